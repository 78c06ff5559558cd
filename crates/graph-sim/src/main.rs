//! The `graph-sim` binary: a Microsoft Graph stand-in (token endpoint, sendMail, Exchange's
//! limits, fault injection) to run beside `mail-worker` for a dry run of a campaign.
//!
//! Prints `GRAPH_API_BASE_URL=…` and `GRAPH_LOGIN_BASE_URL=…` (and with `--sendgrid-listen`,
//! `SENDGRID_API_BASE_URL=…`) on stdout when listening, logs JSON
//! lines on stderr, and on SIGINT/SIGTERM prints the final statistics as one JSON object on
//! stdout. The config file format is in `graph-sim --help` ([`CONFIG_FILE_HELP`]).

use std::{net::SocketAddr, path::PathBuf, process::ExitCode};

use clap::Parser;
use graph_sim::{
    CONFIG_FILE_HELP, GraphSim, MailboxLimits, MinuteOverflow, SimConfig, SimMailbox, events,
    sendgrid::SendGridSim,
};
use tracing_subscriber::{EnvFilter, fmt, layer::SubscriberExt, util::SubscriberInitExt};

/// The default listen address.
const DEFAULT_LISTEN: &str = "127.0.0.1:8025";

/// A Microsoft Graph stand-in that speaks Graph's wire format and enforces Exchange's limits.
///
/// Serves POST /{tenant}/oauth2/v2.0/token (client credentials) and
/// POST /v1.0/users/{id|userPrincipalName}/sendMail, plus an admin API:
/// GET /_sim/stats, GET /_sim/messages, GET /_sim/refusals, POST /_sim/script, /_sim/latency,
/// /_sim/token-faults, /_sim/reset. Without --config and --mailbox it serves one mailbox,
/// events@contoso.example. With --sendgrid-listen it also serves a SendGrid stand-in
/// (POST /v3/mail/send, GET /_sim/messages) on that address, for senders whose provider is
/// SendGrid.
#[derive(Debug, Parser)]
#[command(name = "graph-sim", version, after_long_help = after_help())]
struct Args {
    /// JSON config file: apps, mailboxes, limits (format below).
    #[arg(long, value_name = "FILE", env = "GRAPH_SIM_CONFIG")]
    config: Option<PathBuf>,
    /// Listen address [default: the file's "listen", else 127.0.0.1:8025]; port 0 = any free port.
    #[arg(long, value_name = "ADDR", env = "GRAPH_SIM_LISTEN")]
    listen: Option<SocketAddr>,
    /// Quick setup: a mailbox to serve (repeatable), owned by --tenant-id, sendable by --client-id.
    #[arg(long = "mailbox", value_name = "ADDRESS")]
    mailboxes: Vec<String>,
    /// Quick setup: the tenant of the --mailbox mailboxes and of the quick app.
    #[arg(long, value_name = "TENANT", default_value = "contoso.example")]
    tenant_id: String,
    /// Quick setup: the app's client id.
    #[arg(long, value_name = "ID", default_value = "graph-sim-app")]
    client_id: String,
    /// Quick setup: the app's client secret.
    #[arg(
        long,
        value_name = "SECRET",
        env = "GRAPH_SIM_CLIENT_SECRET",
        default_value = "graph-sim-secret",
        hide_env_values = true
    )]
    client_secret: String,
    /// Limit of the --mailbox mailboxes: messages in any rolling 60 s.
    #[arg(long, value_name = "N", default_value_t = 30)]
    messages_per_minute: u32,
    /// Limit of the --mailbox mailboxes: recipients (To+Cc+Bcc) in any rolling 24 h.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    recipients_per_day: u64,
    /// Limit of the --mailbox mailboxes: requests in flight per app.
    #[arg(long, value_name = "N", default_value_t = 4)]
    concurrent_requests: u32,
    /// Limit of the --mailbox mailboxes: requests per app in any rolling 10 min.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    requests_per_10_minutes: u32,
    /// Limit of the --mailbox mailboxes: recipients of one message.
    #[arg(long, value_name = "N", default_value_t = 500)]
    recipients_per_message: u32,
    /// The --mailbox mailboxes accept messages over the minute limit (202) and count them as
    /// delayed, as Exchange queues them, instead of answering 429.
    #[arg(long)]
    accept_delayed: bool,
    /// Lifetime of issued tokens, s [default: the file's, else 3599].
    #[arg(long, value_name = "S")]
    token_lifetime_s: Option<u64>,
    /// Also serve a SendGrid stand-in (POST /v3/mail/send) on this address (port 0 = any free
    /// port); prints SENDGRID_API_BASE_URL=… when listening.
    #[arg(long, value_name = "ADDR", requires = "sendgrid_keys")]
    sendgrid_listen: Option<SocketAddr>,
    /// API keys the SendGrid stand-in accepts (comma-separated or repeated).
    #[arg(
        long = "sendgrid-key",
        value_name = "KEY",
        env = "GRAPH_SIM_SENDGRID_KEYS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    sendgrid_keys: Vec<String>,
    /// Log format: json (one object per line) or pretty.
    #[arg(
        long,
        value_name = "FORMAT",
        env = "LOG_FORMAT",
        default_value = "json"
    )]
    log_format: String,
}

