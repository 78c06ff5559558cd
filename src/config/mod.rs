//! Configuration from the environment (12-factor), parsed once at start-up into strong types.
//!
//! Every setting is declared once in [`settings`] (name, flag, default, kind, help, docs);
//! `config/mail-worker.env.example`, docs/configuration.md's table and `check-config`'s lines
//! are generated from the declarations. A bad value stops start-up with a [`ConfigError`]
//! naming the variable and what is wrong. Here [`Config::from_lookup`]: the declared values,
//! the rules between two settings, and each layer's settings built from them.

use std::{fmt, num::NonZeroU32, time::Duration};

use url::Url;

pub use crate::mailer::GraphConfig;
pub use crate::rate_limit::RateLimitConfig;
use crate::rate_limit::{RateLimits, RedisUrls};

mod env;
mod errors;
pub(crate) mod events;
mod exchange;
mod ingest;
mod rules;
pub mod settings;
mod unknown;
pub use events::EventsConfig;
pub use exchange::EXCHANGE_LIMITS_PAGE;
pub(crate) use exchange::{
    EXCHANGE_MESSAGES_PER_MINUTE, EXCHANGE_RECIPIENTS_PER_DAY, above_exchange,
};
pub use ingest::IngestConfig;
pub(crate) use ingest::is_token_name;

pub(crate) use crate::domain::redact_url;
use env::Env;
use settings::Settings;
pub(crate) use settings::{ZERO, parse_duration};

/// A variable that is set but cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{var}: {problem} (got {value:?})")]
pub struct ConfigError {
    /// The environment variable's name, e.g. `MAIL_RATE_LIMIT_PER_MINUTE`.
    pub var: &'static str,
    /// The offending value (never a secret: secret-bearing URLs are redacted).
    pub value: String,
    /// What is wrong with it.
    pub problem: String,
}

/// The schemes of `REDIS_URL` and `MAIL_RATE_LIMIT_REDIS_URL`: `redis://`, or `rediss://` for
/// TLS (rustls, verified against the system's trust store).
const REDIS_SCHEMES: &[&str] = &["redis", "rediss"];

/// How log lines are written (`LOG_FORMAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line (default).
    Json,
    /// Human-readable, coloured lines.
    Pretty,
}

