//! Benchmark 9, intake — the intake queue (src/intake, apalis-redis 1.0) from a pushed backlog
//! into committed rows, side by side in one run with the ceiling: the same lines through the
//! file import (`import::enqueue`: the same parser and the same multi-row `UNNEST` insert, 500
//! rows a statement, no queue). Then push → row committed latency at a steady rate, and Redis
//! commands per job (`INFO commandstats` deltas of a private `redis-server`).
//!
//! ```text
//! cargo bench -p mail-worker-bench --bench intake                     # 100,000 jobs; 10 s at 500 jobs/s (~1–2 min)
//! cargo bench -p mail-worker-bench --bench intake -- --jobs 20000     # smaller
//! cargo test -p mail-worker-bench --bench intake -- --smoke           # 2,000 jobs, 2 s of latency (a few seconds)
//! ```
//!
//! Consumers run in this process as the daemon runs its one (`mail_worker::intake::run`, the
//! production settings but the cleanup every 1 s); "two consumers" are two such workers of
//! their own names, as two replicas would be (sharing this process's 2 cores with PostgreSQL
//! and Redis, as replicas on one machine would). Each phase gets a fresh database
//! (`bench_intake_<hex>`) and queue on the private Redis. Latency: each job's push time against
//! its row's `created_at` (the insert's transaction time), one job pushed every 1/rate s.
//! Results: `bench-results/intake.json` (`intake-smoke.json`).
//!
//! Exit status 1 when a phase lost or doubled a job (rows ≠ jobs), 2 when it could not run;
//! never for slowness.

use mail_worker_bench as support;

use std::{
    collections::HashMap,
    process::ExitCode,
    sync::Arc,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use clap::Parser;
use mail_worker::{
    intake::{self, IntakeSettings, QueueConnection},
    ops::Metrics,
};
use serde::Serialize;
use support::{
    Machine,
    campaign::{self, lines, rows},
    daemon::{self, BenchDb, MeasuredRedis},
    fail, per, percentile, thousands, to_f64 as f,
};

/// Benchmark 9: the intake queue's throughput against the file import's insert.
#[derive(Debug, Parser)]
#[command(name = "intake")]
struct Args {
    /// Jobs in the pushed backlog.
    #[arg(long, default_value_t = 100_000)]
    jobs: usize,
    /// Jobs a second pushed in the latency phase.
    #[arg(long, default_value_t = 500)]
    rate: u32,
    /// Seconds of the latency phase.
    #[arg(long, default_value_t = 10)]
    latency_s: u64,
    #[command(flatten)]
    run: support::RunArgs,
}

impl support::BenchArgs for Args {
    const SMOKE: &str = "A smoke run for CI: 2,000 jobs, 2 s of latency.";

    fn smoke(&mut self) {
        self.jobs = 2_000;
        self.latency_s = 2;
    }

    fn invalid(&self) -> Option<&'static str> {
        (self.jobs == 0 || self.rate == 0 || self.latency_s == 0)
            .then_some("--jobs, --rate and --latency-s must be positive")
    }
}

/// One throughput phase.
#[derive(Debug, Clone, Serialize)]
struct Phase {
    name: &'static str,
    jobs: usize,
    seconds: f64,
    jobs_per_s: f64,
    /// Against the file import's rate in this run.
    of_ceiling: f64,
    /// Redis commands per job (pushes excluded), by command.
    redis_commands_per_job: f64,
    redis_by_command: Vec<(String, f64)>,
    /// Redis keys and used_memory before the push, with the backlog pushed, and after.
    keys: [u64; 3],
    used_memory: [u64; 3],
}

