//! Benchmark 27, adaptive rules with timed recovery (issue 43 point 4,
//! docs/decisions/0048-adaptive-rules.md). The production limiter (`paced`, the built-in rule
//! table) on Redis, on a virtual clock, one worker sending back to back (a denial moves the clock
//! to its `retry_after`, as a deferred row comes back), the signals fed as the daemon feeds them:
//!
//! - **reputation**: a Graph tenant sending external mail at L a minute; its first message
//!   after `--burst-at` bounces `5.7.705` (graph-sim's new tenant past its trusted count) and
//!   the bounce reader reads that NDR `--ndr-delay` later (graph-sim's `bounces.delay_ms`):
//!   external messages the limiter lets go after the NDR is read (goal: ≤ 1; the rule suspends
//!   at once, so 0), internal messages that still go (the tenant's reputation is about its
//!   external mail).
//! - **storm**: 3 `429 MailboxConcurrency` (graph-sim's `mailbox_concurrency_storm`) within the
//!   rule's 10 min: sends per minute before, while the rule holds (a quarter of L), while it
//!   recovers (a half) and after (L); goal: every minute ≤ the budget in force and L again
//!   within the rule's duration + its recovery (15 min).
//!
//! What is not here: the 429s and the NDR come from graph-sim in `tests/it/adaptive.rs` and
//! graph-sim's own tests; here the limiter's decisions are what is measured, on a virtual clock.
//!
//! ```text
//! cargo bench -p mail-worker-bench --bench adaptive              # L 30, 40 min
//! cargo test -p mail-worker-bench --bench adaptive -- --smoke    # the same, fewer minutes
//! ```
//!
//! Results: `bench-results/adaptive.json` (`adaptive-smoke.json`). Exit status 1 when a goal is
//! missed.

use mail_worker_bench as support;

use std::{collections::BTreeMap, num::NonZeroU32, process::ExitCode, time::Duration};

use chrono::{DateTime, Utc};
use clap::Parser;
use mail_worker::{
    domain::{MailboxAddress, Priority, adaptive::RuleTable, adaptive::Signal},
    rate_limit::{
        Algorithm, Ask, Decision, MailRateLimiter, RateLimitConfig, RateLimiter, RateLimits,
        RequestEnd, Signalled,
    },
};
use serde::Serialize;
use uuid::Uuid;

const TENANT: &str = "contoso.example";
const STORM_TENANT: &str = "fabrikam.example";

/// Benchmark 27: adaptive rules.
#[derive(Debug, Parser)]
#[command(name = "adaptive")]
struct Args {
    /// Messages per mailbox per minute (Exchange: 30).
    #[arg(long, default_value_t = 30)]
    per_minute: u32,
    /// Virtual minutes of the storm arm.
    #[arg(long, default_value_t = 40)]
    minutes: i64,
    /// Virtual minute of the reputation arm at which the tenant's external mail starts to
    /// bounce.
    #[arg(long, default_value_t = 5)]
    burst_at: i64,
    /// Seconds from a bounced send to its NDR read (graph-sim's delay + the reader's interval).
    #[arg(long, default_value_t = 30)]
    ndr_delay: i64,
    #[command(flatten)]
    run: support::RunArgs,
}

impl support::BenchArgs for Args {
    const SMOKE: &str = "A smoke run for CI: 20 virtual minutes of the storm arm.";

    fn smoke(&mut self) {
        self.minutes = 20;
    }

    fn invalid(&self) -> Option<&'static str> {
        (self.per_minute < 4).then_some("--per-minute must be at least 4")
    }
}

#[derive(Debug, Serialize)]
struct Report {
    #[serde(flatten)]
    info: support::RunInfo,
    per_minute: u32,
    /// Reputation arm.
    external_sent_before_ndr_read: usize,
    external_sent_after_ndr_read: usize,
    internal_sent_after_ndr_read: usize,
    /// Storm arm: sends per virtual minute, from the first signal's minute.
    storm_sends_per_minute: Vec<(i64, usize)>,
    /// Minutes from the rule firing to the first whole minute at L.
    storm_back_to_l_after_min: Option<i64>,
}

