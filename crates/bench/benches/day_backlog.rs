//! Benchmark 13, a backlog past the day budget (issue 23): one mailbox with the default budget
//! (25 a minute, D = 9,000 recipients a day) books message after message behind its backlog;
//! at 0, 10,000 and 100,000 booked, `check_and_reserve` decisions per second (16 in flight,
//! one limiter), Redis commands per decision (`INFO commandstats` deltas, per command), Redis
//! CPU and `usec_per_call` per decision — `paced` and `fixed-window` side by side, each on the
//! mailbox alone and with a tenant whose external budget (5,000 a day, every recipient
//! external) binds first. Then the memory: `MEMORY USAGE` of the mailbox's keys and
//! `used_memory` per booked message, and of a mailbox at rest after a full day of sends.
//!
//! ```text
//! cargo bench -p mail-worker-bench --bench day_backlog                  # 0, 10,000, 100,000 booked; ~2 min
//! cargo test -p mail-worker-bench --bench day_backlog -- --smoke        # 0, 500, 2,000 booked (debug build, seconds)
//! ```
//!
//! The limiter runs on the caller's clock (`ARGV[1]` = ms, as the tests do) frozen at one
//! instant, so every message after the first few is booked and the backlog is exactly the
//! calls made; `fixed-window` gets the same calls (it books nothing: it denies). A private
//! `redis-server` holds only this benchmark's keys. Results: `bench-results/day_backlog.json`.
//! Exit status 1 when a measured `paced` decision was not a booking, 2 when it cannot run.

use mail_worker_bench as support;

use std::{
    num::NonZeroU32,
    process::ExitCode,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use chrono::{DateTime, TimeDelta, Utc};
use clap::Parser;
use mail_worker::{
    config::RateLimitConfig,
    domain::{MailboxAddress, Priority},
    rate_limit::{
        Algorithm, Ask, Decision, MailRateLimiter, RateLimiter, RateLimits, paced::keys::PacedKeys,
    },
};
use serde::Serialize;
use support::{
    Machine,
    daemon::{CommandStats, MeasuredRedis, command_delta},
    thousands,
};

const TENANT: &str = "contoso.example";
const PER_MINUTE: u32 = 25;
const PER_DAY: u32 = 9_000;
/// The tenant's external recipients per day in the tenant scenario: binds before D.
const TENANT_PER_DAY: u32 = 5_000;

/// Benchmark 13: limiter decisions behind a booked backlog past the day budget.
#[derive(Debug, Parser)]
#[command(name = "day_backlog")]
struct Args {
    /// Booked messages at which decisions are measured.
    #[arg(long, value_delimiter = ',', default_values_t = [0, 10_000, 100_000])]
    booked: Vec<u64>,
    /// Decisions measured at each level.
    #[arg(long, default_value_t = 4_000)]
    decisions: u64,
    /// Calls in flight (one limiter, one multiplexed connection).
    #[arg(long, default_value_t = 16)]
    in_flight: u64,
    #[command(flatten)]
    run: support::RunArgs,
}

impl support::BenchArgs for Args {
    const SMOKE: &str = "Levels 0, 500, 2,000 and 200 decisions: proves the benchmark works.";

    fn invalid(&self) -> Option<&'static str> {
        (self.decisions == 0 || self.in_flight == 0 || self.booked.is_empty())
            .then_some("--decisions, --in-flight and --booked must be positive / non-empty")
    }

    fn smoke(&mut self) {
        self.booked = vec![0, 500, 2_000];
        self.decisions = 200;
    }
}

/// One measurement: `decisions` calls at a backlog of `booked`.
#[derive(Debug, Clone, Serialize)]
struct Level {
    algorithm: &'static str,
    tenant_budget: bool,
    booked: u64,
    decisions: u64,
    per_second: f64,
    commands_per_decision: f64,
    redis_cpu_us_per_decision: f64,
    evalsha_usec_per_call: f64,
    /// Not booked (paced) or not denied (fixed-window) among the measured calls.
    unexpected: u64,
    /// Per command: calls per decision.
    commands: Vec<(String, f64)>,
    /// `MEMORY USAGE` of the mailbox's (and tenant's) keys after the level, bytes.
    key_bytes: u64,
    used_memory: u64,
}

#[derive(Debug, Serialize)]
struct Results {
    machine: Machine,
    levels: Vec<Level>,
    at_rest: AtRest,
}