/// The whole effective configuration.
#[derive(Clone, PartialEq, Eq)]
pub struct Config {
    /// `DATABASE_URL`, default `postgres://postgres@127.0.0.1:5432/mail_worker`.
    pub database_url: Url,
    /// `DATABASE_MAX_CONNECTIONS`, default 10: the daemon's PostgreSQL pool, independent of
    /// `WORKER_CONCURRENCY` (a connection is held per statement, never across a provider call).
    pub database_max_connections: NonZeroU32,
    /// `REDIS_URL`, default `redis://127.0.0.1:6379`: the limiter's Redis (unless
    /// `MAIL_RATE_LIMIT_REDIS_URL` is set); like it, one URL or several cluster seeds.
    pub redis_url: RedisUrls,
    /// The limiter's settings.
    pub rate_limit: RateLimitConfig,
    /// `MAIL_DEFER_SPREAD_MAX`, default `30s`: the upper bound (exclusive) of the
    /// per-message spread added to a deferral.
    pub defer_spread_max: Duration,
    /// `MAIL_MAX_ATTEMPTS`, default none: an extra cap on transient failures before a message
    /// ends `ERROR` (the main rule is [`Self::retry_for`]); set it high to give up by time only.
    pub max_attempts: Option<NonZeroU32>,
    /// `MAIL_RETRY_FOR`, default `1d` (a number with a unit: `ms`, `s`, `m`, `h`, `d`): how long a message may keep failing
    /// transiently (counted from its `created_at`) before it ends `ERROR`.
    pub retry_for: Duration,
    /// `MAIL_RETENTION`, default `30d` (a duration as `MAIL_RETRY_FOR`'s, at least `24h`);
    /// `off` (`None`) keeps every row: how long a finished (`SENT`, `ERROR`) message and its
    /// attachments are kept before the daemon deletes them ([`crate::store::retention`]).
    pub retention: Option<Duration>,
    /// `METRICS_LISTEN`, default `0.0.0.0:9184`; `off` disables the listener (`/metrics`,
    /// `/healthz`, `/readyz`).
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// `METRICS_REFRESH`, default `15s`: how often `mail_worker_messages` is re-read
    /// from PostgreSQL (one query).
    pub metrics_refresh: Duration,
    /// `MAIL_BUDGET_ALERT_PERCENT`, default 80 (1–100; `off` disables): the used share of a
    /// mailbox's 24 h recipient budget at which `mail.budget.nearlyUsed` is logged, once per
    /// mailbox and 24 h across replicas.
    pub budget_alert_percent: Option<u8>,
    /// Worker, scheduler and queue settings.
    pub worker: WorkerConfig,
    /// Microsoft Graph endpoints.
    pub graph: GraphConfig,
    /// `SENDGRID_API_BASE_URL`, default `https://api.sendgrid.com`.
    pub sendgrid_api_base_url: Url,
    /// `HTTP_TIMEOUT`, default `30s`: the whole-request deadline of every provider call.
    pub http_timeout: Duration,
    /// `SHUTDOWN_GRACE`, default `30s`: how long in-flight sends may finish after SIGTERM.
    pub shutdown_grace: Duration,
    /// `LOG_FORMAT`, `json` (default) or `pretty`.
    pub log_format: LogFormat,
    /// `RUST_LOG`, default `info`.
    pub log_filter: String,
    /// The admin UI's settings (`mail-worker admin`).
    pub admin: AdminConfig,
    /// The intake queue of campaign sends ([`crate::intake`]).
    pub intake: IntakeConfig,
    /// Bounce reading (`GRAPH_READ_BOUNCES`, …; [`crate::bounces`]).
    pub bounces: crate::bounces::BounceSettings,
    /// The delivery reconciler (`GRAPH_TRACE_DELIVERY`, …; [`crate::delivery`]).
    pub trace: crate::delivery::TraceSettings,
    /// The outbox's webhooks (`EVENTS_*`, [`crate::outbox`]).
    pub events: EventsConfig,
    /// `SENDERS_FILE`, default none: a senders file (`senders.json`) `run` imports at start-up
    /// as `senders import` does, refusing a bad one before touching the database.
    pub senders_file: Option<std::path::PathBuf>,
    /// The HTTP ingest (`INGEST_*`, [`crate::ingest`]).
    pub ingest: IngestConfig,
    /// Every declared setting's value ([`settings`]): what `check-config` prints, and where a
    /// new setting is read (`config.settings.<group>.<field>`).
    pub settings: Settings,
    /// `(deprecated name, its setting)` for each deprecated `*_MS` name that was set.
    pub deprecated: Vec<(&'static str, &'static str)>,
}

/// The intake queue's settings ([`crate::intake`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntakeConfig {
    /// `INTAKE_QUEUE` (its default `{mail-worker:campaign-sends}`); `off` (`None`) disables the intake.
    /// The apalis-redis namespace on `REDIS_URL`: every key is `<queue>:…`.
    pub queue: Option<String>,
    /// `INTAKE_WORKER_NAME`, default the host name (a pod's name in Kubernetes): the start of
    /// this process's apalis worker name, to which the pid and a random suffix are added.
    pub worker_name: Option<String>,
    /// `INTAKE_HEARTBEAT`, default 10 s: apalis-redis's heartbeat; a replica silent for three
    /// of them is dead and its in-flight jobs are consumed by another.
    pub heartbeat: Duration,
}

/// The admin UI's settings (`mail-worker admin`, [`crate::admin`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminConfig {
    /// `ADMIN_LISTEN`, default `127.0.0.1:9185`; `off` disables the UI.
    pub listen: Option<std::net::SocketAddr>,
    /// `ADMIN_TOKEN`: the operators' token, a value or an `env:NAME` / `file:/path`
    /// reference. Required by `mail-worker admin`, which refuses an unset, empty or short one
    /// at start-up ([`crate::admin::auth::AdminToken::resolve`]).
    pub token: Option<crate::domain::SecretRef>,
    /// `ADMIN_COOKIE_SECURE`, default `false`: mark the session cookie `Secure` (set it when
    /// the UI is reached over HTTPS, e.g. behind a TLS-terminating proxy or ingress).
    pub cookie_secure: bool,
}