/// One worker: sends (asks, and on `Allowed` releases `Done`) from `from` to `to`, a denial
/// moving the clock to its `retry_after` with the same message; returns the send times.
async fn drive(
    limiter: &MailRateLimiter,
    ask: impl Fn(Uuid) -> Ask<'static>,
    (from, to): (DateTime<Utc>, DateTime<Utc>),
    mut between: impl AsyncFnMut(DateTime<Utc>),
) -> Vec<DateTime<Utc>> {
    let mut sent = Vec::new();
    let mut now = from;
    let mut id = Uuid::new_v4();
    while now < to {
        between(now).await;
        match limiter.check_and_reserve(&ask(id), now).await {
            Ok(Decision::Allowed(r)) => {
                limiter.release(&r, RequestEnd::Done).await;
                sent.push(now);
                id = Uuid::new_v4();
                now += chrono::Duration::milliseconds(1);
            }
            Ok(Decision::Denied { retry_after, .. }) => {
                now += chrono::Duration::from_std(retry_after.max(Duration::from_millis(1)))
                    .unwrap_or_default();
            }
            Err(e) => support::fail(&format!("the limiter refused a message for good: {e}")),
        }
    }
    sent
}

fn limits(per_minute: u32) -> RateLimits {
    RateLimits {
        per_minute: NonZeroU32::new(per_minute).unwrap_or(NonZeroU32::MIN),
        recipients_per_day: NonZeroU32::new(9_000).unwrap_or(NonZeroU32::MIN),
        reserved_percent: 0,
    }
}

fn leak(address: &str) -> &'static MailboxAddress {
    Box::leak(Box::new(
        MailboxAddress::parse(address)
            .unwrap_or_else(|e| support::fail(&format!("{address}: {e}"))),
    ))
}

