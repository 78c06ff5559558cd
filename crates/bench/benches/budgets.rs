//! Benchmark 6, mailbox budgets — the backlog drain of benchmark 3 with both limiter algorithms
//! side by side in one run: `paced` (the default: rolling windows, booked slots, in-flight
//! leases, fair claims) and `fixed-window` (the seed's UTC-minute counters), each with its own
//! private Redis servers (queue and limiter), its own database and its own graph-sim, running
//! at the same time. One mailbox has a backlog of 1,000 (then 10,000) messages at 25/min;
//! a second mailbox gets 5 messages due 30 s into the run ("another mailbox's wait").
//!
//! ```text
//! cargo bench -p mail-worker-bench --bench budgets                          # 1,000 then 10,000, 5 min each (~12 min)
//! cargo bench -p mail-worker-bench --bench budgets -- --messages 1000       # one size (~6 min)
//! cargo test -p mail-worker-bench --bench budgets -- --smoke               # 50 messages, until each was tried once (~5 s)
//! ```
//!
//! Per mail sent: limiter calls (`evalsha` on the limiter's Redis), Redis commands (limiter,
//! `REDIS_URL`, together), PostgreSQL row writes (`pg_stat_user_tables`), claims (`attempts +
//! deferrals`); the most sends in any rolling 60 s (graph-sim's records) against the
//! limit; Graph 429s (graph-sim's refusals); denials per message (the `deferrals` column); the
//! other mailbox's wait from due to `SENT`. Goals (printed, never failed on): for `paced` ≤ 3
//! limiter round trips, ≤ 40 Redis commands and ≤ 4 row writes per sent mail, each message
//! denied at most once; ≤ L per rolling 60 s and 0 Graph 429 for both.
//!
//! Results: `bench-results/budgets.json` (`budgets-smoke.json`), the daemons' logs in
//! `bench-results/budgets-<algorithm>-<messages>-daemon.log`. Exit status 1 when an arm sent
//! nothing (the daemon or the harness is broken), 2 when the benchmark could not run.

use mail_worker_bench as support;

use std::{
    collections::BTreeMap,
    process::ExitCode,
    time::{Duration, Instant},
};

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use clap::Parser;
use mail_worker::{log_events, rate_limit::Algorithm};
use serde::Serialize;
use support::{
    Machine,
    daemon::{self, BenchDb, CommandStats, Daemon, DaemonEnv, DaemonExit, MeasuredRedis},
    per, thousands, to_f64 as f,
};
use uuid::Uuid;

/// Benchmark 6: both limiter algorithms draining the same backlog, side by side.
#[derive(Debug, Parser)]
#[command(name = "budgets")]
struct Args {
    /// Backlog sizes, comma-separated; each size is one side-by-side run, one after the other.
    #[arg(long, value_delimiter = ',', default_values_t = [1_000, 10_000])]
    messages: Vec<usize>,
    #[command(flatten)]
    drain: daemon::DrainArgs,
    /// Messages of the other mailbox.
    #[arg(long, default_value_t = 5)]
    other_messages: usize,
    /// Seconds into the run at which the other mailbox's messages fall due.
    #[arg(long, default_value_t = 30)]
    other_due_s: u32,
    /// Start at once instead of on the next UTC minute (fixed-window's buckets then do not
    /// line up with the measured minutes).
    #[arg(long)]
    no_align: bool,
    #[command(flatten)]
    run: support::RunArgs,
}

/// One arm's set-up: servers, database, graph-sim, the daemon's environment.
struct Arm {
    algorithm: Algorithm,
    limiter_redis: MeasuredRedis,
    queue_redis: MeasuredRedis,
    db: BenchDb,
    sim: graph_sim::GraphSim,
    backlog_box: (mail_worker::domain::MailboxAddress, Uuid),
    other_box: (mail_worker::domain::MailboxAddress, Uuid),
    env: DaemonEnv,
}

/// The other mailbox's wait, from due to `SENT`.
#[derive(Debug, Clone, Serialize)]
struct OtherWait {
    messages: usize,
    sent: usize,
    /// Seconds from due to `sent_at`, sorted (sent messages only).
    waits_s: Vec<f64>,
    first_s: Option<f64>,
    median_s: Option<f64>,
    max_s: Option<f64>,
}

