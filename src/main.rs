//! The `mail-worker` binary: everything is in [`mail_worker::cli::main`] (parse the CLI, read
//! the config, set up logging, run, and report why it exited).

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    mail_worker::cli::main().await
}
