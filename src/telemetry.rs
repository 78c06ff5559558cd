//! Logging: one JSON object per line (or `pretty` for humans), filtered by `RUST_LOG`.
//!
//! Every outcome log line carries an `event` field from [`crate::log_events`] and dotted field names
//! (`message.id`, `mailbox`, `retry_after_ms`). Never log secrets, tokens, bodies or full
//! recipient addresses: use [`crate::domain::mask_address`].

use tracing_subscriber::{EnvFilter, fmt, layer::SubscriberExt, util::SubscriberInitExt};

use crate::config::LogFormat;

/// The `RUST_LOG` directives that leave apalis-core's lines on a lost queue Redis to ours
/// (unless `RUST_LOG` names apalis itself).
const APALIS_QUIET: [&str; 2] = [
    "apalis_core::worker=off",
    "apalis_core::backend::persistence=error",
];

/// Installs the global subscriber, writing to stderr. `filter` is a `RUST_LOG` directive
/// (default `info`). Calling it twice is harmless (the second call is ignored).
pub fn init(format: LogFormat, filter: &str) {
    init_with_writer(format, filter, std::io::stderr);
}

/// Like [`init`], writing to `writer` (the demo logs to a file so the progress bar stays
/// readable).
pub fn init_with_writer<W>(format: LogFormat, filter: &str, writer: W)
where
    W: for<'a> fmt::MakeWriter<'a> + Send + Sync + 'static,
{
    let mut env_filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    if !filter.contains("sqlx") {
        // PostgreSQL's NOTICEs ("relation _sqlx_migrations already exists") are not events.
        if let Ok(directive) = "sqlx::postgres::notice=warn".parse() {
            env_filter = env_filter.add_directive(directive);
        }
    }
    if !filter.contains("apalis") {
        // apalis-core's own lines on a lost queue Redis ("WorkerError: Failed to poll backend",
        // "poll_next: fetch_next failed -> Dead", a worker dropped with tasks) are one
        // `intake.consumerRestart` line of ours, naming the error (src/intake/supervise.rs).
        for directive in APALIS_QUIET {
            if let Ok(directive) = directive.parse() {
                env_filter = env_filter.add_directive(directive);
            }
        }
    }
    let filter = env_filter;
    let registry = tracing_subscriber::registry().with(filter);
    let _ = match format {
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(false)
                    .with_span_list(false)
                    .with_writer(writer),
            )
            .try_init(),
        LogFormat::Pretty => registry
            .with(fmt::layer().with_ansi(false).with_writer(writer))
            .try_init(),
    };
}
