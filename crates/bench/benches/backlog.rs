//! Benchmark 3, backlog drain — the seed design's cost: 1,000 messages for one mailbox at 25 a
//! minute through the real daemon (`mail-worker run`) and graph-sim for 5 UTC minutes. Per
//! minute, mails sent; per mail sent, limiter calls, Redis commands (`INFO commandstats` deltas,
//! per command), PostgreSQL row writes (`pg_stat_user_tables` deltas) and claims; budget
//! use = sent / (limit × minutes).
//!
//! ```text
//! cargo bench -p mail-worker-bench --bench backlog                  # 1,000 messages, 5 UTC minutes (6 min wall)
//! cargo bench -p mail-worker-bench --bench backlog -- --minutes 10  # longer
//! cargo test -p mail-worker-bench --bench backlog -- --smoke       # 50 messages, until each was tried once (~5 s)
//! ```
//!
//! The daemon runs with the production defaults (`WORKER_CONCURRENCY` 16, `SCHEDULER_INTERVAL` 250,
//! spread 0–30 s) except the limit (`--limit`, default 25). The harness starts two private
//! `redis-server`s — one at `REDIS_URL` (no job queue since issue 12: it stays idle), one for the limiter
//! (`MAIL_RATE_LIMIT_REDIS_URL`) — so each one's `INFO commandstats` holds exactly its part,
//! and a fresh database `bench_backlog_<hex>`. The run starts on a UTC minute (it waits up to a
//! minute for it) so that each measured minute is one limiter bucket. Results:
//! `bench-results/backlog.json` (`backlog-smoke.json`), the daemon's log in
//! `bench-results/backlog-daemon.log`.
//!
//! Exit status 1 when graph-sim saw more than the limit in one UTC minute (the limiter failed)
//! or nothing was sent at all, 2 when the benchmark could not run; never for slowness.

use mail_worker_bench as support;

use std::{
    process::ExitCode,
    time::{Duration, Instant},
};

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use clap::Parser;
use mail_worker::log_events;
use serde::Serialize;
use support::{
    Machine,
    daemon::{
        self, BenchDb, CommandStats, Daemon, DaemonEnv, DaemonExit, MeasuredRedis, RowWrites,
        TableWrites,
    },
    per, thousands, to_f64 as f,
};

/// Benchmark 3: the cost of draining one mailbox's backlog through the daemon.
#[derive(Debug, Parser)]
#[command(name = "backlog")]
struct Args {
    /// Messages in the backlog, all due at the start.
    #[arg(long, default_value_t = 1_000)]
    messages: usize,
    #[command(flatten)]
    drain: daemon::DrainArgs,
    /// Start at once instead of on the next UTC minute (the minutes are then not buckets).
    #[arg(long)]
    no_align: bool,
    /// `MAIL_RATE_LIMIT_ALGORITHM`: `fixed-window` (the seed's, which this benchmark measured in
    /// BENCHMARKS.md) unless told otherwise; benchmark 6 (`budgets`) runs both side by side.
    #[arg(long, default_value = "fixed-window")]
    algorithm: mail_worker::rate_limit::Algorithm,
    #[command(flatten)]
    run: support::RunArgs,
}

/// What happened between two snapshots (one UTC minute in a full run).
#[derive(Debug, Clone, Serialize)]
struct Interval {
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    /// Messages not yet sent at the interval's start.
    backlog_at_start: u64,
    /// Accepted by graph-sim.
    sent: u64,
    /// `mail.rateLimit.deferred` log lines: limiter denials.
    denied: u64,
    /// `mail.graph.throttled`: graph-sim's 429s.
    throttled: u64,
    /// `evalsha` calls on the limiter's Redis: `check_and_reserve` + `release`.
    limiter_calls: u64,
    claims: u64,
    limiter_redis_commands: u64,
    queue_redis_commands: u64,
    /// Inserted + updated + deleted rows (PostgreSQL publishes these with up to ~1 s delay
    /// while busy, ~10 s once idle: per minute they are approximate, the totals are exact).
    pg_row_writes: i64,
    daemon_cpu_s: f64,
}

