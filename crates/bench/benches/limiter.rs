//! Benchmark 1, the limiter round trip: `MailRateLimiter::check_and_reserve` decisions per
//! second and latency (p50, p99) from one process with 1, 16 and 64 calls in flight, (a) spread
//! over many mailboxes (no denials) and (b) on one mailbox (mostly denials), for both
//! algorithms — `paced` (`lua/paced/check_and_reserve.lua`, the default) and `fixed-window`
//! (`lua/fixed_window/check_and_reserve.lua`) — each measured side by side with its ceiling:
//! `redis-benchmark` running `EVALSHA` of the same script with the same keys, arguments and
//! in-flight count. `paced` needs each mailbox's state hash to exist (otherwise it answers
//! `{-1, 0, "seed"}`), so both sides seed it first with `HSET <state key> seeded 1`; both send
//! one fixed message id (a booking belongs to a message id). `paced` runs twice: on Redis's
//! clock (`ARGV[1]` = `TIME`, production) and on the caller's (`ARGV[1]` = ms: the tests', and
//! the script before issue 22), side by side in each run, so the clock's cost is measured.
//!
//! ```text
//! cargo bench -p mail-worker-bench --bench limiter                # 5 runs × 2 s per measurement, both algorithms, about 6 minutes
//! cargo bench -p mail-worker-bench --bench limiter -- --algorithms paced   # one algorithm
//! cargo bench -p mail-worker-bench --bench limiter -- --smoke     # one short run (a few seconds)
//! cargo test -p mail-worker-bench --bench limiter -- --smoke     # the same in the debug build, for CI
//! cargo bench -p mail-worker-bench --bench limiter -- --connection-per-task   # control: a connection per task
//! ```
//!
//! Prints a table of medians over the runs and writes `bench-results/limiter.json`
//! (`limiter-smoke.json` for a smoke run). Needs Redis (`REDIS_URL`, default
//! `redis://127.0.0.1:6379`) and `redis-benchmark` on `PATH` (Debian's `redis-tools`). Keys go
//! under a fresh `bench:limiter:<hex>` prefix and are deleted after each measurement.

use mail_worker_bench as support;

use std::{
    num::NonZeroU32,
    process::ExitCode,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use chrono::Utc;
use clap::Parser;
use mail_worker::{
    config::RateLimitConfig,
    domain::MailboxAddress,
    rate_limit::{
        Algorithm, Ask, Decision, DenyReason, MailRateLimiter, RateLimitError, RateLimiter,
        RateLimits,
        fixed_window::{CHECK_AND_RESERVE_LUA, keys},
        paced::{self, keys::PacedKeys},
    },
};
use serde::Serialize;
use support::{Machine, median, percentile, thousands, us};

/// Mailboxes in the spread pool: 100,000. At 25 messages per mailbox per minute they take
/// 2.5 million reservations a minute, far more than one measurement makes, so (a) never
/// denies. `redis-benchmark -r` picks from the same number.
const SPREAD_POOL: usize = 100_000;
/// The budget of every call: the defaults, 25 messages a minute and 9,000 recipients a day.
const PER_MINUTE: u32 = 25;
const RECIPIENTS_PER_DAY: u32 = 9_000;
/// The Graph tenant of every mailbox (`paced` keys carry it as their hash tag).
const TENANT: &str = "contoso.example";
/// The message id of every call: `paced` keeps a booking per message id, and `redis-benchmark`
/// sends one fixed argument list, so ours uses the same id for every call too.
const MESSAGE_ID: uuid::Uuid = uuid::Uuid::from_u128(0x6d61_696c_2d77_6f72_6b65_722d_6265_6e63);
/// `paced`: requests in flight per mailbox, high enough never to refuse (the benchmark
/// measures the budget decision; nothing releases the leases).
const MAX_IN_FLIGHT: u32 = 1_000_000;
/// `paced`: the in-flight lease: 40 s, as before issue 22 (production now: 15 s, renewed; nothing
/// renews or releases here, and the length does not change the work per call).
const LEASE: Duration = Duration::from_secs(40);
/// The limiter's call deadline, as in production (`MAIL_RATE_LIMIT_REDIS_TIMEOUT`): 250 ms.
const REDIS_TIMEOUT: Duration = Duration::from_millis(250);

/// Benchmark 1: the limiter's round trip against `redis-benchmark`'s ceiling.
#[derive(Debug, Parser)]
#[command(name = "limiter")]
struct Args {
    /// Runs; each measures every cell once, ours and the ceiling side by side. Medians are
    /// reported.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Seconds per measurement (ours; the ceiling gets as many requests as it made in about
    /// that time last run).
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Calls in flight, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 16, 64])]
    in_flight: Vec<usize>,
    /// Give each task its own limiter (its own connection), as redis-benchmark gives each
    /// client one, instead of one limiter per process as the daemon has. A control: it shows
    /// what one multiplexed connection is worth.
    #[arg(long)]
    connection_per_task: bool,
    /// The algorithms to measure, comma-separated (`paced`, `fixed-window`).
    #[arg(long, value_delimiter = ',', default_values_t = [Algorithm::Paced, Algorithm::FixedWindow])]
    algorithms: Vec<Algorithm>,
    /// `paced` only: also measure it on the caller's clock (`ARGV[1]` = ms) beside Redis's.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    caller_clock_too: bool,
    #[command(flatten)]
    run: support::RunArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Scenario {
    /// Every call on another mailbox: every call reserves (fixed-window: GET ×2, INCR, EXPIRE,
    /// INCRBY, EXPIRE; paced: the housekeeping, HSET tat, the day bucket, the 60 s and in-flight
    /// zsets, PEXPIRE ×5).
    Spread,
    /// Every call on one mailbox: fixed-window: 25 reservations a minute, every other call is
    /// denied (GET ×2); paced: the message is booked on its second call, every later call finds
    /// its slot still ahead (the housekeeping, HGET ×3).
    OneMailbox,
}

