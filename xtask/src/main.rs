//! `cargo xtask`: rho's developer tasks.

mod bench;
mod demo;
mod plugins;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "rho's developer tasks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build the plugin crates and install their libraries into a plugin directory.
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
    /// Measure every performance figure beside its raw baseline (release builds).
    Bench {
        /// A reduced run (under two minutes).
        #[arg(long)]
        quick: bool,
        /// Only the figures whose names start with these.
        only: Vec<String>,
    },
    /// Runs the benchmarks in this (release) build; `bench` calls it.
    #[command(hide = true)]
    BenchExec {
        #[arg(long)]
        plugins: PathBuf,
        #[arg(long)]
        quick: bool,
        only: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::BuildPlugins { release, out } => {
            let out = out.unwrap_or_else(plugins::default_out);
            plugins::build_and_install(release, &out).map(|_| ())
        }
        Command::Demo => demo::run(),
        Command::Bench { quick, only } => bench::run(quick, &only),
        Command::BenchExec {
            plugins,
            quick,
            only,
        } => bench::exec(&plugins, quick, &only),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::from(1)
        }
    }
}
