//! The daemon's environment variables as `run`'s flags: [`ENV_VARS`] (name, flag, default,
//! meaning) and [`RunArgs`], which clap fills from them (a given flag overrides its variable).

use clap::{ArgMatches, Args, FromArgMatches, parser::ValueSource};

/// Every environment variable of the daemon: `(name, --flag, default, meaning)`. `run --help`
/// lists them (clap's `env` support: a flag overrides its variable).
pub const ENV_VARS: &[(&str, &str, &str, &str)] = &[
    (
        "DATABASE_URL",
        "database-url",
        "postgres://postgres@127.0.0.1:5432/mail_worker",
        "PostgreSQL (created only by `mail-worker migrate`)",
    ),
    (
        "DATABASE_MAX_CONNECTIONS",
        "database-max-connections",
        "10",
        "PostgreSQL connections per process, whatever WORKER_CONCURRENCY is",
    ),
    (
        "REDIS_URL",
        "redis-url",
        "redis://127.0.0.1:6379",
        "the limiter's Redis unless MAIL_RATE_LIMIT_REDIS_URL is set (no job queue: PostgreSQL is the queue); one URL or comma-separated cluster seeds",
    ),
    (
        "MAIL_RATE_LIMIT_REDIS_URL",
        "rate-limit-redis-url",
        "REDIS_URL",
        "the limiter's own Redis: one URL (standalone, or any cluster node: detected from MOVED) or comma-separated Redis Cluster seeds",
    ),
    (
        "MAIL_RATE_LIMIT_ALGORITHM",
        "rate-limit-algorithm",
        "paced",
        "`paced` or `fixed-window`",
    ),
    (
        "MAIL_RATE_LIMIT_PER_MINUTE",
        "rate-limit-per-minute",
        "25",
        "messages per mailbox per minute",
    ),
    (
        "MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY",
        "rate-limit-recipients-per-day",
        "9000",
        "recipients per mailbox per day",
    ),
    (
        "MAIL_RATE_LIMIT_REDIS_TIMEOUT_MS",
        "rate-limit-redis-timeout-ms",
        "250",
        "limiter deadline; past it the send goes ahead (fail-open)",
    ),
    (
        "MAIL_RATE_LIMIT_KEY_PREFIX",
        "rate-limit-key-prefix",
        "mail:rl",
        "the limiter's Redis key prefix",
    ),
    (
        "MAIL_MAILBOX_MAX_IN_FLIGHT",
        "mailbox-max-in-flight",
        "3",
        "requests in flight per mailbox, all replicas (paced)",
    ),
    (
        "MAIL_RATE_LIMIT_FAIL_OPEN_REPLICAS",
        "rate-limit-fail-open-replicas",
        "1",
        "replicas sharing a mailbox's budget while failing open",
    ),
    (
        "MAIL_DEFER_SPREAD_MAX_MS",
        "defer-spread-max-ms",
        "30000",
        "deferral spread: FNV-1a(message id) mod this",
    ),
    (
        "MAIL_RETRY_FOR",
        "retry-for",
        "24h",
        "how long transient failures are retried before ERROR",
    ),
    (
        "MAIL_MAX_ATTEMPTS",
        "max-attempts",
        "none",
        "an extra cap on transient attempts",
    ),
    (
        "WORKER_CONCURRENCY",
        "worker-concurrency",
        "64",
        "sends in flight per replica",
    ),
    (
        "SCHEDULER_INTERVAL_MS",
        "scheduler-interval-ms",
        "250",
        "the wait before claiming again when the last claim found less than there was room for",
    ),
    (
        "SCHEDULER_BATCH_SIZE",
        "scheduler-batch-size",
        "100",
        "most rows claimed per tick",
    ),
    (
        "SEND_LEASE_MS",
        "send-lease-ms",
        "600000",
        "a SENDING row whose lease was not renewed for this long is rescheduled (at least 2 × HTTP_TIMEOUT_MS)",
    ),
    (
        "GRAPH_API_BASE_URL",
        "graph-api-base-url",
        "https://graph.microsoft.com/v1.0",
        "Microsoft Graph",
    ),
    (
        "GRAPH_LOGIN_BASE_URL",
        "graph-login-base-url",
        "https://login.microsoftonline.com",
        "Entra ID token endpoint",
    ),
    (
        "GRAPH_SAVE_TO_SENT_ITEMS",
        "graph-save-to-sent-items",
        "true",
        "saveToSentItems",
    ),
    (
        "GRAPH_SEND_MODE",
        "graph-send-mode",
        "draft",
        "`draft` (exactly once: draft, then send) or `sendmail`",
    ),
    (
        "GRAPH_SEND_SETTLE_MS",
        "graph-send-settle-ms",
        "120000",
        "how long an unconfirmed send is looked for before it is resent",
    ),
    (
        "SENDGRID_API_BASE_URL",
        "sendgrid-api-base-url",
        "https://api.sendgrid.com",
        "SendGrid v3",
    ),
    (
        "PROVIDER_CLEARTEXT_HOSTS",
        "provider-cleartext-hosts",
        "",
        "host names the provider URLs may reach over http:// besides loopback (a stand-in on a private network only)",
    ),
    (
        "HTTP_TIMEOUT_MS",
        "http-timeout-ms",
        "30000",
        "whole-request deadline of provider calls",
    ),
    (
        "SHUTDOWN_GRACE_MS",
        "shutdown-grace-ms",
        "30000",
        "time for in-flight sends after SIGTERM",
    ),
    (
        "METRICS_LISTEN",
        "metrics-listen",
        "0.0.0.0:9184",
        "/metrics, /healthz, /readyz; `off` disables",
    ),
    (
        "METRICS_REFRESH_MS",
        "metrics-refresh-ms",
        "15000",
        "how often mail_worker_messages is re-read",
    ),
    ("LOG_FORMAT", "log-format", "json", "`json` or `pretty`"),
    ("RUST_LOG", "log", "info", "log filter"),
    (
        "ADMIN_LISTEN",
        "admin-listen",
        "127.0.0.1:9185",
        "`mail-worker admin`: where the admin UI listens; `off` disables it",
    ),
    (
        "ADMIN_TOKEN",
        "admin-token",
        "none (required by `admin`)",
        "`mail-worker admin`: the operators' token (16+ characters), or env:NAME / file:/path",
    ),
    (
        "ADMIN_COOKIE_SECURE",
        "admin-cookie-secure",
        "false",
        "`mail-worker admin`: mark the session cookie Secure (set it when served over HTTPS)",
    ),
];

/// `mail-worker run`'s flags: one per environment variable of [`ENV_VARS`], each read from its
/// variable when not given (clap `env`); given flags override the environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunArgs {
    /// `(variable, value)` given on the command line.
    pub overrides: Vec<(&'static str, String)>,
}

impl FromArgMatches for RunArgs {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut overrides = Vec::new();
        for (var, ..) in ENV_VARS {
            if matches.value_source(var) == Some(ValueSource::CommandLine)
                && let Some(value) = matches.get_one::<String>(var)
            {
                overrides.push((*var, value.clone()));
            }
        }
        Ok(Self { overrides })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl Args for RunArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        cmd.args(ENV_VARS.iter().map(|(var, flag, default, meaning)| {
            clap::Arg::new(*var)
                .long(*flag)
                .env(*var)
                .value_name("VALUE")
                // Values may hold passwords: never echo them in --help.
                .hide_env_values(true)
                .help(format!("{meaning} [default: {default}]"))
        }))
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}
