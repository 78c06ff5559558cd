//! The limiter's settings (docs/rate-limiting.md): algorithm, default budgets, in-flight cap,
//! fail-open, its Redis deadline and key prefix.

use std::{num::NonZeroU32, path::PathBuf, time::Duration};

use super::Fallback::{Unset, Value};
use super::Setting;
use super::kinds::{Custom, FilePath, Optional, Positive, Span, Text, keyword};
use crate::rate_limit::Algorithm;

/// `MAIL_RATE_LIMIT_RESERVED_PERCENT`: 0 to 90.
const RESERVED_PERCENT: Custom<u8> = Custom {
    parse: crate::rate_limit::parse_reserved_percent,
    show: |p| p.to_string(),
};

settings! {
    /// The limiter (docs/rate-limiting.md).
    pub struct LimiterSettings = "The limiter (docs/rate-limiting.md)" {
        algorithm: Algorithm = keyword::<Algorithm>(), Setting {
            name: "MAIL_RATE_LIMIT_ALGORITHM",
            flag: "rate-limit-algorithm",
            default: Value("paced"),
            help: "`paced` (rolling windows, booked slots, in-flight leases, cooldown) or `fixed-window` (the design note's UTC counters)",
            doc: "The limiter's algorithm: `paced` (rolling 60 s / 24 h windows, evenly paced sends, booked\n\
                  slots, in-flight leases, a shared cooldown after Retry-After) or `fixed-window` (the original\n\
                  design note: UTC-minute and UTC-day counters; the benchmarks' baseline).",
            ..Setting::NEW
        };
        per_minute: NonZeroU32 = Positive, Setting {
            name: "MAIL_RATE_LIMIT_PER_MINUTE",
            flag: "rate-limit-per-minute",
            default: Value("25"),
            help: "messages per mailbox per minute (`paced`: any 60 s; Exchange: 30)",
            doc: "Messages per mailbox per minute (paced: any 60 s; fixed-window: per UTC minute). Exchange\n\
                  Online: 30/min; we keep a margin.",
            ..Setting::NEW
        };
        recipients_per_day: NonZeroU32 = Positive, Setting {
            name: "MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY",
            flag: "rate-limit-recipients-per-day",
            default: Value("9000"),
            help: "recipients (To+Cc+Bcc) per mailbox per day (`paced`: any 24 h; Exchange: 10,000 per rolling 24 h)",
            doc: "Recipients (To+Cc+Bcc) per mailbox per day (paced: any 24 h; fixed-window: per UTC day).\n\
                  Exchange Online: 10,000 per rolling 24 h. Start-up (and check-config) warns when either default\n\
                  is above Exchange's (https://learn.microsoft.com/office365/servicedescriptions/exchange-online-service-description/exchange-online-limits#sending-limits).",
            ..Setting::NEW
        };
        reserved_percent: u8 = RESERVED_PERCENT, Setting {
            name: "MAIL_RATE_LIMIT_RESERVED_PERCENT",
            flag: "rate-limit-reserved-percent",
            default: Value("20"),
            help: "`paced`: the share of each mailbox's minute and day budgets (and a tenant's external budget) only `high` messages may use; `normal` and `bulk` get the rest; 0 to 90, 0 = off (priority ignored by the limiter)",
            doc: "paced: the share (percent) of each mailbox's minute and day budgets, and of a tenant's\n\
                  external budget, that only `high` messages may use: normal and bulk mail is paced at the rest\n\
                  (25/min, 20: 20/min), so an alert or a password reset goes out at once even behind a booked\n\
                  campaign. 0 to 90; 0 turns it off (the limiter then ignores priority). A system mailbox may\n\
                  override it (rateLimitReservedPercent in the senders file). fixed-window ignores it.",
            ..Setting::NEW
        };
        max_in_flight: NonZeroU32 = Positive, Setting {
            name: "MAIL_MAILBOX_MAX_IN_FLIGHT",
            flag: "mailbox-max-in-flight",
            default: Value("3"),
            help: "`paced`: requests in flight per mailbox across replicas (Graph: 4 per app and mailbox)",
            doc: "paced: sendMail requests in flight per mailbox across every replica (Graph: 4 per app and\n\
                  mailbox). A lease lives 15 s and the running send renews it every 5 s, so a killed worker's\n\
                  lease frees itself within 15 s.",
            ..Setting::NEW
        };
        fail_open_replicas: NonZeroU32 = Positive, Setting {
            name: "MAIL_RATE_LIMIT_FAIL_OPEN_REPLICAS",
            flag: "rate-limit-fail-open-replicas",
            default: Value("1"),
            help: "`paced`: while the limiter's Redis is down each process paces a mailbox at limit ÷ max(this, the live replicas the heartbeat counts): a lower bound",
            doc: "paced: while the limiter's Redis is unreachable, each process paces each mailbox at its limit\n\
                  divided by max(this, the live replicas the heartbeat counts in PostgreSQL): a lower bound.",
            ..Setting::NEW
        };
        unreachable_not_ready_after: Duration = Span, Setting {
            name: "MAIL_RATE_LIMIT_UNREACHABLE_NOT_READY_AFTER",
            flag: "rate-limit-unreachable-not-ready-after",
            default: Value("1m"),
            help: "a limiter Redis that has not answered once since start-up for this long makes /readyz 503 (`down: rate_limit_redis`); lost later it stays degraded",
            doc: "A limiter Redis that has not answered once since start-up for this long makes /readyz 503\n\
                  (down: rate_limit_redis): a rollout with a wrong REDIS_URL stops at its first pod.",
            alias_ms: Some("MAIL_RATE_LIMIT_UNREACHABLE_NOT_READY_AFTER_MS"),
            ..Setting::NEW
        };
        redis_timeout: Duration = Span, Setting {
            name: "MAIL_RATE_LIMIT_REDIS_TIMEOUT",
            flag: "rate-limit-redis-timeout",
            default: Value("250ms"),
            help: "limiter deadline; past it the send goes ahead (fail-open)",
            doc: "Deadline for one limiter answer; past it the limiter fails open (sends, logs mail.rateLimit.redisError).",
            alias_ms: Some("MAIL_RATE_LIMIT_REDIS_TIMEOUT_MS"),
            ..Setting::NEW
        };
        key_prefix: String = Text, Setting {
            name: "MAIL_RATE_LIMIT_KEY_PREFIX",
            flag: "rate-limit-key-prefix",
            default: Value("mail:rl"),
            help: "the limiter's Redis key prefix (formats in docs/rate-limiting.md)",
            doc: "Prefix of the limiter's keys. fixed-window: <prefix>:{<mailbox>}:m:<YYYYMMDDHHMM> and\n\
                  :d:<YYYYMMDD>; paced: <prefix>:{<graph tenant>}:<mailbox>[:days|:booked|:sent|:inflight].",
            ..Setting::NEW
        };
        adaptive_rules_file: Option<PathBuf> = Optional(FilePath, "(unset)"), Setting {
            name: "ADAPTIVE_RULES_FILE",
            flag: "adaptive-rules-file",
            default: Unset,
            help: "a JSON file of adaptive rules (docs/adaptive-rules.md) replacing the built-in table: a signal (429:MailboxConcurrency, 5.7.705, 5xx, …) seen N times in a window shrinks or suspends a mailbox or tenant for a while, then steps back up; a bad file stops start-up and fails check-config, naming the rule and field",
            doc: "Adaptive rules (docs/adaptive-rules.md): a JSON file {\"rules\": [...]} replacing the built-in\n\
                  table. Each rule: a signal (429:MailboxConcurrency, 429:IncomingBytes, 5.7.233, 5.7.705,\n\
                  5.7.708, 5.7.501, 5.1.90, 5.2.2, 5xx), a threshold within a window, a scope (mailbox, tenant),\n\
                  an action (shrink by a factor, or suspend) for a duration, then recovery (the factor doubles\n\
                  every recoverEvery). Unset: the built-in rules. {\"rules\": []} turns them off.",
            example: Some("/etc/mail-worker/adaptive-rules.json"),
            ..Setting::NEW
        };
    }
}
