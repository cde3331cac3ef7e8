//! `rho plugin`: for plugin authors, without this repository: make a plugin crate, rebuild and
//! install it on every save, check a built library. The same code as `cargo xtask new-plugin`,
//! `dev` and `check-plugin` (`rho-devkit`).

use std::path::PathBuf;
use std::process::ExitCode;

use rho_devkit::dev::Build;
use rho_devkit::scaffold::{self, Layout};

/// `rho plugin` subcommands.
#[derive(clap::Subcommand)]
pub enum Command {
    /// Make a plugin crate NAME (a workspace of its own) that builds, loads and answers at once.
    #[command(
        after_help = "Exit status: 0 when the crate was made, 1 when it could not be (the name is refused, the directory exists), 2 for a usage error."
    )]
    New {
        /// The crate's name, also its tool's name.
        #[arg(value_name = "NAME")]
        name: String,
        /// The directory the crate goes in (default: the current one).
        #[arg(long, value_name = "DIR", default_value = ".")]
        dir: PathBuf,
        /// The `rho-plugin-api` crate the new crate's `[patch.crates-io]` points at (default:
        /// the copy this `rho` carries, written into its data directory, ~/.local/share/rho).
        #[arg(long, value_name = "DIR")]
        api: Option<PathBuf>,
        /// A crate that `rho plugin dev` builds as a WebAssembly component (`NAME.wasm`, for
        /// wasm32-wasip2): sandboxed by construction, the same file on every platform.
        #[arg(long)]
        wasm: bool,
    },
    /// Build the plugin crate in DIR and install it into a plugin directory, again on every save.
    #[command(
        after_help = "Exit status: runs until interrupted; 1 when the sources cannot be watched."
    )]
    Dev {
        /// The plugin crate (default: the current directory).
        #[arg(value_name = "DIR", default_value = ".")]
        dir: PathBuf,
        /// The plugin directory to install into.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Build a WebAssembly component (`NAME.wasm`), whatever the crate's manifest says.
        #[arg(long, conflicts_with = "native")]
        wasm: bool,
        /// Build a native library, whatever the crate's manifest says.
        #[arg(long)]
        native: bool,
    },
    /// Load a built plugin library (or a `.wasm` component) as a host would and show its name,
    /// version and tools.
    #[command(
        after_help = "Exit status: 0 when it loads with every tool accepted, 1 otherwise, 2 for a usage error."
    )]
    Check {
        /// The library file, or a component (`NAME.wasm`).
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs one `rho plugin` command.
pub fn main(command: Command) -> ExitCode {
    let result = match command {
        Command::New {
            name,
            dir,
            api,
            wasm,
        } => {
            // A refused name writes nothing, not even the copy of the API.
            let api = match (scaffold::refuse_name(&name, &[]), api) {
                (Some(reason), _) => Err(rho_devkit::DevkitError::NameRefused(reason)),
                (None, Some(api)) => Ok(api),
                (None, None) => {
                    scaffold::data_dir().and_then(|data| scaffold::write_api_copy(&data))
                }
            };
            let build = if wasm {
                Build::Component
            } else {
                Build::Native
            };
            api.and_then(|api| {
                scaffold::new_plugin(&name, &dir, &Layout::Standalone { api }, build)
            })
            .map(|path| {
                eprintln!("rho: created {}", path.display());
                eprintln!(
                    "next: cd {} && cargo test && rho plugin dev --out PLUGIN_DIR",
                    path.display()
                );
                true
            })
        }
        Command::Dev {
            dir,
            out,
            wasm,
            native,
        } => {
            let build = match (wasm, native) {
                (true, _) => Some(Build::Component),
                (_, true) => Some(Build::Native),
                _ => None,
            };
            rho_devkit::dev::run(&dir, &out, build).map(|()| true)
        }
        Command::Check { file, json } if file.extension().is_some_and(|e| e == "wasm") => {
            check_component(&file, json)
        }
        Command::Check { file, json } => rho_devkit::check::check(&file, json),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("rho: {e}");
            ExitCode::from(1)
        }
    }
}

/// `rho plugin check NAME.wasm`: compiles and loads the component as a host does (no grants, the
/// default limits, nothing cached) and shows what it offers.
#[cfg(feature = "wasm")]
fn check_component(file: &std::path::Path, json: bool) -> Result<bool, rho_devkit::DevkitError> {
    use rho_runtime_wasm::{WORLD_VERSION, WasmEngine, WasmLimits};
    let failed = |reason: String| {
        eprintln!("{}: {reason}", file.display());
        Ok(false)
    };
    let bytes = match std::fs::read(file) {
        Ok(bytes) => bytes,
        Err(e) => return failed(e.to_string()),
    };
    let engine = match WasmEngine::new(WasmLimits::default()) {
        Ok(engine) => engine,
        Err(e) => return failed(e.to_string()),
    };
    let plugin = match engine.load(file, &bytes, &rho_runtime::Grants::default()) {
        Ok(plugin) => plugin,
        Err(e) => {
            eprintln!("{e}");
            return Ok(false);
        }
    };
    Ok(rho_devkit::check::show(
        &rho_devkit::check::Checked {
            info: rho_worker::loader::PluginInfo {
                name: plugin.name().to_owned(),
                version: plugin.version().to_owned(),
                interface_version: WORLD_VERSION,
                path: file.to_owned(),
                sha256: rho_runtime::sha256_hex(&bytes),
                capabilities: plugin.capabilities().clone(),
                granted: None,
            },
            tools: plugin.tools().to_vec(),
            rejected: plugin.rejected().to_vec(),
        },
        json,
    ))
}

/// Without the `wasm` feature a component cannot be checked: one line says so.
#[cfg(not(feature = "wasm"))]
fn check_component(file: &std::path::Path, _json: bool) -> Result<bool, rho_devkit::DevkitError> {
    eprintln!(
        "{}: this rho was built without components (the `wasm` feature)",
        file.display()
    );
    Ok(false)
}
