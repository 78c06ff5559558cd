//! Benchmark 2, contention: two OS processes × 16 tasks hammer one mailbox (limit 25 a minute)
//! across 3 UTC minutes; per minute bucket, the reservations made — which must be exactly the
//! limit — and, in the same processes at the same time, what a GET-then-INCR limiter (kept here
//! only, as the contrast) lets through.
//!
//! ```text
//! cargo bench -p mail-worker-bench --bench contention               # real clock, 3 UTC minutes (2–3 minutes)
//! cargo bench -p mail-worker-bench --bench contention -- --quick    # clock 60× faster: 3 virtual minutes in ~3 s
//! cargo test -p mail-worker-bench --bench contention -- --smoke    # the same as --quick in the debug build, for CI
//! ```
//!
//! The parent process starts `--processes` copies of this binary (`--child`), which agree on a
//! start time and on a [`support::ScaledClock`]; each runs `--tasks` tasks on the real
//! `MailRateLimiter` and as many on GET-then-INCR, every task calling back to back on the one
//! mailbox, each implementation under its own key prefix. Each child reports per bucket what
//! its calls got; the parent adds Redis's own counters, prints the table and writes
//! `bench-results/contention.json` (`contention-smoke.json` for `--quick`/`--smoke`).
//!
//! Exit status 1 when a bucket of the real limiter holds more than the limit (its atomicity
//! failed), 2 when the benchmark could not run; never for slowness.

use mail_worker_bench as support;

use std::{
    collections::BTreeMap,
    num::NonZeroU32,
    process::{ExitCode, Stdio},
    sync::Arc,
    time::Duration,
};

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use clap::Parser;
use mail_worker::{
    clock::Clock,
    config::RateLimitConfig,
    domain::MailboxAddress,
    rate_limit::{
        Algorithm, Ask, Decision, MailRateLimiter, RateLimiter, RateLimits, fixed_window::keys,
    },
};
use redis::AsyncCommands;
use serde::{Deserialize, Serialize};
use support::{Machine, ScaledClock, thousands};

/// The one mailbox every task hammers.
const MAILBOX: &str = "contended@bench.example";
/// The day budget: 9,000 recipients, the default; never reached here (1 recipient per call).
const RECIPIENTS_PER_DAY: u32 = 9_000;
/// The limiter's call deadline, as in production: 250 ms.
const REDIS_TIMEOUT: Duration = Duration::from_millis(250);
/// How long after a bucket's end (real time) the parent reads its counters: 500 ms, more than
/// the limiter's deadline, so no call of that bucket is still on its way.
const COUNTER_GRACE: Duration = Duration::from_millis(500);
/// Time the children get to start and dial Redis before the common start: 2 s.
const START_MARGIN: TimeDelta = TimeDelta::seconds(2);
/// With the real clock, a start with fewer than this many seconds left in its UTC minute moves
/// to the next minute, so the first bucket is not a sliver: 5 s.
const MIN_FIRST_BUCKET: TimeDelta = TimeDelta::seconds(5);

/// Benchmark 2: the limiter under contention from several processes, against GET-then-INCR.
#[derive(Debug, Parser)]
#[command(name = "contention")]
struct Args {
    /// Run the clock 60× faster (unless --speedup says otherwise): 3 virtual minutes in about
    /// 3 s. For CI's smoke run.
    #[arg(long, alias = "smoke")]
    quick: bool,
    /// UTC minute buckets to cover.
    #[arg(long, default_value_t = 3)]
    minutes: u32,
    /// OS processes hammering at once.
    #[arg(long, default_value_t = 2)]
    processes: usize,
    /// Tasks per process per implementation.
    #[arg(long, default_value_t = 16)]
    tasks: usize,
    /// Messages per mailbox per UTC minute.
    #[arg(long, default_value_t = 25)]
    limit: u32,
    /// Virtual ms per real ms (default 1, or 60 with --quick).
    #[arg(long)]
    speedup: Option<i32>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
    /// Internal: run as one hammering process and print its report as JSON.
    #[arg(long, hide = true)]
    child: bool,
    /// Internal (child): key prefix; the limiter uses `<prefix>:lua`, GET-then-INCR
    /// `<prefix>:naive`.
    #[arg(long, hide = true)]
    prefix: Option<String>,
    /// Internal (child): the scaled clock's real origin, ms since the epoch.
    #[arg(long, hide = true)]
    real_origin_ms: Option<i64>,
    /// Internal (child): the scaled clock's virtual origin, ms since the epoch (hammering
    /// starts when the clock shows it).
    #[arg(long, hide = true)]
    virtual_origin_ms: Option<i64>,
    /// Internal (child): hammering stops when the clock shows this, ms since the epoch.
    #[arg(long, hide = true)]
    end_ms: Option<i64>,
}

