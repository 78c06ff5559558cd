//! The daemon the daemon benchmarks run as a child process: the `mail-worker` binary itself
//! (the same entry point, [`mail_worker::cli::main`]), built in this package so that its
//! benchmarks find it through `CARGO_BIN_EXE_bench-mail-worker`.

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    mail_worker::cli::main().await
}
