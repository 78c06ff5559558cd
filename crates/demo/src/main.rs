//! The `mail-worker-demo` binary (`cargo demo`): runs [`mail_worker_demo::run`] and prints its
//! report. The progress bar is drawn on the terminal; the JSON logs go to a file.

use std::process::ExitCode;

use clap::Parser;
use mail_worker::{config::Config, telemetry};
use mail_worker_demo::DemoArgs;

/// Where the demo writes its JSON logs.
const DEMO_LOG: &str = "mail-worker-demo.log";

/// Runs a campaign end to end on this machine against graph-sim (in process), with its own
/// database and Redis keys, and prints a per-mailbox report. Logs go to mail-worker-demo.log.
/// Configured like mail-worker (DATABASE_URL, REDIS_URL, …; config/mail-worker.env.example).
#[derive(Debug, Parser)]
#[command(name = "mail-worker-demo", version, about, long_about = None)]
struct Cli {
    #[command(flatten)]
    args: DemoArgs,
}

#[tokio::main]
async fn main() -> ExitCode {
    let Cli { args } = Cli::parse();
    let config = match Config::from_env() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("mail-worker-demo: bad configuration: {e}");
            return ExitCode::from(78); // EX_CONFIG
        }
    };
    match std::fs::File::create(DEMO_LOG) {
        Ok(file) => telemetry::init_with_writer(
            config.log_format,
            &config.log_filter,
            std::sync::Mutex::new(file),
        ),
        Err(e) => {
            eprintln!("mail-worker-demo: cannot create {DEMO_LOG}: {e}");
            return ExitCode::FAILURE;
        }
    }
    eprintln!("mail-worker-demo: logs go to {DEMO_LOG}");
    let json = args.json;
    let report = match mail_worker_demo::run(config, args).await {
        Ok(report) => report,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "mail-worker-demo failed");
            eprintln!("mail-worker-demo: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let text = if json {
        serde_json::to_string_pretty(&report).unwrap_or_default() + "\n"
    } else {
        mail_worker_demo::render(&report)
    };
    print!("{text}");
    if report.finished {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
