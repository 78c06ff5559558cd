//! The daemon's Prometheus metrics (`GET /metrics`), through `prometheus-client`: one
//! [`Metrics`] per daemon, handed to the parts that count (service, limiter, factory, worker),
//! so two daemons in one process (the tests) never mix their numbers.
//!
//! Names and labels are a contract (dashboards and alerts key on them):
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `mail_worker_sends_total` | counter | `provider` (`graph`, `sendgrid`), `outcome` (`sent`, `deferred`, `throttled`, `retried`, `failed`, `paused`) |
//! | `mail_worker_rate_limit_decisions_total` | counter | `decision` (`allowed`, `minute`, `day`, `tenant`, `cooldown`, `in_flight`, `fail_open`) |
//! | `mail_worker_rate_limit_seconds` | histogram | — (the limiter's round trip) |
//! | `mail_worker_claim_duration_seconds` | histogram | — (one claim statement's round trip, `FOR UPDATE SKIP LOCKED` to `SENDING`) |
//! | `mail_worker_provider_requests_total` | counter | `provider`, `status` (see `mailer::metered::provider_status`) |
//! | `mail_worker_provider_seconds` | histogram | `provider` |
//! | `mail_worker_messages` | gauge | `status` (every row in PostgreSQL: `SCHEDULED`/`SENDING` each refresh, the finished statuses every 5 min) |
//! | `mail_worker_messages_waiting` | gauge | `reason` (`minute`, `day`, `tenant`, `cooldown`, `in_flight`, `paused`, `retry`, `unconfirmed`, `scheduled`, `due`: why the `SCHEDULED` rows wait) |
//! | `mail_worker_budget_used_ratio` | gauge | `mailbox`, `window` (`minute`, `day`): the used share of each Graph mailbox's budgets as the limiter counts them |
//! | `mail_worker_tenant_budget_used_ratio` | gauge | `tenant`: the used share of each Graph tenant's external recipient budget (rolling 24 h) |
//! | `mail_worker_oldest_due_seconds` | gauge | — (how long the oldest due `SCHEDULED` row has waited for a claim) |
//! | `mail_worker_in_flight` | gauge | — (sends running in this process) |
//! | `mail_worker_claimed_total` | counter | — (rows this process claimed) |
//! | `mail_worker_messages_purged_total` | counter | — (finished messages this process deleted, `MAIL_RETENTION`) |
//! | `mail_worker_bounces_total` | counter | `code_class` (`5.1`, `5.2`, `5.4`, `5.7`, …, `other`: the DSN code's class and subject, never an address) |
//! | `mail_worker_recipients_outcome_total` | counter | `mailbox` (the sender), `outcome` (`delivered`, `failed`, `filtered`): recipients whose fate the message trace told (`crate::delivery`), once each |
//! | `mail_worker_sender_paused` | gauge | `mailbox` (1 while paused; senders are configuration, so bounded) |
//! | `mail_worker_limit_paused` | gauge | `scope` (`mailbox`, `tenant`), `key` (the sending mailbox or the Graph tenant: configuration, bounded), `code` (the NDR's DSN code): 1 while an NDR's pause is in force (`limit_pauses`, all replicas; refreshed periodically) |
//! | `mail_worker_warmup_day_budget` | gauge | `mailbox`: the recipients per day its warm-up step allows (the budget in force is the lower of this and its own; `sender_warmups`, all replicas, refreshed every minute) |
//! | `mail_worker_adaptive_actions_total` | counter | `rule` (the rules file's names: configuration, bounded), `scope` (`mailbox`, `tenant`), `tenant` (the Graph tenant), `mailbox` (the sender's address; empty on a tenant's action): adaptive rules this process saw fire (docs/adaptive-rules.md) |
//! | `mail_worker_adaptive_factor` | gauge | `rule`, `scope`, `tenant`, `mailbox`: the lowest share of the budget (0 to 1; 0 = suspended) an action of the rule (or `operator`) held at this process's last decision |
//! | `mail_worker_mailbox_failed_total` | counter | `mailbox`: messages that ended `ERROR` at a send, by sending mailbox (configuration, bounded) |
//! | `mail_worker_messages_overflowed_total` | counter | `pool`, `reason` (`budgetsSpent`): pooled messages given to their pool's overflow sender (configuration, bounded) |
//! | `mail_worker_recipients_suppressed_total` | counter | `stage` (`intake`, `send`): recipients dropped as on their sender's suppression list |
//! | `mail_worker_intake_*` | | the intake queue's (`super::intake`) |
//! | `mail_worker_ingest_*` | | the HTTP ingest's (`super::ingest`) |
//! | `mail_worker_events_*` | | the outbox's webhooks (`super::events`) |
//!
//! Counting happens at the service's outcome (what was written to PostgreSQL), not in apalis's
//! layers, which see a deferred or failed mail as a successful job. No label carries a
//! recipient address.

