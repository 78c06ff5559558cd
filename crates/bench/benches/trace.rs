//! Benchmark 19, the delivery reconciler's budget (issue 42, ADR 0044): 2,000 mailboxes of one
//! tenant, 100,000 `SENT` messages (one recipient each) inserted in bulk and their trace records
//! put straight into graph-sim (`insert_trace_records`): 0.3 % failed (5.1.10), 1 % filtered as
//! spam, the rest delivered. The reconciler (`mail_worker::delivery`) reads the tenant round
//! after round on a virtual clock: each round moves graph-sim's and the reconciler's clock on by
//! `GRAPH_TRACE_INTERVAL` (5 min) and the pending messages' `sent_at` back by as much (PostgreSQL
//! keeps its own clock), until no message is left `SENT`. It measures requests, not wall time:
//! trace requests per 1,000 messages reconciled (goal ≤ 5), the most of the tenant in any rolling
//! 5 minutes as graph-sim counted them (goal ≤ 90; graph-sim's 429s: goal 0), and duplicate
//! outcome events (goal 0). Then a lag phase (`lag_phase`): 500 messages delivered at even
//! steps over one interval, each visible in graph-sim's trace `GRAPH_TRACE_LAG` (5 min) later;
//! the lag from graph-sim's delivery to `DELIVERED` (goal: the trace's lag + one interval).
//!
//! ```text
//! cargo bench -p mail-worker-bench --bench trace                  # 2,000 mailboxes, 100,000 messages
//! cargo test -p mail-worker-bench --bench trace -- --smoke       # 20 mailboxes, 2,000 messages
//! ```
//!
//! Results: `bench-results/trace.json` (`trace-smoke.json`).

use mail_worker_bench as support;

use std::{process::ExitCode, sync::Arc, time::Duration};

use chrono::Utc;
use clap::Parser;
use serde::Serialize;

use graph_sim::{SimConfig, SimMailbox, SimTrace, TraceRecord};
use mail_worker::{clock::ManualClock, config::Config, daemon as product, ops::Metrics};
use support::{
    Machine,
    daemon::{self, BenchDb, MeasuredRedis},
};

/// The virtual time between two reads (`GRAPH_TRACE_INTERVAL`'s default).
const INTERVAL: Duration = Duration::from_secs(300);

/// Rounds at most before the benchmark gives up.
const MAX_ROUNDS: u32 = 200;

#[derive(Debug, Parser)]
#[command(name = "trace")]
struct Args {
    /// Mailboxes of the tenant.
    #[arg(long, default_value_t = 2_000)]
    mailboxes: usize,
    /// Messages sent (one recipient each).
    #[arg(long, default_value_t = 100_000)]
    messages: usize,
    #[command(flatten)]
    run: support::RunArgs,
}

impl support::BenchArgs for Args {
    const SMOKE: &str = "A smoke run for CI: 20 mailboxes, 2,000 messages.";

    fn smoke(&mut self) {
        self.mailboxes = 20;
        self.messages = 2_000;
    }
}

#[derive(Debug, Serialize)]
struct Report {
    machine: Machine,
    smoke: bool,
    mailboxes: usize,
    messages: usize,
    rounds: u32,
    requests: u64,
    requests_per_1000_messages: f64,
    max_requests_in_5_minutes: u64,
    throttled: u64,
    reconciled: i64,
    delivered: i64,
    bounced: i64,
    events: i64,
    duplicate_events: i64,
    seconds: f64,
    /// The lag phase: messages delivered by graph-sim spread over one interval, visible in its
    /// trace `trace_lag_s` later; seconds from each one's delivery to its `DELIVERED`.
    lag: Lag,
}

#[derive(Debug, Serialize)]
struct Lag {
    messages: usize,
    delivered: usize,
    trace_lag_s: u64,
    interval_s: u64,
    median_s: f64,
    max_s: f64,
    /// The trace's own lag + one poll interval.
    goal_s: u64,
}

