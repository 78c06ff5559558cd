//! The `mail-worker` binary: parse the CLI, read the config, set up logging, run, and report
//! why it exited.

use std::process::ExitCode;

use clap::Parser;
use mail_worker::{cli, config::Config, telemetry};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let config = match Config::from_env() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("mail-worker: bad configuration: {e}");
            return ExitCode::from(78); // EX_CONFIG
        }
    };
    telemetry::init(config.log_format, &config.log_filter);
    match cli::execute(cli, config).await {
        Ok(code) => code,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "mail-worker failed");
            eprintln!("mail-worker: {e:#}");
            ExitCode::FAILURE
        }
    }
}