/// A mailbox after a full day of sends at its budget, nothing booked.
#[derive(Debug, Serialize)]
struct AtRest {
    sends: u64,
    key_bytes: Vec<(String, u64)>,
    total_bytes: u64,
    seeded_only_bytes: u64,
}

fn mailbox() -> MailboxAddress {
    MailboxAddress::parse("backlog@contoso.example")
        .unwrap_or_else(|e| support::fail(&e.to_string()))
}

fn limiter(url: &url::Url, algorithm: Algorithm, prefix: &str) -> Arc<MailRateLimiter> {
    let config = RateLimitConfig {
        algorithm,
        redis_url: url.clone().into(),
        defaults: RateLimits {
            per_minute: NonZeroU32::new(PER_MINUTE).unwrap_or(NonZeroU32::MIN),
            recipients_per_day: NonZeroU32::new(PER_DAY).unwrap_or(NonZeroU32::MIN),
            reserved_percent: 0,
        },
        redis_timeout: Duration::from_secs(5),
        key_prefix: prefix.to_owned(),
        max_in_flight: NonZeroU32::MAX,
        lease: Duration::from_secs(15),
        fail_open_replicas: NonZeroU32::MIN,
        unreachable_not_ready_after: Duration::from_secs(60),
        caller_clock: true,
    };
    Arc::new(MailRateLimiter::new(&config).unwrap_or_else(|e| support::fail(&e.to_string())))
}

/// `calls` new messages (ids from `next`) at `now`, `in_flight` at a time; how many were not
/// what the backlog should give (`paced`: a booking; `fixed-window`: a denial).
async fn drive(
    (limiter, algorithm): (&Arc<MailRateLimiter>, Algorithm),
    tenant_budget: bool,
    now: DateTime<Utc>,
    next: &Arc<AtomicU64>,
    calls: u64,
    in_flight: u64,
) -> u64 {
    let end = next.load(Ordering::Relaxed) + calls;
    let limiter_is_paced = algorithm == Algorithm::Paced;
    let tasks: Vec<_> = (0..in_flight)
        .map(|_| {
            let (limiter, next) = (limiter.clone(), next.clone());
            let paced = limiter_is_paced;
            tokio::spawn(async move {
                let mailbox = mailbox();
                let mut unexpected = 0;
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= end {
                        break;
                    }
                    let ask = Ask {
                        message_id: uuid::Uuid::from_u128(u128::from(n) + 1),
                        mailbox: &mailbox,
                        tenant: TENANT,
                        recipients: 1,
                        limits: limiter_limits(),
                        tenant_budget: tenant_budget.then(|| {
                            (
                                1,
                                NonZeroU32::new(TENANT_PER_DAY).unwrap_or(NonZeroU32::MIN),
                            )
                        }),
                        priority: Priority::Normal,
                    };
                    match limiter.check_and_reserve(&ask, now).await {
                        Ok(Decision::Denied { .. }) => {}
                        // The first message goes at once; fixed-window allows its minute.
                        Ok(Decision::Allowed(_)) if n == 0 || !paced => {}
                        other => {
                            unexpected += 1;
                            if unexpected == 1 {
                                eprintln!("call {n}: {other:?}");
                            }
                        }
                    }
                }
                unexpected
            })
        })
        .collect();
    let mut unexpected = 0;
    for task in tasks {
        unexpected += task.await.unwrap_or_else(|e| support::fail(&e.to_string()));
    }
    unexpected
}

fn limiter_limits() -> RateLimits {
    RateLimits {
        per_minute: NonZeroU32::new(PER_MINUTE).unwrap_or(NonZeroU32::MIN),
        recipients_per_day: NonZeroU32::new(PER_DAY).unwrap_or(NonZeroU32::MIN),
        reserved_percent: 0,
    }
}

