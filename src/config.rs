//! Configuration from the environment (12-factor), parsed once at start-up into strong types.
//!
//! Every variable, its default and its meaning is listed in `config/mail-worker.env.example`.
//! A bad value stops start-up with a [`ConfigError`] naming the variable and what is wrong.

use std::{fmt, num::NonZeroU32, time::Duration};

use url::Url;

pub use crate::rate_limit::RateLimitConfig;
use crate::rate_limit::{Algorithm, RateLimits, RedisUrls};

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

/// Exchange Online's per-mailbox limits the default budgets must stay under: 30 messages per
/// minute and 10,000 recipients per rolling 24 h
/// (<https://learn.microsoft.com/office365/servicedescriptions/exchange-online-service-description/exchange-online-limits#sending-limits>).
pub(crate) const EXCHANGE_MESSAGES_PER_MINUTE: u32 = 30;
/// See [`EXCHANGE_MESSAGES_PER_MINUTE`].
pub(crate) const EXCHANGE_RECIPIENTS_PER_DAY: u32 = 10_000;
/// Where Microsoft documents both.
pub const EXCHANGE_LIMITS_PAGE: &str = "https://learn.microsoft.com/office365/servicedescriptions/exchange-online-service-description/exchange-online-limits#sending-limits";

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
    /// `MAIL_RETRY_FOR`, default `24h` (a number with a unit: `ms`, `s`, `m`, `h`, `d`): how long a message may keep failing
    /// transiently (counted from its `created_at`) before it ends `ERROR`.
    pub retry_for: Duration,
    /// `METRICS_LISTEN`, default `0.0.0.0:9184`; `off` disables the listener (`/metrics`,
    /// `/healthz`, `/readyz`).
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// `METRICS_REFRESH_MS`, default 15,000 ms: how often `mail_worker_messages` is re-read
    /// from PostgreSQL (one query).
    pub metrics_refresh: Duration,
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