/// What one process's calls got in one minute bucket, for one implementation.
#[derive(Debug, Default, Clone, Copy, Serialize, Deserialize)]
struct BucketTally {
    /// Calls made with a `now` in this bucket.
    attempts: u64,
    /// Allowed and counted.
    reserved: u64,
    /// Denied (minute budget spent).
    denied: u64,
    /// The real limiter only: allowed uncounted, because it failed open.
    fail_open: u64,
    /// Calls that returned an error (GET-then-INCR's Redis errors).
    errors: u64,
}

impl BucketTally {
    fn merge(&mut self, other: &Self) {
        self.attempts += other.attempts;
        self.reserved += other.reserved;
        self.denied += other.denied;
        self.fail_open += other.fail_open;
        self.errors += other.errors;
    }
}

/// Per bucket (`YYYYMMDDHHMM`, the minute key's suffix) tallies.
type Buckets = BTreeMap<String, BucketTally>;

/// One child's report, printed on its stdout as one JSON document.
#[derive(Debug, Default, Serialize, Deserialize)]
struct ChildReport {
    pid: u32,
    lua: Buckets,
    naive: Buckets,
}

#[derive(Debug, Serialize)]
struct BucketRow {
    /// UTC minute, `YYYY-MM-DD HH:MM` (virtual with a speedup).
    minute: String,
    limit: u32,
    /// The limiter's minute counter in Redis, read 0.5 s after the bucket ended.
    lua_counter: u64,
    /// Reservations each process was granted, in process order.
    lua_per_process: Vec<u64>,
    lua_attempts: u64,
    /// Calls each process made in the bucket, in process order.
    lua_attempts_per_process: Vec<u64>,
    lua_fail_open: u64,
    /// GET-then-INCR's minute counter in Redis, read 0.5 s after the bucket ended.
    naive_counter: u64,
    naive_per_process: Vec<u64>,
    naive_attempts: u64,
    /// naive_counter − limit (negative: the bucket was not even filled).
    naive_overshoot: i64,
}

#[derive(Debug, Serialize)]
struct Report {
    benchmark: &'static str,
    machine: Machine,
    quick: bool,
    processes: usize,
    tasks_per_process_per_implementation: usize,
    limit_per_minute: u32,
    minutes: u32,
    speedup: i32,
    /// Real seconds from the common start to the last child's exit.
    real_seconds: f64,
    buckets: Vec<BucketRow>,
    /// Every limiter bucket held exactly the limit.
    lua_exact: bool,
    /// Some limiter bucket held more than the limit (exit status 1).
    lua_over: bool,
    naive_total_overshoot: i64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.child {
        support::block_on(child(args))
    } else {
        support::block_on(parent(args))
    }
}

fn mailbox() -> MailboxAddress {
    MailboxAddress::parse(MAILBOX).unwrap_or_else(|e| support::fail(&e.to_string()))
}

fn limits(per_minute: u32) -> RateLimits {
    RateLimits {
        per_minute: NonZeroU32::new(per_minute).unwrap_or(NonZeroU32::MIN),
        recipients_per_day: NonZeroU32::new(RECIPIENTS_PER_DAY).unwrap_or(NonZeroU32::MIN),
        reserved_percent: 0,
    }
}

