//! Configuration from the environment (12-factor), parsed once at start-up into strong types.
//!
//! Every variable, its default and its meaning is listed in `config/mail-worker.env.example`.
//! A bad value stops start-up with a [`ConfigError`] naming the variable and what is wrong.
//! Here the settings' types and [`Config::from_lookup`]; the `check-config` lines are
//! `lines.rs`'s, reading one variable [`env`]'s, hiding passwords [`crate::domain::redact_url`]'s.

use std::{fmt, num::NonZeroU32, time::Duration};

use url::Url;

pub use crate::mailer::GraphConfig;
pub use crate::rate_limit::RateLimitConfig;
use crate::rate_limit::{Algorithm, RateLimits, RedisUrls};

mod bounces;
mod env;
mod errors;
pub(crate) mod events;
mod exchange;
mod ingest;
mod lines;
mod trace;
pub use events::EventsConfig;
pub use exchange::EXCHANGE_LIMITS_PAGE;
pub(crate) use exchange::{
    EXCHANGE_MESSAGES_PER_MINUTE, EXCHANGE_RECIPIENTS_PER_DAY, above_exchange,
};
pub use ingest::IngestConfig;
pub(crate) use ingest::is_token_name;

pub(crate) use crate::domain::redact_url;
use env::{Env, has_hash_tag};
pub(crate) use env::{ZERO, parse_duration};

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
    /// `MAIL_DEFER_SPREAD_MAX_MS`, default 30,000 ms: the upper bound (exclusive) of the
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
    /// `METRICS_REFRESH_MS`, default 15,000 ms: how often `mail_worker_messages` is re-read
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
    /// `HTTP_TIMEOUT_MS`, default 30,000 ms: the whole-request deadline of every provider call.
    pub http_timeout: Duration,
    /// `SHUTDOWN_GRACE_MS`, default 30,000 ms: how long in-flight sends may finish after SIGTERM.
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
}

/// The intake queue's settings ([`crate::intake`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntakeConfig {
    /// `INTAKE_QUEUE`, default [`DEFAULT_INTAKE_QUEUE`]; `off` (`None`) disables the intake.
    /// The apalis-redis namespace on `REDIS_URL`: every key is `<queue>:…`.
    pub queue: Option<String>,
    /// `INTAKE_WORKER_NAME`, default the host name (a pod's name in Kubernetes): the start of
    /// this process's apalis worker name, to which the pid and a random suffix are added.
    pub worker_name: Option<String>,
    /// `INTAKE_HEARTBEAT_MS`, default 10 s: apalis-redis's heartbeat; a replica silent for three
    /// of them is dead and its in-flight jobs are consumed by another.
    pub heartbeat: Duration,
}

