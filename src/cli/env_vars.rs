//! The daemon's settings, one table: [`ENV_VARS`] (name, flag, default, secret or not,
//! meaning). `run --help` is built from it ([`RunArgs`]: clap fills each flag from its variable,
//! a given flag overrides it); a test (`env_vars/tests.rs`) fails when the config parser,
//! `check-config`, `config/mail-worker.env.example` or docs/configuration.md's table drift from it.

/// One environment variable of the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvVar {
    /// The variable, e.g. `MAIL_RATE_LIMIT_PER_MINUTE`.
    pub name: &'static str,
    /// `run`'s flag for it, without the leading `--`.
    pub flag: &'static str,
    /// The value an unset variable means (`None`: unset means none); the name of another
    /// variable means "that variable's value".
    pub default: Option<&'static str>,
    /// Whether a value may hold a password or token: `check-config` and errors redact it.
    pub secret: bool,
    /// What it sets, one line (also the docs' table).
    pub meaning: &'static str,
}

impl EnvVar {
    /// [`Self::default`] as `run --help` and the docs show it.
    pub fn default_text(&self) -> &'static str {
        self.default.unwrap_or("none")
    }
}

/// Every environment variable of the daemon, in the env example's order.
pub const ENV_VARS: &[EnvVar] = &[
    EnvVar {
        name: "DATABASE_URL",
        flag: "database-url",
        default: Some("postgres://postgres@127.0.0.1:5432/mail_worker"),
        secret: true,
        meaning: "PostgreSQL (created only by `mail-worker migrate`; every other command on a missing or unmigrated database says to run it)",
    },
    EnvVar {
        name: "DATABASE_MAX_CONNECTIONS",
        flag: "database-max-connections",
        default: Some("10"),
        secret: false,
        meaning: "PostgreSQL connections per process, whatever WORKER_CONCURRENCY is (a send holds one only per statement, never across a provider call); replicas × this must fit the server's max_connections",
    },
    EnvVar {
        name: "REDIS_URL",
        flag: "redis-url",
        default: Some("redis://127.0.0.1:6379"),
        secret: true,
        meaning: "the limiter's Redis unless MAIL_RATE_LIMIT_REDIS_URL is set and the intake queue (INTAKE_QUEUE; PostgreSQL stays the scheduler); one URL or comma-separated cluster seeds; `rediss://` for TLS",
    },
    EnvVar {
        name: "MAIL_RATE_LIMIT_REDIS_URL",
        flag: "rate-limit-redis-url",
        default: Some("REDIS_URL"),
        secret: true,
        meaning: "the limiter's own Redis: one URL (standalone, or any cluster node: detected from MOVED) or comma-separated Redis Cluster seeds (docs/rate-limiting.md)",
    },
    EnvVar {
        name: "MAIL_RATE_LIMIT_ALGORITHM",
        flag: "rate-limit-algorithm",
        default: Some("paced"),
        secret: false,
        meaning: "`paced` (rolling windows, booked slots, in-flight leases, cooldown) or `fixed-window` (the design note's UTC counters)",
    },
    EnvVar {
        name: "MAIL_RATE_LIMIT_PER_MINUTE",
        flag: "rate-limit-per-minute",
        default: Some("25"),
        secret: false,
        meaning: "messages per mailbox per minute (`paced`: any 60 s; Exchange: 30)",
    },
    EnvVar {
        name: "MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY",
        flag: "rate-limit-recipients-per-day",
        default: Some("9000"),
        secret: false,
        meaning: "recipients (To+Cc+Bcc) per mailbox per day (`paced`: any 24 h; Exchange: 10,000 per rolling 24 h)",
    },
    EnvVar {
        name: "MAIL_RATE_LIMIT_RESERVED_PERCENT",
        flag: "rate-limit-reserved-percent",
        default: Some("20"),
        secret: false,
        meaning: "`paced`: the share of each mailbox's minute and day budgets (and a tenant's external budget) only `high` messages may use; `normal` and `bulk` get the rest; 0 to 90, 0 = off (priority ignored by the limiter)",
    },
    EnvVar {
        name: "MAIL_MAILBOX_MAX_IN_FLIGHT",
        flag: "mailbox-max-in-flight",
        default: Some("3"),
        secret: false,
        meaning: "`paced`: requests in flight per mailbox across replicas (Graph: 4 per app and mailbox)",
    },
    EnvVar {
        name: "MAIL_RATE_LIMIT_FAIL_OPEN_REPLICAS",
        flag: "rate-limit-fail-open-replicas",
        default: Some("1"),
        secret: false,
        meaning: "`paced`: while the limiter's Redis is down each process paces a mailbox at limit ÷ max(this, the live replicas the heartbeat counts): a lower bound",
    },
    EnvVar {
        name: "MAIL_RATE_LIMIT_UNREACHABLE_NOT_READY_AFTER_MS",
        flag: "rate-limit-unreachable-not-ready-after-ms",
        default: Some("60000"),
        secret: false,
        meaning: "a limiter Redis that has not answered once since start-up for this long makes /readyz 503 (`down: rate_limit_redis`); lost later it stays degraded",
    },
    EnvVar {
        name: "MAIL_RATE_LIMIT_REDIS_TIMEOUT_MS",
        flag: "rate-limit-redis-timeout-ms",
        default: Some("250"),
        secret: false,
        meaning: "limiter deadline; past it the send goes ahead (fail-open)",
    },
    EnvVar {
        name: "MAIL_RATE_LIMIT_KEY_PREFIX",
        flag: "rate-limit-key-prefix",
        default: Some("mail:rl"),
        secret: false,
        meaning: "the limiter's Redis key prefix (formats in docs/rate-limiting.md)",
    },
    EnvVar {
        name: "MAIL_DEFER_SPREAD_MAX_MS",
        flag: "defer-spread-max-ms",
        default: Some("30000"),
        secret: false,
        meaning: "deferral spread: FNV-1a(message id) mod this (not added to a booked slot)",
    },
    EnvVar {
        name: "MAIL_RETRY_FOR",
        flag: "retry-for",
        default: Some("1d"),
        secret: false,
        meaning: "how long transient failures are retried (from the first attempt; `ms`/`s`/`m`/`h`/`d`), backoff capped at 15 min, then ERROR",
    },
    EnvVar {
        name: "MAIL_RETENTION",
        flag: "retention",
        default: Some("30d"),
        secret: false,
        meaning: "how long finished (SENT, BOUNCED, ERROR: failed or cancelled) messages and their attachments are kept before the daemon deletes them, in batches (at least `24h`; `off` keeps everything)",
    },
    EnvVar {
        name: "MAIL_MAX_ATTEMPTS",
        flag: "max-attempts",
        default: None,
        secret: false,
        meaning: "an extra cap on transient attempts, if set",
    },
    EnvVar {
        name: "METRICS_LISTEN",
        flag: "metrics-listen",
        default: Some("0.0.0.0:9184"),
        secret: false,
        meaning: "/metrics, /healthz, /readyz; `off` disables; a port in use stops start-up",
    },
    EnvVar {
        name: "METRICS_REFRESH_MS",
        flag: "metrics-refresh-ms",
        default: Some("15000"),
        secret: false,
        meaning: "how often the gauges read from PostgreSQL and the limiter (messages, waiting, budgets) are refreshed; the finished statuses of `mail_worker_messages` every 20th time",
    },
    EnvVar {
        name: "MAIL_BUDGET_ALERT_PERCENT",
        flag: "mail-budget-alert-percent",
        default: Some("80"),
        secret: false,
        meaning: "used share of a mailbox's 24 h recipient budget that logs mail.budget.nearlyUsed (once per 24 h); `off` disables",
    },
    EnvVar {
        name: "WORKER_CONCURRENCY",
        flag: "worker-concurrency",
        default: Some("128"),
        secret: false,
        meaning: "sends in flight per replica; a replica claims for its own free slots plus a prefetch of a quarter of them",
    },
    EnvVar {
        name: "SCHEDULER_INTERVAL_MS",
        flag: "scheduler-interval-ms",
        default: Some("250"),
        secret: false,
        meaning: "the wait before claiming again when the last claim found less than there was room for (with work due and slots free a replica claims again at once)",
    },
    EnvVar {
        name: "SCHEDULER_BATCH_SIZE",
        flag: "scheduler-batch-size",
        default: Some("100"),
        secret: false,
        meaning: "most rows one claim takes",
    },
    EnvVar {
        name: "SEND_LEASE_MS",
        flag: "send-lease-ms",
        default: Some("600000"),
        secret: false,
        meaning: "a SENDING row whose lease was not renewed for this long is rescheduled; a live attempt renews it every quarter of it (at least 2 × HTTP_TIMEOUT_MS)",
    },
    EnvVar {
        name: "GRAPH_API_BASE_URL",
        flag: "graph-api-base-url",
        default: Some("https://graph.microsoft.com/v1.0"),
        secret: false,
        meaning: "Microsoft Graph; the token scope is `<its origin>/.default`; a base URL alone (no user, password, query or fragment)",
    },
    EnvVar {
        name: "GRAPH_LOGIN_BASE_URL",
        flag: "graph-login-base-url",
        default: Some("https://login.microsoftonline.com"),
        secret: false,
        meaning: "Entra ID token endpoint; a base URL alone",
    },
    EnvVar {
        name: "GRAPH_SAVE_TO_SENT_ITEMS",
        flag: "graph-save-to-sent-items",
        default: Some("true"),
        secret: false,
        meaning: "saveToSentItems, `true` or `false` (`sendmail` mode; a draft's send always keeps its copy)",
    },
    EnvVar {
        name: "GRAPH_SEND_MODE",
        flag: "graph-send-mode",
        default: Some("draft"),
        secret: false,
        meaning: "`draft` (exactly once: draft, then send) or `sendmail` (one request; docs/delivery.md)",
    },
    EnvVar {
        name: "GRAPH_SEND_SETTLE_MS",
        flag: "graph-send-settle-ms",
        default: Some("120000"),
        secret: false,
        meaning: "after a send with an unknown outcome, how long \"still a draft\" / \"not in Sent Items\" is not trusted",
    },
    EnvVar {
        name: "GRAPH_READ_BOUNCES",
        flag: "graph-read-bounces",
        default: Some("off"),
        secret: false,
        meaning: "`on`: read each Graph sender's Inbox for non-delivery reports and mark their messages BOUNCED (needs Mail.Read and Mail.ReadWrite; per sender `readBounces`)",
    },
    EnvVar {
        name: "GRAPH_BOUNCE_INTERVAL",
        flag: "graph-bounce-interval",
        default: Some("5m"),
        secret: false,
        meaning: "how often each Inbox is read for bounces (a duration: `ms`, `s`, `m`, `h`, `d`; at least 1s)",
    },
    EnvVar {
        name: "GRAPH_BOUNCE_FOLDER",
        flag: "graph-bounce-folder",
        default: None,
        secret: false,
        meaning: "where a handled NDR is moved (a well-known folder name such as `deleteditems`, or a folder id); unset: it is marked read",
    },
    EnvVar {
        name: "SENDGRID_API_BASE_URL",
        flag: "sendgrid-api-base-url",
        default: Some("https://api.sendgrid.com"),
        secret: false,
        meaning: "SendGrid v3; a base URL alone",
    },
    EnvVar {
        name: "PROVIDER_CLEARTEXT_HOSTS",
        flag: "provider-cleartext-hosts",
        default: None,
        secret: false,
        meaning: "host names the three provider URLs may reach over http:// besides loopback (compose's graph-sim); anything else must be https://",
    },
    EnvVar {
        name: "HTTP_TIMEOUT_MS",
        flag: "http-timeout-ms",
        default: Some("30000"),
        secret: false,
        meaning: "whole-request deadline of provider calls",
    },
    EnvVar {
        name: "SHUTDOWN_GRACE_MS",
        flag: "shutdown-grace-ms",
        default: Some("30000"),
        secret: false,
        meaning: "time for in-flight sends after SIGTERM",
    },
    EnvVar {
        name: "LOG_FORMAT",
        flag: "log-format",
        default: Some("json"),
        secret: false,
        meaning: "`json` or `pretty`",
    },
    EnvVar {
        name: "RUST_LOG",
        flag: "log",
        default: Some("info"),
        secret: false,
        meaning: "log filter",
    },
    EnvVar {
        name: "ADMIN_LISTEN",
        flag: "admin-listen",
        default: Some("127.0.0.1:9185"),
        secret: false,
        meaning: "`mail-worker admin`: where the admin UI listens; `off` disables it",
    },
    EnvVar {
        name: "ADMIN_TOKEN",
        flag: "admin-token",
        default: None,
        secret: true,
        meaning: "`mail-worker admin`: the operators' token (at least 16 characters) or an env:NAME / file:/path reference; `admin` refuses to start without one",
    },
    EnvVar {
        name: "ADMIN_COOKIE_SECURE",
        flag: "admin-cookie-secure",
        default: Some("false"),
        secret: false,
        meaning: "`mail-worker admin`: mark the session cookie Secure; set it when the UI is reached over HTTPS",
    },
    EnvVar {
        name: "INTAKE_QUEUE",
        flag: "intake-queue",
        default: Some("{mail-worker:campaign-sends}"),
        secret: false,
        meaning: "the intake queue of campaign sends on REDIS_URL (apalis-redis namespace; braces = one Redis Cluster hash tag, required when REDIS_URL lists cluster seeds); every replica consumes it into PostgreSQL; `off` (any case) disables it (docs/queue.md)",
    },
    EnvVar {
        name: "INTAKE_WORKER_NAME",
        flag: "intake-worker-name",
        default: None,
        secret: false,
        meaning: "the start of this process's intake worker name (pid and a random suffix are added); unset: the host name; Kubernetes: the pod's name",
    },
    EnvVar {
        name: "INTAKE_HEARTBEAT_MS",
        flag: "intake-heartbeat-ms",
        default: Some("10000"),
        secret: false,
        meaning: "the intake worker's heartbeat (apalis-redis): a replica silent for 3 heartbeats is dead and another consumes its in-flight jobs; lower only in tests",
    },
    EnvVar {
        name: "EVENTS_WEBHOOK_URL",
        flag: "events-webhook-url",
        default: Some("off"),
        secret: true,
        meaning: "where the outbox's events are POSTed, signed, in batches (docs/events.md): one or more comma-separated URLs, `https://` (http:// only to loopback or PROVIDER_CLEARTEXT_HOSTS); `off` writes no events at all",
    },
    EnvVar {
        name: "EVENTS_WEBHOOK_SECRET",
        flag: "events-webhook-secret",
        default: None,
        secret: true,
        meaning: "the HMAC-SHA256 key of each POST's signatures (a value, `env:NAME` or `file:/path`): `whsec_<base64>` (24 to 64 bytes) or raw (at least 16 characters); two, separated by a space or a comma, during a rotation (both signatures sent); required with EVENTS_WEBHOOK_URL",
    },
    EnvVar {
        name: "EVENTS_BATCH_SIZE",
        flag: "events-batch-size",
        default: Some("100"),
        secret: false,
        meaning: "the most events one webhook POST carries",
    },
    EnvVar {
        name: "EVENTS_RETRY_FOR",
        flag: "events-retry-for",
        default: Some("1d"),
        secret: false,
        meaning: "how long after it happened an event is retried (jittered backoff) at a receiver that fails, then dead there (`mail-worker events dead`, `replay`)",
    },
    EnvVar {
        name: "EVENTS_SIGNATURE",
        flag: "events-signature",
        default: Some("both"),
        secret: false,
        meaning: "which signature headers each webhook POST carries: `standard` (Standard Webhooks: webhook-id, webhook-timestamp, webhook-signature), `legacy` (X-Mail-Worker-Timestamp, X-Mail-Worker-Signature) or `both` (docs/events.md: migrating)",
    },
    EnvVar {
        name: "INGEST_LISTEN",
        flag: "ingest-listen",
        default: Some("off"),
        secret: false,
        meaning: "the HTTP ingest's listener (`POST /v1/messages`, `GET /v1/openapi.json`; docs/ingest.md): `host:port` or `off`; plain HTTP, TLS is the ingress's; needs INGEST_TOKENS or INGEST_TOKENS_FILE",
    },
    EnvVar {
        name: "INGEST_TOKENS",
        flag: "ingest-tokens",
        default: None,
        secret: true,
        meaning: "the producers' bearer tokens, `name=secret[,name=secret…]`, each secret a literal or an env:NAME / file:/path reference (at least 16 characters); each may post for every sender",
    },
    EnvVar {
        name: "INGEST_TOKENS_FILE",
        flag: "ingest-tokens-file",
        default: None,
        secret: false,
        meaning: "a JSON file of tokens, `[{\"name\": …, \"secret\": …, \"senders\": [\"events@contoso.example\", \"northwind\"]}]`, each narrowed to the senders it lists (read at start-up)",
    },
    EnvVar {
        name: "INGEST_MAX_BODY_BYTES",
        flag: "ingest-max-body-bytes",
        default: Some("10485760"),
        secret: false,
        meaning: "the largest request body the ingest takes, bytes; a larger one is answered 413",
    },
    EnvVar {
        name: "INGEST_MAX_LINES",
        flag: "ingest-max-lines",
        default: Some("1000"),
        secret: false,
        meaning: "the most campaign lines one ingest request may carry (stored in one transaction); more is answered 413",
    },
];

mod run_args;
pub use run_args::RunArgs;

#[cfg(test)]
mod tests;