/// The bucket name of `now`: the minute key's `YYYYMMDDHHMM` suffix.
fn bucket_of(now: DateTime<Utc>) -> String {
    now.format("%Y%m%d%H%M").to_string()
}

fn floor_minute(at: DateTime<Utc>) -> DateTime<Utc> {
    at.duration_trunc(TimeDelta::minutes(1))
        .unwrap_or_else(|e| support::fail(&format!("cannot round {at} to a minute: {e}")))
}

async fn parent(args: Args) -> ExitCode {
    let speedup = args.speedup.unwrap_or(if args.quick { 60 } else { 1 });
    if speedup < 1 || args.minutes == 0 || args.processes == 0 || args.tasks == 0 {
        support::fail("--speedup, --minutes, --processes and --tasks must be positive");
    }
    let machine = Machine::describe();
    let url = support::redis_url();
    let prefix = support::bench_prefix("contention");

    // The common start: a margin from now for the children to start. With the real clock the
    // first bucket is the start's minute (moved to the next one if only a sliver is left);
    // with a speedup the virtual clock starts on a whole minute.
    let start = Utc::now() + START_MARGIN;
    let clock = if speedup == 1 {
        let first = floor_minute(start);
        let begin = if first + TimeDelta::minutes(1) - start < MIN_FIRST_BUCKET {
            first + TimeDelta::minutes(1)
        } else {
            start
        };
        ScaledClock {
            real_origin: begin,
            virtual_origin: begin,
            speedup: 1,
        }
    } else {
        ScaledClock {
            real_origin: start,
            virtual_origin: floor_minute(start) + TimeDelta::minutes(1),
            speedup,
        }
    };
    let first_bucket = floor_minute(clock.virtual_origin);
    let end = first_bucket + TimeDelta::minutes(i64::from(args.minutes));

    machine.print();
    println!(
        "contention: {} processes × {} tasks per implementation on one mailbox, limit {}/min, {} UTC minute(s) from {} (clock ×{speedup}), prefix {prefix}",
        args.processes,
        args.tasks,
        args.limit,
        args.minutes,
        first_bucket.format("%H:%M"),
    );
    let real_end = clock.real_time_of(end);
    eprintln!(
        "hammering from {} to {} (real time, {:.0} s)",
        clock.real_origin.format("%H:%M:%S%.3f"),
        real_end.format("%H:%M:%S%.3f"),
        (real_end - clock.real_origin).as_seconds_f64()
    );

    let exe = std::env::current_exe()
        .unwrap_or_else(|e| support::fail(&format!("cannot find this benchmark's binary: {e}")));
    let real_origin_ms = support::epoch_ms(clock.real_origin).to_string();
    let virtual_origin_ms = support::epoch_ms(clock.virtual_origin).to_string();
    let end_ms = support::epoch_ms(end).to_string();
    let mut children = Vec::new();
    for _ in 0..args.processes {
        let child = tokio::process::Command::new(&exe)
            .args(["--child", "--prefix", &prefix])
            .args(["--tasks", &args.tasks.to_string()])
            .args(["--limit", &args.limit.to_string()])
            .args(["--speedup", &speedup.to_string()])
            .args(["--real-origin-ms", &real_origin_ms])
            .args(["--virtual-origin-ms", &virtual_origin_ms])
            .args(["--end-ms", &end_ms])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| support::fail(&format!("cannot start a child process: {e}")));
        children.push(child);
    }
    // Redis's own counters, the ground truth: each bucket's read just after it ends — a
    // minute key lives only 120 s after its last reservation, so reading them all at the end
    // of a 3-minute run would find the first one gone. The grace covers calls still in flight
    // at the boundary (they are bounded by the limiter's 250 ms deadline).
    let mut conn = support::redis_connection(&url).await;
    let lua_prefix = format!("{prefix}:lua");
    let naive_prefix = format!("{prefix}:naive");
    let mut counters = Vec::new();
    for m in 0..args.minutes {
        let minute = first_bucket + TimeDelta::minutes(i64::from(m));
        tokio::time::sleep(clock.real_wait_until(minute + TimeDelta::minutes(1)) + COUNTER_GRACE)
            .await;
        let mut read = async |p: &str| -> u64 {
            let counter: Option<u64> = conn
                .get(keys::minute_key(p, &mailbox(), minute))
                .await
                .unwrap_or_else(|e| support::fail(&format!("cannot read a counter: {e}")));
            counter.unwrap_or(0)
        };
        let lua = read(&lua_prefix).await;
        let naive = read(&naive_prefix).await;
        counters.push((lua, naive));
    }

    let mut reports = Vec::new();
    for child in children {
        let output = child
            .wait_with_output()
            .await
            .unwrap_or_else(|e| support::fail(&format!("a child process failed: {e}")));
        if !output.status.success() {
            support::fail(&format!("a child process exited with {}", output.status));
        }
        let report: ChildReport = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            support::fail(&format!(
                "a child's report is not JSON ({e}): {}",
                String::from_utf8_lossy(&output.stdout)
            ))
        });
        reports.push(report);
    }
    let real_seconds = (Utc::now() - clock.real_origin).as_seconds_f64();

    let mut rows = Vec::new();
    for (m, (lua_counter, naive_counter)) in (0..args.minutes).zip(counters) {
        let minute = first_bucket + TimeDelta::minutes(i64::from(m));
        let bucket = bucket_of(minute);
        let mut lua = BucketTally::default();
        let mut naive = BucketTally::default();
        let mut lua_per_process = Vec::new();
        let mut lua_attempts_per_process = Vec::new();
        let mut naive_per_process = Vec::new();
        for r in &reports {
            let l = r.lua.get(&bucket).copied().unwrap_or_default();
            let n = r.naive.get(&bucket).copied().unwrap_or_default();
            lua.merge(&l);
            naive.merge(&n);
            lua_per_process.push(l.reserved);
            lua_attempts_per_process.push(l.attempts);
            naive_per_process.push(n.reserved);
        }
        rows.push(BucketRow {
            minute: minute.format("%Y-%m-%d %H:%M").to_string(),
            limit: args.limit,
            lua_counter,
            lua_per_process,
            lua_attempts: lua.attempts,
            lua_attempts_per_process,
            lua_fail_open: lua.fail_open,
            naive_counter,
            naive_per_process,
            naive_attempts: naive.attempts,
            naive_overshoot: i64::try_from(naive_counter).unwrap_or(i64::MAX)
                - i64::from(args.limit),
        });
    }
    for p in [&lua_prefix, &naive_prefix] {
        if let Err(e) = support::unlink_prefix(&mut conn, p).await {
            eprintln!("warning: could not delete keys under {p}: {e}");
        }
    }

    let per_process = |v: &[u64]| {
        let sum: u64 = v.iter().sum();
        let parts: Vec<String> = v.iter().map(u64::to_string).collect();
        format!("{sum} ({})", parts.join("+"))
    };
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.minute.clone(),
                r.limit.to_string(),
                r.lua_counter.to_string(),
                per_process(&r.lua_per_process),
                thousands(u64_f64(r.lua_attempts)),
                r.naive_counter.to_string(),
                per_process(&r.naive_per_process),
                format!("{:+}", r.naive_overshoot),
                thousands(u64_f64(r.naive_attempts)),
            ]
        })
        .collect();
    println!();
    support::print_table(
        &[
            "UTC minute",
            "limit",
            "limiter: Redis",
            "granted (per process)",
            "calls",
            "GET-then-INCR: Redis",
            "granted (per process)",
            "overshoot",
            "calls",
        ],
        &table,
    );

    let u64_limit = u64::from(args.limit);
    let lua_over = rows.iter().any(|r| r.lua_counter > u64_limit);
    let lua_exact = rows.iter().all(|r| r.lua_counter == u64_limit);
    let naive_total_overshoot = rows.iter().map(|r| r.naive_overshoot.max(0)).sum();
    for r in &rows {
        let granted: u64 = r.lua_per_process.iter().sum();
        if granted + r.lua_fail_open != r.lua_counter && r.lua_fail_open > 0 {
            println!(
                "note: {}: {} call(s) failed open; a deadline can leave a reservation counted in Redis that its caller never got",
                r.minute, r.lua_fail_open
            );
        } else if granted != r.lua_counter {
            println!(
                "warning: {}: the processes were granted {granted}, Redis counted {}",
                r.minute, r.lua_counter
            );
        }
        if r.lua_counter < u64_limit {
            println!(
                "warning: {}: the limiter's bucket holds {} < {}: only {} call(s) fell in it (machine too slow or start too late)",
                r.minute, r.lua_counter, r.limit, r.lua_attempts
            );
        }
    }
    println!(
        "verdict: limiter {}; GET-then-INCR overshot by {naive_total_overshoot} over {} minute(s) ({:.0} s real)",
        if lua_over {
            "EXCEEDED THE LIMIT"
        } else if lua_exact {
            "exactly at the limit in every bucket"
        } else {
            "never over the limit"
        },
        args.minutes,
        real_seconds
    );

    let report = Report {
        benchmark: "contention",
        machine,
        quick: speedup > 1,
        processes: args.processes,
        tasks_per_process_per_implementation: args.tasks,
        limit_per_minute: args.limit,
        minutes: args.minutes,
        speedup,
        real_seconds,
        buckets: rows,
        lua_exact,
        lua_over,
        naive_total_overshoot,
    };
    let name = if speedup > 1 {
        "contention-smoke"
    } else {
        "contention"
    };
    let path = support::write_json(name, &report);
    println!("results: {}", path.display());
    support::exit_code(!lua_over)
}

