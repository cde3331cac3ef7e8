//! `rho token`: the named tokens of `rho serve --http` (`[serve] tokens_file`). Each token is a
//! principal with its scopes; the file keeps its SHA-256 only, so a token is printed once, when
//! it is made, and a server reading the file notices an addition or a removal at its next
//! request.

use std::path::PathBuf;
use std::process::ExitCode;

use rho_mcp::TokensFile;

use crate::config::Config;

/// `rho token` subcommands.
#[derive(clap::Subcommand)]
pub enum Command {
    /// Make a token for a new principal NAME and print it (once: the file keeps its SHA-256).
    Add {
        /// The principal's name, as journals, views and policies say it.
        name: String,
        /// A scope the token grants (repeatable).
        #[arg(long = "scope", value_name = "SCOPE")]
        scopes: Vec<String>,
        #[command(flatten)]
        file: FileFlag,
    },
    /// Remove the token of NAME: a server refuses it from its next request on.
    Remove {
        /// The principal's name.
        name: String,
        #[command(flatten)]
        file: FileFlag,
    },
    /// List the principals of the tokens file and their scopes.
    List {
        #[command(flatten)]
        file: FileFlag,
    },
}

/// Which tokens file.
#[derive(clap::Args)]
pub struct FileFlag {
    /// The tokens file (default: `[serve] tokens_file` of the configuration). Made owner-only
    /// when missing.
    #[arg(long = "tokens-file", value_name = "PATH")]
    path: Option<PathBuf>,
}

impl FileFlag {
    fn path(&self, config: &Config) -> Result<PathBuf, String> {
        self.path
            .clone()
            .or_else(|| config.serve.tokens_file.clone())
            .ok_or_else(|| {
                "which tokens file? give --tokens-file PATH (or [serve] tokens_file)".into()
            })
    }
}

pub fn main(command: Command, config: &Config) -> ExitCode {
    match run(command, config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(line) => {
            eprintln!("rho: {}", crate::render::terminal_safe(&line));
            ExitCode::from(1)
        }
    }
}

fn run(command: Command, config: &Config) -> Result<(), String> {
    match command {
        Command::Add { name, scopes, file } => {
            let path = file.path(config)?;
            let mut tokens = TokensFile::read_or_new(&path)?;
            let token = tokens.add(&name, &scopes)?;
            tokens.write(&path)?;
            eprintln!(
                "rho: token of {name} added to {} (shown once; send `Authorization: Bearer TOKEN`):",
                path.display()
            );
            outln!("{token}");
        }
        Command::Remove { name, file } => {
            let path = file.path(config)?;
            let mut tokens = TokensFile::read(&path)?;
            if !tokens.remove(&name) {
                return Err(format!("{} has no token named `{name}`", path.display()));
            }
            tokens.write(&path)?;
            eprintln!("rho: token of {name} removed from {}", path.display());
        }
        Command::List { file } => {
            let path = file.path(config)?;
            for token in TokensFile::read(&path)?.token {
                let scopes = match token.scopes.is_empty() {
                    true => "(no scopes)".to_owned(),
                    false => token.scopes.join(" "),
                };
                outln!("{}  {scopes}", crate::render::terminal_safe(&token.name));
            }
        }
    }
    Ok(())
}
