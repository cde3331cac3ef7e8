//! A host of ten lines: `cargo run -p rho-runtime --example host -- PLUGIN_DIR TOOL [ARGS_JSON]`.
//! Loads the directory (watched), gates with a closure, follows the events, calls one tool. The
//! binary is its own sandboxed worker (`run_if_worker`, first, before any thread).

use rho_runtime::{BusItem, DirOptions, Host, Verdict, gate_fn};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    rho_runtime::run_if_worker();
    tokio::runtime::Runtime::new()?.block_on(run())
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut argv = std::env::args().skip(1);
    let (dir, tool) = (
        argv.next().unwrap_or_else(|| "plugins".into()),
        argv.next().unwrap_or_else(|| "echo".into()),
    );
    let args: serde_json::Value =
        serde_json::from_str(&argv.next().unwrap_or_else(|| "{}".into()))?;

    let (host, reports) = Host::builder()
        .plugin_dir(&dir, DirOptions::default())
        .watch(true)
        .gate(gate_fn(|call| {
            if call.name.starts_with("exit") {
                Verdict::Block("not in this host".into())
            } else {
                Verdict::Allow
            }
        }))
        .build()
        .await?;
    reports
        .iter()
        .flat_map(|r| &r.errors)
        .for_each(|e| eprintln!("{e}"));
    let mut events = host.subscribe();
    let result = host.call(&tool, args).await;
    while let Ok(Some(BusItem::Event(event))) =
        tokio::time::timeout(std::time::Duration::from_millis(100), events.recv()).await
    {
        eprintln!("event: {}", event.kind.type_name());
    }
    println!("{}: {}", result.outcome, result.text());
    host.shutdown().await;
    Ok(())
}
