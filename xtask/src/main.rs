//! `cargo xtask`: rho's developer tasks.

mod bench;
mod demo;
mod layers;
mod msrv;
mod plugins;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "rho's developer tasks")]
struct Cli {
    /// The workspace to work in (default: this repository).
    #[arg(long, global = true, value_name = "DIR")]
    workspace: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create a plugin crate that compiles at once and add it to the workspace.
    NewPlugin {
        /// The plugin's crate name, also its tool's name.
        name: String,
        /// The directory the crate goes in, relative to the workspace.
        #[arg(long, default_value = "plugins")]
        dir: PathBuf,
    },
    /// Load one plugin library and show its name, version, interface version and tools.
    CheckPlugin {
        /// The library file.
        path: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Rebuild a plugin on every save and install it into the plugin directory.
    Dev {
        /// The plugin crate.
        name: String,
        /// The plugin directory (default: target/plugins).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Build the example plugin crates (not the test fixtures) and install their libraries into a
    /// plugin directory.
    BuildPlugins {
        /// Build in release mode.
        #[arg(long)]
        release: bool,
        /// The plugin directory (default: target/plugins).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Build the example plugins and run a short scripted session that shows every outcome.
    Demo,
    /// Count the workspace's lines per crate and check the layered crates (protocol, worker,
    /// runtime): shares, file sizes, import circles, arrows up a layer.
    Layers,
    /// Check the workspace's `rust-version` against the highest one its locked dependencies
    /// declare.
    Msrv,
    /// Write the demo's script to PATH (for the tests of README's commands).
    #[command(hide = true)]
    DemoScript {
        /// Where.
        path: PathBuf,
    },
    /// Measure every performance figure beside its raw baseline (release builds).
    Bench {
        /// A reduced run (under two minutes).
        #[arg(long)]
        quick: bool,
        /// Only the figures whose names start with these.
        only: Vec<String>,
        /// Print each figure's change against this earlier report (a copy of
        /// target/bench/report.json).
        #[arg(long, value_name = "BASE.json")]
        compare: Option<PathBuf>,
        /// With --compare: compare this report instead of measuring.
        #[arg(long, value_name = "NEW.json", requires = "compare")]
        report: Option<PathBuf>,
    },
    /// A loop of calls for the instruction counts (run under callgrind by `bench`).
    #[command(hide = true)]
    BenchLoop {
        #[arg(long)]
        plugins: PathBuf,
        /// Which loop.
        #[arg(value_parser = clap::builder::PossibleValuesParser::new(bench::instructions::LOOPS))]
        what: String,
        calls: usize,
    },
    /// The baseline MCP server of the benchmarks (an in-binary echo tool on stdio, or over
    /// Streamable HTTP at http://ADDR/mcp).
    #[command(hide = true)]
    McpEchoServer {
        #[arg(long)]
        http: Option<std::net::SocketAddr>,
    },
    /// Runs the benchmarks in this (release) build; `bench` calls it.
    #[command(hide = true)]
    BenchExec {
        #[arg(long)]
        plugins: PathBuf,
        /// Write the figures here (JSON) instead of printing the report.
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long)]
        quick: bool,
        only: Vec<String>,
    },
}

fn main() -> ExitCode {
    // The benchmarks measure a host binary that is its own worker (`self_exec`): this one.
    rho_runtime::run_if_worker();
    let cli = Cli::parse();
    if let Some(dir) = cli.workspace {
        plugins::set_workspace_root(dir);
    }
    let result = match cli.command {
        Command::NewPlugin { name, dir } => {
            let workspace = plugins::workspace_root();
            let layout = rho_devkit::scaffold::Layout::Member {
                workspace: workspace.clone(),
            };
            let native = rho_devkit::dev::Build::Native;
            rho_devkit::scaffold::new_plugin(&name, &workspace.join(&dir), &layout, native)
                .map(|path| {
                    eprintln!("created {} and added it to the workspace", path.display());
                    eprintln!("next: cargo test -p {name} && cargo xtask dev {name}");
                })
                .map_err(|e| e.to_string())
        }
        Command::CheckPlugin { path, json } => match rho_devkit::check::check(&path, json) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::from(1),
            Err(e) => Err(e.to_string()),
        },
        Command::Dev { name, out } => plugins::discover().and_then(|found| {
            let plugin = found.into_iter().find(|p| p.name == name).ok_or_else(|| {
                format!("no plugin crate `{name}` in the workspace (see `cargo xtask new-plugin`)")
            })?;
            let out = out.unwrap_or_else(plugins::default_out);
            rho_devkit::dev::run(&plugin.dir, &out, None).map_err(|e| e.to_string())
        }),
        Command::BuildPlugins { release, out } => {
            let out = out.unwrap_or_else(plugins::default_out);
            plugins::examples()
                .and_then(|examples| plugins::build_and_install(&examples, &[], release, &out))
                .map(|_| ())
        }
        Command::Demo => demo::run(),
        Command::Layers => layers::run(&plugins::workspace_root()),
        Command::Msrv => msrv::run(&plugins::workspace_root()),
        Command::DemoScript { path } => demo::write_script(&path),
        Command::Bench {
            compare: Some(compare),
            report: Some(report),
            ..
        } => bench::read_report(&compare).and_then(|base| {
            bench::print_comparison(&base, &bench::read_report(&report)?);
            Ok(())
        }),
        Command::Bench {
            quick,
            only,
            compare,
            report,
        } => match report {
            // clap requires --compare with --report.
            Some(_) => Err("--report needs --compare BASE.json".into()),
            None => bench::run(quick, &only, compare.as_deref()),
        },
        Command::BenchLoop {
            plugins,
            what,
            calls,
        } => bench::instructions::run_loop(&plugins, &what, calls),
        Command::McpEchoServer { http } => bench::mcp::echo_server(http),
        Command::BenchExec {
            plugins,
            quick,
            only,
            out,
        } => bench::exec(&plugins, quick, &only, out.as_deref()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::from(1)
        }
    }
}
