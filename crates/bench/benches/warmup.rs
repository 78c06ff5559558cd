//! Benchmark 26, warm-up (issue 43 point 3, docs/decisions/0047-warm-up.md): a 14 sending-day
//! ramp replayed on a virtual clock. One system mailbox with `"warmUp": {"startPerDay": 50,
//! "growth": 1.5, "maxPerDay": 2000}` (imported through the senders file) has an endless
//! backlog of one-recipient messages. Each calendar day: at 00:00:30 the ramps are evaluated
//! (`store::warmups::evaluate_due`, the daemon's round), the limits in force are read
//! (`senders::by_address` + `RateLimits::for_sender`, the mailer factory's one decision), and
//! from 08:00 the real `paced` limiter (a private `redis-server`, on the caller's clock) is
//! asked for message after message until it denies for the day; each allowed one is written
//! `SENT` at its slot. One day is dirty (10 % hard bounces), one has a `5.7.708`, one calendar
//! day sends nothing. Per day it prints the step, the budget in force, what the limiter let
//! through, the day's outcome, and the budget a model written here expects (min(max, ⌊start ×
//! growth^step⌋); up one after a clean sending day, held after a dirty one, down one after a
//! reputation NDR, unchanged after a day without sends): mismatches must be 0.
//!
//! ```text
//! cargo bench -p mail-worker-bench --bench warmup                 # 15 calendar days, ~10,000 limiter calls
//! cargo test -p mail-worker-bench --bench warmup -- --smoke      # 6 calendar days, ramp 5 × 1.5 up to 40
//! ```
//!
//! Results: `bench-results/warmup.json`. Exit status 1 on any mismatch.

use mail_worker_bench as support;

use std::{num::NonZeroU32, process::ExitCode, time::Duration};

use chrono::{DateTime, Days, NaiveDate, TimeDelta, Utc};
use clap::Parser;
use serde::Serialize;

use mail_worker::{
    config::RateLimitConfig,
    domain::{Priority, Sender, WarmUpGate},
    import,
    rate_limit::{Algorithm, Ask, Decision, MailRateLimiter, RateLimiter, RateLimits, RequestEnd},
    store::{senders, warmups},
};
use support::{
    Machine,
    daemon::{self, BenchDb, MeasuredRedis},
};

const MAILBOX: &str = "warmup@contoso.example";
const TENANT: &str = "contoso.example";

/// Benchmark 26: a warm-up ramp on a virtual clock.
#[derive(Debug, Parser)]
#[command(name = "warmup")]
struct Args {
    /// Sending days replayed.
    #[arg(long, default_value_t = 14)]
    sending_days: u32,
    /// `startPerDay`.
    #[arg(long, default_value_t = 50)]
    start: u32,
    /// `growth`.
    #[arg(long, default_value_t = 1.5)]
    growth: f64,
    /// `maxPerDay`.
    #[arg(long, default_value_t = 2_000)]
    max: u32,
    /// The calendar day (from 1) with 10 % hard bounces.
    #[arg(long, default_value_t = 5)]
    dirty_day: u32,
    /// The calendar day without sends.
    #[arg(long, default_value_t = 8)]
    idle_day: u32,
    /// The calendar day with a 5.7.708 (0: none).
    #[arg(long, default_value_t = 12)]
    ndr_day: u32,
    #[command(flatten)]
    run: support::RunArgs,
}

impl support::BenchArgs for Args {
    const SMOKE: &str =
        "5 sending days of a ramp 5 × 1.5 up to 40, dirty day 2, idle day 4, NDR day 5.";
    fn invalid(&self) -> Option<&'static str> {
        (self.sending_days == 0 || self.start == 0 || self.start > self.max || self.growth < 1.0)
            .then_some("--sending-days and --start must be positive, --start ≤ --max, --growth ≥ 1")
    }
    fn smoke(&mut self) {
        (self.sending_days, self.start, self.max) = (5, 5, 40);
        (self.dirty_day, self.idle_day, self.ndr_day) = (2, 4, 6);
    }
}