/// `INTAKE_QUEUE`'s default. In braces, a Redis Cluster hash tag: every key of the queue
/// (`{mail-worker:campaign-sends}:active`, `…:data`, `…:meta:<id>`, …) hashes to one slot, so
/// apalis-redis's multi-key Lua scripts may run on a cluster node, and a queue started on a
/// standalone Redis keeps its key names when moved to a cluster.
pub const DEFAULT_INTAKE_QUEUE: &str = "{mail-worker:campaign-sends}";

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
    /// `SCHEDULER_INTERVAL_MS`, default 250 ms: how often a replica looks for due messages
    /// while its last claim found fewer than it had room for (with work due and slots free it
    /// claims again at once).
    pub scheduler_interval: Duration,
    /// `SCHEDULER_BATCH_SIZE`, default 100: the most rows one claim takes.
    pub scheduler_batch_size: NonZeroU32,
    /// `SEND_LEASE_MS`, default 600,000 ms (at least twice `HTTP_TIMEOUT_MS`): a row `SENDING`
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

    /// Reads variables through `lookup` (tests pass a map). Empty values count as unset.
    ///
    /// # Errors
    /// The first variable that is set to an unusable value.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = Env(&lookup);
        // `rediss://` is TLS (rustls, the system's trust store).
        let redis_url = env.redis_urls("REDIS_URL", "redis://127.0.0.1:6379")?;
        let http_timeout = env.millis("HTTP_TIMEOUT_MS", 30_000)?;
        // Set but empty would silently be the default: refused, naming what to write.
        for (var, problem) in [
            ("INTAKE_QUEUE", format!("is set but empty: give a queue name (the default is {DEFAULT_INTAKE_QUEUE}), or `off` to turn the intake queue off")),
            ("MAIL_RATE_LIMIT_KEY_PREFIX", "is set but empty: an empty prefix is refused; give one (the default is mail:rl), or unset it".to_owned()),
        ] {
            if lookup(var).is_some_and(|v| v.trim().is_empty()) {
                return Err(env.error(var, &problem));
            }
        }
        let intake_queue = match env.text("INTAKE_QUEUE", DEFAULT_INTAKE_QUEUE)?.trim() {
            // `off` in any case, as every setting reads it (`ADMIN_LISTEN=OFF`, …).
            off if off.eq_ignore_ascii_case("off") => None,
            name if name.contains(char::is_whitespace) => {
                return Err(env.error("INTAKE_QUEUE", "must not contain white space"));
            }
            name => Some(name.to_owned()),
        };
        if let Some(name) = &intake_queue
            && redis_url.is_cluster()
            && !has_hash_tag(name)
        {
            return Err(env.error(
                "INTAKE_QUEUE",
                &format!("REDIS_URL lists Redis Cluster seeds, so the queue's name needs a hash tag (braces, e.g. {{{name}}}) to keep all its keys in one slot"),
            ));
        }
        let send_lease = env.millis("SEND_LEASE_MS", 600_000)?;
        if send_lease < http_timeout * 2 {
            // Blame the variable the operator set: SEND_LEASE_MS when given, else the
            // HTTP_TIMEOUT_MS that outgrew SEND_LEASE_MS's default. Twice: an attempt renews its
            // lease every quarter of it and stops at the lease minus a margin when PostgreSQL
            // cannot confirm it, so a lease under two request timeouts would cut attempts whose
            // requests are merely slow (service::lease).
            let (var, problem) = if env.get("SEND_LEASE_MS").is_some() {
                (
                    "SEND_LEASE_MS",
                    format!(
                        "must be at least twice HTTP_TIMEOUT_MS ({} ms): an attempt that cannot renew its lease stops before the lease ends, and one request plus the outcome write must fit",
                        http_timeout.as_millis()
                    ),
                )
            } else {
                (
                    "HTTP_TIMEOUT_MS",
                    format!(
                        "must be at most half of SEND_LEASE_MS ({} ms, its default): an attempt that cannot renew its lease stops before the lease ends; raise SEND_LEASE_MS too",
                        send_lease.as_millis()
                    ),
                )
            };
            return Err(env.error(var, &problem));
        }
        let retention = env.duration_or_off("MAIL_RETENTION", Duration::from_secs(30 * 86_400))?;
        if retention.is_some_and(|r| r < crate::store::retention::MIN_RETENTION) {
            let problem = format!("{}, or off", crate::store::retention::TOO_SHORT);
            return Err(env.error("MAIL_RETENTION", &problem));
        }
        Ok(Self {
            bounces: bounces::read(&env)?,
            trace: trace::read(&env)?,
            retention,
            database_url: env.url(
                "DATABASE_URL",
                "postgres://postgres@127.0.0.1:5432/mail_worker",
                &["postgres", "postgresql"],
            )?,
            database_max_connections: env.positive("DATABASE_MAX_CONNECTIONS", 10)?,
            rate_limit: RateLimitConfig {
                algorithm: match env.get("MAIL_RATE_LIMIT_ALGORITHM") {
                    None => Algorithm::default(),
                    Some(text) => text.parse().map_err(|problem: String| {
                        env.error("MAIL_RATE_LIMIT_ALGORITHM", &problem)
                    })?,
                },
                max_in_flight: env.positive("MAIL_MAILBOX_MAX_IN_FLIGHT", 3)?,
                lease: crate::rate_limit::IN_FLIGHT_LEASE,
                fail_open_replicas: env.positive("MAIL_RATE_LIMIT_FAIL_OPEN_REPLICAS", 1)?,
                unreachable_not_ready_after: env
                    .millis("MAIL_RATE_LIMIT_UNREACHABLE_NOT_READY_AFTER_MS", 60_000)?,
                redis_url: match env.get("MAIL_RATE_LIMIT_REDIS_URL") {
                    Some(_) => env.redis_urls("MAIL_RATE_LIMIT_REDIS_URL", "")?,
                    None => redis_url.clone(),
                },
                defaults: RateLimits {
                    per_minute: env.positive("MAIL_RATE_LIMIT_PER_MINUTE", 25)?,
                    recipients_per_day: env
                        .positive("MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY", 9_000)?,
                    reserved_percent: env.parsed(
                        "MAIL_RATE_LIMIT_RESERVED_PERCENT",
                        20,
                        crate::rate_limit::parse_reserved_percent,
                    )?,
                },
                redis_timeout: env.millis("MAIL_RATE_LIMIT_REDIS_TIMEOUT_MS", 250)?,
                key_prefix: env.text("MAIL_RATE_LIMIT_KEY_PREFIX", "mail:rl")?,
                caller_clock: false,
            },
            redis_url,
            defer_spread_max: env.millis("MAIL_DEFER_SPREAD_MAX_MS", 30_000)?,
            max_attempts: match env.get("MAIL_MAX_ATTEMPTS") {
                None => None,
                Some(_) => Some(env.positive("MAIL_MAX_ATTEMPTS", 1)?),
            },
            retry_for: env.duration("MAIL_RETRY_FOR", Duration::from_secs(24 * 3600))?,
            metrics_listen: env.listen("METRICS_LISTEN", "0.0.0.0:9184")?,
            metrics_refresh: env.millis("METRICS_REFRESH_MS", 15_000)?,
            budget_alert_percent: env.parsed(
                "MAIL_BUDGET_ALERT_PERCENT",
                Some(80),
                |raw| match raw {
                    off if off.eq_ignore_ascii_case("off") => Ok(None),
                    _ => raw
                        .parse::<u8>()
                        .ok()
                        .filter(|p| (1..=100).contains(p))
                        .map(Some)
                        .ok_or("must be a whole number from 1 to 100, or off"),
                },
            )?,
            worker: WorkerConfig {
                concurrency: env.positive("WORKER_CONCURRENCY", 128)?,
                scheduler_interval: env.millis("SCHEDULER_INTERVAL_MS", 250)?,
                scheduler_batch_size: env.positive("SCHEDULER_BATCH_SIZE", 100)?,
                send_lease,
            },
            graph: GraphConfig {
                api_base_url: env
                    .provider_url("GRAPH_API_BASE_URL", "https://graph.microsoft.com/v1.0")?,
                login_base_url: env
                    .provider_url("GRAPH_LOGIN_BASE_URL", "https://login.microsoftonline.com")?,
                save_to_sent_items: env.bool("GRAPH_SAVE_TO_SENT_ITEMS", true)?,
                send_mode: env
                    .text("GRAPH_SEND_MODE", "draft")?
                    .trim()
                    .parse()
                    .map_err(|e: String| env.error("GRAPH_SEND_MODE", &e))?,
                send_settle: env.millis("GRAPH_SEND_SETTLE_MS", 120_000)?,
            },
            sendgrid_api_base_url: env
                .provider_url("SENDGRID_API_BASE_URL", "https://api.sendgrid.com")?,
            http_timeout,
            shutdown_grace: env.millis("SHUTDOWN_GRACE_MS", 30_000)?,
            log_format: match env.get("LOG_FORMAT").as_deref() {
                None | Some("json") => LogFormat::Json,
                Some("pretty") => LogFormat::Pretty,
                Some(_) => return Err(env.error("LOG_FORMAT", "must be `json` or `pretty`")),
            },
            log_filter: env.get("RUST_LOG").unwrap_or_else(|| "info".into()),
            admin: AdminConfig {
                listen: env.listen("ADMIN_LISTEN", "127.0.0.1:9185")?,
                token: env.get("ADMIN_TOKEN").map(crate::domain::SecretRef::new),
                cookie_secure: env.bool("ADMIN_COOKIE_SECURE", false)?,
            },
            intake: IntakeConfig {
                queue: intake_queue,
                worker_name: env.get("INTAKE_WORKER_NAME").map(|n| n.trim().to_owned()),
                heartbeat: env.millis("INTAKE_HEARTBEAT_MS", 10_000)?,
            },
            events: env.events()?,
            senders_file: env.get("SENDERS_FILE").map(|p| p.trim().into()),
            ingest: env.ingest()?,
        })
    }

    /// Settings that start but are probably wrong: a default budget above Exchange Online's
    /// own limits (Exchange would answer 429s or block the mailbox, not our limiter). Logged at
    /// start-up (`config.warning`) and printed by `mail-worker check-config`.
    pub(crate) fn warnings(&self) -> Vec<String> {
        let limits = self.rate_limit.defaults;
        above_exchange(
            Some(("MAIL_RATE_LIMIT_PER_MINUTE", limits.per_minute.get())),
            Some((
                "MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY",
                limits.recipients_per_day.get(),
            )),
        )
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