impl Scenario {
    fn label(self) -> &'static str {
        match self {
            Self::Spread => "(a) spread",
            Self::OneMailbox => "(b) one mailbox",
        }
    }
}

/// What the calls answered.
#[derive(Debug, Default, Clone, Copy, Serialize)]
struct Tally {
    /// Allowed and counted in Redis.
    reserved: u64,
    /// Allowed without a reservation: the limiter failed open (deadline or Redis error).
    fail_open: u64,
    denied_minute: u64,
    denied_day: u64,
    /// `RateLimitError`s (none expected: every call has 1 recipient).
    errors: u64,
}

impl Tally {
    fn add(&mut self, outcome: &Result<Decision, RateLimitError>) {
        match outcome {
            Ok(Decision::Allowed(r)) if r.is_counted() => self.reserved += 1,
            Ok(Decision::Allowed(_)) => self.fail_open += 1,
            Ok(Decision::Denied {
                reason: DenyReason::Minute,
                ..
            }) => self.denied_minute += 1,
            Ok(Decision::Denied {
                reason: DenyReason::Day,
                ..
            }) => self.denied_day += 1,
            // fixed-window (the script this benchmark measures) has no other reason.
            Ok(Decision::Denied { .. }) | Err(_) => self.errors += 1,
        }
    }

    fn merge(&mut self, other: Self) {
        self.reserved += other.reserved;
        self.fail_open += other.fail_open;
        self.denied_minute += other.denied_minute;
        self.denied_day += other.denied_day;
        self.errors += other.errors;
    }

    fn denied(&self) -> u64 {
        self.denied_minute + self.denied_day
    }
}

/// One measurement of throughput and latency.
#[derive(Debug, Clone, Serialize)]
struct Measurement {
    /// Calls (ours) or requests (ceiling) completed.
    calls: u64,
    /// Wall time of the measurement, s.
    seconds: f64,
    /// Decisions per second.
    per_second: f64,
    /// Latency percentiles of one call, µs.
    p50_us: f64,
    p99_us: f64,
    max_us: f64,
    /// Ours only: what the calls answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    tally: Option<Tally>,
}

#[derive(Debug, Clone, Serialize)]
struct Run {
    ours: Measurement,
    ceiling: Measurement,
    /// ours.per_second / ceiling.per_second.
    ratio: f64,
}

#[derive(Debug, Clone, Serialize)]
struct Medians {
    ours_per_second: f64,
    ours_p50_us: f64,
    ours_p99_us: f64,
    ceiling_per_second: f64,
    ceiling_p50_us: f64,
    ceiling_p99_us: f64,
    /// The median of the runs' paired ratios (not the ratio of the medians).
    ratio: f64,
}