fn after_help() -> String {
    format!(
        "{CONFIG_FILE_HELP}
EXAMPLES:
  graph-sim --mailbox events@contoso.example --client-secret s3cret
  graph-sim --config config/graph-sim.example.json --listen 127.0.0.1:8025
  curl -s localhost:8025/_sim/stats
  curl -s -XPOST localhost:8025/_sim/script -d '{{\"mailbox\":\"events@contoso.example\",\"answers\":[{{\"status\":429,\"retry_after\":\"2.128\"}}]}}' -H 'content-type: application/json'
  curl -s -XPOST localhost:8025/_sim/latency -d '{{\"latency\":{{\"uniform\":[100,400]}}}}' -H 'content-type: application/json'
"
    )
}

fn build_config(args: &Args) -> Result<SimConfig, String> {
    let mut config = match &args.config {
        Some(path) => SimConfig::from_json_file(path).map_err(|e| e.to_string())?,
        None => SimConfig::new(),
    };
    let mut quick = args.mailboxes.clone();
    if args.config.is_none() && quick.is_empty() {
        quick.push("events@contoso.example".to_owned());
    }
    if !quick.is_empty() {
        if !config.apps.iter().any(|a| a.client_id == args.client_id) {
            config = config.with_app(&args.tenant_id, &args.client_id, &args.client_secret);
        }
        let limits = MailboxLimits {
            concurrent_requests: args.concurrent_requests,
            messages_per_minute: args.messages_per_minute,
            recipients_per_day: args.recipients_per_day,
            requests_per_10_minutes: args.requests_per_10_minutes,
            recipients_per_message: args.recipients_per_message,
            minute_overflow: if args.accept_delayed {
                MinuteOverflow::AcceptDelayed
            } else {
                MinuteOverflow::Refuse
            },
            ..MailboxLimits::default()
        };
        for address in quick {
            config = config.with_mailbox(
                SimMailbox::new(address, &args.tenant_id).with_limits(limits.clone()),
            );
        }
    }
    let default_listen: SocketAddr = DEFAULT_LISTEN
        .parse()
        .map_err(|e| format!("default listen address: {e}"))?;
    config.listen = Some(args.listen.or(config.listen).unwrap_or(default_listen));
    if let Some(s) = args.token_lifetime_s {
        config.token_lifetime_s = s;
    }
    Ok(config)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let json = match args.log_format.as_str() {
        "json" => true,
        "pretty" => false,
        other => {
            eprintln!("graph-sim: --log-format must be json or pretty, not {other:?}");
            return ExitCode::from(64); // EX_USAGE
        }
    };
    init_logging(json);
    let config = match build_config(&args) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("graph-sim: {e}");
            return ExitCode::from(78); // EX_CONFIG
        }
    };
    let mailboxes: Vec<String> = config.mailboxes.iter().map(|m| m.address.clone()).collect();
    let sim = match GraphSim::start(config).await {
        Ok(sim) => sim,
        Err(e) => {
            eprintln!("graph-sim: {e}");
            return ExitCode::from(78);
        }
    };
    let sendgrid = match args.sendgrid_listen {
        Some(listen) => match SendGridSim::start_on(listen, args.sendgrid_keys.clone()).await {
            Ok(sendgrid) => Some(sendgrid),
            Err(e) => {
                eprintln!("graph-sim: the SendGrid stand-in cannot listen on {listen}: {e}");
                return ExitCode::from(78);
            }
        },
        None => None,
    };
    println!("GRAPH_API_BASE_URL={}", sim.graph_base_url());
    println!("GRAPH_LOGIN_BASE_URL={}", sim.login_base_url());
    if let Some(sendgrid) = &sendgrid {
        println!("SENDGRID_API_BASE_URL={}", sendgrid.base_url());
    }
    println!(
        "# graph-sim: stats at {}_sim/stats, messages at {}_sim/messages; SIGINT/SIGTERM prints the final stats",
        sim.login_base_url(),
        sim.login_base_url()
    );
    tracing::info!(
        event = events::SIM_STARTED,
        listen = %sim.local_addr(),
        graph_base_url = %sim.graph_base_url(),
        mailboxes = ?mailboxes,
        "graph-sim listening"
    );
    let reason = signal().await;
    let stats = sim.stats();
    let result = sim.shutdown().await;
    drop(sendgrid);
    tracing::info!(
        event = events::SIM_STOPPED,
        reason,
        accepted = stats.total_accepted(),
        "graph-sim stopped"
    );
    match serde_json::to_string(&stats) {
        Ok(json) => println!("{json}"),
        Err(e) => eprintln!("graph-sim: cannot print stats: {e}"),
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("graph-sim: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`): one JSON object per line, or plain
/// text for `--log-format pretty`.
fn init_logging(json: bool) {
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into());
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let registry = tracing_subscriber::registry().with(filter);
    let layer = fmt::layer().with_writer(std::io::stderr);
    if json {
        registry
            .with(layer.json().flatten_event(true).with_current_span(false))
            .init();
    } else {
        registry.with(layer.with_ansi(false)).init();
    }
}

/// Completes on SIGTERM or SIGINT (Ctrl-C), returning which.
async fn signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = tokio::signal::ctrl_c() => "SIGINT",
                _ = term.recv() => "SIGTERM",
            },
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                "SIGINT"
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "SIGINT"
    }
}