/// What one arm measured over the run.
#[derive(Debug, Clone, Serialize)]
struct ArmResult {
    algorithm: &'static str,
    messages: usize,
    /// Accepted by graph-sim, both mailboxes.
    sent: u64,
    sent_backlog: u64,
    /// `mail.rateLimit.deferred` lines: limiter denials, and by reason.
    denied: u64,
    denied_by_reason: BTreeMap<String, u64>,
    /// `evalsha` on the limiter's Redis: checks, seeds, releases.
    limiter_calls: u64,
    limiter_commands: u64,
    queue_commands: u64,
    jobs: u64,
    pg_row_writes: i64,
    /// Messages that were sent or denied at least once.
    tried: i64,
    /// `max(deferrals)` over all messages, and how many were denied more than once.
    max_deferrals: i32,
    denied_twice_or_more: i64,
    /// graph-sim: the most sends in any rolling 60 s and in one UTC minute, backlog mailbox.
    max_rolling_60s: u32,
    max_utc_minute: u32,
    max_rolling_60s_other: u32,
    max_in_flight: u32,
    /// graph-sim's 429s, both mailboxes.
    graph_429: u64,
    throttled_lines: u64,
    error_lines: u64,
    other: OtherWait,
    daemon_exit: DaemonExit,
    status_at_end: BTreeMap<String, i64>,
    limiter_by_command: CommandStats,
    queue_by_command: CommandStats,
    snapshots: Vec<Snapshot>,
    daemon_env: DaemonEnv,
}

impl ArmResult {
    fn per_sent(&self, v: f64) -> f64 {
        per(v, self.sent)
    }
    /// Per try: per limiter decision that ended in a send or a denial.
    fn per_try(&self, v: f64) -> f64 {
        per(v, self.sent + self.denied)
    }
}

#[derive(Debug, Serialize)]
struct SizeRun {
    messages: usize,
    started_at: DateTime<Utc>,
    arms: Vec<ArmResult>,
}

#[derive(Debug, Serialize)]
struct Report {
    #[serde(flatten)]
    run: support::RunInfo,
    limit_per_minute: u32,
    minutes: u32,
    concurrency: u32,
    other_messages: usize,
    other_due_s: u32,
    aligned: bool,
    runs: Vec<SizeRun>,
}