/// What a calendar day sends and what its bounces say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
enum Outcome {
    Clean,
    /// 10 % of the day's messages hard-bounce (`5.1.1`).
    Dirty,
    /// One of the day's messages bounces `5.7.708`.
    ReputationNdr,
    /// Nothing offered: the day does not count.
    Idle,
}

/// One calendar day.
#[derive(Debug, Clone, Serialize)]
struct Day {
    day: u32,
    date: NaiveDate,
    step: u32,
    sending_days: u32,
    budget: u32,
    sent: u32,
    outcome: Outcome,
    expected_step: u32,
    expected_budget: u32,
    mismatch: bool,
}

#[derive(Debug, Serialize)]
struct Report {
    machine: Machine,
    smoke: bool,
    ramp: (u32, f64, u32),
    days: Vec<Day>,
    mismatches: usize,
}

/// The model: min(max, ⌊start × growth^step⌋), written apart from the product's.
fn expected_budget(args: &Args, step: u32) -> u32 {
    let raw = f64::from(args.start) * args.growth.powi(i32::try_from(step).unwrap_or(i32::MAX));
    if raw >= f64::from(args.max) {
        args.max
    } else {
        raw.floor() as u32
    }
}

fn limiter(url: &url::Url) -> MailRateLimiter {
    MailRateLimiter::new(&RateLimitConfig {
        algorithm: Algorithm::Paced,
        redis_url: url.clone().into(),
        defaults: RateLimits {
            per_minute: NonZeroU32::new(6_000).unwrap_or(NonZeroU32::MIN),
            recipients_per_day: NonZeroU32::new(9_000).unwrap_or(NonZeroU32::MIN),
            reserved_percent: 0,
        },
        redis_timeout: Duration::from_secs(5),
        key_prefix: "bench:warmup".to_owned(),
        max_in_flight: NonZeroU32::MAX,
        lease: Duration::from_secs(15),
        fail_open_replicas: NonZeroU32::MIN,
        unreachable_not_ready_after: Duration::from_secs(60),
        caller_clock: true,
    })
    .unwrap_or_else(|e| support::fail(&e.to_string()))
}

fn at(date: NaiveDate, h: u32, s: u32) -> DateTime<Utc> {
    date.and_hms_opt(h, 0, s).unwrap_or_default().and_utc()
}

/// Asks the limiter for message after message of `limits` from `t` on, until the next slot it
/// names is past the day; returns the allowed ones' ids and slots, and the denied
/// message (kept for the next day, as its row would be) with when it may come back.
async fn send_day(
    limiter: &MailRateLimiter,
    limits: RateLimits,
    mut t: DateTime<Utc>,
    pending: &mut Option<(uuid::Uuid, DateTime<Utc>)>,
) -> Vec<(uuid::Uuid, DateTime<Utc>)> {
    let mailbox = mail_worker::domain::MailboxAddress::parse(MAILBOX)
        .unwrap_or_else(|e| support::fail(&e.to_string()));
    let end = at(t.date_naive(), 23, 59);
    let mut sent = Vec::new();
    loop {
        let (id, not_before) = pending.take().unwrap_or((uuid::Uuid::new_v4(), t));
        t = t.max(not_before);
        if t >= end {
            *pending = Some((id, not_before));
            return sent;
        }
        let ask = Ask {
            message_id: id,
            mailbox: &mailbox,
            tenant: TENANT,
            recipients: 1,
            limits,
            tenant_budget: None,
            priority: Priority::Normal,
        };
        match limiter.check_and_reserve(&ask, t).await {
            Ok(Decision::Allowed(r)) => {
                limiter.release(&r, RequestEnd::Done).await;
                sent.push((id, t));
                t += TimeDelta::milliseconds(15);
            }
            // Minute pacing, or the day's window freeing (its buckets age a minute at a time):
            // back at the slot the limiter names, unless that is past the day.
            Ok(Decision::Denied { retry_after, .. }) => {
                let back = t + TimeDelta::from_std(retry_after).unwrap_or(TimeDelta::MAX);
                *pending = Some((id, back));
                if back >= end {
                    return sent;
                }
            }
            Err(e) => support::fail(&format!("limiter: {e}")),
        }
    }
}