/// The status and failure of message `g`: 3 in 1,000 fail, 1 in 100 is filtered.
fn fate(g: usize) -> (&'static str, Option<(String, String, String)>) {
    if g % 1_000 < 3 {
        (
            "Failed",
            Some((
                "550".into(),
                "5.1.10".into(),
                "RESOLVER.ADR.RecipientNotFound; Recipient not found by SMTP address lookup".into(),
            )),
        )
    } else if g % 100 == 50 {
        ("FilteredAsSpam", None)
    } else {
        ("Delivered", None)
    }
}

/// Inserts `n` `SENT` messages over `mailboxes`, message g to `guest<first + g>@example.org`,
/// sent `from_s` seconds from now by PostgreSQL's clock plus g × `span_s` / n; returns (id,
/// mailbox address, sent_at, g).
async fn insert_sent(
    pool: &sqlx::PgPool,
    mailboxes: &[(mail_worker::domain::MailboxAddress, uuid::Uuid)],
    n: usize,
    (first, from_s, span_s): (i64, f64, f64),
) -> Vec<(uuid::Uuid, String, chrono::DateTime<Utc>, i64)> {
    let ids: Vec<uuid::Uuid> = mailboxes.iter().map(|m| m.1).collect();
    sqlx::query_as(
        "WITH ins AS (INSERT INTO messages \
             (id, system_mailbox_id, to_recipients, subject, body, status, scheduled_on, sent_at) \
         SELECT gen_random_uuid(), ($1::uuid[])[(g % cardinality($1::uuid[])) + 1], \
             jsonb_build_array(jsonb_build_object('address', 'guest' || ($3 + g) || '@example.org')), \
             'Invitation', '<p>hi</p>', 'SENT', now() + $4 * interval '1 second', \
             now() + $4 * interval '1 second' + g * ($5 * interval '1 second' / $2) \
         FROM generate_series(0, $2 - 1) AS g \
         RETURNING id, system_mailbox_id, sent_at) \
         SELECT ins.id, s.address, ins.sent_at, \
             row_number() OVER (ORDER BY ins.sent_at) - 1 \
         FROM ins JOIN system_mailboxes s ON s.id = ins.system_mailbox_id",
    )
    .bind(&ids)
    .bind(i64::try_from(n).unwrap_or(i64::MAX))
    .bind(first)
    .bind(from_s)
    .bind(span_s)
    .fetch_all(pool)
    .await
    .unwrap_or_else(|e| support::fail(&format!("cannot insert the messages: {e}")))
}

/// graph-sim's record of message `id` from `sender` to `guest<g>@example.org`, delivered at
/// `at` (virtual) and visible in the trace `lag` later.
fn record(
    (id, sender, g): (uuid::Uuid, &str, i64),
    (status, failure): (&str, Option<(String, String, String)>),
    at: chrono::DateTime<Utc>,
    lag: Duration,
) -> TraceRecord {
    TraceRecord {
        id: uuid::Uuid::new_v4(),
        tenant: daemon::TENANT.to_owned(),
        message_id: format!("<{id}@{}>", daemon::TENANT),
        received: at,
        visible_at_ms: at.timestamp_millis() + i64::try_from(lag.as_millis()).unwrap_or(0),
        sender: sender.to_owned(),
        recipient: format!("guest{g}@example.org"),
        status: status.to_owned(),
        subject: "Invitation".to_owned(),
        size: 1_000,
        failure,
    }
}