/// Microsoft Graph endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphConfig {
    /// `GRAPH_API_BASE_URL`, default `https://graph.microsoft.com/v1.0`.
    pub api_base_url: Url,
    /// `GRAPH_LOGIN_BASE_URL`, default `https://login.microsoftonline.com`.
    pub login_base_url: Url,
    /// `GRAPH_SAVE_TO_SENT_ITEMS`, default `true`.
    pub save_to_sent_items: bool,
    /// `GRAPH_SEND_MODE`, `draft` (default) or `sendmail` (README "Delivery guarantee").
    pub send_mode: crate::mailer::graph::GraphSendMode,
    /// `GRAPH_SEND_SETTLE_MS`, default 120000 ms: after a send with an unknown outcome, how
    /// long a check that finds the message still a draft (or not in Sent Items) is not trusted
    /// to mean "not sent" (Graph is eventually consistent; Microsoft documents no bound).
    pub send_settle: Duration,
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
        Ok(Self {
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
                redis_url: match env.get("MAIL_RATE_LIMIT_REDIS_URL") {
                    Some(_) => env.redis_urls("MAIL_RATE_LIMIT_REDIS_URL", "")?,
                    None => redis_url.clone(),
                },
                defaults: RateLimits {
                    per_minute: env.positive("MAIL_RATE_LIMIT_PER_MINUTE", 25)?,
                    recipients_per_day: env
                        .positive("MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY", 9_000)?,
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
        })
    }

    /// Settings that start but are probably wrong: a default budget above Exchange Online's
    /// own limits (Exchange would answer 429s or block the mailbox, not our limiter). Logged at
    /// start-up (`config.warning`) and printed by `mail-worker check-config`.
    pub(crate) fn warnings(&self) -> Vec<String> {
        let limits = self.rate_limit.defaults;
        let mut found = Vec::new();
        if limits.per_minute.get() > EXCHANGE_MESSAGES_PER_MINUTE {
            found.push(format!(
                "MAIL_RATE_LIMIT_PER_MINUTE={} is above Exchange Online's {EXCHANGE_MESSAGES_PER_MINUTE} messages per mailbox per minute: Graph will throttle the excess with 429s ({EXCHANGE_LIMITS_PAGE})",
                limits.per_minute
            ));
        }
        if limits.recipients_per_day.get() > EXCHANGE_RECIPIENTS_PER_DAY {
            found.push(format!(
                "MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY={} is above Exchange Online's {EXCHANGE_RECIPIENTS_PER_DAY} recipients per mailbox per rolling 24 h: Exchange blocks a mailbox that exceeds it, and its mail bounces after Graph accepted it ({EXCHANGE_LIMITS_PAGE})",
                limits.recipients_per_day
            ));
        }
        found
    }

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
            format!("MAIL_DEFER_SPREAD_MAX_MS={}", ms(self.defer_spread_max)),
            format!(
                "MAIL_MAX_ATTEMPTS={}",
                self.max_attempts
                    .map_or_else(|| "none".to_owned(), |n| n.to_string())
            ),
            format!("MAIL_RETRY_FOR={}", with_unit(self.retry_for)),
            format!(
                "METRICS_LISTEN={}",
                self.metrics_listen
                    .map_or_else(|| "off".to_owned(), |a| a.to_string())
            ),
            format!("METRICS_REFRESH_MS={}", ms(self.metrics_refresh)),
            format!("WORKER_CONCURRENCY={}", self.worker.concurrency),
            format!(
                "SCHEDULER_INTERVAL_MS={}",
                ms(self.worker.scheduler_interval)
            ),
            format!("SCHEDULER_BATCH_SIZE={}", self.worker.scheduler_batch_size),
            format!("SEND_LEASE_MS={}", ms(self.worker.send_lease)),
            format!("GRAPH_API_BASE_URL={}", self.graph.api_base_url),
            format!("GRAPH_LOGIN_BASE_URL={}", self.graph.login_base_url),
            format!("GRAPH_SAVE_TO_SENT_ITEMS={}", self.graph.save_to_sent_items),
            format!("GRAPH_SEND_MODE={}", self.graph.send_mode),
            format!("GRAPH_SEND_SETTLE_MS={}", ms(self.graph.send_settle)),
            format!("SENDGRID_API_BASE_URL={}", self.sendgrid_api_base_url),
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
            format!(
                "ADMIN_LISTEN={}",
                self.admin
                    .listen
                    .map_or_else(|| "off".to_owned(), |a| a.to_string())
            ),
            format!(
                "ADMIN_TOKEN={}",
                self.admin
                    .token
                    .as_ref()
                    .map_or_else(|| "(unset)".to_owned(), |t| t.describe())
            ),
            format!("ADMIN_COOKIE_SECURE={}", self.admin.cookie_secure),
        ]
    }
}

/// `d` in the largest unit that shows it exactly: `24h`, `90m`, `1500ms`.
fn with_unit(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, per) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms.is_multiple_of(per) {
            return format!("{}{unit}", ms / per);
        }
    }
    format!("{ms}ms")
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.redacted_lines()).finish()
    }
}

/// `url` with its password (if any) replaced by `***`, for logs and `check-config`: the
/// userinfo password and a `password` query parameter.
pub(crate) fn redact_url(url: &Url) -> String {
    let mut url = url.clone();
    if url.password().is_some() {
        let _ = url.set_password(Some("***"));
    }
    if url
        .query_pairs()
        .any(|(k, _)| k.eq_ignore_ascii_case("password"))
    {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| {
                let v = if k.eq_ignore_ascii_case("password") {
                    "***".into()
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        url.query_pairs_mut().clear().extend_pairs(pairs);
    }
    url.to_string()
}

/// `raw` with its password replaced by `***`, whether it parses as a URL or not.
fn redact_raw(raw: &str) -> String {
    match Url::parse(raw) {
        Ok(url) => redact_url(&url),
        Err(_) => redact_unparsed(raw),
    }
}

/// `raw` as a URL of one of `schemes`, or what is wrong with it.
fn parse_url(raw: &str, schemes: &[&str]) -> Result<Url, String> {
    let url = Url::parse(raw).map_err(|e| format!("is not a URL ({e})"))?;
    if !schemes.contains(&url.scheme()) {
        return Err(format!(
            "must use one of the schemes {}",
            schemes.join(", ")
        ));
    }
    Ok(url)
}

/// A string that failed to parse as a URL, with anything between `://` and the last `@`
/// (where a password would be) replaced by `***`.
fn redact_unparsed(raw: &str) -> String {
    match (raw.find("://"), raw.rfind('@')) {
        (Some(start), Some(at)) if at > start + 3 => {
            format!("{}***{}", &raw[..start + 3], &raw[at..])
        }
        _ => raw.to_owned(),
    }
}

/// Whether `url`'s host is loopback: 127.0.0.0/8, `::1` or `localhost` (and `*.localhost`,
/// RFC 6761 §6.3).
pub(crate) fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            name == "localhost" || name.ends_with(".localhost")
        }
        None => false,
    }
}