/// Worker, scheduler and queue settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerConfig {
    /// `WORKER_CONCURRENCY`, default 128: sends in flight per process (each waits on the
    /// provider, not on a PostgreSQL connection; `MAIL_MAILBOX_MAX_IN_FLIGHT` still caps each
    /// mailbox). 128, not 64: at 64 a replica is bound by its slots (64 ÷ ~60 ms a message at
    /// +20 ms per Graph request), at 128 by the CPU (BENCHMARKS.md §8).
    pub concurrency: NonZeroU32,
    /// `SCHEDULER_INTERVAL`, default `250ms`: how often a replica looks for due messages
    /// while its last claim found fewer than it had room for (with work due and slots free it
    /// claims again at once).
    pub scheduler_interval: Duration,
    /// `SCHEDULER_BATCH_SIZE`, default 100: the most rows one claim takes.
    pub scheduler_batch_size: NonZeroU32,
    /// `SEND_LEASE`, default `10m` (at least twice `HTTP_TIMEOUT`): a row `SENDING`
    /// whose lease was not renewed for this long is rescheduled (`mail.send.outcomeUnknown`).
    /// A live attempt renews it every quarter of it, and stops when it cannot.
    pub send_lease: Duration,
}

impl Config {
    /// Reads the process environment.
    ///
    /// # Errors
    /// The first variable that is set to an unusable value.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Warnings about the process environment itself: each variable that looks like a
    /// misspelt setting (`MAIL_RATE_LIMIT_PERMINUTE`), named with the setting it is near.
    pub(crate) fn environment_warnings() -> Vec<String> {
        unknown::warnings(&std::env::vars().collect::<Vec<_>>())
    }