#[derive(Debug, Clone, Serialize)]
struct Cell {
    /// `paced`, `paced (caller clock)` or `fixed-window`.
    algorithm_name: &'static str,
    #[serde(skip)]
    algorithm: Algorithm,
    /// `paced` on the caller's clock (`ARGV[1]` = ms) instead of Redis's `TIME`.
    caller_clock: bool,
    scenario: Scenario,
    in_flight: usize,
    runs: Vec<Run>,
    median: Option<Medians>,
}

#[derive(Debug, Serialize)]
struct Report {
    #[serde(flatten)]
    run: support::RunInfo,
    runs: usize,
    seconds_per_measurement: f64,
    spread_pool: usize,
    per_minute: u32,
    recipients_per_day: u32,
    redis_timeout_ms: u64,
    /// Ours used one limiter (one connection) per task instead of one per process.
    connection_per_task: bool,
    /// SHA1 of `lua/fixed_window/check_and_reserve.lua`.
    script_sha1: String,
    /// SHA1 of `lua/paced/check_and_reserve.lua`.
    paced_script_sha1: String,
    cells: Vec<Cell>,
}

async fn run(args: Args, machine: Machine) -> ExitCode {
    let url = support::redis_url();
    let base = support::bench_prefix("limiter");
    let mut conn = support::redis_connection(&url).await;
    let sha = load_script(&mut conn, CHECK_AND_RESERVE_LUA).await;
    let paced_sha = load_script(&mut conn, paced::CHECK_AND_RESERVE_LUA).await;
    if let Err(e) = std::process::Command::new("redis-benchmark")
        .arg("--version")
        .output()
    {
        support::fail(&format!(
            "redis-benchmark is needed for the ceiling (Debian: redis-tools): {e}"
        ));
    }

    // Mailboxes shaped like redis-benchmark's `bench__rand_int__@bench.example` (12 digits), so
    // ours and the ceiling send keys of the same length. A smoke run needs fewer.
    let pool_size = if args.run.smoke { 5_000 } else { SPREAD_POOL };
    let spread: Arc<[MailboxAddress]> = (0..pool_size)
        .map(|i| mailbox(&format!("bench{i:012}@bench.example")))
        .collect();
    let one: Arc<[MailboxAddress]> = Arc::new([mailbox("bench000000000000@bench.example")]);

    println!(
        "limiter round trip: {:?}, {} run(s) × {} s per measurement, in flight {:?}, {}, prefix {base}",
        args.algorithms
            .iter()
            .map(|a| a.as_str())
            .collect::<Vec<_>>(),
        args.runs,
        args.seconds,
        args.in_flight,
        if args.connection_per_task {
            "ours: one limiter (connection) per task"
        } else {
            "ours: one limiter (one multiplexed connection) per process"
        }
    );
    println!();

    let duration = Duration::from_secs_f64(args.seconds);
    let mut cells: Vec<Cell> = Vec::new();
    let variants = args.algorithms.iter().flat_map(|&algorithm| {
        let caller = algorithm == Algorithm::Paced && args.caller_clock_too;
        [(algorithm, false), (algorithm, true)]
            .into_iter()
            .filter(move |(_, caller_clock)| !caller_clock || caller)
    });
    for (algorithm, caller_clock) in variants {
        for &in_flight in &args.in_flight {
            for scenario in [Scenario::Spread, Scenario::OneMailbox] {
                cells.push(Cell {
                    algorithm_name: if caller_clock {
                        "paced (caller clock)"
                    } else {
                        algorithm.as_str()
                    },
                    algorithm,
                    caller_clock,
                    scenario,
                    in_flight,
                    runs: Vec::new(),
                    median: None,
                });
            }
        }
    }
    // Each cell's last ceiling rate, to size the next redis-benchmark run to about `duration`.
    let mut ceiling_rate: Vec<Option<f64>> = vec![None; cells.len()];

    for run in 0..args.runs {
        for (index, cell) in cells.iter_mut().enumerate() {
            let mailboxes = match cell.scenario {
                Scenario::Spread => spread.clone(),
                Scenario::OneMailbox => one.clone(),
            };
            let tag = match (cell.algorithm, cell.scenario) {
                (Algorithm::FixedWindow, Scenario::Spread) => "fa",
                (Algorithm::FixedWindow, Scenario::OneMailbox) => "fb",
                (Algorithm::Paced, Scenario::Spread) => "pa",
                (Algorithm::Paced, Scenario::OneMailbox) => "pb",
            };
            let clock = if cell.caller_clock { "c" } else { "r" };
            let ours_prefix = format!("{base}:{run}:{}{tag}{clock}:o", cell.in_flight);
            let ceiling_prefix = format!("{base}:{run}:{}{tag}{clock}:c", cell.in_flight);
            let ceiling = CeilingSetup {
                url: &url,
                algorithm: cell.algorithm,
                caller_clock: cell.caller_clock,
                sha: match cell.algorithm {
                    Algorithm::FixedWindow => &sha,
                    Algorithm::Paced => &paced_sha,
                },
                scenario: cell.scenario,
                prefix: &ceiling_prefix,
                in_flight: cell.in_flight,
                pool: pool_size,
            };
            // Alternate which side goes first, so neither always meets a warmer (or busier)
            // machine.
            let measure = async || {
                measure_ours(
                    (cell.algorithm, cell.caller_clock),
                    &url,
                    &ours_prefix,
                    &mailboxes,
                    cell.in_flight,
                    duration,
                    args.connection_per_task,
                )
                .await
            };
            let (ours, ceiling) = if run % 2 == 0 {
                let ours = measure().await;
                let requests =
                    requests_for(ceiling_rate[index].unwrap_or(ours.per_second), duration);
                let ceiling = measure_ceiling(&ceiling, requests, &mut conn).await;
                (ours, ceiling)
            } else {
                let rate = ceiling_rate[index].unwrap_or(1_000.0);
                let ceiling =
                    measure_ceiling(&ceiling, requests_for(rate, duration), &mut conn).await;
                (measure().await, ceiling)
            };
            // `paced` needs every mailbox's state hash seeded first; the calls must have written
            // more than the seeds.
            let seeded = match (cell.algorithm, cell.scenario) {
                (Algorithm::FixedWindow, _) => [0, 0],
                (Algorithm::Paced, Scenario::OneMailbox) => [1, 1],
                (Algorithm::Paced, Scenario::Spread) => [pool_size, pool_size],
            };
            for ((side, prefix), seeded) in [("ours", &ours_prefix), ("ceiling", &ceiling_prefix)]
                .into_iter()
                .zip(seeded)
            {
                match support::unlink_prefix(&mut conn, prefix).await {
                    Ok(n) if n <= seeded => support::fail(&format!(
                        "{side} left no key under {prefix} beyond its {seeded} seed(s): its calls did not run the script"
                    )),
                    Ok(_) => {}
                    Err(e) => eprintln!("warning: could not delete keys under {prefix}: {e}"),
                }
            }
            ceiling_rate[index] = Some(ceiling.per_second);
            let ratio = ours.per_second / ceiling.per_second;
            eprintln!(
                "run {}/{} {:<20} {:<16} in flight {:>2}: ours {:>9}/s p50 {:>7.1} µs p99 {:>8.1} µs | ceiling {:>9}/s p50 {:>7.1} µs p99 {:>8.1} µs | {:.2}",
                run + 1,
                args.runs,
                cell.algorithm_name,
                cell.scenario.label(),
                cell.in_flight,
                thousands(ours.per_second),
                ours.p50_us,
                ours.p99_us,
                thousands(ceiling.per_second),
                ceiling.p50_us,
                ceiling.p99_us,
                ratio
            );
            cell.runs.push(Run {
                ours,
                ceiling,
                ratio,
            });
        }
    }

    let mut warnings = Vec::new();
    let mut rows = Vec::new();
    for cell in &mut cells {
        let pick = |f: fn(&Run) -> f64| median(&cell.runs.iter().map(f).collect::<Vec<_>>());
        let m = Medians {
            ours_per_second: pick(|r| r.ours.per_second).unwrap_or(f64::NAN),
            ours_p50_us: pick(|r| r.ours.p50_us).unwrap_or(f64::NAN),
            ours_p99_us: pick(|r| r.ours.p99_us).unwrap_or(f64::NAN),
            ceiling_per_second: pick(|r| r.ceiling.per_second).unwrap_or(f64::NAN),
            ceiling_p50_us: pick(|r| r.ceiling.p50_us).unwrap_or(f64::NAN),
            ceiling_p99_us: pick(|r| r.ceiling.p99_us).unwrap_or(f64::NAN),
            ratio: pick(|r| r.ratio).unwrap_or(f64::NAN),
        };
        let mut total = Tally::default();
        for r in &cell.runs {
            total.merge(r.ours.tally.unwrap_or_default());
        }
        let calls = total.reserved + total.fail_open + total.denied() + total.errors;
        if cell.scenario == Scenario::Spread && total.denied() > 0 {
            warnings.push(format!(
                "{} {} in flight {}: {} denials where none were expected",
                cell.algorithm_name,
                cell.scenario.label(),
                cell.in_flight,
                total.denied()
            ));
        }
        if total.fail_open + total.errors > 0 {
            warnings.push(format!(
                "{} {} in flight {}: {} call(s) failed open (deadline {} ms) and {} error(s)",
                cell.algorithm_name,
                cell.scenario.label(),
                cell.in_flight,
                total.fail_open,
                REDIS_TIMEOUT.as_millis(),
                total.errors
            ));
        }
        #[allow(clippy::cast_precision_loss)]
        let denied_pct = 100.0 * total.denied() as f64 / calls.max(1) as f64;
        rows.push(vec![
            cell.algorithm_name.to_owned(),
            cell.scenario.label().to_owned(),
            cell.in_flight.to_string(),
            thousands(m.ours_per_second),
            format!("{:.0}", m.ours_p50_us),
            format!("{:.0}", m.ours_p99_us),
            thousands(m.ceiling_per_second),
            format!("{:.0}", m.ceiling_p50_us),
            format!("{:.0}", m.ceiling_p99_us),
            format!("{:.2}", m.ratio),
            format!("{denied_pct:.2} %"),
        ]);
        cell.median = Some(m);
    }

    println!();
    println!(
        "medians of {} run(s); ceiling = redis-benchmark -c <in flight> -P 1 EVALSHA of the same check_and_reserve.lua (lua/<algorithm>/), same keys and arguments",
        args.runs
    );
    support::print_table(
        &[
            "algorithm",
            "scenario",
            "in flight",
            "ours dec/s",
            "p50 µs",
            "p99 µs",
            "ceiling dec/s",
            "p50 µs",
            "p99 µs",
            "ours/ceiling",
            "ours denied",
        ],
        &rows,
    );
    for w in &warnings {
        println!("warning: {w}");
    }

    let report = Report {
        run: support::RunInfo {
            benchmark: "limiter",
            machine,
            smoke: args.run.smoke,
        },
        runs: args.runs,
        seconds_per_measurement: args.seconds,
        spread_pool: pool_size,
        per_minute: PER_MINUTE,
        recipients_per_day: RECIPIENTS_PER_DAY,
        redis_timeout_ms: u64::try_from(REDIS_TIMEOUT.as_millis()).unwrap_or(u64::MAX),
        connection_per_task: args.connection_per_task,
        script_sha1: sha,
        paced_script_sha1: paced_sha,
        cells,
    };
    let name = match (args.run.smoke, args.connection_per_task) {
        (true, _) => "limiter-smoke",
        (false, true) => "limiter-connection-per-task",
        (false, false) => "limiter",
    };
    let path = support::write_json(name, &report);
    println!("results: {}", path.display());
    ExitCode::SUCCESS
}