/// Writes the day's sends as `SENT` rows of the mailbox, bouncing some as `outcome` says.
async fn record(
    pool: &sqlx::PgPool,
    mailbox_id: uuid::Uuid,
    sent: &[(uuid::Uuid, DateTime<Utc>)],
    outcome: Outcome,
) {
    let (ids, times): (Vec<uuid::Uuid>, Vec<DateTime<Utc>>) = sent.iter().copied().unzip();
    sqlx::query(
        "INSERT INTO messages (id, system_mailbox_id, to_recipients, subject, body, status, \
             queued_at, sent_at) \
         SELECT u.id, $2, '[{\"address\":\"guest@example.org\"}]'::jsonb, 's', 'x', 'SENT', u.t, u.t \
         FROM unnest($1::uuid[], $3::timestamptz[]) AS u(id, t)",
    )
    .bind(&ids)
    .bind(mailbox_id)
    .bind(&times)
    .execute(pool)
    .await
    .unwrap_or_else(|e| support::fail(&format!("recording the sends: {e}")));
    let (bounced, code) = match outcome {
        Outcome::Dirty => (
            ids.len().div_ceil(10),
            "550 5.1.1 RESOLVER.ADR.RecipNotFound",
        ),
        Outcome::ReputationNdr => (1, "550 5.7.708 Access denied, traffic not accepted"),
        Outcome::Clean | Outcome::Idle => (0, ""),
    };
    sqlx::query(
        "UPDATE messages SET status = 'BOUNCED', bounce_code = $2, \
             bounced_at = sent_at + interval '1 hour' WHERE id = ANY($1)",
    )
    .bind(&ids[..bounced.min(ids.len())])
    .bind(code)
    .execute(pool)
    .await
    .unwrap_or_else(|e| support::fail(&format!("recording the bounces: {e}")));
}

