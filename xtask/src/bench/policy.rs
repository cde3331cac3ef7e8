//! What a policy set costs a call: `inproc_call_policy_100` (the in-process host with a set of
//! 100 Cedar policies against the same host with none, in pairs of runs), `policy_decide_100`
//! (one decision alone), and the set both use ([`hundred_policies`]).

use std::sync::Arc;
use std::time::Instant;

use rho_policy::CedarPolicy;
use rho_runtime::{
    AuthMethod, CallOptions, DirOptions, Host, Origin, Policy, PolicyAction, PolicyQuery,
    Principal, ToolCall, Via,
};
use serde_json::json;

use super::{Ctx, Figure, per_iter_us};

/// 100 policies as a shared server might hold them: one that permits, 49 about single tools,
/// 40 about single principals, and 10 general ones with conditions on the principal, the tool
/// and the arguments (each evaluated for every call).
pub(super) fn hundred_policies() -> String {
    let mut text = String::from("@id(\"permit-all\") permit(principal, action, resource);\n");
    for i in 0..49 {
        text.push_str(&format!(
            "@id(\"tool-{i}\") forbid(principal, action == Rho::Action::\"call\", resource == Rho::Tool::\"tool_{i}\") unless {{ principal.scopes.contains(\"tool_{i}:call\") }};\n"
        ));
    }
    for i in 0..40 {
        text.push_str(&format!(
            "@id(\"user-{i}\") forbid(principal == Rho::Principal::\"user_{i}\", action, resource) when {{ resource.destructive }};\n"
        ));
    }
    for i in 0..10 {
        text.push_str(&format!(
            "@id(\"general-{i}\") forbid(principal, action == Rho::Action::\"call\", resource) when {{ context.transport == \"nats\" && resource.name like \"*_{i}\" && context.arguments.hasTag(\"path\") && context.arguments.getTag(\"path\") like \"/secret/{i}/*\" }};\n"
        ));
    }
    text
}

/// The 100-policy set, parsed.
pub(super) fn hundred() -> Result<CedarPolicy, String> {
    CedarPolicy::from_text("bench.cedar", &hundred_policies()).map_err(|e| e.to_string())
}

async fn echo_host(dir: &std::path::Path, policy: Option<CedarPolicy>) -> Result<Host, String> {
    let mut builder = Host::builder().plugin_dir(dir, DirOptions::in_process());
    if let Some(policy) = policy {
        builder = builder.policy(Arc::new(policy));
    }
    let (host, reports) = builder.build().await.map_err(|e| e.to_string())?;
    super::loaded(&reports)?;
    Ok(host)
}

/// `inproc_call_policy_100` and `policy_decide_100`.
pub async fn figures(ctx: &Ctx) -> Result<Vec<Figure>, String> {
    let dir = super::inproc::tempfile_dir()?.join("policy-plugins");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    std::fs::copy(ctx.plugin("echo"), dir.join("libecho.so")).map_err(|e| e.to_string())?;
    let with = echo_host(&dir, Some(hundred()?)).await?;
    let without = echo_host(&dir, None).await?;
    let principal = Arc::new(Principal::new("bench", AuthMethod::StaticToken));
    let call = ToolCall::new("c", "echo", json!({"text": "hello"})).by(principal.clone());
    let n = if ctx.quick { 2_000 } else { 10_000 };
    let runs = ctx.runs();
    let (mut policed, mut free) = (Vec::new(), Vec::new());
    for _ in 0..=runs {
        for (host, samples) in [(&with, &mut policed), (&without, &mut free)] {
            let (h, c) = (host.clone(), call.clone());
            let took = tokio::spawn(async move {
                let started = Instant::now();
                for _ in 0..n {
                    h.call_with(&c, &CallOptions::default()).await;
                }
                per_iter_us(n, started)
            });
            samples.push(took.await.map_err(|e| e.to_string())?);
        }
    }
    let call_figure = Figure::paired(
        "inproc_call_policy_100",
        "us/call",
        "the same in-process host with no policy, in pairs of runs",
        &mut policed[1..],
        &mut free[1..],
    );
    // One decision alone, on the call the host decides.
    let policy = hundred()?;
    let spec = with.spec("echo").ok_or("echo is not served")?;
    let origin = with.origin("echo").unwrap_or(Origin::Host);
    let arguments = json!({"text": "hello"});
    let query = PolicyQuery {
        action: PolicyAction::Call,
        principal: Some(&principal),
        tool: &spec,
        origin: &origin,
        arguments: Some(&arguments),
        via: Via::Embedded,
    };
    let decisions = n * 5;
    let mut decide = Vec::new();
    for _ in 0..=runs {
        let started = Instant::now();
        for _ in 0..decisions {
            std::hint::black_box(policy.decide(&query));
        }
        decide.push(per_iter_us(decisions, started));
    }
    let decide_us = super::median(&mut decide[1..]);
    eprintln!("policy evaluation: {decide_us:.2} us per call (100 policies)");
    let decide_figure = Figure {
        name: "policy_decide_100".into(),
        value: decide_us,
        unit: "us/decision".into(),
        baseline: "a whole in-process call with no policy".into(),
        baseline_value: call_figure.baseline_value,
        runs,
        spread: None,
    };
    with.shutdown().await;
    without.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(vec![call_figure, decide_figure])
}
