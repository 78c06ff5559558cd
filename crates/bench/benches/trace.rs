//! Benchmark 19, the delivery reconciler's budget (issue 42, ADR 0044): 2,000 mailboxes of one
//! tenant, 100,000 `SENT` messages (one recipient each) inserted in bulk and their trace records
//! put straight into graph-sim (`insert_trace_records`): 0.3 % failed (5.1.10), 1 % filtered as
//! spam, the rest delivered. The reconciler (`mail_worker::delivery`) reads the tenant round
//! after round on a virtual clock: each round moves graph-sim's and the reconciler's clock on by
//! `GRAPH_TRACE_INTERVAL` (5 min) and the pending messages' `sent_at` back by as much (PostgreSQL
//! keeps its own clock), until no message is left `SENT`. It measures requests, not wall time:
//! trace requests per 1,000 messages reconciled (goal ≤ 5), the most of the tenant in any rolling
//! 5 minutes as graph-sim counted them (goal ≤ 90; graph-sim's 429s: goal 0), and duplicate
//! outcome events (goal 0).
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

/// Inserts `n` `SENT` messages over `mailboxes` (message g to `guest<g>@example.org`, sent
/// between 2 h and 1 h ago by PostgreSQL's clock); returns (id, mailbox address, sent_at, g).
async fn insert_sent(
    pool: &sqlx::PgPool,
    mailboxes: &[(mail_worker::domain::MailboxAddress, uuid::Uuid)],
    n: usize,
) -> Vec<(uuid::Uuid, String, chrono::DateTime<Utc>, i64)> {
    let ids: Vec<uuid::Uuid> = mailboxes.iter().map(|m| m.1).collect();
    sqlx::query_as(
        "WITH ins AS (INSERT INTO messages \
             (id, system_mailbox_id, to_recipients, subject, body, status, scheduled_on, sent_at) \
         SELECT gen_random_uuid(), ($1::uuid[])[(g % cardinality($1::uuid[])) + 1], \
             jsonb_build_array(jsonb_build_object('address', 'guest' || g || '@example.org')), \
             'Invitation', '<p>hi</p>', 'SENT', now() - interval '2 hours', \
             now() - interval '2 hours' + g * (interval '1 hour' / $2) \
         FROM generate_series(0, $2 - 1) AS g \
         RETURNING id, system_mailbox_id, sent_at) \
         SELECT ins.id, s.address, ins.sent_at, \
             row_number() OVER (ORDER BY ins.sent_at) - 1 \
         FROM ins JOIN system_mailboxes s ON s.id = ins.system_mailbox_id",
    )
    .bind(&ids)
    .bind(i64::try_from(n).unwrap_or(i64::MAX))
    .fetch_all(pool)
    .await
    .unwrap_or_else(|e| support::fail(&format!("cannot insert the messages: {e}")))
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
    let sent = insert_sent(&setup, &mailboxes, args.messages).await;
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
        let (status, failure) = fate(usize::try_from(*g).unwrap_or(0));
        TraceRecord {
            id: uuid::Uuid::new_v4(),
            tenant: daemon::TENANT.to_owned(),
            message_id: format!("<{id}@{}>", daemon::TENANT),
            received: *at,
            visible_at_ms: at.timestamp_millis(),
            sender: sender.clone(),
            recipient: format!("guest{g}@example.org"),
            status: status.to_owned(),
            subject: "Invitation".to_owned(),
            size: 1_000,
            failure,
        }
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
                .is_some_and(|e| e != "trace budget used up")
            {
                support::fail("the read failed");
            }
        }
        // The next interval: the clocks on, PostgreSQL's pending messages back by as much.
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
    let seconds = started.elapsed().as_secs_f64();
    let counts = db.status_counts().await;
    let (events, duplicates): (i64, i64) = sqlx::query_as(
        "SELECT coalesce(sum(n), 0)::int8, coalesce(sum(n - 1), 0)::int8 FROM \
         (SELECT count(*) AS n FROM events WHERE recipient IS NOT NULL \
          GROUP BY message_id, kind, recipient) e",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap_or_else(|e| support::fail(&format!("cannot count the events: {e}")));
    let stats = sim.trace_stats();
    // graph-sim's count: a read cut by its deadline reports none of its requests.
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
        throttled: stats.throttled,
        reconciled,
        delivered,
        bounced,
        events,
        duplicate_events: duplicates,
        seconds,
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
        stats.max_in_5_minutes, stats.throttled
    );
    println!(
        "outcome events: {events}, duplicates: {duplicates} (goal 0); {seconds:.1} s wall (PostgreSQL writes, not the budget)"
    );
    drop(reconciler);
    db.drop().await;
    let path = support::write_json(&support::results_name("trace", args.run.smoke), &report);
    println!("results: {}", path.display());
    support::exit_code(
        reconciled == args.messages as i64 && duplicates == 0 && stats.throttled == 0,
    )
}

fn main() -> ExitCode {
    support::bench_main(run)
}