#[derive(Debug, Serialize)]
struct PerSent {
    limiter_calls: f64,
    denials: f64,
    jobs: f64,
    limiter_redis_commands: f64,
    queue_redis_commands: f64,
    redis_commands: f64,
    pg_row_writes: f64,
    pg_rows_inserted: f64,
    pg_rows_updated: f64,
    pg_rows_deleted: f64,
    daemon_cpu_ms: f64,
    redis_cpu_ms: f64,
    graph_requests: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    #[serde(flatten)]
    run: support::RunInfo,
    messages: usize,
    limit_per_minute: u32,
    minutes: u32,
    aligned: bool,
    daemon_env: DaemonEnv,
    intervals: Vec<Interval>,
    sent: u64,
    denied: u64,
    throttled: u64,
    released: u64,
    error_lines: u64,
    limiter_calls: u64,
    limiter_calls_from_log: u64,
    claims: u64,
    /// sent / (limit × minutes); only for aligned full runs.
    budget_use: Option<f64>,
    per_sent: PerSent,
    limiter_commands: CommandStats,
    queue_commands: CommandStats,
    pg_writes: TableWrites,
    queue_memory_growth_bytes: i64,
    queue_keys_growth: i64,
    graph_sim_max_in_utc_minute: u32,
    graph_sim_max_in_rolling_60s: u32,
    graph_sim_refused: u64,
    /// graph-sim's refusals by cause (concurrency = over 4 requests in flight).
    graph_sim_refused_by_cause: graph_sim::RefusedCounts,
    /// The most sendMail requests graph-sim saw in flight for the mailbox.
    graph_sim_max_concurrent: u32,
    status_at_end: std::collections::BTreeMap<String, i64>,
    daemon_exit: DaemonExit,
    snapshots: Vec<Snapshot>,
}