struct Env<'a, F: Fn(&str) -> Option<String>>(&'a F);

impl<F: Fn(&str) -> Option<String>> Env<'_, F> {
    fn get(&self, var: &str) -> Option<String> {
        (self.0)(var).filter(|v| !v.trim().is_empty())
    }

    fn error(&self, var: &'static str, problem: &str) -> ConfigError {
        ConfigError {
            var,
            value: redact_raw(&self.get(var).unwrap_or_default()),
            problem: problem.to_owned(),
        }
    }

    /// `host:port`, or `off` (`None`).
    fn listen(
        &self,
        var: &'static str,
        default: &str,
    ) -> Result<Option<std::net::SocketAddr>, ConfigError> {
        let raw = self.get(var).unwrap_or_else(|| default.to_owned());
        if raw.trim().eq_ignore_ascii_case("off") {
            return Ok(None);
        }
        raw.trim()
            .parse()
            .map(Some)
            .map_err(|_| self.error(var, &format!("must be host:port (e.g. {default}) or `off`")))
    }

    fn text(&self, var: &'static str, default: &str) -> Result<String, ConfigError> {
        Ok(self.get(var).unwrap_or_else(|| default.to_owned()))
    }

    fn positive(&self, var: &'static str, default: u32) -> Result<NonZeroU32, ConfigError> {
        let Some(raw) = self.get(var) else {
            return Ok(NonZeroU32::new(default).expect("defaults are positive"));
        };
        raw.trim()
            .parse::<u32>()
            .ok()
            .and_then(NonZeroU32::new)
            .ok_or_else(|| self.error(var, "must be a whole number from 1 to 4294967295"))
    }

    fn millis(&self, var: &'static str, default: u64) -> Result<Duration, ConfigError> {
        let Some(raw) = self.get(var) else {
            return Ok(Duration::from_millis(default));
        };
        match raw.trim().parse::<u64>() {
            Ok(0) => Err(self.error(var, "must be a positive number of milliseconds, not 0")),
            Ok(ms) => Ok(Duration::from_millis(ms)),
            Err(_) => Err(self.error(var, "must be a whole number of milliseconds")),
        }
    }

    /// A duration with a unit: `500ms`, `30s`, `15m`, `24h`, `1d` (not 0).
    fn duration(&self, var: &'static str, default: Duration) -> Result<Duration, ConfigError> {
        let Some(raw) = self.get(var) else {
            return Ok(default);
        };
        let raw = raw.trim();
        let split = raw.find(|c: char| !c.is_ascii_digit()).unwrap_or(raw.len());
        let (number, unit) = raw.split_at(split);
        let problem = "must be a whole number with a unit: ms, s, m, h or d (e.g. 24h)";
        let n: u64 = number.parse().map_err(|_| self.error(var, problem))?;
        let ms_per = match unit.trim() {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(self.error(var, problem)),
        };
        match n.checked_mul(ms_per) {
            Some(0) => Err(self.error(var, "must be more than 0")),
            Some(ms) => Ok(Duration::from_millis(ms)),
            None => Err(self.error(var, problem)),
        }
    }

    fn bool(&self, var: &'static str, default: bool) -> Result<bool, ConfigError> {
        match self
            .get(var)
            .map(|v| v.trim().to_ascii_lowercase())
            .as_deref()
        {
            None => Ok(default),
            Some("true") => Ok(true),
            Some("false") => Ok(false),
            Some(_) => Err(self.error(var, "must be `true` or `false`")),
        }
    }

    /// A provider base URL: `https://`, or `http://` only to a loopback host (127.0.0.0/8,
    /// `::1`, `localhost`: a stand-in on this machine). Credentials and tokens cross these
    /// URLs, so cleartext to any other host is refused.
    fn provider_url(&self, var: &'static str, default: &str) -> Result<Url, ConfigError> {
        let url = self.url(var, default, &["http", "https"])?;
        // `PROVIDER_CLEARTEXT_HOSTS`: host names an operator explicitly lets the provider URLs
        // reach over http:// — a stand-in such as compose's `graph-sim`, never a real provider.
        let allowed = self.get("PROVIDER_CLEARTEXT_HOSTS").unwrap_or_default();
        let named = url.host_str().is_some_and(|host| {
            allowed
                .split(',')
                .map(str::trim)
                .any(|h| !h.is_empty() && h.eq_ignore_ascii_case(host))
        });
        if url.scheme() == "http" && !is_loopback(&url) && !named {
            return Err(self.error(
                var,
                "must use https:// (http:// is accepted only for a loopback host: 127.0.0.0/8, ::1, localhost, or a host named in PROVIDER_CLEARTEXT_HOSTS), because client secrets, API keys and tokens cross it",
            ));
        }
        if url.host().is_none() {
            return Err(self.error(var, "must name a host"));
        }
        Ok(url)
    }

    fn url(&self, var: &'static str, default: &str, schemes: &[&str]) -> Result<Url, ConfigError> {
        let raw = self.get(var).unwrap_or_else(|| default.to_owned());
        parse_url(raw.trim(), schemes).map_err(|problem| self.error(var, &problem))
    }

    /// `REDIS_URL` or `MAIL_RATE_LIMIT_REDIS_URL`: one URL as [`Self::url`], or several
    /// comma-separated (seed nodes of one Redis Cluster), each with the first one's scheme and
    /// credentials (the cluster client uses one set for every node). A bad element is named by
    /// its position and shown redacted.
    fn redis_urls(&self, var: &'static str, default: &str) -> Result<RedisUrls, ConfigError> {
        let raw = self.get(var).unwrap_or_else(|| default.to_owned());
        if !raw.contains(',') {
            return Ok(self.url(var, default, REDIS_SCHEMES)?.into());
        }
        let mut urls: Vec<Url> = Vec::new();
        for (n, element) in raw.split(',').map(str::trim).enumerate() {
            let bad = |problem: &str| ConfigError {
                var,
                value: redact_raw(element),
                problem: format!("list element {} {problem}", n + 1),
            };
            if element.is_empty() {
                return Err(bad("is empty"));
            }
            let url = parse_url(element, REDIS_SCHEMES).map_err(|problem| bad(&problem))?;
            if let Some(first) = urls.first()
                && (first.scheme(), first.username(), first.password())
                    != (url.scheme(), url.username(), url.password())
            {
                return Err(bad(
                    "must use the first element's scheme and credentials (the seeds of one Redis Cluster)",
                ));
            }
            urls.push(url);
        }
        Ok(RedisUrls::new(urls).expect("split yields at least one element"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| map.get(k).cloned())
    }

    /// The worker's knobs: metrics refresh, concurrency, database connections, scheduler
    /// interval and batch size, send lease.
    fn worker_knobs(c: &Config) -> (Duration, u32, u32, Duration, u32, Duration) {
        (
            c.metrics_refresh,
            c.worker.concurrency.get(),
            c.database_max_connections.get(),
            c.worker.scheduler_interval,
            c.worker.scheduler_batch_size.get(),
            c.worker.send_lease,
        )
    }

    #[test]
    fn defaults_match_the_documented_table() {
        let c = parse(&[]).unwrap();
        assert_eq!(
            c.database_url.as_str(),
            "postgres://postgres@127.0.0.1:5432/mail_worker"
        );
        assert_eq!(c.redis_url.first().as_str(), "redis://127.0.0.1:6379");
        assert_eq!(c.rate_limit.redis_url, c.redis_url);
        assert_eq!(c.rate_limit.defaults.per_minute.get(), 25);
        assert_eq!(c.rate_limit.defaults.recipients_per_day.get(), 9000);
        assert_eq!(c.rate_limit.redis_timeout, Duration::from_millis(250));
        assert_eq!(c.rate_limit.key_prefix, "mail:rl");
        assert_eq!(c.defer_spread_max, Duration::from_millis(30_000));
        assert_eq!(c.max_attempts, None);
        assert_eq!(c.retry_for, Duration::from_secs(24 * 3600));
        assert_eq!(c.metrics_listen, Some("0.0.0.0:9184".parse().unwrap()));
        assert_eq!(
            worker_knobs(&c),
            (
                Duration::from_secs(15),
                128,
                10,
                Duration::from_millis(250),
                100,
                Duration::from_secs(600)
            )
        );
        assert_eq!(
            c.graph.api_base_url.as_str(),
            "https://graph.microsoft.com/v1.0"
        );
        assert_eq!(
            c.graph.login_base_url.as_str(),
            "https://login.microsoftonline.com/"
        );
        assert!(c.graph.save_to_sent_items);
        assert_eq!(
            c.sendgrid_api_base_url.as_str(),
            "https://api.sendgrid.com/"
        );
        assert_eq!(c.http_timeout, Duration::from_secs(30));
        assert_eq!(c.shutdown_grace, Duration::from_secs(30));
        assert_eq!(c.log_format, LogFormat::Json);
        assert_eq!(c.log_filter, "info");
        assert_eq!(c.admin.listen, Some("127.0.0.1:9185".parse().unwrap()));
        assert_eq!(c.admin.token, None);
        assert!(!c.admin.cookie_secure);
    }

    #[test]
    fn the_admin_variables_are_read_and_the_token_is_never_printed() {
        let c = parse(&[
            ("ADMIN_LISTEN", "0.0.0.0:9999"),
            ("ADMIN_TOKEN", "a-literal-token-hunter2"),
            ("ADMIN_COOKIE_SECURE", "true"),
        ])
        .unwrap();
        assert_eq!(c.admin.listen, Some("0.0.0.0:9999".parse().unwrap()));
        assert!(c.admin.cookie_secure);
        let text = c.redacted_lines().join("\n");
        assert!(text.contains("ADMIN_TOKEN=<literal>"), "{text}");
        assert!(!text.contains("hunter2") && !format!("{c:?}").contains("hunter2"));
        let c = parse(&[
            ("ADMIN_LISTEN", "off"),
            ("ADMIN_TOKEN", "file:/run/secrets/admin"),
        ])
        .unwrap();
        assert_eq!(c.admin.listen, None);
        assert!(
            c.redacted_lines()
                .contains(&"ADMIN_TOKEN=file:/run/secrets/admin".to_owned())
        );
        for (var, value) in [
            ("ADMIN_LISTEN", "9185"),
            ("ADMIN_COOKIE_SECURE", "sometimes"),
        ] {
            let err = parse(&[(var, value)]).unwrap_err();
            assert_eq!(err.var, var, "{err}");
        }
    }

    #[test]
    fn every_variable_is_read() {
        let c = parse(&[
            ("DATABASE_URL", "postgres://u:pw@db:5433/x"),
            ("REDIS_URL", "redis://q:6380"),
            ("MAIL_RATE_LIMIT_REDIS_URL", "redis://rl:6381"),
            ("MAIL_RATE_LIMIT_PER_MINUTE", "10"),
            ("MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY", "500"),
            ("MAIL_RATE_LIMIT_REDIS_TIMEOUT_MS", "100"),
            ("MAIL_RATE_LIMIT_KEY_PREFIX", "t:rl"),
            ("MAIL_DEFER_SPREAD_MAX_MS", "5000"),
            ("MAIL_MAX_ATTEMPTS", "3"),
            ("MAIL_RETRY_FOR", "1m"),
            ("METRICS_LISTEN", "off"),
            ("METRICS_REFRESH_MS", "500"),
            ("WORKER_CONCURRENCY", "64"),
            ("DATABASE_MAX_CONNECTIONS", "7"),
            ("SCHEDULER_INTERVAL_MS", "400"),
            ("SCHEDULER_BATCH_SIZE", "20"),
            ("SEND_LEASE_MS", "60000"),
            ("GRAPH_API_BASE_URL", "http://127.0.0.1:9/v1.0"),
            ("GRAPH_LOGIN_BASE_URL", "http://127.0.0.1:9"),
            ("GRAPH_SAVE_TO_SENT_ITEMS", "false"),
            ("SENDGRID_API_BASE_URL", "http://127.0.0.1:8"),
            ("HTTP_TIMEOUT_MS", "5000"),
            ("SHUTDOWN_GRACE_MS", "2000"),
            ("LOG_FORMAT", "pretty"),
            ("RUST_LOG", "debug"),
        ])
        .unwrap();
        assert_eq!(c.database_url.port(), Some(5433));
        assert_eq!(c.redis_url.first().host_str(), Some("q"));
        assert_eq!(c.rate_limit.redis_url.first().host_str(), Some("rl"));
        assert_eq!(c.rate_limit.defaults.per_minute.get(), 10);
        assert_eq!(c.rate_limit.defaults.recipients_per_day.get(), 500);
        assert_eq!(c.rate_limit.redis_timeout, Duration::from_millis(100));
        assert_eq!(c.rate_limit.key_prefix, "t:rl");
        assert_eq!(c.defer_spread_max, Duration::from_millis(5000));
        assert_eq!(c.max_attempts.map(NonZeroU32::get), Some(3));
        assert_eq!(c.retry_for, Duration::from_secs(60));
        assert_eq!(c.metrics_listen, None);
        assert_eq!(
            worker_knobs(&c),
            (
                Duration::from_millis(500),
                64,
                7,
                Duration::from_millis(400),
                20,
                Duration::from_secs(60)
            )
        );
        assert_eq!(c.graph.api_base_url.port(), Some(9));
        assert!(!c.graph.save_to_sent_items);
        assert_eq!(c.sendgrid_api_base_url.port(), Some(8));
        assert_eq!(c.http_timeout, Duration::from_secs(5));
        assert_eq!(c.shutdown_grace, Duration::from_secs(2));
        assert_eq!(c.log_format, LogFormat::Pretty);
        assert_eq!(c.log_filter, "debug");
    }

    #[test]
    fn bad_values_name_the_variable() {
        for (var, value, needle) in [
            ("MAIL_RATE_LIMIT_PER_MINUTE", "abc", "whole number"),
            ("MAIL_RATE_LIMIT_PER_MINUTE", "0", "whole number"),
            ("MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY", "-5", "whole number"),
            ("WORKER_CONCURRENCY", "1.5", "whole number"),
            ("SCHEDULER_INTERVAL_MS", "0", "not 0"),
            ("HTTP_TIMEOUT_MS", "soon", "milliseconds"),
            ("GRAPH_SAVE_TO_SENT_ITEMS", "maybe", "true"),
            ("GRAPH_SAVE_TO_SENT_ITEMS", "yes", "`true` or `false`"),
            ("GRAPH_SAVE_TO_SENT_ITEMS", "1", "`true` or `false`"),
            ("MAIL_RATE_LIMIT_REDIS_URL", "http://x", "schemes"),
            ("LOG_FORMAT", "xml", "json"),
            ("REDIS_URL", "http://x", "schemes"),
            ("DATABASE_URL", "not a url", "not a URL"),
            ("METRICS_LISTEN", "9184", "host:port"),
            ("MAIL_RETRY_FOR", "a day", "unit"),
            ("MAIL_RETRY_FOR", "3600", "unit"),
            ("SEND_LEASE_MS", "1000", "HTTP_TIMEOUT_MS"),
            ("SEND_LEASE_MS", "50000", "twice HTTP_TIMEOUT_MS"),
        ] {
            let err = parse(&[(var, value)]).unwrap_err();
            assert_eq!(err.var, var);
            let text = err.to_string();
            assert!(text.starts_with(var), "{text}");
            assert!(text.contains(needle), "{var}={value}: {text}");
        }
    }

    #[test]
    fn provider_urls_must_be_https_except_to_loopback() {
        for var in [
            "GRAPH_API_BASE_URL",
            "GRAPH_LOGIN_BASE_URL",
            "SENDGRID_API_BASE_URL",
        ] {
            for bad in [
                "http://graph.microsoft.com/v1.0",
                "http://10.0.0.5:8080",
                "http://localhost.evil.example",
                "http://[::2]:80",
                "ftp://127.0.0.1",
            ] {
                let err = parse(&[(var, bad)]).unwrap_err();
                assert_eq!(err.var, var, "{bad}");
                assert!(err.to_string().starts_with(var), "{err}");
            }
            let err = parse(&[(var, "http://graph.example")]).unwrap_err();
            assert!(err.problem.contains("https://"), "{err}");
            for good in [
                "https://graph.example",
                "http://127.0.0.1:9",
                "http://127.8.9.10",
                "http://[::1]:8080",
                "http://localhost:3000",
                "http://LOCALHOST",
                "http://sim.localhost:1",
            ] {
                assert!(parse(&[(var, good)]).is_ok(), "{var}={good}");
            }
            // A stand-in on a private network, named explicitly; nothing else gets through.
            let named = [("PROVIDER_CLEARTEXT_HOSTS", "graph-sim, other")];
            assert!(parse(&[named[0], (var, "http://graph-sim:8025/v1.0")]).is_ok());
            assert!(parse(&[named[0], (var, "http://graph-sim.example:8025")]).is_err());
            assert!(parse(&[(var, "http://graph-sim:8025")]).is_err());
        }
    }

    #[test]
    fn redacted_lines_hide_url_passwords() {
        let c = parse(&[
            ("DATABASE_URL", "postgres://app:hunter2@db/x"),
            ("REDIS_URL", "redis://:s3cret@cache:6379"),
        ])
        .unwrap();
        let text = c.redacted_lines().join("\n");
        assert!(
            !text.contains("hunter2") && !text.contains("s3cret"),
            "{text}"
        );
        assert!(
            text.contains("DATABASE_URL=postgres://app:***@db/x"),
            "{text}"
        );
        assert!(!format!("{c:?}").contains("hunter2"));
        let err = parse(&[("DATABASE_URL", "mysql://app:hunter2@db/x")]).unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
        let err = parse(&[("DATABASE_URL", "postgres://app:hunter2@db:54x2/mail")]).unwrap_err();
        assert_eq!(err.value, "postgres://***@db:54x2/mail");
        let c = parse(&[("DATABASE_URL", "postgres://db/x?user=app&password=hunter2")]).unwrap();
        assert!(!c.redacted_lines().join("\n").contains("hunter2"));
        let c = parse(&[("REDIS_URL", "rediss://:s3cret@cache:6380")]).unwrap();
        assert!(!c.redacted_lines().join("\n").contains("s3cret"));
    }

    #[test]
    fn tls_redis_urls_are_accepted_for_the_queue_and_the_limiter() {
        let c = parse(&[
            ("REDIS_URL", "rediss://queue.example:6380"),
            (
                "MAIL_RATE_LIMIT_REDIS_URL",
                "rediss://limiter.example:6380/0",
            ),
        ])
        .unwrap();
        assert_eq!(c.redis_url.first().scheme(), "rediss");
        assert_eq!(
            c.rate_limit.redis_url.first().as_str(),
            "rediss://limiter.example:6380/0"
        );
        // The limiter inherits the queue's TLS URL when it has none of its own.
        let c = parse(&[("REDIS_URL", "rediss://queue.example:6380")]).unwrap();
        assert_eq!(c.rate_limit.redis_url.first().scheme(), "rediss");
        // And the redis crate can open it (TLS compiled in).
        assert!(redis::Client::open(c.rate_limit.redis_url.first().as_str()).is_ok());
    }

    #[test]
    fn the_limiters_redis_may_be_a_list_of_cluster_seeds_each_checked_and_redacted() {
        let seeds = "redis://:pw@a:7000, redis://:pw@b:7001,redis://:pw@c:7002";
        let c = parse(&[("MAIL_RATE_LIMIT_REDIS_URL", seeds)]).unwrap();
        let hosts: Vec<_> = c
            .rate_limit
            .redis_url
            .as_slice()
            .iter()
            .map(|u| u.host_str().unwrap())
            .collect();
        assert_eq!(hosts, ["a", "b", "c"]);
        assert!(c.rate_limit.redis_url.is_cluster());
        assert!(c.redacted_lines().contains(
            &"MAIL_RATE_LIMIT_REDIS_URL=redis://:***@a:7000,redis://:***@b:7001,redis://:***@c:7002"
                .to_owned()
        ));
        // REDIS_URL, when it is the limiter's, too.
        let c = parse(&[("REDIS_URL", "redis://a:7000,redis://b:7001")]).unwrap();
        assert_eq!(c.rate_limit.redis_url.as_slice().len(), 2);
        assert!(!c.redis_url.redacted().contains("***"));
        for (value, needle) in [
            (
                "redis://a:7000,http://b:7001",
                "list element 2 must use one of the schemes",
            ),
            ("redis://a:7000,,redis://c:7002", "list element 2 is empty"),
            ("redis://a:7000,not a url", "list element 2 is not a URL"),
            (
                "redis://:pw@a:7000,redis://:other@b:7001",
                "list element 2 must use the first",
            ),
            (
                "redis://a:7000,rediss://b:7001",
                "list element 2 must use the first",
            ),
        ] {
            let err = parse(&[("MAIL_RATE_LIMIT_REDIS_URL", value)]).unwrap_err();
            assert_eq!(err.var, "MAIL_RATE_LIMIT_REDIS_URL");
            let text = err.to_string();
            assert!(text.contains(needle), "{value}: {text}");
            assert!(!text.contains("other"), "the password is redacted: {text}");
        }
    }

    #[test]
    fn save_to_sent_items_takes_only_true_or_false() {
        assert!(
            parse(&[("GRAPH_SAVE_TO_SENT_ITEMS", "true")])
                .unwrap()
                .graph
                .save_to_sent_items
        );
        assert!(
            !parse(&[("GRAPH_SAVE_TO_SENT_ITEMS", " FALSE ")])
                .unwrap()
                .graph
                .save_to_sent_items
        );
        for bad in ["yes", "no", "1", "0", "on"] {
            let err = parse(&[("GRAPH_SAVE_TO_SENT_ITEMS", bad)]).unwrap_err();
            assert_eq!(err.var, "GRAPH_SAVE_TO_SENT_ITEMS", "{bad}");
        }
    }

    #[test]
    fn a_send_lease_under_twice_the_http_timeout_blames_the_variable_that_was_set() {
        let err = parse(&[("SEND_LEASE_MS", "59999")]).unwrap_err();
        assert_eq!(err.var, "SEND_LEASE_MS");
        assert_eq!(err.value, "59999");
        assert!(
            err.problem
                .contains("at least twice HTTP_TIMEOUT_MS (30000 ms)"),
            "{err}"
        );
        assert!(parse(&[("SEND_LEASE_MS", "60000")]).is_ok());
        // SEND_LEASE_MS left at its default, HTTP_TIMEOUT_MS raised past half of it.
        let err = parse(&[("HTTP_TIMEOUT_MS", "300001")]).unwrap_err();
        assert_eq!(err.var, "HTTP_TIMEOUT_MS");
        assert_eq!(err.value, "300001");
        assert!(err.problem.contains("SEND_LEASE_MS (600000 ms"), "{err}");
        assert!(parse(&[("HTTP_TIMEOUT_MS", "300000")]).is_ok());
        // Both set: the lease is the one to raise.
        let err =
            parse(&[("HTTP_TIMEOUT_MS", "700000"), ("SEND_LEASE_MS", "1399999")]).unwrap_err();
        assert_eq!(err.var, "SEND_LEASE_MS");
        assert!(parse(&[("HTTP_TIMEOUT_MS", "700000"), ("SEND_LEASE_MS", "1400000")]).is_ok());
    }

    #[test]
    fn default_limits_above_exchange_online_are_warned_about() {
        assert_eq!(parse(&[]).unwrap().warnings(), Vec::<String>::new());
        let at_exchange = parse(&[
            ("MAIL_RATE_LIMIT_PER_MINUTE", "30"),
            ("MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY", "10000"),
        ])
        .unwrap();
        assert!(at_exchange.warnings().is_empty());
        let above = parse(&[
            ("MAIL_RATE_LIMIT_PER_MINUTE", "31"),
            ("MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY", "10001"),
        ])
        .unwrap();
        let warnings = above.warnings();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].starts_with("MAIL_RATE_LIMIT_PER_MINUTE=31 "),
            "{warnings:?}"
        );
        assert!(
            warnings[1].starts_with("MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY=10001 "),
            "{warnings:?}"
        );
        for w in &warnings {
            assert!(w.contains("https://learn.microsoft.com/"), "{w}");
        }
        let only_day = parse(&[("MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY", "20000")]).unwrap();
        assert_eq!(only_day.warnings().len(), 1);
    }
}