fn mailbox(raw: &str) -> MailboxAddress {
    MailboxAddress::parse(raw).unwrap_or_else(|e| support::fail(&e.to_string()))
}

fn limits() -> RateLimits {
    RateLimits {
        per_minute: NonZeroU32::new(PER_MINUTE).unwrap_or(NonZeroU32::MIN),
        recipients_per_day: NonZeroU32::new(RECIPIENTS_PER_DAY).unwrap_or(NonZeroU32::MIN),
        reserved_percent: 0,
    }
}

/// How many requests take about `duration` at `per_second` (at least 200).
fn requests_for(per_second: f64, duration: Duration) -> u64 {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let n = (per_second * duration.as_secs_f64()).round() as u64;
    n.max(200)
}

/// Ours: one `MailRateLimiter` (one multiplexed connection, as in the daemon) — or, with
/// `--connection-per-task`, one per task, as redis-benchmark has one connection per client —
/// and `in_flight` tasks calling `check_and_reserve` back to back for `duration`, after a
/// warm-up of a tenth of that (at least 50 ms) whose calls are not counted. Mailboxes are taken
/// round robin.
#[allow(clippy::too_many_arguments)]
async fn measure_ours(
    (algorithm, caller_clock): (Algorithm, bool),
    url: &url::Url,
    prefix: &str,
    mailboxes: &Arc<[MailboxAddress]>,
    in_flight: usize,
    duration: Duration,
    connection_per_task: bool,
) -> Measurement {
    let config = RateLimitConfig {
        algorithm,
        redis_url: url.clone().into(),
        defaults: limits(),
        redis_timeout: REDIS_TIMEOUT,
        key_prefix: prefix.to_owned(),
        max_in_flight: NonZeroU32::new(MAX_IN_FLIGHT).unwrap_or(NonZeroU32::MAX),
        lease: LEASE,
        fail_open_replicas: NonZeroU32::MIN,
        unreachable_not_ready_after: Duration::from_secs(60),
        caller_clock,
    };
    if algorithm == Algorithm::Paced {
        let mut conn = support::redis_connection(url).await;
        seed_paced(&mut conn, prefix, mailboxes.iter()).await;
    }
    let mut limiters = Vec::new();
    for _ in 0..if connection_per_task { in_flight } else { 1 } {
        let limiter = Arc::new(
            MailRateLimiter::new(&config).unwrap_or_else(|e| support::fail(&e.to_string())),
        );
        if let Err(e) = limiter.ping().await {
            support::fail(&format!("the limiter cannot reach Redis: {e}"));
        }
        limiters.push(limiter);
    }
    let next = Arc::new(AtomicUsize::new(0));
    let warm_up = (duration / 10).max(Duration::from_millis(50));
    drive(&limiters, mailboxes, &next, in_flight, warm_up).await;
    let started = Instant::now();
    let (mut latencies, tally) = drive(&limiters, mailboxes, &next, in_flight, duration).await;
    let seconds = started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let calls = latencies.len() as u64;
    #[allow(clippy::cast_precision_loss)]
    let per_second = calls as f64 / seconds;
    Measurement {
        calls,
        seconds,
        per_second,
        p50_us: percentile(&latencies, 50.0).map_or(f64::NAN, us),
        p99_us: percentile(&latencies, 99.0).map_or(f64::NAN, us),
        max_us: latencies.last().copied().map_or(f64::NAN, us),
        tally: Some(tally),
    }
}