fn config(db: &BenchDb, redis: &MeasuredRedis, sim: &graph_sim::GraphSim) -> Config {
    let sim_base = sim.graph_base_url();
    let login = sim.login_base_url();
    let env = |name: &str| -> Option<String> {
        Some(match name {
            "DATABASE_URL" => db.url.to_string(),
            "REDIS_URL" => redis.url.to_string(),
            "INTAKE_QUEUE" | "METRICS_LISTEN" => "off".into(),
            "GRAPH_API_BASE_URL" => sim_base.to_string(),
            "GRAPH_LOGIN_BASE_URL" => login.to_string(),
            "GRAPH_TRACE_DELIVERY" => "on".into(),
            // The outbox on (the events are counted in PostgreSQL; nothing dispatches them).
            "EVENTS_WEBHOOK_URL" => "http://127.0.0.1:9/events".into(),
            "EVENTS_WEBHOOK_SECRET" => "bench-trace-secret-0123456789".into(),
            "RUST_LOG" => "error".into(),
            _ => return None,
        })
    };
    let mut config =
        Config::from_lookup(env).unwrap_or_else(|e| support::fail(&format!("bad config: {e}")));
    // Every round is due at once by PostgreSQL's clock; the virtual clock spaces them.
    config.trace.interval = Duration::ZERO;
    // The trace budget counts by the virtual clock, not by Redis's.
    config.rate_limit.caller_clock = true;
    config
}