async fn run(args: Args, machine: Machine) -> ExitCode {
    let mut runs = Vec::new();
    let mut broken = false;
    for &messages in &args.messages {
        let (paced, fixed) = tokio::join!(
            set_up(&args, Algorithm::Paced, messages),
            set_up(&args, Algorithm::FixedWindow, messages)
        );
        let minute = TimeDelta::minutes(1);
        let start = if args.no_align {
            Utc::now() + TimeDelta::milliseconds(200)
        } else {
            Utc::now()
                .duration_trunc(minute)
                .unwrap_or_else(|e| support::fail(&e.to_string()))
                + minute
        };
        let other_due = start + TimeDelta::seconds(i64::from(args.other_due_s));
        tokio::join!(
            schedule_other(&paced, other_due),
            schedule_other(&fixed, other_due)
        );
        println!();
        println!(
            "budgets: {messages} messages for one mailbox at {}/min + {} for another due at {} UTC, WORKER_CONCURRENCY {}, {} from {} UTC; paced and fixed-window side by side, each with its own limiter Redis, database and graph-sim",
            args.drain.limit,
            args.other_messages,
            other_due.format("%H:%M:%S"),
            args.drain.concurrency,
            daemon::drain_span(args.run.smoke, args.drain.minutes),
            start.format("%H:%M:%S"),
        );
        let (a, b) = tokio::join!(
            drive(&args, paced, messages, start, other_due),
            drive(&args, fixed, messages, start, other_due)
        );
        broken |= a.sent == 0 || b.sent == 0;
        print_size(&args, &a, &b);
        runs.push(SizeRun {
            messages,
            started_at: start,
            arms: vec![a, b],
        });
    }
    let report = Report {
        run: support::RunInfo {
            benchmark: "budgets",
            machine,
            smoke: args.run.smoke,
        },
        limit_per_minute: args.drain.limit,
        minutes: args.drain.minutes,
        concurrency: args.drain.concurrency,
        other_messages: args.other_messages,
        other_due_s: args.other_due_s,
        aligned: !args.no_align,
        runs,
    };
    let path = support::write_json(&support::results_name("budgets", args.run.smoke), &report);
    println!("results: {}", path.display());
    if broken {
        println!("FAILURE: an arm sent nothing: the daemon or the harness is broken (see its log)");
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

async fn set_up(args: &Args, algorithm: Algorithm, messages: usize) -> Arm {
    let limiter_redis = MeasuredRedis::start().await;
    let queue_redis = MeasuredRedis::start().await;
    let label = match algorithm {
        Algorithm::Paced => "budgets_paced",
        Algorithm::FixedWindow => "budgets_fixed",
    };
    let db = BenchDb::create(&daemon::shared_postgres(), label).await;
    let setup = db.setup_pool().await;
    let backlog_box = daemon::add_mailboxes(&setup, "backlog", 1).await.remove(0);
    let other_box = daemon::add_mailboxes(&setup, "other", 1).await.remove(0);
    daemon::insert_messages(&setup, &[backlog_box.1], messages).await;
    daemon::insert_messages(&setup, &[other_box.1], args.other_messages).await;
    db.settle(setup).await;
    let sim = daemon::start_sim(&[backlog_box.clone(), other_box.clone()]).await;
    let mut env = DaemonEnv::new(&db.url, &queue_redis.url, &limiter_redis.url, &sim);
    env.set("MAIL_RATE_LIMIT_ALGORITHM", algorithm.as_str())
        .set("MAIL_RATE_LIMIT_PER_MINUTE", args.drain.limit)
        .set("WORKER_CONCURRENCY", args.drain.concurrency)
        .set("MAIL_RATE_LIMIT_KEY_PREFIX", "bench:budgets:rl");
    Arm {
        algorithm,
        limiter_redis,
        queue_redis,
        db,
        sim,
        backlog_box,
        other_box,
        env,
    }
}

/// Makes the other mailbox's messages due at `due` (+ k µs, in order), through a set-up pool
/// that is settled before anything is measured.
async fn schedule_other(arm: &Arm, due: DateTime<Utc>) {
    let setup = arm.db.setup_pool().await;
    sqlx::query(
        "UPDATE messages SET scheduled_on = $2 + (scheduled_on - (SELECT min(scheduled_on) \
             FROM messages WHERE system_mailbox_id = $1)) \
         WHERE system_mailbox_id = $1",
    )
    .bind(arm.other_box.1)
    .bind(due)
    .execute(&setup)
    .await
    .unwrap_or_else(|e| support::fail(&format!("cannot schedule the other mailbox: {e}")));
    arm.db.settle(setup).await;
}

/// The counters of one arm at one instant.
#[derive(Debug, Clone, Serialize)]
struct Snapshot {
    #[serde(flatten)]
    counters: daemon::DrainCounters,
    pg_row_writes: i64,
    /// Mails graph-sim accepted so far (both mailboxes).
    sent: u64,
}

async fn snapshot(arm: &mut Arm) -> Snapshot {
    Snapshot {
        counters: daemon::DrainCounters::read(
            &mut arm.limiter_redis,
            &mut arm.queue_redis,
            &arm.db,
        )
        .await,
        pg_row_writes: daemon::total_writes(&arm.db.row_writes().await).total(),
        sent: arm.sim.stats().total_accepted(),
    }
}

async fn sleep_until(at: DateTime<Utc>) {
    if let Ok(wait) = (at - Utc::now()).to_std() {
        tokio::time::sleep(wait).await;
    }
}

#[allow(clippy::too_many_lines)]
async fn drive(
    args: &Args,
    mut arm: Arm,
    messages: usize,
    start: DateTime<Utc>,
    other_due: DateTime<Utc>,
) -> ArmResult {
    let name = arm.algorithm.as_str();
    let log = daemon::results_path(&if args.run.smoke {
        format!("budgets-smoke-{name}-daemon.log")
    } else {
        format!("budgets-{name}-{messages}-daemon.log")
    });
    sleep_until(start).await;
    let mut snapshots = vec![snapshot(&mut arm).await];
    let worker = Daemon::spawn(&arm.env, &log).await;
    if args.run.smoke {
        // Until every backlog message was sent or denied once and the other mailbox's were
        // sent, or 60 s.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let (tried, other_sent): (i64, i64) = sqlx::query_as(
                "SELECT count(*) FILTER (WHERE system_mailbox_id = $1 \
                     AND (status = 'SENT' OR deferrals > 0)), \
                 count(*) FILTER (WHERE system_mailbox_id = $2 AND status = 'SENT') \
                 FROM messages",
            )
            .bind(arm.backlog_box.1)
            .bind(arm.other_box.1)
            .fetch_one(&arm.db.pool)
            .await
            .unwrap_or((0, 0));
            let done = usize::try_from(tried).unwrap_or(0) >= messages
                && usize::try_from(other_sent).unwrap_or(0) >= args.other_messages;
            if done || Instant::now() > deadline {
                break;
            }
        }
        snapshots.push(snapshot(&mut arm).await);
    } else {
        for m in 1..=args.drain.minutes {
            sleep_until(start + TimeDelta::minutes(i64::from(m))).await;
            let s = snapshot(&mut arm).await;
            eprintln!(
                "{name} {messages}: minute {m}/{}: {} sent so far, {} claimed, limiter evalsha {}",
                args.drain.minutes,
                arm.sim.stats().total_accepted(),
                s.counters.claims - snapshots[0].counters.claims,
                s.counters
                    .limiter_commands
                    .get("evalsha")
                    .map_or(0, |c| c.calls)
                    - snapshots[0]
                        .counters
                        .limiter_commands
                        .get("evalsha")
                        .map_or(0, |c| c.calls),
            );
            snapshots.push(s);
        }
    }
    let daemon_exit = worker.stop(Duration::from_secs(30)).await;
    arm.db.wait_backends_gone().await;
    let last = snapshot(&mut arm).await;
    let first = &snapshots[0];
    let limiter_by_command = daemon::command_delta(
        &first.counters.limiter_commands,
        &last.counters.limiter_commands,
    );
    let queue_by_command = daemon::command_delta(
        &first.counters.queue_commands,
        &last.counters.queue_commands,
    );

    let lines = daemon::read_log(&log);
    let with_event = |name: &'static str| {
        lines
            .iter()
            .filter(move |l| l.event.as_deref() == Some(name))
    };
    let denied = with_event(log_events::MAIL_RATE_LIMIT_DEFERRED).count() as u64;
    let mut denied_by_reason = BTreeMap::new();
    for l in with_event(log_events::MAIL_RATE_LIMIT_DEFERRED) {
        let reason = l
            .json
            .get("reason")
            .or_else(|| l.json.get("fields").and_then(|f| f.get("reason")))
            .and_then(|v| v.as_str())
            .unwrap_or("?")
            .to_owned();
        *denied_by_reason.entry(reason).or_insert(0) += 1;
    }
    let stats = arm.sim.stats();
    let backlog_stats = stats.mailbox(arm.backlog_box.0.as_str());
    let other_stats = stats.mailbox(arm.other_box.0.as_str());
    let records = arm.sim.messages();
    let sent_backlog = records
        .iter()
        .filter(|r| r.mailbox.eq_ignore_ascii_case(arm.backlog_box.0.as_str()))
        .count() as u64;

    let (tried, max_deferrals, twice): (i64, Option<i32>, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE status = 'SENT' OR deferrals > 0), max(deferrals), \
             count(*) FILTER (WHERE deferrals > 1) FROM messages",
    )
    .fetch_one(&arm.db.pool)
    .await
    .unwrap_or_else(|e| support::fail(&format!("cannot read the deferrals: {e}")));
    let mut waits_s: Vec<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM sent_at - $2)::float8 FROM messages \
         WHERE system_mailbox_id = $1 AND status = 'SENT' ORDER BY 1",
    )
    .bind(arm.other_box.1)
    .bind(other_due)
    .fetch_all(&arm.db.pool)
    .await
    .unwrap_or_else(|e| support::fail(&format!("cannot read the other mailbox: {e}")));
    waits_s.sort_by(f64::total_cmp);
    let other = OtherWait {
        messages: args.other_messages,
        sent: waits_s.len(),
        first_s: waits_s.first().copied(),
        median_s: support::median(&waits_s),
        max_s: if waits_s.len() == args.other_messages {
            waits_s.last().copied()
        } else {
            None
        },
        waits_s,
    };
    let status_at_end = arm.db.status_counts().await;
    let result = ArmResult {
        algorithm: name,
        messages,
        sent: records.len() as u64,
        sent_backlog,
        denied,
        denied_by_reason,
        limiter_calls: limiter_by_command.get("evalsha").map_or(0, |c| c.calls),
        limiter_commands: daemon::total_calls(&limiter_by_command),
        queue_commands: daemon::total_calls(&queue_by_command),
        jobs: last.counters.claims - first.counters.claims,
        pg_row_writes: last.pg_row_writes - first.pg_row_writes,
        tried,
        max_deferrals: max_deferrals.unwrap_or(0),
        denied_twice_or_more: twice,
        max_rolling_60s: backlog_stats.map_or(0, |b| b.max_in_rolling_60s),
        max_utc_minute: backlog_stats.map_or(0, |b| b.max_in_utc_minute),
        max_rolling_60s_other: other_stats.map_or(0, |b| b.max_in_rolling_60s),
        max_in_flight: backlog_stats.map_or(0, |b| b.max_concurrent),
        graph_429: stats.refused_total(),
        throttled_lines: with_event(log_events::MAIL_GRAPH_THROTTLED).count() as u64,
        error_lines: lines.iter().filter(|l| l.level == "ERROR").count() as u64,
        other,
        daemon_exit,
        status_at_end,
        limiter_by_command,
        queue_by_command,
        snapshots,
        daemon_env: arm.env.clone(),
    };
    let Arm {
        sim,
        db,
        limiter_redis,
        queue_redis,
        ..
    } = arm;
    if let Err(e) = sim.shutdown().await {
        eprintln!("warning: graph-sim: {e}");
    }
    db.drop().await;
    drop(limiter_redis);
    drop(queue_redis);
    result
}