/// `in_flight` tasks calling back to back until `duration` has passed (task `i` on
/// `limiters[i % len]`); every call's latency (ns) and what the calls answered.
async fn drive(
    limiters: &[Arc<MailRateLimiter>],
    mailboxes: &Arc<[MailboxAddress]>,
    next: &Arc<AtomicUsize>,
    in_flight: usize,
    duration: Duration,
) -> (Vec<u64>, Tally) {
    let end = Instant::now() + duration;
    let tasks: Vec<_> = (0..in_flight)
        .map(|i| {
            let limiter = limiters[i % limiters.len()].clone();
            let mailboxes = mailboxes.clone();
            let next = next.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(16_384);
                let mut tally = Tally::default();
                while Instant::now() < end {
                    let mailbox =
                        &mailboxes[next.fetch_add(1, Ordering::Relaxed) % mailboxes.len()];
                    let now = Utc::now();
                    let sent = Instant::now();
                    let ask = Ask {
                        message_id: MESSAGE_ID,
                        mailbox,
                        tenant: TENANT,
                        recipients: 1,
                        limits: limits(),
                        tenant_budget: None,
                        priority: mail_worker::domain::Priority::Normal,
                    };
                    let outcome = limiter.check_and_reserve(&ask, now).await;
                    let nanos = sent.elapsed().as_nanos();
                    latencies.push(u64::try_from(nanos).unwrap_or(u64::MAX));
                    tally.add(&outcome);
                }
                (latencies, tally)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut tally = Tally::default();
    for task in tasks {
        match task.await {
            Ok((l, t)) => {
                latencies.extend(l);
                tally.merge(t);
            }
            Err(e) => support::fail(&format!("a benchmark task panicked: {e}")),
        }
    }
    (latencies, tally)
}

struct CeilingSetup<'a> {
    url: &'a url::Url,
    algorithm: Algorithm,
    /// `paced`: `ARGV[1]` = now in ms instead of `TIME`.
    caller_clock: bool,
    sha: &'a str,
    scenario: Scenario,
    prefix: &'a str,
    in_flight: usize,
    /// Mailboxes for (a): `-r <pool>`.
    pool: usize,
}

/// `SCRIPT LOAD`s `lua` and checks its SHA1 is the one the limiter uses.
async fn load_script(conn: &mut redis::aio::MultiplexedConnection, lua: &str) -> String {
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(lua)
        .query_async(conn)
        .await
        .unwrap_or_else(|e| support::fail(&format!("SCRIPT LOAD failed: {e}")));
    let expected = redis::Script::new(lua).get_hash().to_owned();
    if sha != expected {
        support::fail(&format!(
            "SCRIPT LOAD answered {sha}, the limiter uses {expected}"
        ));
    }
    sha
}

/// `paced` answers `{-1, 0, "seed"}` for a mailbox without a state hash (the limiter then
/// rebuilds it from PostgreSQL's history and asks again): `HSET <state key> seeded 1` for
/// every mailbox first, pipelined, so every measured call is one decision.
async fn seed_paced<'m>(
    conn: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
    mailboxes: impl Iterator<Item = &'m MailboxAddress>,
) {
    let mut pipe = redis::pipe();
    let mut queued = 0;
    for mailbox in mailboxes {
        let keys = PacedKeys::new(prefix, TENANT, mailbox);
        pipe.cmd("HSET")
            .arg(keys.state())
            .arg("seeded")
            .arg(1)
            .ignore();
        queued += 1;
        if queued == 10_000 {
            run_pipe(conn, &pipe).await;
            pipe = redis::pipe();
            queued = 0;
        }
    }
    if queued > 0 {
        run_pipe(conn, &pipe).await;
    }
}