async fn run(args: Args, machine: Machine) -> ExitCode {
    let redis = MeasuredRedis::start().await;
    let db = BenchDb::create(&daemon::shared_postgres(), "trace").await;
    let setup = db.setup_pool().await;
    eprintln!("registering {} mailboxes", args.mailboxes);
    let mailboxes = daemon::add_mailboxes(&setup, "trace", args.mailboxes).await;
    eprintln!("inserting {} SENT messages", args.messages);
    // Sent between 2 h and 1 h ago by PostgreSQL's clock.
    let sent = insert_sent(&setup, &mailboxes, args.messages, (0, -7_200.0, 3_600.0)).await;
    db.settle(setup).await;

    let start = Utc::now();
    let sim_clock = graph_sim::clock::ManualClock::new(start);
    let clock = ManualClock::new(start);
    let mut sim_config = SimConfig::new()
        .with_app_registration(
            graph_sim::SimApp::new(daemon::TENANT, daemon::CLIENT_ID, daemon::CLIENT_SECRET)
                .with_roles([
                    "Mail.Send",
                    "Mail.Read",
                    "Mail.ReadWrite",
                    "ExchangeMessageTrace.Read.All",
                ]),
        )
        .with_trace(SimTrace::default())
        .with_clock(sim_clock.clone());
    for (address, _) in &mailboxes {
        sim_config = sim_config.with_mailbox(SimMailbox::new(address.as_str(), daemon::TENANT));
    }
    let sim = graph_sim::GraphSim::start(sim_config)
        .await
        .unwrap_or_else(|e| support::fail(&format!("graph-sim: {e}")));
    sim.insert_trace_records(sent.iter().map(|(id, sender, at, g)| {
        let fate = fate(usize::try_from(*g).unwrap_or(0));
        record((*id, sender, *g), fate, *at, Duration::ZERO)
    }));

    let config = config(&db, &redis, &sim);
    let reconciler = product::build_delivery_reconciler(
        &config,
        db.pool.clone(),
        Arc::new(clock.clone()),
        Arc::new(Metrics::new()),
    )
    .unwrap_or_else(|e| support::fail(&format!("reconciler: {e:#}")));

    let started = std::time::Instant::now();
    let mut rounds = 0;
    while rounds < MAX_ROUNDS && db.status_counts().await.get("SENT").copied().unwrap_or(0) > 0 {
        rounds += 1;
        let done = reconciler
            .round()
            .await
            .unwrap_or_else(|e| support::fail(&format!("round: {e}")));
        for (_, outcome) in done
            .iter()
            .filter(|(_, o)| o.requests > 0 || o.error.is_some())
        {
            eprintln!(
                "round {rounds}: {} requests, {} records, delivered {} failed {} filtered {}{}",
                outcome.requests,
                outcome.records,
                outcome.delivered,
                outcome.failed,
                outcome.filtered,
                outcome
                    .error
                    .as_deref()
                    .map(|e| format!(" (stopped: {e})"))
                    .unwrap_or_default()
            );
            if outcome
                .error
                .as_deref()
                // A read cut by its deadline (a debug build writing 100,000 outcomes) keeps
                // what it wrote (500 messages a transaction); the next read goes on.
                .is_some_and(|e| e != "trace budget used up" && e != "deadline")
            {
                support::fail("the read failed");
            }
        }
        // The next interval: the clocks on, PostgreSQL's pending messages back by as much.
        next_interval(&clock, &sim_clock, &db).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    let counts = db.status_counts().await;
    let stats = sim.trace_stats();
    let lag = lag_phase(
        &args,
        &db,
        &sim,
        &reconciler,
        &mailboxes,
        (&clock, &sim_clock),
    )
    .await;
    let (events, duplicates): (i64, i64) = sqlx::query_as(
        "SELECT coalesce(sum(n), 0)::int8, coalesce(sum(n - 1), 0)::int8 FROM \
         (SELECT count(*) AS n FROM events WHERE recipient IS NOT NULL \
          GROUP BY message_id, kind, recipient) e",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap_or_else(|e| support::fail(&format!("cannot count the events: {e}")));
    let throttled = sim.trace_stats().throttled;
    // graph-sim's count (of the backlog's reads, before the lag phase): a read cut by its
    // deadline reports none of its requests.
    let requests = stats.requests;
    let delivered = counts.get("DELIVERED").copied().unwrap_or(0);
    let bounced = counts.get("BOUNCED").copied().unwrap_or(0);
    let reconciled = delivered + bounced;
    let per_1000 = requests as f64 * 1000.0 / (reconciled.max(1) as f64);
    let report = Report {
        machine,
        smoke: args.run.smoke,
        mailboxes: args.mailboxes,
        messages: args.messages,
        rounds,
        requests,
        requests_per_1000_messages: per_1000,
        max_requests_in_5_minutes: stats.max_in_5_minutes,
        throttled,
        reconciled,
        delivered,
        bounced,
        events,
        duplicate_events: duplicates,
        seconds,
        lag,
    };
    println!(
        "{} mailboxes, {} messages in one tenant: {} reconciled ({} DELIVERED, {} BOUNCED) in {} rounds of {} s virtual",
        report.mailboxes,
        report.messages,
        reconciled,
        delivered,
        bounced,
        rounds,
        INTERVAL.as_secs()
    );
    println!(
        "trace requests: {requests} ({per_1000:.2} per 1,000 messages reconciled, goal ≤ 5); most in any rolling 5 min: {} (goal ≤ 90); graph-sim's 429s: {}",
        stats.max_in_5_minutes, throttled
    );
    println!(
        "outcome events (with the lag phase's): {events}, duplicates: {duplicates} (goal 0); {seconds:.1} s wall (PostgreSQL writes, not the budget)"
    );
    let lag = &report.lag;
    println!(
        "lag from graph-sim's delivery to DELIVERED ({} of {} messages delivered over one interval, the trace {} s behind, a read every {} s): median {:.0} s, max {:.0} s (goal ≤ {} s: the trace's lag + one interval)",
        lag.delivered,
        lag.messages,
        lag.trace_lag_s,
        lag.interval_s,
        lag.median_s,
        lag.max_s,
        lag.goal_s
    );
    let lag_ok = lag.delivered == lag.messages && lag.max_s <= lag.goal_s as f64;
    drop(reconciler);
    db.drop().await;
    let path = support::write_json(&support::results_name("trace", args.run.smoke), &report);
    println!("results: {}", path.display());
    support::exit_code(
        reconciled == args.messages as i64 && duplicates == 0 && throttled == 0 && lag_ok,
    )
}

/// Messages of the lag phase (one interval's worth, one per mailbox in turn).
const LAG_MESSAGES: usize = 500;

/// The lag phase, after the backlog is reconciled: [`LAG_MESSAGES`] messages delivered by
/// graph-sim at even steps over one interval from now (virtual), each visible in the trace
/// `GRAPH_TRACE_LAG` later (Exchange's trace lags by minutes); reads every interval as before.
/// Each message's lag: the virtual time of the read that made it `DELIVERED` minus its delivery.
async fn lag_phase(
    args: &Args,
    db: &BenchDb,
    sim: &graph_sim::GraphSim,
    reconciler: &mail_worker::delivery::DeliveryReconciler,
    mailboxes: &[(mail_worker::domain::MailboxAddress, uuid::Uuid)],
    (clock, sim_clock): (&ManualClock, &graph_sim::clock::ManualClock),
) -> Lag {
    use mail_worker::clock::Clock;
    let trace_lag = mail_worker::delivery::TraceSettings::default().lag;
    let n = LAG_MESSAGES.min(args.messages);
    let start = clock.now();
    let span = INTERVAL.as_secs_f64();
    let first = i64::try_from(args.messages).unwrap_or(0);
    let sent = insert_sent(&db.pool, mailboxes, n, (first, 0.0, span)).await;
    // Message g is delivered g × interval / n after the start (virtual).
    let delivered_at =
        |g: i64| start + chrono::Duration::milliseconds(g * INTERVAL.as_millis() as i64 / n as i64);
    sim.insert_trace_records(sent.iter().map(|(id, sender, _, g)| {
        record(
            (*id, sender, first + g),
            ("Delivered", None),
            delivered_at(*g),
            trace_lag,
        )
    }));
    let ids: Vec<uuid::Uuid> = sent.iter().map(|m| m.0).collect();
    let mut by_id: std::collections::HashMap<uuid::Uuid, i64> =
        sent.iter().map(|(id, _, _, g)| (*id, *g)).collect();
    let mut lags: Vec<f64> = Vec::new();
    for _ in 0..20 {
        reconciler
            .round()
            .await
            .unwrap_or_else(|e| support::fail(&format!("round: {e}")));
        let now = clock.now();
        let done: Vec<uuid::Uuid> = sqlx::query_scalar(
            "SELECT id FROM messages WHERE id = ANY($1) AND status = 'DELIVERED'",
        )
        .bind(&ids)
        .fetch_all(&db.pool)
        .await
        .unwrap_or_else(|e| support::fail(&format!("cannot read the delivered: {e}")));
        for id in done {
            if let Some(g) = by_id.remove(&id) {
                lags.push((now - delivered_at(g)).num_milliseconds() as f64 / 1000.0);
            }
        }
        if lags.len() >= n {
            break;
        }
        next_interval(clock, sim_clock, db).await;
    }
    lags.sort_by(f64::total_cmp);
    Lag {
        messages: n,
        delivered: lags.len(),
        trace_lag_s: trace_lag.as_secs(),
        interval_s: INTERVAL.as_secs(),
        median_s: lags.get(lags.len() / 2).copied().unwrap_or(f64::NAN),
        max_s: lags.last().copied().unwrap_or(f64::NAN),
        goal_s: (trace_lag + INTERVAL).as_secs(),
    }
}

/// The next poll interval: both clocks on, and the `SENT` rows' `sent_at` back by as much, so
/// PostgreSQL's `now()` agrees with the manual clocks.
async fn next_interval(
    clock: &ManualClock,
    sim_clock: &graph_sim::clock::ManualClock,
    db: &BenchDb,
) {
    clock.advance(INTERVAL);
    sim_clock.advance(INTERVAL);
    sqlx::query(
        "UPDATE messages SET sent_at = sent_at - $1 * interval '1 second' WHERE status = 'SENT'",
    )
    .bind(INTERVAL.as_secs_f64())
    .execute(&db.pool)
    .await
    .unwrap_or_else(|e| support::fail(&format!("cannot move sent_at: {e}")));
}

fn main() -> ExitCode {
    support::bench_main(run)
}
