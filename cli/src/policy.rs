//! `rho policy check FILE`: a policy file validated against rho's schema, and what a principal
//! may list and call under it (a person's way to try a change before putting it in force).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use rho_policy::CedarPolicy;
use rho_runtime::{Origin, Policy, Principal, Via};

use crate::host::{self, PluginFlags};

/// `rho policy` commands.
#[derive(clap::Subcommand)]
pub enum Command {
    /// Validate FILE's Cedar policies against rho's schema; with --principal, print which
    /// tools that principal may list and call under them.
    #[command(
        after_help = "Exit status: 0 when the file is valid, 1 when it is not (one line says where), 2 for a usage error."
    )]
    Check(CheckArgs),
}

/// `rho policy check` flags.
#[derive(clap::Args)]
pub struct CheckArgs {
    /// The policy file (Cedar).
    file: PathBuf,
    /// Who asks, as JSON: {"id": "alice", "auth": "oauth", "scopes": ["tools:read"], "claims":
    /// {"groups": ["admins"]}} (`auth`: local, none, static_token or oauth). Needs the tools:
    /// --plugins DIR or the config file's.
    #[arg(long, value_name = "JSON")]
    principal: Option<String>,
    /// How the principal's requests come (embedded, stdio, http, nats).
    #[arg(long, value_name = "TRANSPORT", default_value = "http")]
    via: String,
    #[command(flatten)]
    plugins: PluginFlags,
}

/// A principal given as JSON on the command line, or a usage line saying what was expected.
pub fn principal_flag(json: &str) -> Result<Principal, ExitCode> {
    serde_json::from_str::<Principal>(json).map_err(|e| {
        host::usage(&format!(
            "--principal: not a principal ({e}); as in {{\"id\": \"alice\", \"auth\": \"oauth\", \"scopes\": [\"tools:read\"]}}"
        ))
    })
}

/// A transport named on the command line.
fn via_flag(name: &str) -> Result<Via, ExitCode> {
    serde_json::from_value(serde_json::Value::from(name)).map_err(|_| {
        host::usage(&format!(
            "--via: `{name}` is no transport (embedded, stdio, http, nats)"
        ))
    })
}

pub async fn main(command: Command, config: crate::config::Config) -> ExitCode {
    let Command::Check(args) = command;
    let policy = match CedarPolicy::from_file(&args.file) {
        Ok(policy) => policy,
        Err(e) => {
            eprintln!("rho: {}", crate::render::terminal_safe(&e.to_string()));
            return ExitCode::from(1);
        }
    };
    outln!(
        "{}: valid against rho's schema ({})",
        args.file.display(),
        crate::render::terminal_safe(&policy.describe())
    );
    let Some(json) = &args.principal else {
        return ExitCode::SUCCESS;
    };
    let principal = match principal_flag(json) {
        Ok(principal) => principal,
        Err(code) => return code,
    };
    let via = match via_flag(&args.via) {
        Ok(via) => via,
        Err(code) => return code,
    };
    // The tools as a host would serve them, with no policy of its own in force: the one
    // checked decides.
    let mut plugins = args.plugins.clone();
    plugins.policy = None;
    let mut config = config;
    config.policy.file = None;
    let (host, _) = match host::build(&config, &plugins, None, |b| b).await {
        Ok(built) => built,
        Err(code) => return code,
    };
    let tools: Vec<_> = host
        .tools()
        .into_iter()
        .filter_map(|spec| {
            let origin: Origin = host.origin(&spec.name)?;
            Some((spec, origin))
        })
        .collect();
    let policy = Arc::new(policy);
    outln!(
        "for {}:",
        crate::render::terminal_safe(&principal.to_string())
    );
    let decided = policy.what_may(Some(&principal), &tools, via);
    let width = decided
        .iter()
        .map(|t| t.tool.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let list_width = decided
        .iter()
        .map(|t| t.list.to_string().len())
        .max()
        .unwrap_or(4)
        .max(4);
    outln!("{:width$}  {:list_width$}  CALL", "TOOL", "LIST");
    for tool in &decided {
        outln!(
            "{:width$}  {:list_width$}  {}",
            tool.tool,
            tool.list.to_string(),
            tool.call
        );
    }
    host.shutdown().await;
    ExitCode::SUCCESS
}