async fn run(args: Args, machine: Machine) -> ExitCode {
    let mut limiter_redis = MeasuredRedis::start().await;
    let mut queue_redis = MeasuredRedis::start().await;
    let db = BenchDb::create(&daemon::shared_postgres(), "backlog").await;
    let setup = db.setup_pool().await;
    let mailboxes = daemon::add_mailboxes(&setup, "backlog", 1).await;
    let ids: Vec<_> = mailboxes.iter().map(|(_, id)| *id).collect();
    daemon::insert_messages(&setup, &ids, args.messages).await;
    db.settle(setup).await;
    let sim = daemon::start_sim(&mailboxes).await;
    let mut env = DaemonEnv::new(&db.url, &queue_redis.url, &limiter_redis.url, &sim);
    env.set("MAIL_RATE_LIMIT_PER_MINUTE", args.drain.limit)
        .set("WORKER_CONCURRENCY", args.drain.concurrency)
        .set("MAIL_RATE_LIMIT_KEY_PREFIX", "bench:backlog:rl")
        .set("MAIL_RATE_LIMIT_ALGORITHM", args.algorithm.as_str());

    let minute = TimeDelta::minutes(1);
    let start = if args.no_align {
        Utc::now()
    } else {
        Utc::now()
            .duration_trunc(minute)
            .unwrap_or_else(|e| support::fail(&e.to_string()))
            + minute
    };
    println!(
        "backlog: {} messages for {} at {}/min ({}), WORKER_CONCURRENCY {}, {} from {} UTC; two private Redis servers (queue {}, limiter {}), database {}",
        args.messages,
        mailboxes[0].0,
        args.drain.limit,
        args.algorithm,
        args.drain.concurrency,
        daemon::drain_span(args.run.smoke, args.drain.minutes),
        start.format("%H:%M:%S"),
        queue_redis.url,
        limiter_redis.url,
        db.url.path().trim_start_matches('/'),
    );
    sleep_until(start).await;

    let mut snapshots = Vec::new();
    snapshots.push(snapshot(&mut limiter_redis, &mut queue_redis, &db, None).await);
    let log = daemon::results_path(if args.run.smoke {
        "backlog-smoke-daemon.log"
    } else {
        "backlog-daemon.log"
    });
    let worker = Daemon::spawn(&env, &log).await;
    if args.run.smoke {
        // Until every message was sent or denied once (each was claimed, sent to the limiter
        // and written back), or 60 s.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let tried: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM messages WHERE status = 'SENT' OR deferrals > 0",
            )
            .fetch_one(&db.pool)
            .await
            .unwrap_or(0);
            if usize::try_from(tried).unwrap_or(0) >= args.messages || Instant::now() > deadline {
                break;
            }
        }
        snapshots.push(snapshot(&mut limiter_redis, &mut queue_redis, &db, Some(&worker)).await);
    } else {
        for m in 1..=args.drain.minutes {
            sleep_until(start + minute * i32::try_from(m).unwrap_or(i32::MAX)).await;
            let s = snapshot(&mut limiter_redis, &mut queue_redis, &db, Some(&worker)).await;
            let sent = sim.stats().total_accepted();
            eprintln!(
                "minute {m}/{}: {sent} sent so far, {} jobs pushed, limiter evalsha {}",
                args.drain.minutes,
                s.counters.claims,
                s.counters
                    .limiter_commands
                    .get("evalsha")
                    .map_or(0, |c| c.calls)
            );
            snapshots.push(s);
        }
    }
    let exit = worker.stop(Duration::from_secs(30)).await;
    db.wait_backends_gone().await;
    let pg_final = db.row_writes().await;
    let limiter_final = limiter_redis.commandstats().await;
    let queue_final = queue_redis.commandstats().await;
    let jobs_final = db.claims().await;
    let queue_memory_final = queue_redis.used_memory().await;
    let queue_keys_final = queue_redis.dbsize().await;
    let status_at_end = db.status_counts().await;

    // Events from the daemon's log and graph-sim's records.
    let lines = daemon::read_log(&log);
    let count_event = |name: &str, from: DateTime<Utc>, to: DateTime<Utc>| {
        lines
            .iter()
            .filter(|l| l.event.as_deref() == Some(name) && l.at >= from && l.at < to)
            .count() as u64
    };
    let records = sim.messages();
    let sent_between = |from: DateTime<Utc>, to: DateTime<Utc>| {
        records
            .iter()
            .filter(|r| r.received_at >= from && r.received_at < to)
            .count() as u64
    };
    let far = DateTime::<Utc>::MAX_UTC;
    let early = DateTime::<Utc>::MIN_UTC;

    let mut intervals = Vec::new();
    for pair in snapshots.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let limiter =
            daemon::command_delta(&a.counters.limiter_commands, &b.counters.limiter_commands);
        let queue_cmds =
            daemon::command_delta(&a.counters.queue_commands, &b.counters.queue_commands);
        intervals.push(Interval {
            from: a.counters.at,
            to: b.counters.at,
            backlog_at_start: (args.messages as u64)
                .saturating_sub(sent_between(early, a.counters.at)),
            sent: sent_between(a.counters.at, b.counters.at),
            denied: count_event(
                log_events::MAIL_RATE_LIMIT_DEFERRED,
                a.counters.at,
                b.counters.at,
            ),
            throttled: count_event(
                log_events::MAIL_GRAPH_THROTTLED,
                a.counters.at,
                b.counters.at,
            ),
            limiter_calls: limiter.get("evalsha").map_or(0, |c| c.calls),
            claims: b.counters.claims - a.counters.claims,
            limiter_redis_commands: daemon::total_calls(&limiter),
            queue_redis_commands: daemon::total_calls(&queue_cmds),
            pg_row_writes: daemon::total_writes(&daemon::writes_delta(&a.pg_writes, &b.pg_writes))
                .total(),
            daemon_cpu_s: b.daemon_cpu_s - a.daemon_cpu_s,
        });
    }

    // Totals over the daemon's whole life (start to stop).
    let first = &snapshots[0];
    let limiter_commands = daemon::command_delta(&first.counters.limiter_commands, &limiter_final);
    let queue_commands = daemon::command_delta(&first.counters.queue_commands, &queue_final);
    let pg_writes = daemon::writes_delta(&first.pg_writes, &pg_final);
    let writes = daemon::total_writes(&pg_writes);
    let sent = records.len() as u64;
    let denied = count_event(log_events::MAIL_RATE_LIMIT_DEFERRED, early, far);
    let throttled = count_event(log_events::MAIL_GRAPH_THROTTLED, early, far);
    let released = count_event(log_events::MAIL_RATE_LIMIT_RELEASED, early, far);
    let error_lines = lines.iter().filter(|l| l.level == "ERROR").count() as u64;
    let limiter_calls = limiter_commands.get("evalsha").map_or(0, |c| c.calls);
    let claims = jobs_final - first.counters.claims;
    let stats = sim.stats();
    let box_stats = stats.mailboxes.first();
    let redis_cpu = limiter_redis.cpu_seconds() - first.limiter_redis_cpu_s
        + queue_redis.cpu_seconds()
        - first.queue_redis_cpu_s;
    let limiter_total = daemon::total_calls(&limiter_commands);
    let queue_total = daemon::total_calls(&queue_commands);
    let graph_requests = sent + box_stats.map_or(0, |b| b.refused.total());
    let per_sent = PerSent {
        limiter_calls: per(f(limiter_calls), sent),
        denials: per(f(denied), sent),
        jobs: per(f(claims), sent),
        limiter_redis_commands: per(f(limiter_total), sent),
        queue_redis_commands: per(f(queue_total), sent),
        redis_commands: per(f(limiter_total + queue_total), sent),
        pg_row_writes: per(writes.total() as f64, sent),
        pg_rows_inserted: per(writes.inserted as f64, sent),
        pg_rows_updated: per(writes.updated as f64, sent),
        pg_rows_deleted: per(writes.deleted as f64, sent),
        daemon_cpu_ms: per(exit.cpu_s * 1_000.0, sent),
        redis_cpu_ms: per(redis_cpu * 1_000.0, sent),
        graph_requests: per(f(graph_requests), sent),
    };
    let budget_use = (!args.no_align).then(|| {
        let measured: u64 = intervals.iter().map(|i| i.sent).sum();
        f(measured) / (f64::from(args.drain.limit) * f64::from(args.drain.minutes))
    });

    print_report(
        &args,
        &intervals,
        &per_sent,
        (sent, denied, claims, limiter_calls),
        &limiter_commands,
        &queue_commands,
        &pg_writes,
        writes,
        budget_use,
    );
    let memory_growth = i64::try_from(queue_memory_final).unwrap_or(i64::MAX)
        - i64::try_from(first.queue_memory_bytes).unwrap_or(0);
    let keys_growth = i64::try_from(queue_keys_final).unwrap_or(i64::MAX)
        - i64::try_from(first.queue_keys).unwrap_or(0);
    println!(
        "queue Redis grew by {} bytes and {} keys: {:.0} bytes and {:.2} keys per claim (no job queue: the daemon keeps nothing there per message)",
        thousands(memory_growth as f64),
        keys_growth,
        memory_growth as f64 / f(claims.max(1)),
        keys_growth as f64 / f(claims.max(1)),
    );
    let max_minute = box_stats.map_or(0, |b| b.max_in_utc_minute);
    let max_rolling = box_stats.map_or(0, |b| b.max_in_rolling_60s);
    println!(
        "graph-sim: {sent} accepted, at most {max_minute} in one UTC minute and {max_rolling} in a rolling 60 s (Exchange: 30), at most {} requests in flight (Exchange: 4), {} refused ({} over the concurrency limit, {} over the rolling minute); the daemon logged {released} release(s), {throttled} Graph throttling(s), {error_lines} error line(s); it used {:.2} s CPU ({}), peak RSS {} MiB, exit {}",
        box_stats.map_or(0, |b| b.max_concurrent),
        box_stats.map_or(0, |b| b.refused.total()),
        box_stats.map_or(0, |b| b.refused.concurrency),
        box_stats.map_or(0, |b| b.refused.minute),
        exit.cpu_s,
        exit.source,
        exit.max_rss_kib / 1024,
        exit.status,
    );
    println!("messages at the end: {status_at_end:?}");

    let over_limit = max_minute > args.drain.limit;
    if over_limit {
        println!(
            "FAILURE: graph-sim saw {max_minute} messages in one UTC minute, over the limit {}",
            args.drain.limit
        );
    }
    if sent == 0 {
        println!(
            "FAILURE: nothing was sent: the daemon or the harness is broken (see {})",
            log.display()
        );
    }

    let report = Report {
        run: support::RunInfo {
            benchmark: "backlog",
            machine,
            smoke: args.run.smoke,
        },
        messages: args.messages,
        limit_per_minute: args.drain.limit,
        minutes: args.drain.minutes,
        aligned: !args.no_align,
        daemon_env: env,
        intervals,
        sent,
        denied,
        throttled,
        released,
        error_lines,
        limiter_calls,
        limiter_calls_from_log: sent + denied + released,
        claims,
        budget_use,
        per_sent,
        limiter_commands,
        queue_commands,
        pg_writes,
        queue_memory_growth_bytes: memory_growth,
        queue_keys_growth: keys_growth,
        graph_sim_max_in_utc_minute: max_minute,
        graph_sim_max_in_rolling_60s: max_rolling,
        graph_sim_refused: box_stats.map_or(0, |b| b.refused.total()),
        graph_sim_refused_by_cause: box_stats.map(|b| b.refused.clone()).unwrap_or_default(),
        graph_sim_max_concurrent: box_stats.map_or(0, |b| b.max_concurrent),
        status_at_end,
        daemon_exit: exit,
        snapshots,
    };
    let path = support::write_json(&support::results_name("backlog", args.run.smoke), &report);
    println!("results: {}", path.display());
    if let Err(e) = sim.shutdown().await {
        eprintln!("warning: graph-sim: {e}");
    }
    db.drop().await;
    drop(limiter_redis);
    drop(queue_redis);
    support::exit_code(!over_limit && sent != 0)
}