#[allow(clippy::cast_precision_loss)]
fn u64_f64(v: u64) -> f64 {
    v as f64
}

/// One hammering process: waits for the common start, runs `--tasks` tasks on the real
/// limiter and `--tasks` on GET-then-INCR until the clock shows `--end-ms`, prints its report.
async fn child(args: Args) -> ExitCode {
    let (Some(prefix), Some(real_origin), Some(virtual_origin), Some(end)) = (
        args.prefix,
        args.real_origin_ms,
        args.virtual_origin_ms,
        args.end_ms,
    ) else {
        support::fail("--child needs --prefix, --real-origin-ms, --virtual-origin-ms, --end-ms");
    };
    let clock = ScaledClock {
        real_origin: support::from_epoch_ms(real_origin),
        virtual_origin: support::from_epoch_ms(virtual_origin),
        speedup: args.speedup.unwrap_or(1),
    };
    let end = support::from_epoch_ms(end);
    let url = support::redis_url();
    let limiter = Arc::new(
        MailRateLimiter::new(&RateLimitConfig {
            algorithm: Algorithm::FixedWindow,
            redis_url: url.clone().into(),
            defaults: limits(args.limit),
            redis_timeout: REDIS_TIMEOUT,
            key_prefix: format!("{prefix}:lua"),
            max_in_flight: std::num::NonZeroU32::MAX,
            lease: Duration::from_secs(40),
            fail_open_replicas: std::num::NonZeroU32::MIN,
            unreachable_not_ready_after: Duration::from_secs(60),
            // A scaled virtual clock (fixed-window decides by it anyway).
            caller_clock: true,
        })
        .unwrap_or_else(|e| support::fail(&e.to_string())),
    );
    if let Err(e) = limiter.ping().await {
        support::fail(&format!("the limiter cannot reach Redis: {e}"));
    }
    let conn = support::redis_connection(&url).await;
    let naive_prefix = format!("{prefix}:naive");

    tokio::time::sleep(clock.real_wait_until(clock.virtual_origin)).await;

    let mut lua_tasks = Vec::new();
    let mut naive_tasks = Vec::new();
    for _ in 0..args.tasks {
        let limiter = limiter.clone();
        let limit = args.limit;
        lua_tasks.push(tokio::spawn(hammer(clock, end, move |now| {
            let limiter = limiter.clone();
            async move {
                let mailbox = mailbox();
                let ask = Ask {
                    message_id: uuid::Uuid::new_v4(),
                    mailbox: &mailbox,
                    tenant: "contoso.example",
                    recipients: 1,
                    limits: limits(limit),
                    tenant_budget: None,
                    priority: mail_worker::domain::Priority::Normal,
                };
                match limiter.check_and_reserve(&ask, now).await {
                    Ok(Decision::Allowed(r)) if r.is_counted() => Attempt::Reserved,
                    Ok(Decision::Allowed(_)) => Attempt::FailOpen,
                    Ok(Decision::Denied { .. }) => Attempt::Denied,
                    Err(_) => Attempt::Error,
                }
            }
        })));
        let conn = conn.clone();
        let prefix = naive_prefix.clone();
        naive_tasks.push(tokio::spawn(hammer(clock, end, move |now| {
            let (mut conn, prefix) = (conn.clone(), prefix.clone());
            async move {
                match get_then_incr(&mut conn, &prefix, &mailbox(), limit, now).await {
                    Ok(true) => Attempt::Reserved,
                    Ok(false) => Attempt::Denied,
                    Err(_) => Attempt::Error,
                }
            }
        })));
    }
    let mut report = ChildReport {
        pid: std::process::id(),
        ..ChildReport::default()
    };
    for (tasks, into) in [
        (lua_tasks, &mut report.lua),
        (naive_tasks, &mut report.naive),
    ] {
        for task in tasks {
            let buckets = task
                .await
                .unwrap_or_else(|e| support::fail(&format!("a hammering task panicked: {e}")));
            for (bucket, tally) in buckets {
                into.entry(bucket).or_default().merge(&tally);
            }
        }
    }
    match serde_json::to_string(&report) {
        Ok(json) => println!("{json}"),
        Err(e) => support::fail(&format!("cannot encode the child's report: {e}")),
    }
    ExitCode::SUCCESS
}