async fn memory_usage(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> u64 {
    redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(key)
        .arg("SAMPLES")
        .arg(0)
        .query_async::<Option<u64>>(conn)
        .await
        .unwrap_or_else(|e| support::fail(&format!("MEMORY USAGE {key}: {e}")))
        .unwrap_or(0)
}

async fn keys_bytes(conn: &mut redis::aio::MultiplexedConnection, keys: &[String]) -> u64 {
    let mut sum = 0;
    for key in keys {
        sum += memory_usage(conn, key).await;
    }
    sum
}

/// The paced state seeded as the limiter's seed leaves an empty history (the tenant's too).
async fn seed(conn: &mut redis::aio::MultiplexedConnection, keys: &PacedKeys) {
    let done: redis::RedisResult<()> = redis::pipe()
        .cmd("HSET")
        .arg(keys.state())
        .arg(&["seeded", "1", "total", "0", "hs", "1", "bmin", "-"][..])
        .ignore()
        .cmd("HSET")
        .arg(&keys.keys[5])
        .arg(&["seeded", "1", "total", "0", "hs", "1"][..])
        .ignore()
        .query_async(conn)
        .await;
    done.unwrap_or_else(|e| support::fail(&format!("seeding failed: {e}")));
}

fn stats_per(delta: &CommandStats, decisions: u64) -> (f64, f64, Vec<(String, f64)>) {
    #[allow(clippy::cast_precision_loss)]
    let per = |v: u64| v as f64 / decisions as f64;
    let inner: u64 = delta
        .iter()
        .filter(|(name, _)| !name.starts_with("eval") && name.as_str() != "memory")
        .map(|(_, c)| c.calls)
        .sum();
    let evalsha = delta.get("evalsha").copied().unwrap_or_default();
    #[allow(clippy::cast_precision_loss)]
    let usec = evalsha.usec as f64 / evalsha.calls.max(1) as f64;
    let mut commands: Vec<(String, f64)> = delta
        .iter()
        .filter(|(name, _)| name.as_str() != "memory")
        .map(|(name, c)| (name.clone(), per(c.calls)))
        .collect();
    commands.sort_by(|a, b| b.1.total_cmp(&a.1));
    (per(inner), usec, commands)
}

async fn run(args: Args, machine: Machine) -> ExitCode {
    let mut redis = MeasuredRedis::start().await;
    let mut conn = support::redis_connection(&redis.url).await;
    let now = Utc::now();
    let mut levels = Vec::new();
    for (algorithm, tenant_budget) in [
        (Algorithm::Paced, false),
        (Algorithm::FixedWindow, false),
        (Algorithm::Paced, true),
        (Algorithm::FixedWindow, true),
    ] {
        let prefix = support::bench_prefix("day_backlog");
        let keys = PacedKeys::new(&prefix, TENANT, &mailbox());
        let limiter = limiter(&redis.url, algorithm, &prefix);
        if algorithm == Algorithm::Paced {
            seed(&mut conn, &keys).await;
        }
        let next = Arc::new(AtomicU64::new(0));
        // One call first, alone: the script is loaded (NOSCRIPT answered once) and the
        // mailbox's first message goes at once; every later one is booked (paced).
        drive((&limiter, algorithm), tenant_budget, now, &next, 1, 1).await;
        for &booked in &args.booked {
            let made = next.load(Ordering::Relaxed);
            drive(
                (&limiter, algorithm),
                tenant_budget,
                now,
                &next,
                booked.saturating_sub(made),
                args.in_flight,
            )
            .await;
            let (before, cpu) = (redis.commandstats().await, redis.cpu_seconds());
            let started = Instant::now();
            let unexpected = drive(
                (&limiter, algorithm),
                tenant_budget,
                now,
                &next,
                args.decisions,
                args.in_flight,
            )
            .await;
            let seconds = started.elapsed().as_secs_f64();
            let cpu = redis.cpu_seconds() - cpu;
            let delta = command_delta(&before, &redis.commandstats().await);
            let (commands_per_decision, evalsha_usec_per_call, commands) =
                stats_per(&delta, args.decisions);
            #[allow(clippy::cast_precision_loss)]
            let level = Level {
                algorithm: algorithm.as_str(),
                tenant_budget,
                booked,
                decisions: args.decisions,
                per_second: args.decisions as f64 / seconds,
                commands_per_decision,
                redis_cpu_us_per_decision: cpu * 1e6 / args.decisions as f64,
                evalsha_usec_per_call,
                unexpected,
                commands,
                key_bytes: keys_bytes(&mut conn, &keys.keys).await,
                used_memory: redis.used_memory().await,
            };
            eprintln!(
                "{} tenant {tenant_budget} at {booked} booked: {:.0} dec/s, {:.1} commands per decision",
                level.algorithm, level.per_second, level.commands_per_decision
            );
            levels.push(level);
        }
        let _ = support::unlink_prefix(&mut conn, &prefix).await;
    }
    let at_rest = at_rest(&redis.url, &mut conn).await;
    print(&levels, &at_rest);
    let path = support::write_json(
        &support::results_name("day_backlog", args.run.smoke),
        &Results {
            machine,
            levels: levels.clone(),
            at_rest,
        },
    );
    println!("\nraw figures: {}", path.display());
    let broken = levels
        .iter()
        .filter(|l| l.algorithm == "paced" && l.unexpected > 0)
        .count();
    if broken > 0 {
        eprintln!("{broken} paced level(s) had decisions that were not bookings");
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

/// A mailbox after 24 h of sends at its day budget (one recipient every 9.6 s, each released),
/// nothing booked: its keys' `MEMORY USAGE`; and a mailbox only seeded.
async fn at_rest(url: &url::Url, conn: &mut redis::aio::MultiplexedConnection) -> AtRest {
    let prefix = support::bench_prefix("day_backlog");
    let keys = PacedKeys::new(&prefix, TENANT, &mailbox());
    seed(conn, &keys).await;
    let seeded_only_bytes = memory_usage(conn, keys.state()).await;
    let limiter = limiter(url, Algorithm::Paced, &prefix);
    let start = Utc::now() - TimeDelta::days(1);
    let mailbox = mailbox();
    let sends = u64::from(PER_DAY);
    for i in 0..sends {
        let at = start + TimeDelta::milliseconds(i64::try_from(i).unwrap_or(0) * 9_600);
        let ask = Ask {
            message_id: uuid::Uuid::new_v4(),
            mailbox: &mailbox,
            tenant: TENANT,
            recipients: 1,
            limits: limiter_limits(),
            tenant_budget: None,
            priority: Priority::Normal,
        };
        if let Ok(Decision::Allowed(r)) = limiter.check_and_reserve(&ask, at).await {
            limiter
                .release(&r, mail_worker::rate_limit::RequestEnd::Done)
                .await;
        }
    }
    let mut key_bytes = Vec::new();
    for key in &keys.keys[..5] {
        key_bytes.push((
            key.replace(&prefix, "<prefix>"),
            memory_usage(conn, key).await,
        ));
    }
    let total_bytes = key_bytes.iter().map(|(_, b)| b).sum();
    let _ = support::unlink_prefix(conn, &prefix).await;
    AtRest {
        sends,
        key_bytes,
        total_bytes,
        seeded_only_bytes,
    }
}

fn print(levels: &[Level], at_rest: &AtRest) {
    println!(
        "\nbacklog past the day budget: one mailbox, 25/min, D = 9,000 (tenant: 5,000 external/day)\n"
    );
    let rows: Vec<Vec<String>> = levels
        .iter()
        .map(|l| {
            vec![
                l.algorithm.to_owned(),
                if l.tenant_budget { "yes" } else { "no" }.to_owned(),
                thousands(l.booked as f64),
                thousands(l.per_second),
                format!("{:.1}", l.commands_per_decision),
                format!("{:.1}", l.redis_cpu_us_per_decision),
                format!("{:.1}", l.evalsha_usec_per_call),
                l.commands
                    .iter()
                    .take(6)
                    .map(|(c, n)| format!("{c} {n:.2}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                thousands(l.key_bytes as f64),
            ]
        })
        .collect();
    support::print_table(
        &[
            "algorithm",
            "tenant",
            "booked",
            "dec/s",
            "cmds/dec",
            "Redis CPU µs/dec",
            "usec/call",
            "commandstats per decision",
            "keys bytes",
        ],
        &rows,
    );
    for pair in levels.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if a.algorithm == b.algorithm && a.tenant_budget == b.tenant_budget && b.booked > a.booked {
            #[allow(clippy::cast_precision_loss)]
            let per = (b.key_bytes as f64 - a.key_bytes as f64)
                / (b.booked + b.decisions - a.booked - a.decisions) as f64;
            println!(
                "{} tenant {}: {per:.1} bytes of keys per booked message ({} → {} booked)",
                a.algorithm, a.tenant_budget, a.booked, b.booked
            );
        }
    }
    println!(
        "\nat rest after {} sends in 24 h: {} bytes ({}); seeded only: {} bytes",
        at_rest.sends,
        thousands(at_rest.total_bytes as f64),
        at_rest
            .key_bytes
            .iter()
            .map(|(k, b)| format!("{k} {b}"))
            .collect::<Vec<_>>()
            .join(", "),
        at_rest.seeded_only_bytes
    );
}

fn main() -> ExitCode {
    support::bench_main(run)
}
