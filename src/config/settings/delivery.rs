//! Deferrals, retries, retention, and the metrics listener.

use std::{net::SocketAddr, num::NonZeroU32, time::Duration};

use super::Fallback::{Unset, Value};
use super::Setting;
use super::kinds::{Custom, Off, Optional, Positive, Span, SpanAtLeast};
use super::urls::Listen;
use crate::store::retention::{MIN_RETENTION, TOO_SHORT};

/// `MAIL_BUDGET_ALERT_PERCENT` (besides `off`): 1 to 100.
const ALERT_PERCENT: Custom<u8> = Custom {
    parse: |raw| {
        raw.parse::<u8>()
            .ok()
            .filter(|p| (1..=100).contains(p))
            .ok_or("must be a whole number from 1 to 100")
    },
    show: |p| p.to_string(),
};

settings! {
    /// Deferrals, retries, retention and metrics.
    pub struct DeliverySettings = "Deferrals, retries, retention and metrics" {
        defer_spread_max: Duration = Span, Setting {
            name: "MAIL_DEFER_SPREAD_MAX",
            flag: "defer-spread-max",
            default: Value("30s"),
            help: "deferral spread: FNV-1a(message id) mod this (not added to a booked slot)",
            doc: "A deferred message waits retry_after + spread, spread = FNV-1a(message id) mod this.\n\
                  paced: a booked slot is kept exactly (the slots already spread the messages); the spread then\n\
                  applies only to short in-flight waits, bounded by the wait.",
            alias_ms: Some("MAIL_DEFER_SPREAD_MAX_MS"),
            ..Setting::NEW
        };
        retry_for: Duration = Span, Setting {
            name: "MAIL_RETRY_FOR",
            flag: "retry-for",
            default: Value("1d"),
            help: "how long transient failures are retried (from the first attempt; `ms`/`s`/`m`/`h`/`d`), backoff capped at 15 min, then ERROR",
            doc: "How long transient failures (5xx, timeouts) are retried, from a message's first attempt,\n\
                  before it ends ERROR: a number with a unit (ms, s, m, h, d). The backoff is capped at 15 min.",
            ..Setting::NEW
        };
        retention: Option<Duration> = Off(SpanAtLeast(MIN_RETENTION, TOO_SHORT)), Setting {
            name: "MAIL_RETENTION",
            flag: "retention",
            default: Value("30d"),
            help: "how long finished (SENT, BOUNCED, ERROR: failed or cancelled) messages and their attachments are kept before the daemon deletes them, in batches (at least `24h`; `off` keeps everything)",
            doc: "How long finished messages (SENT, BOUNCED, ERROR: failed or cancelled) and their attachments are\n\
                  kept: older ones are deleted in batches by one replica at a time. At least 24h (the limiter\n\
                  rebuilds budgets from the last 24 h of sends); `off` keeps everything.",
            ..Setting::NEW
        };
        max_attempts: Option<NonZeroU32> = Optional(Positive, "none"), Setting {
            name: "MAIL_MAX_ATTEMPTS",
            flag: "max-attempts",
            default: Unset,
            help: "an extra cap on transient attempts, if set",
            doc: "An extra cap on transient attempts (unset: none; give up by time only).",
            example: Some("50"),
            ..Setting::NEW
        };
        metrics_listen: Option<SocketAddr> = Off(Listen), Setting {
            name: "METRICS_LISTEN",
            flag: "metrics-listen",
            default: Value("0.0.0.0:9184"),
            help: "/metrics, /healthz, /readyz; `off` disables; a port in use stops start-up",
            doc: "The daemon's own HTTP listener: /metrics (Prometheus), /healthz, /readyz; `off` disables it.",
            ..Setting::NEW
        };
        metrics_refresh: Duration = Span, Setting {
            name: "METRICS_REFRESH",
            flag: "metrics-refresh",
            default: Value("15s"),
            help: "how often the gauges read from PostgreSQL and the limiter (messages, waiting, budgets) are refreshed; the finished statuses of `mail_worker_messages` every 20th time",
            doc: "How often the gauges read from PostgreSQL and the limiter (messages by status and by why they\n\
                  wait, each mailbox's used budget) are refreshed.",
            alias_ms: Some("METRICS_REFRESH_MS"),
            ..Setting::NEW
        };
        budget_alert_percent: Option<u8> = Off(ALERT_PERCENT), Setting {
            name: "MAIL_BUDGET_ALERT_PERCENT",
            flag: "mail-budget-alert-percent",
            default: Value("80"),
            help: "used share of a mailbox's 24 h recipient budget that logs mail.budget.nearlyUsed (once per 24 h); `off` disables",
            doc: "Log mail.budget.nearlyUsed when a mailbox has used this share of its 24 h recipient budget\n\
                  (once per mailbox and 24 h, across replicas); `off` disables.",
            ..Setting::NEW
        };
    }
}