/// What one call of either implementation got.
enum Attempt {
    Reserved,
    FailOpen,
    Denied,
    Error,
}

/// Calls `attempt` back to back until the clock reaches `end`, tallying per minute bucket.
async fn hammer<F, Fut>(clock: ScaledClock, end: DateTime<Utc>, mut attempt: F) -> Buckets
where
    F: FnMut(DateTime<Utc>) -> Fut,
    Fut: std::future::Future<Output = Attempt>,
{
    let mut buckets = Buckets::new();
    loop {
        let now = clock.now();
        if now >= end {
            return buckets;
        }
        let outcome = attempt(now).await;
        let tally = buckets.entry(bucket_of(now)).or_default();
        tally.attempts += 1;
        match outcome {
            Attempt::Reserved => tally.reserved += 1,
            Attempt::FailOpen => tally.fail_open += 1,
            Attempt::Denied => tally.denied += 1,
            Attempt::Error => tally.errors += 1,
        }
    }
}

/// The non-atomic limiter the Lua script replaces, for contrast only: GET the minute counter,
/// decide in the application, then INCR + EXPIRE the minute counter and INCRBY + EXPIRE the
/// day counter (same keys and TTLs as the script). Two callers that both read 24 both send.
/// `Ok(true)` = reserved.
async fn get_then_incr(
    conn: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
    mailbox: &MailboxAddress,
    limit: u32,
    now: DateTime<Utc>,
) -> redis::RedisResult<bool> {
    let minute_key = keys::minute_key(prefix, mailbox, now);
    let day_key = keys::day_key(prefix, mailbox, now);
    let minute: Option<u64> = conn.get(&minute_key).await?;
    if minute.unwrap_or(0) + 1 > u64::from(limit) {
        return Ok(false);
    }
    let _: u64 = conn.incr(&minute_key, 1).await?;
    let _: bool = conn
        .expire(&minute_key, keys::MINUTE_KEY_TTL_SECS.cast_signed())
        .await?;
    let _: u64 = conn.incr(&day_key, 1).await?;
    let _: bool = conn
        .expire(&day_key, keys::DAY_KEY_TTL_SECS.cast_signed())
        .await?;
    Ok(true)
}