fn ratio(fixed: f64, paced: f64) -> String {
    if paced == 0.0 && fixed == 0.0 {
        "=".into()
    } else if paced == 0.0 || !paced.is_finite() || !fixed.is_finite() {
        "–".into()
    } else {
        format!("{:.1}×", fixed / paced)
    }
}

fn secs(v: Option<f64>) -> String {
    v.map_or_else(|| "not all sent".into(), |s| format!("{s:.1} s"))
}

/// One arm's total of something over the run (limiter calls, row writes, …).
type Total = fn(&ArmResult) -> f64;

#[allow(clippy::too_many_lines, clippy::cast_precision_loss)]
fn print_size(args: &Args, p: &ArmResult, w: &ArmResult) {
    let limit = args.drain.limit;
    println!();
    println!(
        "backlog {}: per mail sent (whole run; both mailboxes' sends), ratio = fixed-window ÷ paced",
        thousands(p.messages as f64)
    );
    let row = |name: &str, pv: f64, wv: f64, digits: usize, goal: &str| {
        vec![
            name.to_owned(),
            format!("{pv:.digits$}"),
            format!("{wv:.digits$}"),
            ratio(wv, pv),
            goal.to_owned(),
        ]
    };
    let met = |ok: bool| if ok { "met" } else { "NOT met" };
    let limiter_calls: Total = |r| f(r.limiter_calls);
    let commands: Total = |r| f(r.limiter_commands + r.queue_commands);
    let row_writes: Total = |r| r.pg_row_writes as f64;
    let claims: Total = |r| f(r.jobs);
    // What, the arm's total over the run, paced's goal per mail sent.
    let per_sent: [(&str, Total, Option<f64>); 8] = [
        ("limiter calls (evalsha)", limiter_calls, Some(3.0)),
        ("Redis commands, limiter", |r| f(r.limiter_commands), None),
        ("Redis commands, queue", |r| f(r.queue_commands), None),
        ("Redis commands, together", commands, Some(40.0)),
        ("PostgreSQL row writes", row_writes, Some(4.0)),
        ("claims", claims, None),
        ("limiter denials", |r| f(r.denied), None),
        ("daemon CPU ms", |r| r.daemon_exit.cpu_s * 1_000.0, None),
    ];
    let mut rows = vec![vec![
        "mails sent (backlog + other)".into(),
        format!(
            "{} ({} + {})",
            p.sent,
            p.sent_backlog,
            p.sent - p.sent_backlog
        ),
        format!(
            "{} ({} + {})",
            w.sent,
            w.sent_backlog,
            w.sent - w.sent_backlog
        ),
        ratio(f(w.sent), f(p.sent)),
        String::new(),
    ]];
    for (what, total, most) in per_sent {
        let (pv, wv) = (p.per_sent(total(p)), w.per_sent(total(w)));
        let goal = most.map_or_else(String::new, |most| {
            format!("paced ≤ {most}: {}", met(pv <= most))
        });
        rows.push(row(what, pv, wv, 1, &goal));
    }
    support::print_table(
        &["per mail sent", "paced", "fixed-window", "ratio", "goal"],
        &rows,
    );
    println!();
    println!(
        "per try (a limiter decision that ended in a send or a denial: {} paced, {} fixed-window)",
        p.sent + p.denied,
        w.sent + w.denied
    );
    // What, the arm's total over the run, digits.
    let per_try: [(&str, Total, usize); 4] = [
        ("limiter calls", limiter_calls, 2),
        ("Redis commands, together", commands, 1),
        ("PostgreSQL row writes", row_writes, 2),
        ("claims", claims, 2),
    ];
    rows = per_try
        .into_iter()
        .map(|(what, total, digits)| {
            row(what, p.per_try(total(p)), w.per_try(total(w)), digits, "")
        })
        .collect();
    support::print_table(
        &["per try", "paced", "fixed-window", "ratio", "goal"],
        &rows,
    );
    println!();
    let reasons = |r: &ArmResult| {
        r.denied_by_reason
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let waits = |r: &ArmResult| {
        r.other
            .waits_s
            .iter()
            .map(|s| format!("{s:.1}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    // A wait of the other mailbox in each arm.
    let wait = |what: &str, of: fn(&OtherWait) -> Option<f64>, goal: &str| {
        let (pv, wv) = (of(&p.other), of(&w.other));
        vec![
            what.to_owned(),
            secs(pv),
            secs(wv),
            ratio(wv.unwrap_or(f64::NAN), pv.unwrap_or(f64::NAN)),
            goal.to_owned(),
        ]
    };
    // A peak of each arm.
    let most = |what: &str, peak: fn(&ArmResult) -> u32, goal: String| {
        let (pv, wv) = (peak(p), peak(w));
        vec![
            what.to_owned(),
            pv.to_string(),
            wv.to_string(),
            ratio(f64::from(wv), f64::from(pv)),
            goal,
        ]
    };
    rows = vec![
        most(
            &format!("most sends in a rolling 60 s (limit {limit})"),
            |r| r.max_rolling_60s,
            format!(
                "≤ {limit}: paced {}, fixed-window {}",
                met(p.max_rolling_60s <= limit),
                met(w.max_rolling_60s <= limit)
            ),
        ),
        most(
            "most sends in one UTC minute",
            |r| r.max_utc_minute,
            String::new(),
        ),
        most(
            "most requests in flight (Graph: 4)",
            |r| r.max_in_flight,
            String::new(),
        ),
        vec![
            "Graph 429s (graph-sim refusals)".into(),
            p.graph_429.to_string(),
            w.graph_429.to_string(),
            ratio(f(w.graph_429), f(p.graph_429)),
            format!(
                "0: paced {}, fixed-window {}",
                met(p.graph_429 == 0),
                met(w.graph_429 == 0)
            ),
        ],
        vec![
            "denials per message: max (messages denied > once)".into(),
            format!("{} ({})", p.max_deferrals, p.denied_twice_or_more),
            format!("{} ({})", w.max_deferrals, w.denied_twice_or_more),
            ratio(f64::from(w.max_deferrals), f64::from(p.max_deferrals)),
            format!("paced ≤ 1: {}", met(p.max_deferrals <= 1)),
        ],
        vec![
            "messages tried (sent or denied)".into(),
            p.tried.to_string(),
            w.tried.to_string(),
            ratio(w.tried as f64, p.tried as f64),
            String::new(),
        ],
        vec![
            "denials by reason".into(),
            reasons(p),
            reasons(w),
            String::new(),
            String::new(),
        ],
        vec![
            format!(
                "other mailbox: {} due at +{} s, sent",
                args.other_messages, args.other_due_s
            ),
            format!("{}/{}", p.other.sent, p.other.messages),
            format!("{}/{}", w.other.sent, w.other.messages),
            String::new(),
            String::new(),
        ],
        wait(
            "other mailbox: wait from due to SENT, first",
            |o| o.first_s,
            "",
        ),
        wait("other mailbox: wait, last", |o| o.max_s, "paced: seconds"),
        vec![
            "other mailbox: every wait, s".into(),
            waits(p),
            waits(w),
            String::new(),
            String::new(),
        ],
        vec![
            "graph-sim throttlings logged / ERROR lines".into(),
            format!("{} / {}", p.throttled_lines, p.error_lines),
            format!("{} / {}", w.throttled_lines, w.error_lines),
            String::new(),
            String::new(),
        ],
    ];
    support::print_table(&["", "paced", "fixed-window", "ratio", "goal"], &rows);
    println!();
    let per_minute = |r: &ArmResult| -> Vec<(u64, u64)> {
        r.snapshots
            .windows(2)
            .map(|s| {
                let d = daemon::command_delta(
                    &s[0].counters.limiter_commands,
                    &s[1].counters.limiter_commands,
                );
                (
                    d.get("evalsha").map_or(0, |c| c.calls),
                    s[1].counters.claims - s[0].counters.claims,
                )
            })
            .collect()
    };
    if !args.run.smoke && p.snapshots.len() > 2 && w.snapshots.len() > 2 {
        // After the first minute: the booking pass of a small backlog is over, so this is
        // what a send costs once the backlog is booked (paced) — and the re-tries (fixed-window).
        let steady = |r: &ArmResult| {
            let (a, b) = (&r.snapshots[1], &r.snapshots[r.snapshots.len() - 1]);
            let l =
                daemon::command_delta(&a.counters.limiter_commands, &b.counters.limiter_commands);
            let q = daemon::command_delta(&a.counters.queue_commands, &b.counters.queue_commands);
            let sent = b.sent - a.sent;
            [
                per(f(l.get("evalsha").map_or(0, |c| c.calls)), sent),
                per(f(daemon::total_calls(&l) + daemon::total_calls(&q)), sent),
                per((b.pg_row_writes - a.pg_row_writes) as f64, sent),
                per(f(b.counters.claims - a.counters.claims), sent),
                f(sent),
            ]
        };
        let (sp, sw) = (steady(p), steady(w));
        println!(
            "per mail sent after the first minute (minutes 2–{}: {} sent paced, {} fixed-window; PostgreSQL counts ±1 s late)",
            args.drain.minutes, sp[4], sw[4]
        );
        let rows: Vec<Vec<String>> = [
            ("limiter calls", 0, "paced ≤ 3"),
            ("Redis commands, together", 1, "paced ≤ 40"),
            ("PostgreSQL row writes", 2, "paced ≤ 4"),
            ("claims", 3, ""),
        ]
        .iter()
        .map(|(name, i, goal)| {
            vec![
                (*name).to_owned(),
                format!("{:.1}", sp[*i]),
                format!("{:.1}", sw[*i]),
                ratio(sw[*i], sp[*i]),
                (*goal).to_owned(),
            ]
        })
        .collect();
        support::print_table(
            &["after minute 1", "paced", "fixed-window", "ratio", "goal"],
            &rows,
        );
        println!();
    }
    if !args.run.smoke {
        let (pm, wm) = (per_minute(p), per_minute(w));
        let rows: Vec<Vec<String>> = pm
            .iter()
            .zip(&wm)
            .enumerate()
            .map(|(i, (a, b))| {
                vec![
                    (i + 1).to_string(),
                    a.0.to_string(),
                    a.1.to_string(),
                    b.0.to_string(),
                    b.1.to_string(),
                ]
            })
            .collect();
        support::print_table(
            &[
                "minute",
                "paced limiter calls",
                "paced claims",
                "fixed-window limiter calls",
                "fixed-window claims",
            ],
            &rows,
        );
        println!();
    }
    println!(
        "messages at the end: paced {:?}; fixed-window {:?}",
        p.status_at_end, w.status_at_end
    );
    println!(
        "daemons: paced {:.2} s CPU, exit {}; fixed-window {:.2} s CPU, exit {}",
        p.daemon_exit.cpu_s, p.daemon_exit.status, w.daemon_exit.cpu_s, w.daemon_exit.status
    );
}

fn main() -> ExitCode {
    support::bench_main(run)
}

impl support::BenchArgs for Args {
    const SMOKE: &str = "A smoke run for CI: 50 messages, the other mailbox's 2 due after 2 s, no alignment; stops when every backlog message was tried once and the other mailbox's were sent.";

    fn invalid(&self) -> Option<&'static str> {
        (self.messages.contains(&0) || self.drain.is_empty() || self.other_messages == 0).then_some(
            "--messages, --limit, --minutes, --concurrency, --other-messages must be positive",
        )
    }

    fn smoke(&mut self) {
        self.messages = vec![50];
        self.other_messages = 2;
        self.other_due_s = 2;
        self.no_align = true;
    }
}
