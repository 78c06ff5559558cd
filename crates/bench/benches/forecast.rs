//! Benchmark 11, the campaign forecast's accuracy (issue 24): a campaign over three mailboxes at
//! 25, 20 and 30 messages a minute (one of them behind a backlog already waiting) is forecast
//! with `mail-worker campaign forecast`'s code, enqueued, and sent by one `mail-worker run`
//! against graph-sim (Exchange's limits); per mailbox it prints the forecast finish, graph-sim's
//! last accepted send, and the error against the goal, max(5 %, 30 s).
//!
//! ```text
//! cargo bench -p mail-worker-bench --bench forecast                       # 3 × 100 + 20 waiting, ~5 minutes
//! cargo bench -p mail-worker-bench --bench forecast -- --messages 300     # ~15 minutes
//! cargo test -p mail-worker-bench --bench forecast -- --smoke            # 3 × 5 + 3 waiting (~15 s)
//! ```
//!
//! Results: `bench-results/forecast.json` (`forecast-smoke.json`), the daemon's log in
//! `bench-results/forecast-daemon.log`. Exit status 1 when a mailbox missed the goal, a message
//! was not sent before the timeout, or graph-sim refused a request.

use mail_worker_bench as support;

use std::{
    num::NonZeroU32,
    process::ExitCode,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use clap::Parser;
use serde::Serialize;

use mail_worker::{
    config::Config,
    import,
    reports::campaign::forecast_file,
    store::senders::{self, LimitsChange},
};
use support::{
    Machine,
    daemon::{self, BenchDb, Daemon, DaemonEnv, MeasuredRedis},
};

/// The mailboxes' limits (messages per minute); the second has the backlog.
const LIMITS: [u32; 3] = [25, 20, 30];

/// Benchmark 11: forecast vs actual finish of a campaign.
#[derive(Debug, Parser)]
#[command(name = "forecast")]
struct Args {
    /// The campaign's messages per mailbox.
    #[arg(long, default_value_t = 100)]
    messages: usize,
    /// Messages already waiting for the second mailbox before the campaign.
    #[arg(long, default_value_t = 20)]
    backlog: usize,
    #[command(flatten)]
    run: support::RunArgs,
}

/// One mailbox's forecast against its actual finish.
#[derive(Debug, Clone, Serialize)]
struct Line {
    mailbox: String,
    per_minute: u32,
    messages: u64,
    backlog: u64,
    forecast_s: f64,
    actual_s: Option<f64>,
    error_s: Option<f64>,
    error_percent: Option<f64>,
    within_goal: bool,
}

#[derive(Debug, Serialize)]
struct Report {
    machine: Machine,
    smoke: bool,
    forecast_at: DateTime<Utc>,
    lines: Vec<Line>,
    graph_sim_refused: u64,
    sent: i64,
    expected: usize,
}

/// The campaign file: `n` lines per mailbox, one recipient each, campaign `bench-forecast`.
fn campaign(mailboxes: &[(mail_worker::domain::MailboxAddress, uuid::Uuid)], n: usize) -> String {
    let mut out = String::new();
    for (address, _) in mailboxes {
        for k in 0..n {
            let line = serde_json::json!({
                "id": uuid::Uuid::new_v4(),
                "systemMailbox": address.as_str(),
                "campaignId": "bench-forecast",
                "to": [{"address": format!("guest{k}@example.org")}],
                "subject": "Invitation",
                "body": {"contentType": "html", "content": daemon::BODY},
            });
            out.push_str(&line.to_string());
            out.push('\n');
        }
    }
    out
}

async fn run(args: Args, machine: Machine) -> ExitCode {
    let limiter_redis = MeasuredRedis::start().await;
    let queue_redis = MeasuredRedis::start().await;
    let db = BenchDb::create(&daemon::shared_postgres(), "forecast").await;
    let setup = db.setup_pool().await;
    let mailboxes = daemon::add_mailboxes(&setup, "forecast", LIMITS.len()).await;
    for ((address, _), limit) in mailboxes.iter().zip(LIMITS) {
        let change = LimitsChange::Set {
            per_minute: NonZeroU32::new(limit),
            recipients_per_day: None,
            reserved_percent: None,
        };
        senders::set_limits(&setup, address, change)
            .await
            .unwrap_or_else(|e| support::fail(&format!("cannot set {address}'s limit: {e}")));
    }
    daemon::insert_messages(&setup, &[mailboxes[1].1], args.backlog).await;
    db.settle(setup).await;
    let sim = daemon::start_sim(&mailboxes).await;
    let mut env = DaemonEnv::new(&db.url, &queue_redis.url, &limiter_redis.url, &sim);
    env.set("MAIL_RATE_LIMIT_KEY_PREFIX", "bench:forecast:rl");
    let config = Config::from_lookup(|name| env.get(name).map(str::to_owned))
        .unwrap_or_else(|e| support::fail(&format!("bad configuration: {e}")));
    let file = campaign(&mailboxes, args.messages);

    let forecast = forecast_file(&config, &db.pool, file.as_bytes(), None)
        .await
        .unwrap_or_else(|e| support::fail(&format!("cannot forecast: {e}")));
    println!(
        "forecast: {} messages over {} mailboxes at {LIMITS:?}/min, {} already waiting for {}: done in {:.1} s",
        args.messages * LIMITS.len(),
        LIMITS.len(),
        args.backlog,
        mailboxes[1].0,
        (forecast.finish - forecast.now).num_milliseconds() as f64 / 1000.0
    );
    let enqueued = import::enqueue(&db.pool, file.as_bytes(), Default::default())
        .await
        .unwrap_or_else(|e| support::fail(&format!("cannot enqueue: {e}")));
    let expected = enqueued.good + args.backlog;
    let log = daemon::results_path(if args.run.smoke {
        "forecast-smoke-daemon.log"
    } else {
        "forecast-daemon.log"
    });
    let worker = Daemon::spawn(&env, &log).await;
    let slowest = forecast
        .senders
        .iter()
        .map(|s| s.seconds)
        .fold(0.0, f64::max);
    let deadline = Instant::now() + Duration::from_secs_f64(slowest * 1.5 + 120.0);
    let mut sent = 0;
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
        sent = db.status_counts().await.get("SENT").copied().unwrap_or(0);
        if usize::try_from(sent).unwrap_or(0) >= expected {
            break;
        }
    }
    let _ = worker.stop(Duration::from_secs(30)).await;

    let records = sim.messages();
    let lines: Vec<Line> = forecast
        .senders
        .iter()
        .map(|s| {
            let actual = records
                .iter()
                .filter(|r| r.mailbox.eq_ignore_ascii_case(&s.mailbox))
                .map(|r| r.received_at)
                .max()
                .map(|t| (t - forecast.now).num_milliseconds() as f64 / 1000.0);
            let error = actual.map(|a| (a - s.seconds).abs());
            Line {
                mailbox: s.mailbox.clone(),
                per_minute: s.limits.per_minute,
                messages: s.messages.messages,
                backlog: s.backlog.unbooked,
                forecast_s: s.seconds,
                actual_s: actual,
                error_s: error,
                error_percent: error.map(|e| 100.0 * e / s.seconds.max(f64::EPSILON)),
                within_goal: error.is_some_and(|e| e <= (0.05 * s.seconds).max(30.0)),
            }
        })
        .collect();
    let secs = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1}"));
    support::print_table_of(
        &[
            "mailbox",
            "per min",
            "messages",
            "waiting before",
            "forecast s",
            "actual s",
            "error s",
            "error %",
            "goal",
        ],
        &lines,
        |l| {
            vec![
                l.mailbox.clone(),
                l.per_minute.to_string(),
                l.messages.to_string(),
                l.backlog.to_string(),
                secs(Some(l.forecast_s)),
                secs(l.actual_s),
                secs(l.error_s),
                secs(l.error_percent),
                if l.within_goal { "met" } else { "MISSED" }.to_owned(),
            ]
        },
    );
    let report = Report {
        machine,
        smoke: args.run.smoke,
        forecast_at: forecast.now,
        graph_sim_refused: sim.stats().refused_total(),
        lines,
        sent,
        expected,
    };
    let path = support::write_json(&support::results_name("forecast", args.run.smoke), &report);
    println!("results: {}", path.display());
    let ok = report.lines.iter().all(|l| l.within_goal)
        && report.graph_sim_refused == 0
        && usize::try_from(report.sent).unwrap_or(0) >= expected;
    db.drop().await;
    support::exit_code(ok)
}

fn main() -> ExitCode {
    support::bench_main(run)
}

impl support::BenchArgs for Args {
    const SMOKE: &str = "A smoke run for CI: 5 messages per mailbox, 3 waiting.";

    fn invalid(&self) -> Option<&'static str> {
        (self.messages == 0).then_some("--messages must be positive")
    }

    fn smoke(&mut self) {
        self.messages = 5;
        self.backlog = 3;
    }
}
