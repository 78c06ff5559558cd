//! The `mail-worker` binary: parse the CLI, read the config, set up logging, run, and report
//! why it exited.

use std::process::ExitCode;

use clap::Parser;
use mail_worker::{cli, config::Config, telemetry};

/// Where `mail-worker demo` writes its JSON logs.
const DEMO_LOG: &str = "mail-worker-demo.log";

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
    if matches!(cli.command, cli::Command::Demo(_)) {
        // The demo draws a progress bar on the terminal; its JSON logs go to a file.
        match std::fs::File::create(DEMO_LOG) {
            Ok(file) => telemetry::init_with_writer(
                config.log_format,
                &config.log_filter,
                std::sync::Mutex::new(file),
            ),
            Err(e) => {
                eprintln!("mail-worker: cannot create {DEMO_LOG}: {e}");
                return ExitCode::FAILURE;
            }
        }
        eprintln!("mail-worker demo: logs go to {DEMO_LOG}");
    } else {
        telemetry::init(config.log_format, &config.log_filter);
    }
    match cli::execute(cli, config).await {
        Ok(code) => code,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "mail-worker failed");
            eprintln!("mail-worker: {e:#}");
            ExitCode::FAILURE
        }
    }
}
