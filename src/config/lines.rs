//! `mail-worker check-config`'s lines: the effective configuration, passwords hidden.

use std::{fmt::Display, time::Duration};

use super::{Config, LogFormat, env::with_unit, redact_url};

impl Config {
    /// The effective configuration as `NAME=value` lines, in the env file's order, with
    /// passwords in URLs replaced by `***`. This is what `mail-worker check-config` prints.
    pub(crate) fn redacted_lines(&self) -> Vec<String> {
        let ms = |d: Duration| d.as_millis().to_string();
        vec![
            format!("DATABASE_URL={}", redact_url(&self.database_url)),
            format!("DATABASE_MAX_CONNECTIONS={}", self.database_max_connections),
            format!("REDIS_URL={}", self.redis_url.redacted()),
            format!("MAIL_RATE_LIMIT_ALGORITHM={}", self.rate_limit.algorithm),
            format!(
                "MAIL_RATE_LIMIT_REDIS_URL={}",
                self.rate_limit.redis_url.redacted()
            ),
            format!(
                "MAIL_RATE_LIMIT_PER_MINUTE={}",
                self.rate_limit.defaults.per_minute
            ),
            format!(
                "MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY={}",
                self.rate_limit.defaults.recipients_per_day
            ),
            format!(
                "MAIL_RATE_LIMIT_RESERVED_PERCENT={}",
                self.rate_limit.defaults.reserved_percent
            ),
            format!(
                "MAIL_RATE_LIMIT_REDIS_TIMEOUT_MS={}",
                ms(self.rate_limit.redis_timeout)
            ),
            format!("MAIL_RATE_LIMIT_KEY_PREFIX={}", self.rate_limit.key_prefix),
            format!(
                "MAIL_MAILBOX_MAX_IN_FLIGHT={}",
                self.rate_limit.max_in_flight
            ),
            format!(
                "MAIL_RATE_LIMIT_FAIL_OPEN_REPLICAS={}",
                self.rate_limit.fail_open_replicas
            ),
            format!(
                "MAIL_RATE_LIMIT_UNREACHABLE_NOT_READY_AFTER_MS={}",
                ms(self.rate_limit.unreachable_not_ready_after)
            ),
            format!("MAIL_DEFER_SPREAD_MAX_MS={}", ms(self.defer_spread_max)),
            format!("MAIL_MAX_ATTEMPTS={}", or(self.max_attempts, "none")),
            format!("MAIL_RETRY_FOR={}", with_unit(self.retry_for)),
            format!(
                "MAIL_RETENTION={}",
                or(self.retention.map(with_unit), "off")
            ),
            format!("METRICS_LISTEN={}", or(self.metrics_listen, "off")),
            format!("METRICS_REFRESH_MS={}", ms(self.metrics_refresh)),
            format!(
                "MAIL_BUDGET_ALERT_PERCENT={}",
                or(self.budget_alert_percent, "off")
            ),
            format!("WORKER_CONCURRENCY={}", self.worker.concurrency),
            format!(
                "SCHEDULER_INTERVAL_MS={}",
                ms(self.worker.scheduler_interval)
            ),
            format!("SCHEDULER_BATCH_SIZE={}", self.worker.scheduler_batch_size),
            format!("SEND_LEASE_MS={}", ms(self.worker.send_lease)),
            format!(
                "GRAPH_API_BASE_URL={}",
                redact_url(&self.graph.api_base_url)
            ),
            format!(
                "GRAPH_LOGIN_BASE_URL={}",
                redact_url(&self.graph.login_base_url)
            ),
            format!("GRAPH_SAVE_TO_SENT_ITEMS={}", self.graph.save_to_sent_items),
            format!("GRAPH_SEND_MODE={}", self.graph.send_mode),
            format!("GRAPH_SEND_SETTLE_MS={}", ms(self.graph.send_settle)),
            format!(
                "GRAPH_READ_BOUNCES={}",
                if self.bounces.enabled { "on" } else { "off" }
            ),
            format!("GRAPH_BOUNCE_INTERVAL={}", with_unit(self.bounces.interval)),
            format!(
                "GRAPH_BOUNCE_FOLDER={}",
                self.bounces.folder.as_deref().unwrap_or("(unset)")
            ),
            format!(
                "GRAPH_TRACE_DELIVERY={}",
                if self.trace.enabled { "on" } else { "off" }
            ),
            format!("GRAPH_TRACE_INTERVAL={}", with_unit(self.trace.interval)),
            format!("GRAPH_TRACE_LAG={}", with_unit(self.trace.lag)),
            format!("GRAPH_TRACE_GIVE_UP={}", with_unit(self.trace.give_up)),
            format!("GRAPH_TRACE_PROBE={}", with_unit(self.trace.probe)),
            format!(
                "SENDGRID_API_BASE_URL={}",
                redact_url(&self.sendgrid_api_base_url)
            ),
            format!("HTTP_TIMEOUT_MS={}", ms(self.http_timeout)),
            format!("SHUTDOWN_GRACE_MS={}", ms(self.shutdown_grace)),
            format!(
                "LOG_FORMAT={}",
                match self.log_format {
                    LogFormat::Json => "json",
                    LogFormat::Pretty => "pretty",
                }
            ),
            format!("RUST_LOG={}", self.log_filter),
            format!("ADMIN_LISTEN={}", or(self.admin.listen, "off")),
            format!(
                "ADMIN_TOKEN={}",
                or(self.admin.token.as_ref().map(|t| t.describe()), "(unset)")
            ),
            format!("ADMIN_COOKIE_SECURE={}", self.admin.cookie_secure),
            format!("INTAKE_QUEUE={}", or(self.intake.queue.as_deref(), "off")),
            format!(
                "INTAKE_WORKER_NAME={}",
                or(self.intake.worker_name.as_deref(), "(unset)")
            ),
            format!("INTAKE_HEARTBEAT_MS={}", self.intake.heartbeat.as_millis()),
            format!(
                "EVENTS_WEBHOOK_URL={}",
                if self.events.webhook_urls.is_empty() {
                    "off".to_owned()
                } else {
                    let urls: Vec<String> = self
                        .events
                        .webhook_urls
                        .iter()
                        .map(super::events::shown)
                        .collect();
                    urls.join(",")
                }
            ),
            format!(
                "EVENTS_WEBHOOK_SECRET={}",
                self.events
                    .secret
                    .as_ref()
                    .map_or_else(|| "(unset)".to_owned(), |t| t.describe())
            ),
            format!("EVENTS_BATCH_SIZE={}", self.events.batch_size),
            format!("EVENTS_RETRY_FOR={}", with_unit(self.events.retry_for)),
            format!("EVENTS_SIGNATURE={}", self.events.signature.as_str()),
            format!(
                "SENDERS_FILE={}",
                or(self.senders_file.as_ref().map(|p| p.display()), "(unset)")
            ),
            format!("INGEST_LISTEN={}", or(self.ingest.listen, "off")),
            format!("INGEST_TOKENS={}", self.ingest.tokens_shown()),
            format!(
                "INGEST_TOKENS_FILE={}",
                or(
                    self.ingest.tokens_file.as_ref().map(|p| p.display()),
                    "(unset)"
                )
            ),
            format!("INGEST_MAX_BODY_BYTES={}", self.ingest.max_body_bytes),
            format!("INGEST_MAX_LINES={}", self.ingest.max_lines),
        ]
    }

    /// The first 16 hex digits of the SHA-256 of [`Self::redacted_lines`]: two replicas with
    /// the same digest run the same settings (secrets, hidden in the lines, do not count).
    /// The `daemon.started` line's `config_digest`.
    pub fn digest(&self) -> String {
        use sha2::{Digest, Sha256};
        let hash = Sha256::digest(self.redacted_lines().join("\n").as_bytes());
        hash.iter().take(8).map(|b| format!("{b:02x}")).collect()
    }
}

/// `value` as it prints, or `none` (`off`, `(unset)`, …) where it is not set.
fn or(value: Option<impl Display>, none: &str) -> String {
    value.map_or_else(|| none.to_owned(), |v| v.to_string())
}