    /// Reads variables through `lookup` (tests pass a map). Empty values count as unset.
    ///
    /// # Errors
    /// The first variable that is set to an unusable value.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = Env::new(&lookup);
        rules::refuse_empty(&env)?;
        let settings = Settings::read(&env)?;
        rules::check(&env, &settings)?;
        Ok(Self::from_settings(settings, env.deprecated()))
    }

    /// Each layer's settings, built from the declared values.
    fn from_settings(s: Settings, deprecated: Vec<(&'static str, &'static str)>) -> Self {
        let (storage, limiter, delivery, worker, providers) =
            (&s.storage, &s.limiter, &s.delivery, &s.worker, &s.providers);
        Self {
            database_url: storage.database_url.clone(),
            database_max_connections: storage.database_max_connections,
            redis_url: storage.redis_url.clone(),
            rate_limit: RateLimitConfig {
                algorithm: limiter.algorithm,
                max_in_flight: limiter.max_in_flight,
                lease: crate::rate_limit::IN_FLIGHT_LEASE,
                fail_open_replicas: limiter.fail_open_replicas,
                unreachable_not_ready_after: limiter.unreachable_not_ready_after,
                redis_url: storage.rate_limit_redis_url.clone(),
                defaults: RateLimits {
                    per_minute: limiter.per_minute,
                    recipients_per_day: limiter.recipients_per_day,
                    reserved_percent: limiter.reserved_percent,
                },
                redis_timeout: limiter.redis_timeout,
                key_prefix: limiter.key_prefix.clone(),
                caller_clock: false,
            },
            defer_spread_max: delivery.defer_spread_max,
            max_attempts: delivery.max_attempts,
            retry_for: delivery.retry_for,
            retention: delivery.retention,
            metrics_listen: delivery.metrics_listen,
            metrics_refresh: delivery.metrics_refresh,
            budget_alert_percent: delivery.budget_alert_percent,
            worker: WorkerConfig {
                concurrency: worker.concurrency,
                scheduler_interval: worker.scheduler_interval,
                scheduler_batch_size: worker.scheduler_batch_size,
                send_lease: worker.send_lease,
            },
            graph: GraphConfig {
                api_base_url: providers.graph_api_base_url.clone(),
                login_base_url: providers.graph_login_base_url.clone(),
                save_to_sent_items: providers.save_to_sent_items,
                send_mode: providers.send_mode,
                send_settle: providers.send_settle,
            },
            sendgrid_api_base_url: providers.sendgrid_api_base_url.clone(),
            http_timeout: providers.http_timeout,
            shutdown_grace: providers.shutdown_grace,
            log_format: s.logs.format,
            log_filter: s.logs.filter.clone(),
            admin: AdminConfig {
                listen: s.admin.listen,
                token: s.admin.token.clone(),
                cookie_secure: s.admin.cookie_secure,
            },
            intake: IntakeConfig {
                queue: s.intake.queue.clone(),
                worker_name: s.intake.worker_name.clone(),
                heartbeat: s.intake.heartbeat,
            },
            bounces: crate::bounces::BounceSettings {
                enabled: providers.read_bounces,
                interval: providers.bounce_interval,
                folder: providers.bounce_folder.clone(),
            },
            trace: crate::delivery::TraceSettings {
                enabled: s.trace.enabled,
                interval: s.trace.interval,
                lag: s.trace.lag,
                give_up: s.trace.give_up,
                probe: s.trace.probe,
            },
            events: EventsConfig {
                webhook_urls: s.events.webhook_urls.clone(),
                secret: s.events.secret.clone(),
                batch_size: s.events.batch_size,
                retry_for: s.events.retry_for,
                signature: s.events.signature,
            },
            senders_file: s.senders.file.clone(),
            ingest: IngestConfig {
                listen: s.ingest.listen,
                tokens: s.ingest.tokens.clone(),
                tokens_file: s.ingest.tokens_file.clone(),
                max_body_bytes: s.ingest.max_body_bytes,
                max_lines: s.ingest.max_lines,
            },
            settings: s,
            deprecated,
        }
    }

    /// The effective configuration as `NAME=value` lines, in the declarations' (and the env
    /// example's) order, passwords in URLs replaced by `***`: what `check-config` prints.
    pub(crate) fn redacted_lines(&self) -> Vec<String> {
        self.settings.lines()
    }

    /// The first 16 hex digits of the SHA-256 of [`Self::redacted_lines`]: two replicas with
    /// the same digest run the same settings (secrets, hidden in the lines, do not count).
    /// The `daemon.started` line's `config_digest`.
    pub fn digest(&self) -> String {
        use sha2::{Digest, Sha256};
        let hash = Sha256::digest(self.redacted_lines().join("\n").as_bytes());
        hash.iter().take(8).map(|b| format!("{b:02x}")).collect()
    }

    /// Settings that start but are probably wrong: a default budget above Exchange Online's
    /// own limits (Exchange would answer 429s or block the mailbox, not our limiter). Logged at
    /// start-up (`config.warning`) and printed by `mail-worker check-config`.
    /// Also each deprecated `*_MS` name that was set, naming the setting that replaces it.
    pub(crate) fn warnings(&self) -> Vec<String> {
        let limits = self.rate_limit.defaults;
        let mut warnings: Vec<String> = self
            .deprecated
            .iter()
            .map(|(alias, name)| {
                format!("{alias} is deprecated: set {name} instead, a duration with a unit (e.g. {name}=30s, {name}=10m; {alias} still works, in milliseconds)")
            })
            .collect();
        warnings.extend(above_exchange(
            Some(("MAIL_RATE_LIMIT_PER_MINUTE", limits.per_minute.get())),
            Some((
                "MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY",
                limits.recipients_per_day.get(),
            )),
        ));
        warnings
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.redacted_lines()).finish()
    }
}

#[cfg(test)]
mod tests;

impl From<&Config> for crate::mailer::MailerSettings {
    fn from(config: &Config) -> Self {
        Self {
            graph: config.graph.clone(),
            sendgrid_api_base_url: config.sendgrid_api_base_url.clone(),
            http_timeout: config.http_timeout,
            defaults: config.rate_limit.defaults,
            read_bounces: config.bounces.enabled,
        }
    }
}
