//! Benchmark 13, the outbox of events (issue 25): (a) what events cost the send path — row
//! writes (pg_stat_user_tables) and PostgreSQL backend CPU per sent message, events off vs on,
//! the daemon in process against graph-sim; (b) how fast the dispatcher delivers to a local
//! receiver at `EVENTS_BATCH_SIZE` 1 and 100 (events/s), each signed `EVENTS_SIGNATURE=legacy`
//! and `standard` (ADR 0037: goal standard ≥ 0.95× legacy), against the 2 events (accepted,
//! sent) per message a send rate of 1,000 messages/s makes; (c) the outbox's lag while 2,000 events/s
//! are written (the `accepted` events of messages scheduled far ahead, so nothing else runs).
//!
//! ```text
//! cargo bench -p mail-worker-bench --bench events                  # 4,000 sends per arm, 20,000 events
//! cargo test -p mail-worker-bench --bench events -- --smoke       # 200 sends, 1,000 events (~20 s)
//! ```
//!
//! Results: `bench-results/events.json` (`events-smoke.json`).

use mail_worker_bench as support;

use std::{
    process::ExitCode,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use clap::Parser;
use serde::Serialize;

use mail_worker::{
    config::Config, daemon as product, domain::MailboxAddress, import, store::events::Outbox,
};
use support::{
    Machine,
    daemon::{self, BenchDb, MeasuredRedis},
};

/// How long an idle backend may keep its table counters before pg_stat_user_tables shows them
/// (PostgreSQL 15 flushes them at most once a second, and an idle backend's within 10 s).
const STATS_FLUSH: Duration = Duration::from_secs(11);

/// The secret the bench signs with.
const SECRET: &str = "bench-events-secret-0123456789";

#[derive(Debug, Parser)]
#[command(name = "events")]
struct Args {
    /// Messages sent per arm (events off, on).
    #[arg(long, default_value_t = 4_000)]
    sends: usize,
    /// Events delivered per batch size.
    #[arg(long, default_value_t = 20_000)]
    events: usize,
    /// Seconds of the lag run at 2,000 events/s.
    #[arg(long, default_value_t = 20)]
    lag_seconds: u64,
    #[command(flatten)]
    run: support::RunArgs,
}

impl support::BenchArgs for Args {
    const SMOKE: &str = "A smoke run for CI: 200 sends, 1,000 events, 3 s of lag.";

    fn smoke(&mut self) {
        self.sends = 200;
        self.events = 1_000;
        self.lag_seconds = 3;
    }
}

#[derive(Debug, Serialize)]
struct SendArm {
    events: bool,
    sends: usize,
    seconds: f64,
    sends_per_s: f64,
    row_writes_per_message_intake: f64,
    row_writes_per_message_send_path: f64,
    pg_cpu_ms_per_message: f64,
    events_delivered: u64,
}

#[derive(Debug, Serialize)]
struct DeliveryArm {
    batch_size: u32,
    /// `EVENTS_SIGNATURE`.
    signature: &'static str,
    events: usize,
    seconds: f64,
    events_per_s: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    machine: Machine,
    smoke: bool,
    send_path: Vec<SendArm>,
    delivery: Vec<DeliveryArm>,
    lag_written_events_per_s: f64,
    lag_max_seconds: f64,
}

/// A local receiver counting the events it is POSTed (200 to each).
async fn receiver() -> (String, Arc<AtomicU64>) {
    let count = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&count);
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: axum::body::Bytes| {
            let seen = Arc::clone(&seen);
            async move {
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                let n = v["events"].as_array().map_or(0, Vec::len) as u64;
                seen.fetch_add(n, Ordering::Relaxed);
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, count)
}

/// Lines of `n` messages over `mailboxes`, due now or in 2099.
fn lines(mailboxes: &[(MailboxAddress, uuid::Uuid)], n: usize, later: bool) -> String {
    (0..n)
        .map(|k| {
            let mut line = serde_json::json!({
                "id": uuid::Uuid::new_v4(),
                "systemMailbox": mailboxes[k % mailboxes.len()].0.as_str(),
                "campaignId": "bench-events",
                "to": [{"address": format!("guest{k}@example.org")}],
                "subject": "Invitation",
                "body": {"contentType": "html", "content": daemon::BODY},
            });
            if later {
                line["scheduledOn"] = "2099-01-01T00:00:00Z".into();
            }
            line.to_string() + "\n"
        })
        .collect()
}

/// The daemon's config on `db`, `redis`, `sim`, events to `url` (or off) in batches of `batch`.
fn config(
    db: &BenchDb,
    redis: &MeasuredRedis,
    sim: &graph_sim::GraphSim,
    url: Option<&str>,
    batch: u32,
    signature: &'static str,
) -> Config {
    let sim_base = sim.graph_base_url();
    let login = sim.login_base_url();
    let env = |name: &str| -> Option<String> {
        Some(match name {
            "DATABASE_URL" => db.url.to_string(),
            "REDIS_URL" => redis.url.to_string(),
            "INTAKE_QUEUE" | "METRICS_LISTEN" => "off".into(),
            "GRAPH_API_BASE_URL" => sim_base.to_string(),
            "GRAPH_LOGIN_BASE_URL" => login.to_string(),
            "MAIL_RATE_LIMIT_PER_MINUTE" => "100000".into(),
            "MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY" => "1000000".into(),
            "MAIL_MAILBOX_MAX_IN_FLIGHT" => "16".into(),
            "GRAPH_SEND_MODE" => "sendmail".into(),
            "SCHEDULER_INTERVAL" => "50ms".into(),
            "METRICS_REFRESH" => "250ms".into(),
            "EVENTS_WEBHOOK_URL" => url?.to_owned(),
            "EVENTS_WEBHOOK_SECRET" => SECRET.into(),
            "EVENTS_BATCH_SIZE" => batch.to_string(),
            "EVENTS_SIGNATURE" => signature.into(),
            "RUST_LOG" => "error".into(),
            _ => return None,
        })
    };
    Config::from_lookup(env).unwrap_or_else(|e| support::fail(&format!("bad config: {e}")))
}

/// graph-sim without Exchange's per-mailbox limits: the send path, not the stand-in, bounds the
/// rate.
async fn unlimited_sim(mailboxes: &[(MailboxAddress, uuid::Uuid)]) -> graph_sim::GraphSim {
    let limits = graph_sim::MailboxLimits {
        concurrent_requests: 64,
        messages_per_minute: 1_000_000,
        recipients_per_day: 10_000_000,
        requests_per_10_minutes: 10_000_000,
        ..graph_sim::MailboxLimits::default()
    };
    let mut config = graph_sim::SimConfig::new().with_app(
        daemon::TENANT,
        daemon::CLIENT_ID,
        daemon::CLIENT_SECRET,
    );
    for (address, _) in mailboxes {
        config = config.with_mailbox(
            graph_sim::SimMailbox::new(address.as_str(), daemon::TENANT)
                .with_limits(limits.clone()),
        );
    }
    graph_sim::GraphSim::start(config)
        .await
        .unwrap_or_else(|e| support::fail(&format!("graph-sim: {e}")))
}

/// Waits until `done` holds (checked every 20 ms), at most `within`.
async fn until(within: Duration, mut done: impl AsyncFnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if done().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

async fn send_arm(events: bool, n: usize, redis: &MeasuredRedis) -> SendArm {
    let db = BenchDb::create(&daemon::shared_postgres(), "events").await;
    let setup = db.setup_pool().await;
    let mailboxes = daemon::add_mailboxes(&setup, "events", 40).await;
    db.settle(setup).await;
    let sim = unlimited_sim(&mailboxes).await;
    let (url, delivered) = receiver().await;
    let outbox = if events { Outbox::On } else { Outbox::Off };
    let before = db.row_writes().await;
    import::enqueue(&db.pool, lines(&mailboxes, n, false), outbox)
        .await
        .unwrap_or_else(|e| support::fail(&format!("enqueue: {e}")));
    // pg_stat_user_tables shows a backend's counters only once it flushed them.
    tokio::time::sleep(STATS_FLUSH).await;
    let enqueued = db.row_writes().await;
    let config = config(
        &db,
        redis,
        &sim,
        events.then_some(url.as_str()),
        100,
        "both",
    );
    let started = Instant::now();
    let (handle, run) = product::start(config, product::Options::default())
        .await
        .unwrap_or_else(|e| support::fail(&format!("daemon: {e:#}")));
    let run = tokio::spawn(run);
    let sent = until(Duration::from_secs(600), async || {
        db.status_counts().await.get("SENT").copied().unwrap_or(0) == n as i64
    })
    .await;
    let seconds = started.elapsed().as_secs_f64();
    if !sent {
        support::fail("not every message was SENT within 10 minutes");
    }
    if events {
        until(Duration::from_secs(60), async || {
            delivered.load(Ordering::Relaxed) >= 2 * n as u64
        })
        .await;
    }
    let cpu = db.daemon_backends_cpu().await;
    let after = db.row_writes().await;
    handle.stop();
    let _ = run.await;
    db.wait_backends_gone().await;
    db.drop().await;
    let intake = daemon::total_writes(&daemon::writes_delta(&before, &enqueued)).total();
    let send_delta = daemon::writes_delta(&enqueued, &after);
    let send = daemon::total_writes(&send_delta).total();
    let per_table: Vec<String> = send_delta
        .iter()
        .map(|(t, w)| format!("{t} {:.2}", w.total() as f64 / n as f64))
        .collect();
    println!(
        "  send path writes per message by table: {}",
        per_table.join(", ")
    );
    SendArm {
        events,
        sends: n,
        seconds,
        sends_per_s: n as f64 / seconds,
        row_writes_per_message_intake: intake as f64 / n as f64,
        row_writes_per_message_send_path: send as f64 / n as f64,
        pg_cpu_ms_per_message: cpu * 1000.0 / n as f64,
        events_delivered: delivered.load(Ordering::Relaxed),
    }
}

/// Delivers `n` `accepted` events (of messages scheduled in 2099) at `batch` per POST; with
/// `lag` the events are written at 2,000/s meanwhile and the worst lag is returned instead.
async fn delivery_arm(
    batch: u32,
    signature: &'static str,
    n: usize,
    redis: &MeasuredRedis,
    lag: Option<u64>,
) -> (DeliveryArm, f64) {
    let db = BenchDb::create(&daemon::shared_postgres(), "events").await;
    let setup = db.setup_pool().await;
    let mailboxes = daemon::add_mailboxes(&setup, "events", 4).await;
    db.settle(setup).await;
    let sim = daemon::start_sim(&mailboxes).await;
    let (url, delivered) = receiver().await;
    if lag.is_none() {
        for chunk in 0..n.div_ceil(5_000) {
            let k = 5_000.min(n - chunk * 5_000);
            import::enqueue(&db.pool, lines(&mailboxes, k, true), Outbox::On)
                .await
                .unwrap_or_else(|e| support::fail(&format!("enqueue: {e}")));
        }
    }
    let config = config(&db, redis, &sim, Some(&url), batch, signature);
    let started = Instant::now();
    let (handle, run) = product::start(config, product::Options::default())
        .await
        .unwrap_or_else(|e| support::fail(&format!("daemon: {e:#}")));
    let run = tokio::spawn(run);
    let mut worst: f64 = 0.0;
    let mut total = n;
    if let Some(seconds) = lag {
        total = 0;
        let end = Instant::now() + Duration::from_secs(seconds);
        while Instant::now() < end {
            let tick = Instant::now();
            import::enqueue(&db.pool, lines(&mailboxes, 200, true), Outbox::On)
                .await
                .unwrap_or_else(|e| support::fail(&format!("enqueue: {e}")));
            total += 200;
            let text = handle.metrics.encode();
            let oldest = text
                .lines()
                .find_map(|l| l.strip_prefix("mail_worker_events_oldest_undelivered_seconds "))
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0);
            worst = worst.max(oldest);
            tokio::time::sleep(Duration::from_millis(100).saturating_sub(tick.elapsed())).await;
        }
    }
    let all = until(Duration::from_secs(600), async || {
        delivered.load(Ordering::Relaxed) >= total as u64
    })
    .await;
    let seconds = started.elapsed().as_secs_f64();
    if !all {
        support::fail("the events were not all delivered within 10 minutes");
    }
    handle.stop();
    let _ = run.await;
    db.wait_backends_gone().await;
    db.drop().await;
    (
        DeliveryArm {
            batch_size: batch,
            signature,
            events: total,
            seconds,
            events_per_s: total as f64 / seconds,
        },
        worst,
    )
}

async fn run(args: Args, machine: Machine) -> ExitCode {
    let redis = MeasuredRedis::start().await;
    let mut send_path = Vec::new();
    for events in [false, true] {
        let arm = send_arm(events, args.sends, &redis).await;
        println!(
            "events {}: {} sends in {:.1} s ({:.0}/s); row writes per message: intake {:.2}, send path {:.2}; PostgreSQL CPU {:.3} ms per message; {} events delivered",
            if events { "on " } else { "off" },
            arm.sends,
            arm.seconds,
            arm.sends_per_s,
            arm.row_writes_per_message_intake,
            arm.row_writes_per_message_send_path,
            arm.pg_cpu_ms_per_message,
            arm.events_delivered
        );
        send_path.push(arm);
    }
    let mut delivery = Vec::new();
    for batch in [1, 100] {
        let mut legacy = 0.0;
        for signature in ["legacy", "standard"] {
            let (arm, _) = delivery_arm(batch, signature, args.events, &redis, None).await;
            if signature == "legacy" {
                legacy = arm.events_per_s;
            }
            println!(
                "batch size {batch}, {signature:>8} signature: {} events in {:.1} s: {:.0} events/s ({:.2}× the 2,000 events/s of 1,000 sends/s; {:.3}× legacy, goal ≥ 0.95×)",
                arm.events,
                arm.seconds,
                arm.events_per_s,
                arm.events_per_s / 2_000.0,
                arm.events_per_s / legacy
            );
            delivery.push(arm);
        }
    }
    let (written, lag) = delivery_arm(100, "both", 0, &redis, Some(args.lag_seconds)).await;
    let rate = written.events as f64 / args.lag_seconds as f64;
    println!(
        "lag while {rate:.0} events/s are written for {} s (goal 2,000/s; batch size 100): worst {lag:.2} s (goal ≤ 5 s)",
        args.lag_seconds
    );
    let report = Report {
        machine,
        smoke: args.run.smoke,
        send_path,
        delivery,
        lag_written_events_per_s: rate,
        lag_max_seconds: lag,
    };
    let path = support::write_json(&support::results_name("events", args.run.smoke), &report);
    println!("results: {}", path.display());
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    support::bench_main(run)
}
