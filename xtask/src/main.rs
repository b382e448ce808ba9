//! Workspace automation, std only (no dependencies, so it builds in seconds on a clean clone).
//! Run through the `.cargo/config.toml` alias: `cargo xtask loom [CRATE...]`; see `cargo xtask help`.

mod cli;
mod libtest;
mod loom;
mod loom_env;
mod report;
mod workspace;

use std::process::ExitCode;

fn main() -> ExitCode {
    match cli::parse(std::env::args().skip(1)) {
        Ok(cli::Command::Help) => {
            print!("{}", cli::USAGE);
            ExitCode::SUCCESS
        }
        Ok(cli::Command::Loom(args)) => loom::run(&args),
        Err(error) => {
            eprintln!("xtask: error: {error}\n");
            eprint!("{}", cli::USAGE);
            ExitCode::from(2)
        }
    }
}