#[derive(Debug, Clone, Serialize)]
struct Latency {
    rate: u32,
    jobs: usize,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
struct Results {
    machine: Machine,
    jobs: usize,
    file_import_rows_per_s: f64,
    phases: Vec<Phase>,
    latency: Latency,
}

fn main() -> ExitCode {
    support::bench_main(run)
}

/// A fresh database with one mailbox; returns it and the mailbox's address.
async fn database() -> (BenchDb, String) {
    campaign::database("intake").await
}

/// The consumers of `queue`: `n` workers, as `n` replicas run them; stop with the token.
fn consumers(
    n: usize,
    queue: &str,
    conn: &QueueConnection,
    db: &BenchDb,
) -> (
    mail_worker::shutdown::CancellationToken,
    Vec<tokio::task::JoinHandle<Result<(), intake::IntakeError>>>,
) {
    let stop = mail_worker::shutdown::CancellationToken::new();
    let tasks = (0..n)
        .map(|i| {
            let mut settings = IntakeSettings::new(queue, Some(&format!("bench-{i}")));
            settings.cleanup_every = Duration::from_secs(1);
            tokio::spawn(intake::run(
                settings,
                conn.clone(),
                db.pool.clone(),
                Arc::new(Metrics::new()),
                stop.clone(),
            ))
        })
        .collect();
    (stop, tasks)
}

async fn stop_all(
    stop: mail_worker::shutdown::CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<Result<(), intake::IntakeError>>>,
) {
    stop.cancel();
    for t in tasks {
        if let Ok(Err(e)) = t.await {
            fail(&format!("an intake consumer failed: {e}"));
        }
    }
}

/// A backlog of `jobs` pushed, then consumed by `n` consumers until every row is committed.
async fn throughput(
    name: &'static str,
    n: usize,
    jobs: usize,
    redis: &mut MeasuredRedis,
    ceiling: f64,
) -> Result<Phase, String> {
    let (db, mailbox) = database().await;
    let queue = format!("{{{}}}", support::bench_prefix("intake"));
    let conn = intake::connect(&redis.url.clone().into())
        .await
        .unwrap_or_else(|e| fail(&format!("the private Redis: {e}")));
    let (keys0, mem0) = (redis.dbsize().await, redis.used_memory().await);
    let pushed = intake::push_lines(
        conn.clone(),
        &queue,
        lines(&mailbox, jobs).into_iter().map(|(_, l)| l),
    )
    .await
    .unwrap_or_else(|e| fail(&format!("pushing: {e}")));
    assert_eq!(pushed, jobs);
    let (keys1, mem1) = (redis.dbsize().await, redis.used_memory().await);
    let before = redis.commandstats().await;
    let started = Instant::now();
    let (stop, tasks) = consumers(n, &queue, &conn, &db);
    while rows(&db).await < jobs as i64 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    let after = redis.commandstats().await;
    // The cleanup removes the done jobs within a second or two.
    let mut c = conn.clone();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        match intake::dead::stats(&mut c, &queue, Duration::from_secs(30)).await {
            Ok(s) if s.done == 0 => break,
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    stop_all(stop, tasks).await;
    let (keys2, mem2) = (redis.dbsize().await, redis.used_memory().await);
    let stored = rows(&db).await;
    db.drop().await;
    if stored != jobs as i64 {
        return Err(format!("{name}: {stored} rows for {jobs} jobs"));
    }
    let delta = daemon::command_delta(&before, &after);
    let mut by_command: Vec<(String, f64)> = delta
        .iter()
        .map(|(c, n)| (c.clone(), per(f(n.calls), jobs as u64)))
        .filter(|(_, v)| *v >= 0.001)
        .collect();
    by_command.sort_by(|a, b| b.1.total_cmp(&a.1));
    let jobs_per_s = f(jobs as u64) / seconds;
    Ok(Phase {
        name,
        jobs,
        seconds,
        jobs_per_s,
        of_ceiling: jobs_per_s / ceiling,
        redis_commands_per_job: per(f(daemon::total_calls(&delta)), jobs as u64),
        redis_by_command: by_command,
        keys: [keys0, keys1, keys2],
        used_memory: [mem0, mem1, mem2],
    })
}

/// One job every 1/rate s for `seconds`, one consumer; push → `created_at` per job.
async fn latency(rate: u32, seconds: u64, redis: &MeasuredRedis) -> Latency {
    let (db, mailbox) = database().await;
    let queue = format!("{{{}}}", support::bench_prefix("intake-latency"));
    let conn = intake::connect(&redis.url.clone().into())
        .await
        .unwrap_or_else(|e| fail(&format!("the private Redis: {e}")));
    let (stop, tasks) = consumers(1, &queue, &conn, &db);
    // Let the worker register and start polling.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let jobs = (u64::from(rate) * seconds) as usize;
    let mut pushed_at: HashMap<uuid::Uuid, DateTime<Utc>> = HashMap::with_capacity(jobs);
    let every = Duration::from_secs_f64(1.0 / f64::from(rate));
    let started = tokio::time::Instant::now();
    for (k, (id, line)) in lines(&mailbox, jobs).into_iter().enumerate() {
        tokio::time::sleep_until(started + every * k as u32).await;
        pushed_at.insert(id, Utc::now());
        intake::push_lines(conn.clone(), &queue, [line])
            .await
            .unwrap_or_else(|e| fail(&format!("pushing: {e}")));
    }
    while rows(&db).await < jobs as i64 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop_all(stop, tasks).await;
    let committed: Vec<(uuid::Uuid, DateTime<Utc>)> =
        sqlx::query_as("SELECT id, created_at FROM messages")
            .fetch_all(&db.pool)
            .await
            .unwrap_or_else(|e| fail(&format!("reading rows: {e}")));
    db.drop().await;
    let mut micros: Vec<u64> = committed
        .iter()
        .filter_map(|(id, at)| {
            let pushed = pushed_at.get(id)?;
            Some((*at - *pushed).num_microseconds().unwrap_or(0).max(0) as u64)
        })
        .collect();
    micros.sort_unstable();
    let ms = |p: f64| percentile(&micros, p).map_or(0.0, |v| f(v) / 1000.0);
    Latency {
        rate,
        jobs,
        p50_ms: ms(50.0),
        p99_ms: ms(99.0),
        max_ms: micros.last().map_or(0.0, |v| f(*v) / 1000.0),
    }
}

async fn run(args: Args, machine: Machine) -> ExitCode {
    let mut redis = MeasuredRedis::start().await;
    println!(
        "\nintake: {} jobs, file import (the ceiling) vs the queue",
        thousands(f(args.jobs as u64))
    );
    let ceiling = campaign::file_import_rate("intake", args.jobs).await;
    let mut phases = Vec::new();
    let mut failed = Vec::new();
    for (name, n) in [("1 consumer", 1), ("2 consumers", 2)] {
        match throughput(name, n, args.jobs, &mut redis, ceiling).await {
            Ok(p) => phases.push(p),
            Err(e) => failed.push(e),
        }
    }
    let latency = latency(args.rate, args.latency_s, &redis).await;

    let mut rows_out = vec![vec![
        "file import (multi-row insert)".to_owned(),
        thousands(ceiling),
        "1.00".into(),
        "-".into(),
        "-".into(),
        "-".into(),
    ]];
    for p in &phases {
        rows_out.push(vec![
            format!("queue, {}", p.name),
            thousands(p.jobs_per_s),
            format!("{:.2}", p.of_ceiling),
            format!("{:.2}", p.redis_commands_per_job),
            format!("{} → {} → {}", p.keys[0], p.keys[1], p.keys[2]),
            format!(
                "{:.2} → {:.2} → {:.2}",
                f(p.used_memory[0]) / 1e6,
                f(p.used_memory[1]) / 1e6,
                f(p.used_memory[2]) / 1e6
            ),
        ]);
    }
    support::print_table(
        &[
            "path",
            "rows/s",
            "× ceiling",
            "Redis cmds/job",
            "keys (before → pushed → after)",
            "used_memory MB",
        ],
        &rows_out,
    );
    for p in &phases {
        let top: Vec<String> = p
            .redis_by_command
            .iter()
            .take(8)
            .map(|(c, v)| format!("{c} {v:.2}"))
            .collect();
        println!("{}: Redis per job: {}", p.name, top.join(", "));
    }
    println!(
        "push → row committed at {} jobs/s ({} jobs, 1 consumer): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        latency.rate, latency.jobs, latency.p50_ms, latency.p99_ms, latency.max_ms
    );
    let results = Results {
        machine,
        jobs: args.jobs,
        file_import_rows_per_s: ceiling,
        phases,
        latency,
    };
    let path = support::write_json(&support::results_name("intake", args.run.smoke), &results);
    println!("results: {}", path.display());
    drop(redis);
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        for e in failed {
            eprintln!("intake: {e}");
        }
        ExitCode::from(1)
    }
}