async fn sleep_until(at: DateTime<Utc>) {
    if let Ok(wait) = (at - Utc::now()).to_std() {
        tokio::time::sleep(wait).await;
    }
}

/// The counters at one instant.
#[derive(Debug, Clone, Serialize)]
struct Snapshot {
    #[serde(flatten)]
    counters: daemon::DrainCounters,
    queue_keys: u64,
    queue_memory_bytes: u64,
    limiter_keys: u64,
    pg_writes: TableWrites,
    daemon_cpu_s: f64,
    limiter_redis_cpu_s: f64,
    queue_redis_cpu_s: f64,
}

async fn snapshot(
    limiter: &mut MeasuredRedis,
    queue: &mut MeasuredRedis,
    db: &BenchDb,
    worker: Option<&Daemon>,
) -> Snapshot {
    Snapshot {
        counters: daemon::DrainCounters::read(limiter, queue, db).await,
        queue_keys: queue.dbsize().await,
        queue_memory_bytes: queue.used_memory().await,
        limiter_keys: limiter.dbsize().await,
        pg_writes: db.row_writes().await,
        daemon_cpu_s: worker.and_then(Daemon::cpu_seconds).unwrap_or(0.0),
        limiter_redis_cpu_s: limiter.cpu_seconds(),
        queue_redis_cpu_s: queue.cpu_seconds(),
    }
}