mod labels;
mod limiter;

use std::{sync::atomic::AtomicU64, time::Duration};

use super::intake::OutcomeLabels;
pub use labels::OutcomeLabel;
use labels::{
    AdaptiveLabels, BudgetLabels, CodeClassLabels, DecisionLabels, LimitPauseLabels, MailboxLabels,
    OverflowLabels, ProviderLabels, ProviderStatusLabels, ReasonLabels, RecipientOutcomeLabels,
    SendLabels, StageLabels, StatusLabels, TenantLabels,
};
pub(crate) use labels::{PROVIDER_GRAPH, PROVIDER_SENDGRID, STAGE_INTAKE, STAGE_SEND, STATUSES};
use prometheus_client::{
    encoding::text::encode,
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

/// Declares [`Metrics`]: each entry is a field, its type, the metric's name and help, and how
/// it is made when not by `Default` (a histogram's buckets); `new` registers them all. The
/// fields are the `ops` module's, so the intake's counting methods live beside its labels
/// (`ops/intake.rs`).
macro_rules! metric_table {
    ($(#[$meta:meta])* pub struct $name:ident {
        $($field:ident: $ty:ty = $metric:literal, $help:literal $(, $init:expr)?;)+
    }) => {
        $(#[$meta])*
        pub struct $name {
            registry: Registry,
            $(pub(super) $field: $ty,)+
        }

        impl $name {
            /// A fresh registry with every metric registered.
            pub fn new() -> Self {
                let mut registry = Registry::default();
                $(
                    let $field: $ty = metric_table!(@made $($init)?);
                    registry.register($metric, $help, $field.clone());
                )+
                Self { registry, $($field,)+ }
            }
        }
    };
    (@made) => { Default::default() };
    (@made $init:expr) => { $init };
}

metric_table! {
    /// One daemon's metrics. Cheap to share behind an `Arc`; every method takes `&self`.
    pub struct Metrics {
        sends: Family<SendLabels, Counter> = "mail_worker_sends", "Sends by provider and outcome (what was written to PostgreSQL)";
        decisions: Family<DecisionLabels, Counter> = "mail_worker_rate_limit_decisions", "Rate-limiter decisions: allowed, each deny reason, fail_open";
        rate_limit_seconds: Histogram = "mail_worker_rate_limit_seconds", "Round trip of one rate-limiter decision, seconds", latency_histogram();
        claim_seconds: Histogram = "mail_worker_claim_duration_seconds", "Round trip of one claim statement (due rows to SENDING), seconds", claim_histogram();
        provider_requests: Family<ProviderStatusLabels, Counter> = "mail_worker_provider_requests", "Provider send requests by provider and result class";
        provider_seconds: Family<ProviderLabels, Histogram> = "mail_worker_provider_seconds", "Duration of one provider send request, seconds", Family::new_with_constructor(latency_histogram as fn() -> Histogram);
        messages: Family<StatusLabels, Gauge> = "mail_worker_messages", "Messages in PostgreSQL by status (all replicas; refreshed periodically)";
        waiting: Family<ReasonLabels, Gauge> = "mail_worker_messages_waiting", "SCHEDULED messages by why they wait (all replicas; refreshed periodically)";
        budget_used: Family<BudgetLabels, Gauge<f64, AtomicU64>> = "mail_worker_budget_used_ratio", "Used share of each Graph mailbox's budget as the limiter counts it, by window (minute, day)";
        tenant_budget_used: Family<TenantLabels, Gauge<f64, AtomicU64>> = "mail_worker_tenant_budget_used_ratio", "Used share of each Graph tenant's external recipient budget (rolling 24 h) as the limiter counts it";
        oldest_due: Gauge<f64, AtomicU64> = "mail_worker_oldest_due_seconds", "How long the oldest due SCHEDULED message has been due, seconds (0: none)";
        in_flight: Gauge = "mail_worker_in_flight", "Sends running in this process";
        claimed: Counter = "mail_worker_claimed", "Due messages this process claimed";
        purged: Counter = "mail_worker_messages_purged", "Finished messages this process deleted as older than MAIL_RETENTION (with their attachments)";
        bounces: Family<CodeClassLabels, Counter> = "mail_worker_bounces", "Messages marked BOUNCED from a non-delivery report, by DSN code class (5.1, 5.7, …)";
        recipient_outcomes: Family<RecipientOutcomeLabels, Counter> = "mail_worker_recipients_outcome", "Recipients whose fate Exchange's message trace told, by sender and outcome (delivered, failed, filtered)";
        paused: Family<MailboxLabels, Gauge> = "mail_worker_sender_paused", "1 while a sender is paused (credentials missing or refused, a sender fault: 403 ErrorAccessDenied, 404 ErrorInvalidUser or MailboxNotEnabledForRESTAPI, a missing permission)";
        limit_paused: Family<LimitPauseLabels, Gauge> = "mail_worker_limit_paused", "1 while an NDR's pause of a mailbox's day budget (5.1.90, 5.2.2 submission quota) or a tenant's external mail (5.7.233, 5.7.705, 5.7.708, 5.7.501) is in force (all replicas; refreshed periodically)";
        warmup_day_budget: Family<MailboxLabels, Gauge> = "mail_worker_warmup_day_budget", "Recipients per day a sender's warm-up step allows, by sending mailbox (the budget in force is the lower of this and its own; all replicas; refreshed every minute)";
        adaptive_actions: Family<AdaptiveLabels, Counter> = "mail_worker_adaptive_actions", "Adaptive rules that fired, by rule, scope (mailbox, tenant), tenant and mailbox";
        adaptive_factor: Family<AdaptiveLabels, Gauge<f64, AtomicU64>> = "mail_worker_adaptive_factor", "The share of the budget (0 to 1; 0: suspended) an adaptive action holds, by rule (or operator), scope, tenant and mailbox, as this process last decided by it";
        mailbox_failed: Family<MailboxLabels, Counter> = "mail_worker_mailbox_failed", "Messages that ended ERROR at a send, by sending mailbox (configuration, bounded; never a recipient)";
        overflowed: Family<OverflowLabels, Counter> = "mail_worker_messages_overflowed", "Pooled messages given to their pool's overflow sender, by pool and reason (budgetsSpent)";
        suppressed: Family<StageLabels, Counter> = "mail_worker_recipients_suppressed", "Recipients dropped as on their sender's suppression list, by stage (intake, send)";
        intake_jobs: Family<OutcomeLabels, Counter> = "mail_worker_intake_jobs", "Intake queue jobs by outcome (inserted, duplicate, dead)";
        intake_depth: Gauge = "mail_worker_intake_queue_depth", "Intake jobs waiting in Redis (active + retries)";
        intake_dead: Gauge = "mail_worker_intake_dead", "Dead-lettered intake jobs";
        intake_oldest: Gauge = "mail_worker_intake_oldest_job_seconds", "Age of the oldest waiting intake job, seconds";
        intake_restarts: Counter = "mail_worker_intake_consumer_restarts", "Restarts of this process's intake consumer after a poll error or a stall";
        intake_silent: Gauge<f64, AtomicU64> = "mail_worker_intake_consumer_silent_seconds", "How long this process's intake consumer has not heard from its Redis, seconds (0 while it holds jobs)";
        ingest_requests: Family<super::ingest::IngestStatusLabels, Counter> = "mail_worker_ingest_requests", "HTTP ingest requests (POST /v1/messages) by the status answered";
        ingest_lines: Family<super::ingest::IngestLineLabels, Counter> = "mail_worker_ingest_lines", "HTTP ingest lines by outcome (stored, duplicate, refused)";
        ingest_seconds: Histogram = "mail_worker_ingest_request_seconds", "Duration of one HTTP ingest request, body read to answer, seconds", latency_histogram();
        events_delivered: Counter = "mail_worker_events_delivered", "Outbox events this process delivered to a webhook receiver (2xx)";
        events_retried: Counter = "mail_worker_events_retried", "Outbox events of a batch a receiver refused or did not answer, to be tried again";
        events_dead: Counter = "mail_worker_events_dead", "Outbox events given up at a receiver after EVENTS_RETRY_FOR";
        events_oldest: Gauge<f64, AtomicU64> = "mail_worker_events_oldest_undelivered_seconds", "Age of the oldest outbox event some receiver has not got yet, seconds (0: none)";
    }
}

crate::debug_showing::debug_showing!(Metrics {});

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

fn latency_histogram() -> Histogram {
    // 0.5 ms … ~16 s in 16 doubling buckets.
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

fn claim_histogram() -> Histogram {
    // 0.25 ms … ~12 s in 32 buckets a factor √2 apart: fine enough that a quantile
    // interpolated inside one bucket is within ±20 % (the scale benchmark's p50/p99). Each
    // bound rounded to 3 significant digits, so `le` reads `0.000354`, not float noise.
    Histogram::new(
        exponential_buckets(0.00025, std::f64::consts::SQRT_2, 32).map(|b| {
            let scale = 10f64.powi(2 - b.log10().floor() as i32);
            (b * scale).round() / scale
        }),
    )
}

impl Metrics {
    /// Counts one send's outcome.
    pub fn send(&self, provider: &'static str, outcome: OutcomeLabel) {
        self.sends
            .get_or_create(&SendLabels {
                provider,
                outcome: outcome.as_str(),
            })
            .inc();
    }

    /// Counts one message of `mailbox` that ended `ERROR` at a send
    /// (`mail_worker_mailbox_failed_total`, the per-mailbox signal `MailWorkerMessagesFailing`
    /// alerts on).
    pub fn failed_for(&self, mailbox: &str) {
        self.mailbox_failed
            .get_or_create(&MailboxLabels {
                mailbox: mailbox.to_owned(),
            })
            .inc();
    }

    /// Counts one pooled message given to `pool`'s overflow sender for `reason`
    /// (`mail_worker_messages_overflowed_total`).
    pub fn overflowed(&self, pool: &str, reason: &'static str) {
        self.overflowed
            .get_or_create(&OverflowLabels {
                pool: pool.to_owned(),
                reason,
            })
            .inc();
    }

    /// Counts one limiter decision (`allowed`, a [`DenyReason`], or `fail_open`) and its round
    /// trip.
    pub fn rate_limit_decision(&self, decision: &'static str, took: Duration) {
        self.decisions
            .get_or_create(&DecisionLabels { decision })
            .inc();
        self.rate_limit_seconds.observe(took.as_secs_f64());
    }

    /// Observes one claim statement's round trip.
    pub fn claim_statement(&self, took: Duration) {
        self.claim_seconds.observe(took.as_secs_f64());
    }

    /// Counts one provider request and its duration.
    pub fn provider_request(&self, provider: &'static str, status: &'static str, took: Duration) {
        self.provider_requests
            .get_or_create(&ProviderStatusLabels { provider, status })
            .inc();
        self.provider_seconds
            .get_or_create(&ProviderLabels { provider })
            .observe(took.as_secs_f64());
    }

    /// Sets `mail_worker_messages` from `(status, count)` rows; statuses of [`STATUSES`] not
    /// among them are set to 0.
    pub fn set_messages(&self, rows: &[(String, i64)]) {
        self.set_messages_of(&STATUSES, rows);
    }

    /// Sets `mail_worker_messages` of `statuses` from `(status, count)` rows (0 when a status
    /// is not among them); the other statuses keep their values.
    pub fn set_messages_of(&self, statuses: &[&str], rows: &[(String, i64)]) {
        for &status in statuses {
            let count = rows
                .iter()
                .find(|(s, _)| s == status)
                .map_or(0, |(_, n)| *n);
            self.messages
                .get_or_create(&StatusLabels {
                    status: status.to_owned(),
                })
                .set(count);
        }
    }

    /// Sets `mail_worker_messages_waiting` from `(reason, count)` rows (every reason, as
    /// `store::waiting::count_waiting` gives them).
    pub fn set_waiting(&self, rows: &[(&'static str, i64)]) {
        for &(reason, count) in rows {
            self.waiting
                .get_or_create(&ReasonLabels { reason })
                .set(count);
        }
    }

    /// Sets `mail_worker_budget_used_ratio` of `mailbox`: `minute` and `day` shares.
    pub fn set_budget_used(&self, mailbox: &str, minute: f64, day: f64) {
        for (window, share) in [("minute", minute), ("day", day)] {
            self.budget_used
                .get_or_create(&BudgetLabels {
                    mailbox: mailbox.to_owned(),
                    window,
                })
                .set(share);
        }
    }

    /// Sets `mail_worker_tenant_budget_used_ratio` of Graph tenant `tenant`.
    pub fn set_tenant_budget_used(&self, tenant: &str, share: f64) {
        self.tenant_budget_used
            .get_or_create(&TenantLabels {
                tenant: tenant.to_owned(),
            })
            .set(share);
    }

    /// Sets `mail_worker_limit_paused` to the pauses in force, (scope, key, code) each; the
    /// ended ones leave the family.
    pub fn set_limit_pauses(&self, pauses: &[(String, String, String)]) {
        self.limit_paused.clear();
        for (scope, key, code) in pauses {
            self.limit_paused
                .get_or_create(&LimitPauseLabels {
                    scope: scope.clone(),
                    key: key.clone(),
                    code: code.clone(),
                })
                .set(1);
        }
    }

    /// Sets `mail_worker_oldest_due_seconds`.
    pub fn set_oldest_due(&self, seconds: f64) {
        self.oldest_due.set(seconds);
    }

    /// One more send in flight until the guard drops.
    pub(crate) fn in_flight(&self) -> InFlightGuard {
        self.in_flight.inc();
        InFlightGuard(self.in_flight.clone())
    }

    /// Counts `n` claimed rows.
    pub fn claimed(&self, n: u64) {
        self.claimed.inc_by(n);
    }

    /// Counts `n` messages deleted by retention.
    pub fn purged(&self, n: u64) {
        self.purged.inc_by(n);
    }

    /// Counts `n` recipients dropped as suppressed at `stage` ([`STAGE_INTAKE`], [`STAGE_SEND`]).
    pub fn recipients_suppressed(&self, stage: &'static str, n: u64) {
        self.suppressed
            .get_or_create(&StageLabels { stage })
            .inc_by(n);
    }

    /// Counts one message marked `BOUNCED`; `code_class` is [`crate::bounces`]'s class of its
    /// DSN code (`5.1`, never an address).
    pub fn bounced(&self, code_class: &'static str) {
        self.bounces
            .get_or_create(&CodeClassLabels { code_class })
            .inc();
    }

    /// Counts one recipient of `mailbox` whose fate became `outcome` (`delivered`, `failed`,
    /// `filtered`; never an address).
    pub fn recipient_outcome(&self, mailbox: &str, outcome: &'static str) {
        self.recipient_outcomes
            .get_or_create(&RecipientOutcomeLabels {
                mailbox: mailbox.to_owned(),
                outcome,
            })
            .inc();
    }

    /// Marks `mailbox` paused (or not).
    pub fn set_paused(&self, mailbox: &str, paused: bool) {
        self.paused
            .get_or_create(&MailboxLabels {
                mailbox: mailbox.to_owned(),
            })
            .set(i64::from(paused));
    }

    /// Sets `mail_worker_warmup_day_budget` to `budgets` (mailbox, recipients per day): every
    /// sender with a ramp, and only those.
    pub fn set_warmup_day_budgets(&self, budgets: &[(String, u32)]) {
        self.warmup_day_budget.clear();
        for (mailbox, budget) in budgets {
            self.warmup_day_budget
                .get_or_create(&MailboxLabels {
                    mailbox: mailbox.clone(),
                })
                .set(i64::from(*budget));
        }
    }

    /// The registry in Prometheus/OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// Decrements `mail_worker_in_flight` on drop.
#[derive(Debug)]
pub(crate) struct InFlightGuard(Gauge);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests;
