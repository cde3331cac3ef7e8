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
    /// Publish prebuilt plugin files (one per platform: a Linux .so, a macOS .dylib, a .wasm
    /// component) as one signed OCI artifact at REFERENCE (oci://REGISTRY/REPO:TAG).
    #[command(
        after_help = "The declaration (tools, capabilities) is read from the file this host can load. Plain HTTP only for loopback registries.\nExit status: 0 when published and signed, 1 otherwise, 2 for a usage error."
    )]
    Publish {
        /// The plugin files.
        #[arg(value_name = "FILE", required = true)]
        files: Vec<PathBuf>,
        /// Where: oci://REGISTRY/REPOSITORY:TAG.
        #[arg(value_name = "REFERENCE")]
        reference: String,
        /// The minisign secret key to sign with (no password: `minisign -G -W`, `rho plugin key new`).
        #[arg(long, value_name = "KEY")]
        key: PathBuf,
        #[command(flatten)]
        registry: crate::distribute::RegistryFlags,
    },
    /// Install a plugin from a registry into a plugin directory: pinned by digest, its signature
    /// verified, its declared needs checked against the directory's grants, written atomically,
    /// recorded in DIR.lock.
    #[command(
        after_help = "Exit status: 0 when installed, 1 when refused or failed, 2 for a usage error."
    )]
    Install {
        /// oci://REGISTRY/REPOSITORY[:TAG|@DIGEST].
        #[arg(value_name = "REFERENCE")]
        reference: String,
        /// The plugin directory.
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
        #[command(flatten)]
        trust: crate::distribute::TrustFlags,
        #[command(flatten)]
        registry: crate::distribute::RegistryFlags,
    },
    /// Follow the tags installed plugins came from to newer signed versions (all, or NAME).
    #[command(
        after_help = "Refuses a tag that moved to an older version or an unsigned digest.\nExit status: 0 when every plugin is current or updated, 1 otherwise, 2 for a usage error."
    )]
    Update {
        /// One plugin (its name or file); all when left out.
        #[arg(value_name = "NAME")]
        name: Option<String>,
        /// The plugin directory.
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
        #[command(flatten)]
        trust: crate::distribute::TrustFlags,
        #[command(flatten)]
        registry: crate::distribute::RegistryFlags,
    },
    /// Compare a plugin directory's files with its lock: each changed, missing or unrecorded
    /// file is named.
    #[command(
        after_help = "Exit status: 0 when every file matches the lock, 1 otherwise, 2 for a usage error."
    )]
    Verify {
        /// The plugin directory.
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
    },
    /// List the plugins installed in a directory (its lock file).
    List {
        /// The plugin directory.
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove an installed plugin (its name or file) from a directory and its lock.
    Remove {
        /// The plugin's name or file.
        #[arg(value_name = "NAME")]
        name: String,
        /// The plugin directory.
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
    },
    /// Signing keys for `rho plugin publish`.
    #[command(subcommand)]
    Key(KeyCommand),
}

/// `rho plugin key` subcommands.
#[derive(clap::Subcommand)]
pub enum KeyCommand {
    /// Make a minisign key pair without a password: PATH (secret, owner-only) and PATH.pub.
    New {
        /// The secret key's file (the public key goes to PATH.pub).
        #[arg(value_name = "PATH")]
        path: PathBuf,
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
        Command::Publish {
            files,
            reference,
            key,
            registry,
        } => distributed(crate::distribute::publish(
            &files, &reference, &key, &registry,
        )),
        Command::Install {
            reference,
            dir,
            trust,
            registry,
        } => distributed(crate::distribute::install(
            &reference, &dir, &trust, &registry,
        )),
        Command::Update {
            name,
            dir,
            trust,
            registry,
        } => distributed(crate::distribute::update(
            name.as_deref(),
            &dir,
            &trust,
            &registry,
        )),
        Command::Verify { dir } => distributed(crate::distribute::verify(&dir)),
        Command::List { dir, json } => distributed(crate::distribute::list(&dir, json)),
        Command::Remove { name, dir } => distributed(crate::distribute::remove(&name, &dir)),
        Command::Key(KeyCommand::New { path }) => distributed(crate::distribute::key_new(&path)),
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

/// A distribution command's result: its one-line error is printed as is.
fn distributed(result: Result<bool, String>) -> Result<bool, rho_devkit::DevkitError> {
    Ok(result.unwrap_or_else(|e| {
        eprintln!("rho: {e}");
        false
    }))
}

/// `rho plugin check NAME.wasm`: compiles and loads the component as a host does (no grants, the
/// default limits, nothing cached) and shows what it offers.
fn check_component(file: &std::path::Path, json: bool) -> Result<bool, rho_devkit::DevkitError> {
    match crate::inspect::component(file) {
        Ok(checked) => Ok(rho_devkit::check::show(&checked, json)),
        Err(error) => {
            eprintln!("rho: {error}");
            Ok(false)
        }
    }
}