#[allow(clippy::too_many_arguments)]
fn print_report(
    args: &Args,
    intervals: &[Interval],
    per_sent: &PerSent,
    (sent, denied, jobs, limiter_calls): (u64, u64, u64, u64),
    limiter_commands: &CommandStats,
    queue_commands: &CommandStats,
    pg_writes: &TableWrites,
    writes: RowWrites,
    budget_use: Option<f64>,
) {
    println!();
    let rows: Vec<Vec<String>> = intervals
        .iter()
        .map(|i| {
            vec![
                format!("{}–{}", i.from.format("%H:%M:%S"), i.to.format("%H:%M:%S")),
                i.backlog_at_start.to_string(),
                i.sent.to_string(),
                i.denied.to_string(),
                i.limiter_calls.to_string(),
                format!("{:.1}", per(f(i.limiter_calls), i.sent)),
                format!("{:.1}", f(i.backlog_at_start) / f64::from(args.drain.limit)),
                i.claims.to_string(),
                thousands(f(i.limiter_redis_commands)),
                thousands(f(i.queue_redis_commands)),
                thousands(i.pg_row_writes as f64),
                format!("{:.2}", i.daemon_cpu_s),
            ]
        })
        .collect();
    support::print_table(
        &[
            "UTC interval",
            "backlog",
            "sent",
            "denied",
            "limiter calls",
            "calls/sent",
            "backlog/limit",
            "jobs",
            "Redis cmds (limiter)",
            "Redis cmds (queue)",
            "PG row writes",
            "daemon CPU s",
        ],
        &rows,
    );
    println!();
    println!(
        "whole run: {sent} sent, {denied} denied, {limiter_calls} limiter calls, {jobs} jobs{}",
        budget_use.map_or(String::new(), |b| format!(
            "; budget use {:.1} % (sent in the {} minute(s) / ({} × {}))",
            b * 100.0,
            args.drain.minutes,
            args.drain.limit,
            args.drain.minutes
        ))
    );
    println!();
    let one = |v: f64| format!("{v:.1}");
    let row_writes = format!(
        "{:.1} ({:.1} + {:.1} + {:.1})",
        per_sent.pg_row_writes,
        per_sent.pg_rows_inserted,
        per_sent.pg_rows_updated,
        per_sent.pg_rows_deleted
    );
    support::print_table_of(
        &["per mail sent", "value"],
        [
            ("limiter calls", one(per_sent.limiter_calls)),
            ("limiter denials", one(per_sent.denials)),
            ("claims (attempts + deferrals)", one(per_sent.jobs)),
            (
                "Redis commands, limiter",
                one(per_sent.limiter_redis_commands),
            ),
            ("Redis commands, queue", one(per_sent.queue_redis_commands)),
            ("Redis commands, total", one(per_sent.redis_commands)),
            ("PostgreSQL row writes (ins + upd + del)", row_writes),
            ("daemon CPU ms", one(per_sent.daemon_cpu_ms)),
            ("Redis CPU ms (both servers)", one(per_sent.redis_cpu_ms)),
            ("Graph requests", format!("{:.2}", per_sent.graph_requests)),
        ],
        |(what, value)| vec![what.to_owned(), value],
    );
    println!();
    let mut names: Vec<&String> = limiter_commands
        .keys()
        .chain(queue_commands.keys())
        .collect();
    names.sort();
    names.dedup();
    names.sort_by_key(|n| {
        std::cmp::Reverse(
            limiter_commands.get(*n).map_or(0, |c| c.calls)
                + queue_commands.get(*n).map_or(0, |c| c.calls),
        )
    });
    let rows: Vec<Vec<String>> = names
        .iter()
        .map(|n| {
            let l = limiter_commands.get(*n).copied().unwrap_or_default();
            let q = queue_commands.get(*n).copied().unwrap_or_default();
            vec![
                (*n).clone(),
                thousands(f(l.calls)),
                format!("{:.2}", per(f(l.calls), sent)),
                thousands(f(q.calls)),
                format!("{:.2}", per(f(q.calls), sent)),
                format!("{:.1}", per(f(l.usec + q.usec), sent)),
            ]
        })
        .collect();
    support::print_table(
        &[
            "Redis command",
            "limiter Redis",
            "per sent",
            "queue Redis",
            "per sent",
            "Redis µs per sent",
        ],
        &rows,
    );
    println!("(commands run inside Lua scripts count under their own names as well as in evalsha)");
    println!();
    let mut rows: Vec<Vec<String>> = pg_writes
        .iter()
        .map(|(t, w)| {
            vec![
                t.clone(),
                w.inserted.to_string(),
                format!("{} ({} HOT)", w.updated, w.hot_updated),
                w.deleted.to_string(),
                format!("{:.1}", per(w.total() as f64, sent)),
            ]
        })
        .collect();
    rows.push(vec![
        "total".into(),
        writes.inserted.to_string(),
        format!("{} ({} HOT)", writes.updated, writes.hot_updated),
        writes.deleted.to_string(),
        format!("{:.1}", per(writes.total() as f64, sent)),
    ]);
    support::print_table(
        &[
            "PostgreSQL table",
            "inserted",
            "updated",
            "deleted",
            "per sent",
        ],
        &rows,
    );
    println!();
}

fn main() -> ExitCode {
    support::bench_main(run)
}

impl support::BenchArgs for Args {
    const SMOKE: &str = "A smoke run for CI: 50 messages, no alignment, stop when each message was tried once (a few seconds). Proves the harness works; the figures are one partial minute.";

    fn invalid(&self) -> Option<&'static str> {
        (self.messages == 0 || self.drain.is_empty())
            .then_some("--messages, --limit, --minutes and --concurrency must be positive")
    }

    fn smoke(&mut self) {
        self.messages = 50;
        self.no_align = true;
    }
}