async fn run_pipe(conn: &mut redis::aio::MultiplexedConnection, pipe: &redis::Pipeline) {
    let done: redis::RedisResult<()> = pipe.query_async(conn).await;
    if let Err(e) = done {
        support::fail(&format!("seeding the paced state hashes failed: {e}"));
    }
}

/// The ceiling: `redis-benchmark -c <in flight> -n <requests> -P 1 --csv EVALSHA <sha> 2 <minute
/// key> <day key> 25 9000 1 <ms left in minute> <ms left in day>`, with the keys built by the
/// limiter's own key builders. For (a), `-r 100000` puts a random 12-digit mailbox number in
/// each key (independently in the two keys: the same work per call); for (b), one mailbox.
/// For (b), checks the script really ran (the minute counter must stand at the limit); for
/// (a) the caller checks that keys were written.
async fn measure_ceiling(
    setup: &CeilingSetup<'_>,
    requests: u64,
    conn: &mut redis::aio::MultiplexedConnection,
) -> Measurement {
    let now = Utc::now();
    let mailbox = match setup.scenario {
        Scenario::Spread => mailbox("bench__rand_int__@bench.example"),
        Scenario::OneMailbox => mailbox("bench000000000000@bench.example"),
    };
    let paced_keys = PacedKeys::new(setup.prefix, TENANT, &mailbox);
    if setup.algorithm == Algorithm::Paced {
        // The state hashes redis-benchmark's random keys will name (12-digit numbers below
        // `-r`), or the one mailbox's.
        let seeds: Vec<MailboxAddress> = match setup.scenario {
            Scenario::Spread => (0..setup.pool)
                .map(|i| self::mailbox(&format!("bench{i:012}@bench.example")))
                .collect(),
            Scenario::OneMailbox => vec![mailbox.clone()],
        };
        seed_paced(conn, setup.prefix, seeds.iter()).await;
    }
    let minute_key = keys::minute_key(setup.prefix, &mailbox, now);
    let day_key = keys::day_key(setup.prefix, &mailbox, now);
    let mut command = tokio::process::Command::new("redis-benchmark");
    command
        .arg("-u")
        .arg(setup.url.as_str())
        .arg("-c")
        .arg(setup.in_flight.to_string())
        .arg("-n")
        .arg(requests.to_string())
        .args(["-P", "1", "--csv"]);
    if setup.scenario == Scenario::Spread {
        command.arg("-r").arg(setup.pool.to_string());
    }
    match setup.algorithm {
        Algorithm::FixedWindow => {
            command
                .args(["EVALSHA", setup.sha, "2"])
                .arg(&minute_key)
                .arg(&day_key)
                .arg(PER_MINUTE.to_string())
                .arg(RECIPIENTS_PER_DAY.to_string())
                .arg("1")
                .arg(keys::ms_left_in_minute(now).to_string())
                .arg(keys::ms_left_in_day(now).to_string());
        }
        Algorithm::Paced => {
            // The limiter's own argument list (rate_limit/paced/check.rs): 7 keys, then now
            // (`TIME`, or the caller's fixed at the start), id, L, D, recipients, external,
            // tenant budget, in flight, lease, allowance, grace.
            let now_arg = if setup.caller_clock {
                now.timestamp_millis().to_string()
            } else {
                "TIME".to_owned()
            };
            command
                .args(["EVALSHA", setup.sha, "7"])
                .args(paced_keys.all())
                .arg(now_arg)
                .arg(MESSAGE_ID.to_string())
                .arg(PER_MINUTE.to_string())
                .arg(RECIPIENTS_PER_DAY.to_string())
                .args(["1", "0", "0"])
                .arg(MAX_IN_FLIGHT.to_string())
                .arg(LEASE.as_millis().to_string())
                .arg(paced::PACING_ALLOWANCE.as_millis().to_string())
                .arg(paced::BOOKING_GRACE.as_millis().to_string());
        }
    }
    let started = Instant::now();
    let output = command
        .output()
        .await
        .unwrap_or_else(|e| support::fail(&format!("cannot run redis-benchmark: {e}")));
    let seconds = started.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        support::fail(&format!(
            "redis-benchmark exited with {}: {stdout}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let csv = parse_csv(&stdout)
        .unwrap_or_else(|| support::fail(&format!("unexpected redis-benchmark output: {stdout}")));

    // Proof that EVALSHA ran our script rather than answering errors: for (b) the minute
    // counter stands at the limit; for (a) the caller finds the keys when it deletes them.
    if setup.algorithm == Algorithm::Paced && setup.scenario == Scenario::OneMailbox {
        // The first call reserved (tat set), the second booked the message: the booking is there.
        let booked: Option<String> = redis::cmd("HGET")
            .arg(paced_keys.state())
            .arg(format!("b:{MESSAGE_ID}"))
            .query_async(conn)
            .await
            .unwrap_or(None);
        if booked.is_none() {
            support::fail(
                "after redis-benchmark the paced mailbox holds no booking: did EVALSHA fail?",
            );
        }
    } else if setup.scenario == Scenario::OneMailbox {
        let counter: Option<u32> = redis::cmd("GET")
            .arg(&minute_key)
            .query_async(conn)
            .await
            .unwrap_or(None);
        if counter != Some(PER_MINUTE) {
            support::fail(&format!(
                "after redis-benchmark the minute counter is {counter:?}, expected {PER_MINUTE}: did EVALSHA fail?"
            ));
        }
    }
    Measurement {
        calls: requests,
        seconds,
        per_second: csv.per_second,
        p50_us: csv.p50_ms * 1_000.0,
        p99_us: csv.p99_ms * 1_000.0,
        max_us: csv.max_ms * 1_000.0,
        tally: None,
    }
}

struct Csv {
    per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

/// redis-benchmark 7's `--csv`: a header line, then
/// `"<test>","rps","avg","min","p50","p95","p99","max"` (latencies in ms).
fn parse_csv(stdout: &str) -> Option<Csv> {
    let line = stdout.lines().rev().find(|l| !l.trim().is_empty())?;
    let fields: Vec<f64> = line
        .trim()
        .trim_matches('"')
        .split("\",\"")
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    match fields.as_slice() {
        [rps, _avg, _min, p50, _p95, p99, max] => Some(Csv {
            per_second: *rps,
            p50_ms: *p50,
            p99_ms: *p99,
            max_ms: *max,
        }),
        _ => None,
    }
}

fn main() -> ExitCode {
    support::bench_main(run)
}

impl support::BenchArgs for Args {
    const SMOKE: &str =
        "One run of 0.2 s measurements, to prove the benchmark works (figures not meaningful).";

    fn invalid(&self) -> Option<&'static str> {
        (self.runs == 0
            || self.seconds <= 0.0
            || self.in_flight.contains(&0)
            || self.algorithms.is_empty())
        .then_some("--runs, --seconds, --in-flight and --algorithms must be positive")
    }

    fn smoke(&mut self) {
        self.runs = 1;
        self.seconds = 0.2;
    }
}