async fn run(args: Args, machine: support::Machine) -> ExitCode {
    let prefix = support::bench_prefix("adaptive");
    let url = support::redis_url();
    let limiter = MailRateLimiter::new(&RateLimitConfig {
        algorithm: Algorithm::Paced,
        redis_url: url.clone().into(),
        defaults: limits(args.per_minute),
        redis_timeout: Duration::from_secs(2),
        key_prefix: prefix.clone(),
        max_in_flight: NonZeroU32::MAX,
        lease: Duration::from_secs(15),
        fail_open_replicas: NonZeroU32::MIN,
        unreachable_not_ready_after: Duration::from_secs(60),
        caller_clock: true,
    })
    .unwrap_or_else(|e| support::fail(&e.to_string()))
    .with_adaptive_rules(RuleTable::defaults());
    let t0 = DateTime::parse_from_rfc3339("2026-12-07T09:00:00Z")
        .unwrap_or_else(|e| support::fail(&e.to_string()))
        .with_timezone(&Utc);
    let minute = |m: i64| t0 + chrono::Duration::minutes(m);
    let l = args.per_minute;

    // Reputation: external mail from news@ (1 external recipient each), internal from hr@.
    let news = leak("news@contoso.example");
    let hr = leak("hr@contoso.example");
    let per_day = NonZeroU32::new(10_000).unwrap_or(NonZeroU32::MIN);
    let external = move |id| Ask {
        message_id: id,
        mailbox: news,
        tenant: TENANT,
        recipients: 1,
        limits: limits(l),
        tenant_budget: Some((1, per_day)),
        priority: Priority::Normal,
    };
    let burst = minute(args.burst_at);
    let read_at = burst + chrono::Duration::seconds(args.ndr_delay);
    let mut read = false;
    let sent = drive(
        &limiter,
        external,
        (t0, minute(args.burst_at + 10)),
        async |now| {
            if !read && now >= read_at {
                read = true;
                let on = Signalled {
                    tenant: TENANT,
                    mailbox: news,
                };
                limiter
                    .adaptive_signal(Signal::Ndr5_7_705, on, read_at)
                    .await;
            }
        },
    )
    .await;
    let before = sent
        .iter()
        .filter(|t| **t >= burst && **t < read_at)
        .count();
    let after = sent.iter().filter(|t| **t >= read_at).count();
    let internal = move |id| Ask {
        message_id: id,
        mailbox: hr,
        tenant: TENANT,
        recipients: 1,
        limits: limits(l),
        tenant_budget: Some((0, per_day)),
        priority: Priority::Normal,
    };
    let internal_after = drive(
        &limiter,
        internal,
        (read_at, read_at + chrono::Duration::minutes(2)),
        async |_| {},
    )
    .await
    .len();
    println!(
        "reputation: a 5.7.705 from minute {}, its NDR read {} s later: external sent between burst and read {before}, after the read {after} (goal ≤ 1); internal sent in the 2 min after {internal_after}",
        args.burst_at, args.ndr_delay
    );

    // Storm: 3 MailboxConcurrency at minutes 1, 2, 3 (the rule fires at 3), in another tenant
    // (the first arm's is suspended).
    let storm = leak("events@fabrikam.example");
    let storm_ask = move |id| Ask {
        message_id: id,
        mailbox: storm,
        tenant: STORM_TENANT,
        recipients: 1,
        limits: limits(l),
        tenant_budget: None,
        priority: Priority::Normal,
    };
    let mut signals = vec![minute(3), minute(2), minute(1)];
    let sent = drive(
        &limiter,
        storm_ask,
        (t0, minute(args.minutes)),
        async |now| {
            while signals.last().is_some_and(|at| *at <= now) {
                let at = signals.pop().unwrap_or(now);
                let on = Signalled {
                    tenant: STORM_TENANT,
                    mailbox: storm,
                };
                limiter
                    .adaptive_signal(Signal::MailboxConcurrency, on, at)
                    .await;
            }
        },
    )
    .await;
    let mut per_minute: BTreeMap<i64, usize> = (0..args.minutes).map(|m| (m, 0)).collect();
    for t in &sent {
        *per_minute.entry((*t - t0).num_minutes()).or_default() += 1;
    }
    let fired = 3;
    let budget_at = |m: i64| -> usize {
        let l = l as usize;
        match m - fired {
            ..0 => l,
            0..10 => l / 4,
            10..15 => l / 2,
            _ => l,
        }
    };
    let mut within = true;
    println!("storm: sends per minute (L {l}; the rule fires at minute {fired}):");
    for (m, n) in &per_minute {
        let budget = budget_at(*m);
        // The minute the rule fires in may hold sends from before it.
        if *n > budget && *m != fired {
            within = false;
        }
        println!("  minute {m:>3}: {n:>3} (budget in force {budget})");
    }
    // Back to L: the first minute after the rule fired that sends as many as the minute before
    // the storm (the pacing's whole budget: L, or L − 1 where its margin spills a slot over).
    let whole = per_minute.get(&(fired - 1)).copied().unwrap_or(l as usize);
    let back = per_minute
        .iter()
        .find(|(m, n)| **m > fired && **n >= whole)
        .map(|(m, _)| m - fired);
    println!(
        "storm: back to L {} min after the rule fired (its duration 10 min + recovery 5 min = 15)",
        back.map_or("never".to_owned(), |m| m.to_string())
    );
    let mut conn = support::redis_connection(&url).await;
    let _ = support::unlink_prefix(&mut conn, &prefix).await;
    let ok = after <= 1 && internal_after > 0 && within && back.is_some_and(|m| m <= 16);
    let report = Report {
        info: support::RunInfo {
            benchmark: "adaptive",
            machine,
            smoke: args.run.smoke,
        },
        per_minute: l,
        external_sent_before_ndr_read: before,
        external_sent_after_ndr_read: after,
        internal_sent_after_ndr_read: internal_after,
        storm_sends_per_minute: per_minute.into_iter().collect(),
        storm_back_to_l_after_min: back,
    };
    let path = support::write_json(&support::results_name("adaptive", args.run.smoke), &report);
    println!("results: {}", path.display());
    if !ok {
        eprintln!("adaptive: a goal was missed");
    }
    support::exit_code(ok)
}

fn main() -> ExitCode {
    support::bench_main(run)
}