async fn run(args: Args, machine: Machine) -> ExitCode {
    let redis = MeasuredRedis::start().await;
    let db = BenchDb::create(&daemon::shared_postgres(), "warmup").await;
    let pool = &db.pool;
    let file = format!(
        r#"{{"systemMailboxes":[{{"address":"{MAILBOX}","graphTenantId":"{TENANT}",
        "clientId":"11111111-1111-4111-8111-111111111111","clientSecret":"env:UNUSED",
        "warmUp":{{"startPerDay":{},"growth":{},"maxPerDay":{}}}}}]}}"#,
        args.start, args.growth, args.max
    );
    let parsed = import::senders::parse(&file).unwrap_or_else(|e| support::fail(&e.to_string()));
    import::senders::import(pool, &parsed)
        .await
        .unwrap_or_else(|e| support::fail(&e.to_string()));
    let limiter = limiter(&redis.url);
    let defaults = RateLimits {
        per_minute: NonZeroU32::new(6_000).unwrap_or(NonZeroU32::MIN),
        recipients_per_day: NonZeroU32::new(9_000).unwrap_or(NonZeroU32::MIN),
        reserved_percent: 0,
    };
    let first = NaiveDate::from_ymd_opt(2026, 12, 1).unwrap_or_default();
    let mut days = Vec::new();
    let (mut expected_step, mut pending, mut sending, mut calendar) = (0_u32, None, 0, 0);
    let mut last: Option<Outcome> = None;
    while sending < args.sending_days {
        calendar += 1;
        let date = first + Days::new(u64::from(calendar - 1));
        // The model: what the last sending day does to the step.
        match last.take() {
            Some(Outcome::Clean) => {
                if expected_budget(&args, expected_step) < args.max {
                    expected_step += 1;
                }
            }
            Some(Outcome::ReputationNdr) => expected_step = expected_step.saturating_sub(1),
            Some(Outcome::Dirty | Outcome::Idle) | None => {}
        }
        warmups::evaluate_due(pool, Some(at(date, 0, 30)), WarmUpGate::default())
            .await
            .unwrap_or_else(|e| support::fail(&format!("evaluate: {e}")));
        let address = mail_worker::domain::MailboxAddress::parse(MAILBOX)
            .unwrap_or_else(|e| support::fail(&e.to_string()));
        let Some(sender @ Sender::SystemMailbox(_)) = senders::by_address(pool, &address)
            .await
            .unwrap_or_else(|e| support::fail(&e.to_string()))
        else {
            support::fail("the mailbox is gone");
        };
        let limits = defaults.for_sender(&sender);
        let state = warmups::all(pool)
            .await
            .unwrap_or_else(|e| support::fail(&e.to_string()))
            .pop()
            .unwrap_or_else(|| support::fail("no ramp"));
        let outcome = if calendar == args.idle_day {
            Outcome::Idle
        } else if calendar == args.dirty_day {
            Outcome::Dirty
        } else if calendar == args.ndr_day {
            Outcome::ReputationNdr
        } else {
            Outcome::Clean
        };
        let sent = if outcome == Outcome::Idle {
            // Nothing waits that day: the message the last day left booked is gone too (its
            // booking lapses after the limiter's grace), as when a campaign has ended.
            pending = None;
            Vec::new()
        } else {
            send_day(&limiter, limits, at(date, 8, 0), &mut pending).await
        };
        record(pool, state.sender_id, &sent, outcome).await;
        if outcome != Outcome::Idle {
            sending += 1;
            last = Some(outcome);
        }
        let budget = limits.recipients_per_day.get();
        let expected = expected_budget(&args, expected_step);
        let sent_n = u32::try_from(sent.len()).unwrap_or(u32::MAX);
        let mismatch = state.step != expected_step
            || budget != expected
            || (outcome != Outcome::Idle && sent_n != expected);
        days.push(Day {
            day: calendar,
            date,
            step: state.step,
            sending_days: state.sending_days,
            budget,
            sent: sent_n,
            outcome,
            expected_step,
            expected_budget: expected,
            mismatch,
        });
    }
    let rows: Vec<Vec<String>> = days
        .iter()
        .map(|d| {
            vec![
                d.day.to_string(),
                d.date.to_string(),
                d.step.to_string(),
                d.sending_days.to_string(),
                d.budget.to_string(),
                d.sent.to_string(),
                format!("{:?}", d.outcome),
                d.expected_step.to_string(),
                d.expected_budget.to_string(),
                if d.mismatch { "MISMATCH" } else { "ok" }.to_owned(),
            ]
        })
        .collect();
    support::print_table(
        &[
            "day",
            "date",
            "step",
            "sending days before",
            "budget",
            "sent",
            "outcome",
            "expected step",
            "expected budget",
            "check",
        ],
        &rows,
    );
    let mismatches = days.iter().filter(|d| d.mismatch).count();
    println!(
        "warm-up: {} calendar days, {} sending days, ramp {} × {} up to {}: {} mismatches",
        days.len(),
        args.sending_days,
        args.start,
        args.growth,
        args.max,
        mismatches
    );
    let report = Report {
        machine,
        smoke: args.run.smoke,
        ramp: (args.start, args.growth, args.max),
        days,
        mismatches,
    };
    support::write_json(&support::results_name("warmup", args.run.smoke), &report);
    db.drop().await;
    drop(redis);
    support::exit_code(mismatches == 0)
}

fn main() -> ExitCode {
    support::bench_main(run)
}
