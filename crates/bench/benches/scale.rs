//! Benchmark 13, a campaign day at scale (issue 23): a private PostgreSQL, a private 3-master
//! Redis Cluster for the limiter, graph-sim in this process with latency and Exchange's
//! limits, `--mailboxes` system mailboxes in `--tenants` Graph tenants with `--messages` due
//! each, and `mail-worker run` replicas (the real binary). Two arms, two databases of the one
//! server, both set up first: the `messages` table empty, and pre-filled with `--history`
//! finished (`SENT`) rows of the last 29 days (one `generate_series` insert, then `VACUUM
//! ANALYZE`). The arms take turns so outside load falls on both alike: for each `--replicas`
//! count, `--rounds` rounds of empty then history (every other round history first); with
//! `--steady-within`, one arm through every count, then the other. Each window: `--warmup` s
//! (with `--steady-within`, then until the backlog is booked and no slot is left overdue),
//! then `--seconds` s measured:
//!
//! - sends/s (graph-sim's accepted messages in the window) against Σ L/60 (every mailbox at
//!   `MAIL_RATE_LIMIT_PER_MINUTE` = `--per-minute`; goal ≥ 0.95 while every mailbox has due
//!   work, which the benchmark checks at the window's end), and against the pacing's ceiling:
//!   the campaign is `normal` mail, which `paced` keeps out of the share R reserved for `high`
//!   (`MAIL_RATE_LIMIT_RESERVED_PERCENT`, `--reserved-percent`, default 20), its slots spaced
//!   (60 s + 2 s) / ⌊L (100 − R) / 100⌋, so 0.774 × Σ L/60 at R = 20 and L = 10 or 25, 0.968
//!   at R = 0;
//! - Graph 429s (graph-sim's refusals) and the most messages of one mailbox in any rolling 60 s
//!   (graph-sim's records; goal ≤ L);
//! - the claim statement: p50/p99 from the daemons' `mail_worker_claim_duration_seconds`
//!   (each replica's `/metrics` before and after the window, summed, interpolated inside a
//!   bucket as `histogram_quantile`), and calls, mean, max from pg_stat_statements; PostgreSQL's
//!   CPU (the whole private server) per sent message, empty table against history (goal within
//!   10 %), and every statement's share of it (pg_stat_statements: time, buffers per call);
//! - Redis commands per script call and per sent message, and `used_memory` (all masters);
//! - CPU ms per sent message of each process (`/proc/PID/stat`) and the machine's busy share
//!   (`/proc/stat`): where the sends/s stop growing with replicas, the CPU binds; the sum over
//!   the processes gives the sends/s this machine's cores could carry.
//!
//! Then, on the history arm with its backlog in place and mailboxes added up to
//! `--page-mailboxes`: the mailboxes page's report (`reports::usage::usage_page`, what the admin
//! UI and `mailbox usage` print) for the first and the last page of 50 and a page of 500, the
//! `mailbox usage` command as a process, and 50 mailboxes read one at a time (the old page).
//!
//! ```text
//! CARGO_TARGET_DIR=/work/rel-target cargo bench -p mail-worker-bench --bench scale
//! cargo bench -p mail-worker-bench --bench scale -- --mailboxes 500 --tenants 50 --replicas 1,2 --seconds 60
//! cargo test -p mail-worker-bench --bench scale -- --smoke     # seconds; figures meaningless
//! ```
//!
//! Results: `bench-results/scale.json` (`scale-smoke.json`); daemon logs
//! `bench-results/scale-<arm>-r<replicas>-<round>-<n>.log`. Exit status 1 when a Graph 429 was seen or a
//! mailbox went over L in a rolling minute; 2 when the benchmark could not run.

use mail_worker_bench as support;

use std::{collections::BTreeMap, process::ExitCode, time::Duration, time::Instant};

use chrono::{DateTime, Utc};
use clap::Parser;
use graph_sim::{GraphSim, Latency, SimConfig, SimMailbox, Target};
use mail_worker::{domain::Priority, forecast, rate_limit::Algorithm};
use serde::Serialize;
use support::{
    Machine, RunInfo,
    cluster::PrivateCluster,
    daemon::{self, BenchDb, Daemon, DaemonEnv, MeasuredRedis, PrivatePostgres, total_calls},
    fail,
    prom::Buckets,
    statements::Statement,
};
use uuid::Uuid;

/// Benchmark 13: thousands of mailboxes, a million rows, Redis Cluster, several replicas.
#[derive(Debug, Parser)]
#[command(name = "scale")]
struct Args {
    /// System mailboxes.
    #[arg(long, default_value_t = 2_000)]
    mailboxes: usize,
    /// Graph tenants they are spread over (round robin).
    #[arg(long, default_value_t = 200)]
    tenants: usize,
    /// Due messages per mailbox (the campaign).
    #[arg(long, default_value_t = 200)]
    messages: usize,
    /// Finished rows of history in the second arm (0: only the empty arm).
    #[arg(long, default_value_t = 1_000_000)]
    history: u64,
    /// Replica counts to run in each arm, in order, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2, 4])]
    replicas: Vec<u32>,
    /// Seconds measured per replica count.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Seconds before each measurement (start-up, the first claims).
    #[arg(long, default_value_t = 15)]
    warmup: u64,
    /// Rounds of the two arms per replica count (they alternate: empty, history, history,
    /// empty, …).
    #[arg(long, default_value_t = 2)]
    rounds: u32,
    /// `MAIL_RATE_LIMIT_PER_MINUTE` (L) of every mailbox.
    #[arg(long, default_value_t = 25)]
    per_minute: u32,
    /// graph-sim's latency per sendMail, ms.
    #[arg(long, default_value_t = 50)]
    latency_ms: u64,
    /// Mailboxes for the pages section (at least `--mailboxes`).
    #[arg(long, default_value_t = 5_000)]
    page_mailboxes: usize,
    /// `WORKER_CONCURRENCY` of each replica (unset: the daemon's default, 128).
    #[arg(long)]
    worker_concurrency: Option<u32>,
    /// `MAIL_RATE_LIMIT_RESERVED_PERCENT` (R): the share of L only `high` mail may use; the
    /// campaign is `normal`, so it may use (1 − R) L (unset: the daemon's default, 20).
    #[arg(long)]
    reserved_percent: Option<u8>,
    /// After the warm-up, wait up to this many seconds for a steady state before measuring:
    /// no due row never tried (the backlog is booked) and at most 1 % of the mailboxes with a
    /// row overdue by more than one slot (60 s / L), so the window measures the limiter's pace,
    /// not the booking of the backlog or a burst of slots that came due between windows
    /// (0: measure right after the warm-up).
    #[arg(long, default_value_t = 0)]
    steady_within: u64,
    /// The private PostgreSQL's `shared_buffers`: 1 GB holds both arms' working sets (the
    /// server's default 128 MB does not, so the arm that runs second reads its pages from the
    /// OS cache and costs more CPU for it; a production server is given a quarter of its RAM).
    #[arg(long, default_value = "1GB")]
    shared_buffers: String,
    #[command(flatten)]
    run: support::RunArgs,
}

impl support::BenchArgs for Args {
    const SMOKE: &str = "A smoke run for CI: 20 mailboxes in 4 tenants, 10 messages each, 2,000 rows of history, 1 replica for 3 s after a steady state (at most 20 s), 100 mailboxes paged (figures meaningless).";

    fn smoke(&mut self) {
        self.mailboxes = 20;
        self.tenants = 4;
        self.messages = 10;
        self.history = 2_000;
        self.replicas = vec![1];
        self.rounds = 1;
        self.seconds = 3;
        self.warmup = 2;
        self.page_mailboxes = 100;
        self.steady_within = 20;
    }

    fn invalid(&self) -> Option<&'static str> {
        (self.mailboxes == 0
            || self.tenants == 0
            || self.messages == 0
            || self.seconds == 0
            || self.rounds == 0)
            .then_some(
                "--mailboxes, --tenants, --messages, --seconds and --rounds must be positive",
            )
            .or_else(|| {
                self.replicas
                    .contains(&0)
                    .then_some("--replicas must be positive")
            })
    }
}

/// The benchmark app of tenant `t`: one per tenant (graph-sim's apps have unique ids), its id
/// this prefix and `t` in 12 digits; one secret for all (benchmark values, not credentials).
const CLIENT_ID_PREFIX: &str = "b3c0a1e2-5d4f-4a6b-9c8d-";
const CLIENT_SECRET: &str = daemon::CLIENT_SECRET;

fn client_id(tenant: usize) -> String {
    format!("{CLIENT_ID_PREFIX}{tenant:012}")
}

/// One arm's fixed parts: its database, mailboxes, graph-sim and limiter key prefix.
struct Arm {
    name: String,
    history: u64,
    db: BenchDb,
    sim: GraphSim,
    mailboxes: Vec<(String, Uuid)>,
    prefix: String,
    setup_s: f64,
}

/// `n` system mailboxes `mb<i>@t<i mod tenants>.example` (from `first`), tenant
/// `t<i mod tenants>.example`, in one insert.
async fn add_mailboxes(
    pool: &sqlx::PgPool,
    first: usize,
    n: usize,
    tenants: usize,
) -> Vec<(String, Uuid)> {
    sqlx::query_as(
        "INSERT INTO system_mailboxes (address, graph_tenant_id, graph_client_id, graph_client_secret) \
         SELECT 'mb' || g || '@t' || (g % $3) || '.example', 't' || (g % $3) || '.example', \
             $4 || lpad((g % $3)::text, 12, '0'), $5 \
         FROM generate_series($1::bigint, $1 + $2 - 1) AS g ORDER BY g RETURNING address, id",
    )
    .bind(i64::try_from(first).unwrap_or(0))
    .bind(i64::try_from(n).unwrap_or(0))
    .bind(i64::try_from(tenants).unwrap_or(1))
    .bind(CLIENT_ID_PREFIX)
    .bind(CLIENT_SECRET)
    .fetch_all(pool)
    .await
    .unwrap_or_else(|e| fail(&format!("cannot register the mailboxes: {e}")))
}

impl Arm {
    async fn setup(pg: &PrivatePostgres, args: &Args, history: u64) -> Self {
        let started = Instant::now();
        let name = if history == 0 { "empty" } else { "history" }.to_owned();
        let db = BenchDb::create(&pg.url, "scale").await;
        sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .execute(&db.pool)
            .await
            .unwrap_or_else(|e| fail(&format!("cannot create pg_stat_statements: {e}")));
        let setup = db.setup_pool().await;
        let mailboxes = add_mailboxes(&setup, 0, args.mailboxes, args.tenants).await;
        let ids: Vec<Uuid> = mailboxes.iter().map(|(_, id)| *id).collect();
        if history > 0 {
            // Finished rows of the last 29 days, older than the limiter's 24 h (its seeding
            // reads those) and younger than MAIL_RETENTION's 30 d (nothing to delete).
            sqlx::query(
                "INSERT INTO messages (id, system_mailbox_id, to_recipients, subject, body, status, \
                     scheduled_on, sent_at, created_at, updated_at, attempts) \
                 SELECT gen_random_uuid(), ($1::uuid[])[(g % cardinality($1::uuid[])) + 1], \
                     jsonb_build_array(jsonb_build_object('address', 'old' || g || '@example.org')), \
                     'Earlier ' || g, $3, 'SENT', t, t, t, t, 1 \
                 FROM generate_series(0, $2 - 1) AS g, \
                     LATERAL (SELECT now() - interval '25 hours' \
                                  - (g % 40000) * interval '1 minute' AS t) AS at",
            )
            .bind(&ids)
            .bind(i64::try_from(history).unwrap_or(0))
            .bind(daemon::BODY)
            .execute(&setup)
            .await
            .unwrap_or_else(|e| fail(&format!("cannot insert the history: {e}")));
        }
        daemon::insert_messages(&setup, &ids, args.mailboxes * args.messages).await;
        sqlx::query("VACUUM ANALYZE messages")
            .execute(&setup)
            .await
            .unwrap_or_else(|e| fail(&format!("VACUUM ANALYZE: {e}")));
        db.settle(setup).await;
        let mut config = SimConfig::new();
        for t in 0..args.tenants {
            config = config.with_app(format!("t{t}.example"), client_id(t), CLIENT_SECRET);
        }
        for (address, _) in &mailboxes {
            let tenant = address.split('@').nth(1).unwrap_or_default().to_owned();
            config = config.with_mailbox(SimMailbox::new(address, &tenant).with_limits(
                graph_sim::MailboxLimits {
                    minute_overflow: graph_sim::MinuteOverflow::Refuse,
                    ..graph_sim::MailboxLimits::default()
                },
            ));
        }
        let sim = GraphSim::start(config)
            .await
            .unwrap_or_else(|e| fail(&format!("cannot start graph-sim: {e}")));
        sim.set_latency(Target::Global, Latency::Fixed(args.latency_ms))
            .unwrap_or_else(|e| fail(&format!("graph-sim latency: {e}")));
        Self {
            name,
            history,
            db,
            sim,
            mailboxes,
            prefix: support::bench_prefix("scale"),
            setup_s: started.elapsed().as_secs_f64(),
        }
    }

    fn env(&self, args: &Args, queue: &MeasuredRedis, cluster: &PrivateCluster) -> DaemonEnv {
        let mut env = DaemonEnv::new(&self.db.url, &queue.url, &queue.url, &self.sim);
        env.set("MAIL_RATE_LIMIT_REDIS_URL", cluster.seeds())
            .set("MAIL_RATE_LIMIT_KEY_PREFIX", &self.prefix)
            .set("MAIL_RATE_LIMIT_ALGORITHM", "paced")
            .set("MAIL_RATE_LIMIT_PER_MINUTE", args.per_minute);
        if let Some(n) = args.worker_concurrency {
            env.set("WORKER_CONCURRENCY", n);
        }
        if let Some(r) = args.reserved_percent {
            env.set("MAIL_RATE_LIMIT_RESERVED_PERCENT", r);
        }
        env
    }
}

/// Busy and total jiffies of the whole machine (`/proc/stat`'s `cpu` line).
fn machine_jiffies() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().sum();
    // idle + iowait
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// What the processes had used at one moment.
struct Snapshot {
    at: Instant,
    utc: DateTime<Utc>,
    daemons: Vec<f64>,
    postgres: f64,
    redis: Vec<f64>,
    harness: f64,
    commands: daemon::CommandStats,
    machine: (u64, u64),
}

impl Snapshot {
    fn take(daemons: &[Daemon], pg: &PrivatePostgres, cluster: &PrivateCluster) -> Self {
        Self {
            at: Instant::now(),
            utc: Utc::now(),
            daemons: daemons
                .iter()
                .map(|d| d.cpu_seconds().unwrap_or(0.0))
                .collect(),
            postgres: pg.cpu_seconds(),
            redis: cluster.cpu_seconds(),
            harness: daemon::cpu_seconds(std::process::id()).unwrap_or(0.0),
            commands: cluster.commandstats(),
            machine: machine_jiffies(),
        }
    }
}

/// The claim statement's figures in the window (pg_stat_statements).
#[derive(Debug, Clone, Default, Serialize)]
struct ClaimStatement {
    calls: i64,
    mean_ms: f64,
    stddev_ms: f64,
    max_ms: f64,
    rows_per_call: f64,
}

/// The claim statement's round trips in the window, the daemons' own histogram
/// (`mail_worker_claim_duration_seconds`, all replicas summed), ms.
#[derive(Debug, Clone, Default, Serialize)]
struct ClaimHistogram {
    count: u64,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    buckets: Buckets,
}

impl ClaimHistogram {
    fn of(buckets: Buckets) -> Self {
        let ms = |q: f64| buckets.quantile(q).map(|s| s * 1_000.0);
        Self {
            count: buckets.count(),
            p50_ms: ms(0.5),
            p99_ms: ms(0.99),
            buckets,
        }
    }
}

/// The daemon histogram's name.
const CLAIM_HISTOGRAM: &str = "mail_worker_claim_duration_seconds";

/// The claim histogram of each daemon's `/metrics` (empty for one that did not answer).
async fn scrape_claims(ports: &[u16]) -> Vec<Buckets> {
    let mut out = Vec::new();
    for port in ports {
        let text = match reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await {
            Ok(answer) => answer.text().await.unwrap_or_default(),
            Err(e) => {
                eprintln!("warning: /metrics on port {port}: {e}");
                String::new()
            }
        };
        out.push(Buckets::parse(&text, CLAIM_HISTOGRAM));
    }
    out
}

/// One replica count of one arm, one round.
#[derive(Debug, Clone, Serialize)]
struct Run {
    arm: String,
    history: u64,
    replicas: u32,
    round: u32,
    window_s: f64,
    sent: usize,
    sends_per_s: f64,
    budget_per_s: f64,
    ratio: f64,
    /// The most `paced` lets the `normal` campaign send, sends/s (see [`pacing_ceiling`]).
    pacing_ceiling_per_s: f64,
    /// Sends/s against it.
    ratio_of_pacing_ceiling: f64,
    mailboxes_without_due_work: i64,
    steady: Option<Steady>,
    graph_429s: usize,
    claim: ClaimStatement,
    claim_histogram: ClaimHistogram,
    statements: Vec<Statement>,
    cpu_ms_per_message_daemons: Vec<f64>,
    cpu_ms_per_message_postgres: f64,
    cpu_ms_per_message_redis: Vec<f64>,
    cpu_ms_per_message_graph_sim_and_harness: f64,
    cpu_ms_per_message_total: f64,
    machine_busy_percent: f64,
    redis_commands_per_script_call: f64,
    redis_commands_per_sent: f64,
    redis_used_memory: u64,
    redis_keys: u64,
}

/// How the wait for a steady state ended (`--steady-within`).
#[derive(Debug, Clone, Serialize)]
struct Steady {
    reached: bool,
    waited_s: f64,
    /// Due rows never tried, at the end of the wait.
    never_tried: i64,
    /// Mailboxes with a row overdue by more than one slot, at the end of the wait.
    overdue_mailboxes: i64,
}

/// Waits (polling every 2 s) until no due row is untried and at most 1 % of the mailboxes
/// have a row overdue by more than 60 s / L, or `--steady-within` s have passed.
async fn wait_for_steady(args: &Args, db: &BenchDb) -> Option<Steady> {
    if args.steady_within == 0 {
        return None;
    }
    let started = Instant::now();
    let slot_ms = 60_000.0 / f64::from(args.per_minute.max(1));
    loop {
        let (never_tried, overdue): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE deferrals = 0), \
                 count(DISTINCT system_mailbox_id) \
                     FILTER (WHERE scheduled_on < now() - $1 * interval '1 millisecond') \
             FROM messages WHERE status = 'SCHEDULED' AND scheduled_on <= now()",
        )
        .bind(slot_ms)
        .fetch_one(&db.pool)
        .await
        .unwrap_or((-1, -1));
        let waited_s = started.elapsed().as_secs_f64();
        let reached = never_tried == 0 && overdue * 100 <= args.mailboxes as i64;
        if reached || waited_s >= args.steady_within as f64 {
            println!(
                "            steady state {}after {waited_s:.0} s: {never_tried} due rows never tried, {overdue} mailboxes overdue by > {slot_ms:.0} ms",
                if reached { "" } else { "NOT reached " }
            );
            return Some(Steady {
                reached,
                waited_s,
                never_tried,
                overdue_mailboxes: overdue,
            });
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

async fn claim_statement(db: &BenchDb) -> ClaimStatement {
    sqlx::query_as::<_, (i64, f64, f64, f64, i64)>(
        "SELECT calls, mean_exec_time, stddev_exec_time, max_exec_time, rows \
         FROM pg_stat_statements WHERE query LIKE 'WITH picked AS%SKIP LOCKED%' \
         AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
         ORDER BY calls DESC LIMIT 1",
    )
    .fetch_optional(&db.pool)
    .await
    .ok()
    .flatten()
    .map(|(calls, mean_ms, stddev_ms, max_ms, rows)| ClaimStatement {
        calls,
        mean_ms,
        stddev_ms,
        max_ms,
        rows_per_call: rows as f64 / calls.max(1) as f64,
    })
    .unwrap_or_default()
}

/// The most one mailbox's `normal` mail can send under `paced`, sends/s, L and R as the daemons
/// read them: the forecast's rule, the script's (`normal` gets ⌊L × (100 − R) / 100⌋ a minute,
/// its slots ⌈(60 s + `PACING_ALLOWANCE`) / that⌉ apart), so 7.74 of L = 10 a minute at R = 20.
fn pacing_ceiling(args: &Args, arm: &Arm, queue: &MeasuredRedis, cluster: &PrivateCluster) -> f64 {
    let env = arm.env(args, queue, cluster);
    let config = mail_worker::config::Config::from_lookup(|n| env.get(n).map(str::to_owned))
        .unwrap_or_else(|e| fail(&format!("the daemons' config: {e}")));
    let defaults = &config.rate_limit.defaults;
    let limits = forecast::Limits {
        per_minute: defaults.per_minute.get(),
        recipients_per_day: defaults.recipients_per_day.get(),
        reserved_percent: defaults.reserved_percent,
    };
    let normal = forecast::usable_budget(limits, Priority::Normal).per_minute;
    let spacing = forecast::spacing(Algorithm::Paced, normal);
    1_000.0 / spacing.num_milliseconds() as f64
}

async fn measure(
    args: &Args,
    arm: &Arm,
    (replicas, round): (u32, u32),
    (pg, queue, cluster): (&PrivatePostgres, &MeasuredRedis, &PrivateCluster),
) -> Run {
    let mut daemons = Vec::new();
    let mut ports = Vec::new();
    for d in 0..replicas {
        let log = daemon::results_path(&format!(
            "scale-{}-r{replicas}-{round}-{}.log",
            arm.name,
            d + 1
        ));
        // Each replica's own /metrics, for its claim histogram.
        let port = daemon::free_port();
        let mut env = arm.env(args, queue, cluster);
        env.set("METRICS_LISTEN", format!("127.0.0.1:{port}"));
        daemons.push(Daemon::spawn(&env, &log).await);
        ports.push(port);
    }
    tokio::time::sleep(Duration::from_secs(args.warmup)).await;
    let steady = wait_for_steady(args, &arm.db).await;
    sqlx::query("SELECT pg_stat_statements_reset()")
        .execute(&arm.db.pool)
        .await
        .unwrap_or_else(|e| fail(&format!("pg_stat_statements_reset: {e}")));
    let claims_before = scrape_claims(&ports).await;
    let before = Snapshot::take(&daemons, pg, cluster);
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    let after = Snapshot::take(&daemons, pg, cluster);
    let claims_after = scrape_claims(&ports).await;
    let claim = claim_statement(&arm.db).await;
    let statements = support::statements::top(&arm.db.pool, 8).await;
    let claim_buckets = claims_after
        .iter()
        .zip(&claims_before)
        .fold(Buckets::default(), |sum, (a, b)| sum.add(&a.since(b)));
    let idle: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM system_mailboxes m WHERE NOT EXISTS (SELECT 1 FROM messages \
         WHERE system_mailbox_id = m.id AND status = 'SCHEDULED')",
    )
    .fetch_one(&arm.db.pool)
    .await
    .unwrap_or(-1);
    for d in daemons {
        d.stop(Duration::from_secs(20)).await;
    }
    let window_s = (after.at - before.at).as_secs_f64();
    let sent = arm
        .sim
        .messages()
        .iter()
        .filter(|m| m.received_at >= before.utc && m.received_at < after.utc)
        .count();
    let per = |cpu_s: f64| cpu_s * 1_000.0 / sent.max(1) as f64;
    let commands = PrivateCluster::delta(&before.commands, &after.commands);
    let scripts: u64 = ["evalsha", "eval"]
        .iter()
        .filter_map(|c| commands.get(*c))
        .map(|c| c.calls)
        .sum();
    let budget_per_s = arm.mailboxes.len() as f64 * f64::from(args.per_minute) / 60.0;
    let ceiling = arm.mailboxes.len() as f64 * pacing_ceiling(args, arm, queue, cluster);
    let sends_per_s = sent as f64 / window_s;
    let cpu_total = after.daemons.iter().sum::<f64>() - before.daemons.iter().sum::<f64>()
        + (after.postgres - before.postgres)
        + (after.redis.iter().sum::<f64>() - before.redis.iter().sum::<f64>())
        + (after.harness - before.harness);
    Run {
        arm: arm.name.clone(),
        history: arm.history,
        replicas,
        round,
        window_s,
        sent,
        sends_per_s,
        budget_per_s,
        ratio: sends_per_s / budget_per_s,
        pacing_ceiling_per_s: ceiling,
        ratio_of_pacing_ceiling: sends_per_s / ceiling,
        mailboxes_without_due_work: idle,
        steady,
        graph_429s: arm
            .sim
            .refusals()
            .iter()
            .filter(|r| r.at >= before.utc && r.at < after.utc)
            .count(),
        claim,
        claim_histogram: ClaimHistogram::of(claim_buckets),
        statements,
        cpu_ms_per_message_daemons: support::deltas(&before.daemons, &after.daemons)
            .map(per)
            .collect(),
        cpu_ms_per_message_postgres: per(after.postgres - before.postgres),
        cpu_ms_per_message_redis: support::deltas(&before.redis, &after.redis)
            .map(per)
            .collect(),
        cpu_ms_per_message_graph_sim_and_harness: per(after.harness - before.harness),
        cpu_ms_per_message_total: per(cpu_total),
        machine_busy_percent: (after.machine.0 - before.machine.0) as f64 * 100.0
            / (after.machine.1 - before.machine.1).max(1) as f64,
        redis_commands_per_script_call: total_calls(&commands) as f64 / scripts.max(1) as f64,
        redis_commands_per_sent: total_calls(&commands) as f64 / sent.max(1) as f64,
        redis_used_memory: cluster.used_memory(),
        redis_keys: cluster.keys(),
    }
}

/// The most messages any one mailbox had accepted in a rolling 60 s, over the whole arm.
fn max_per_rolling_minute(sim: &GraphSim) -> (String, usize) {
    let mut by_mailbox: BTreeMap<String, Vec<DateTime<Utc>>> = BTreeMap::new();
    for m in sim.messages() {
        by_mailbox.entry(m.mailbox).or_default().push(m.received_at);
    }
    let mut worst = (String::new(), 0);
    for (mailbox, mut at) in by_mailbox {
        at.sort();
        let mut start = 0;
        for end in 0..at.len() {
            while at[end] - at[start] >= chrono::TimeDelta::seconds(60) {
                start += 1;
            }
            if end + 1 - start > worst.1 {
                worst = (mailbox.clone(), end + 1 - start);
            }
        }
    }
    worst
}

/// The pages section's figures, ms (p50, max).
#[derive(Debug, Clone, Serialize)]
struct Pages {
    mailboxes: u64,
    rows_in_messages: i64,
    first_page_of_50_ms: (f64, f64),
    last_page_of_50_ms: (f64, f64),
    page_of_500_ms: (f64, f64),
    cli_first_page_ms: (f64, f64),
    fifty_one_at_a_time_ms: (f64, f64),
}

async fn pages(args: &Args, arm: &Arm, queue: &MeasuredRedis, cluster: &PrivateCluster) -> Pages {
    if args.page_mailboxes > args.mailboxes {
        let setup = arm.db.setup_pool().await;
        add_mailboxes(
            &setup,
            args.mailboxes,
            args.page_mailboxes - args.mailboxes,
            args.tenants,
        )
        .await;
        arm.db.settle(setup).await;
    }
    let env = arm.env(args, queue, cluster);
    let config = mail_worker::config::Config::from_lookup(|n| env.get(n).map(str::to_owned))
        .unwrap_or_else(|e| fail(&format!("the pages' config: {e}")));
    let pool = &arm.db.pool;
    let report = |page: u32, per_page: u32| {
        let config = &config;
        async move {
            let mut samples = Vec::new();
            let mut listed = Vec::new();
            for _ in 0..10 {
                let started = Instant::now();
                let p = mail_worker::reports::usage::usage_page(config, pool, page, per_page)
                    .await
                    .unwrap_or_else(|e| fail(&format!("usage_page: {e}")));
                samples.push(started.elapsed().as_secs_f64() * 1_000.0);
                if let Some(e) = p.mailboxes.iter().find_map(|u| u.limiter_error.as_ref()) {
                    fail(&format!("usage_page could not read the limiter: {e}"));
                }
                listed = p.mailboxes;
            }
            (support::p50_max(samples), listed)
        }
    };
    let (first, listed) = report(1, 50).await;
    let total = mail_worker::reports::usage::usage_page(&config, pool, 1, 1)
        .await
        .map_or(0, |p| p.total);
    let last_page = u32::try_from(total.div_ceil(50)).unwrap_or(1).max(1);
    let (last, _) = report(last_page, 50).await;
    let (of_500, _) = report(1, 500).await;
    let mut one_at_a_time = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        for u in &listed {
            let address = mail_worker::domain::MailboxAddress::parse(&u.mailbox)
                .unwrap_or_else(|e| fail(&e.to_string()));
            mail_worker::reports::usage::mailbox_usage(&config, pool, &address)
                .await
                .unwrap_or_else(|e| fail(&format!("mailbox_usage: {e}")));
        }
        one_at_a_time.push(started.elapsed().as_secs_f64() * 1_000.0);
    }
    let mut cli = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        env.run_cli(&["mailbox", "usage", "--page", "1"]);
        cli.push(started.elapsed().as_secs_f64() * 1_000.0);
    }
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM messages")
        .fetch_one(pool)
        .await
        .unwrap_or(0);
    Pages {
        mailboxes: total,
        rows_in_messages: rows,
        first_page_of_50_ms: first,
        last_page_of_50_ms: last,
        page_of_500_ms: of_500,
        cli_first_page_ms: support::p50_max(cli),
        fifty_one_at_a_time_ms: support::p50_max(one_at_a_time),
    }
}

#[derive(Debug, Serialize)]
struct Report {
    #[serde(flatten)]
    run: RunInfo,
    mailboxes: usize,
    tenants: usize,
    messages_per_mailbox: usize,
    history: u64,
    per_minute: u32,
    latency_ms: u64,
    seconds: u64,
    setup_s: Vec<(String, f64)>,
    runs: Vec<Run>,
    max_per_rolling_minute: Vec<(String, String, usize)>,
    comparisons: Vec<Comparison>,
    pages: Option<Pages>,
}

/// One arm at one replica count, its rounds together (CPU and time summed, then per message).
#[derive(Debug, Clone, Default, Serialize)]
struct ArmTotal {
    sent: usize,
    sends_per_s: f64,
    postgres_ms_per_message: f64,
    all_ms_per_message: f64,
    machine_busy_percent: f64,
    claim_calls: i64,
    claim_mean_ms: f64,
    claim: ClaimHistogram,
    /// Per statement, its rounds together.
    statements: Vec<StatementTotal>,
}

/// One statement over an arm's rounds.
#[derive(Debug, Clone, Default, Serialize)]
struct StatementTotal {
    query: String,
    calls_per_message: f64,
    exec_ms_per_message: f64,
    hit_per_call: f64,
    read_per_call: f64,
}

impl StatementTotal {
    /// `runs`' statements merged by their text, per message of `sent`, most time first.
    fn merged(runs: &[&Run], sent: usize) -> Vec<Self> {
        let n = sent.max(1) as f64;
        let mut out: Vec<(String, f64, f64, f64, f64)> = Vec::new();
        for st in runs.iter().flat_map(|r| &r.statements) {
            let calls = st.calls as f64;
            let (hit, read) = (st.hit_per_call * calls, st.read_per_call * calls);
            match out.iter_mut().find(|s| s.0 == st.query) {
                Some(s) => {
                    s.1 += calls;
                    s.2 += st.total_ms;
                    s.3 += hit;
                    s.4 += read;
                }
                None => out.push((st.query.clone(), calls, st.total_ms, hit, read)),
            }
        }
        let mut out: Vec<Self> = out
            .into_iter()
            .map(|(query, calls, ms, hit, read)| Self {
                query,
                calls_per_message: calls / n,
                exec_ms_per_message: ms / n,
                hit_per_call: hit / calls.max(1.0),
                read_per_call: read / calls.max(1.0),
            })
            .collect();
        out.sort_by(|a, b| b.exec_ms_per_message.total_cmp(&a.exec_ms_per_message));
        out
    }
}

impl ArmTotal {
    fn of(runs: &[&Run]) -> Self {
        let sent: usize = runs.iter().map(|r| r.sent).sum();
        let per = |f: &dyn Fn(&Run) -> f64| {
            runs.iter().map(|r| f(r) * r.sent as f64).sum::<f64>() / sent.max(1) as f64
        };
        let mean = |f: &dyn Fn(&Run) -> f64| {
            runs.iter().map(|r| f(r)).sum::<f64>() / runs.len().max(1) as f64
        };
        let calls: i64 = runs.iter().map(|r| r.claim.calls).sum();
        Self {
            sent,
            sends_per_s: mean(&|r| r.sends_per_s),
            postgres_ms_per_message: per(&|r| r.cpu_ms_per_message_postgres),
            all_ms_per_message: per(&|r| r.cpu_ms_per_message_total),
            machine_busy_percent: mean(&|r| r.machine_busy_percent),
            claim_calls: calls,
            claim_mean_ms: runs
                .iter()
                .map(|r| r.claim.mean_ms * r.claim.calls as f64)
                .sum::<f64>()
                / calls.max(1) as f64,
            claim: ClaimHistogram::of(
                runs.iter()
                    .fold(Buckets::default(), |b, r| b.add(&r.claim_histogram.buckets)),
            ),
            statements: StatementTotal::merged(runs, sent),
        }
    }
}

/// Both arms at one replica count.
#[derive(Debug, Clone, Serialize)]
struct Comparison {
    replicas: u32,
    empty: ArmTotal,
    history: Option<ArmTotal>,
    /// history ÷ empty, PostgreSQL CPU per message, each round.
    postgres_ratio_by_round: Vec<f64>,
    /// The sends/s this machine's cores would carry at the empty arm's CPU per message (all
    /// processes), were they all ours.
    cores_would_carry_per_s: f64,
}

/// `v` ms with two decimals, `-` when not measured.
fn ms(v: Option<f64>) -> String {
    v.map_or("-".to_owned(), |v| format!("{v:.2}"))
}

fn print_total(arm: &str, t: &ArmTotal) {
    println!(
        "            {arm:<7} {:>6.1} sends/s, PostgreSQL {:.3} CPU ms/msg, all processes {:.2}, machine {:.0} % busy; claim p50 {} p99 {} ms ({} statements), mean {:.2} ms",
        t.sends_per_s,
        t.postgres_ms_per_message,
        t.all_ms_per_message,
        t.machine_busy_percent,
        ms(t.claim.p50_ms),
        ms(t.claim.p99_ms),
        t.claim.count,
        t.claim_mean_ms,
    );
}

fn print_statements(empty: &ArmTotal, history: &ArmTotal) {
    println!(
        "            statements, exec ms per sent message (calls per message, buffers hit/read per call): empty | history"
    );
    let mut queries: Vec<&str> = Vec::new();
    for st in history
        .statements
        .iter()
        .take(8)
        .chain(empty.statements.iter().take(8))
    {
        if !queries.contains(&st.query.as_str()) {
            queries.push(&st.query);
        }
    }
    let cell = |t: &ArmTotal, q: &str| {
        t.statements
            .iter()
            .find(|s| s.query == q)
            .map_or(format!("{:>28}", "-"), |s| {
                format!(
                    "{:>7.4} ({:.4}, {:>4.0}/{:<5.1})",
                    s.exec_ms_per_message, s.calls_per_message, s.hit_per_call, s.read_per_call
                )
            })
    };
    for q in queries {
        println!(
            "              {} | {}  {q}",
            cell(empty, q),
            cell(history, q)
        );
    }
}

/// History against empty at each replica count, and what the CPU per message says of the
/// machine.
fn compare(args: &Args, runs: &[Run]) -> Vec<Comparison> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let budget = args.mailboxes as f64 * f64::from(args.per_minute) / 60.0;
    let ratio = |h: f64, e: f64| h / e.max(1e-9);
    let mut out = Vec::new();
    for &replicas in &args.replicas {
        let of = |history: bool| -> Vec<&Run> {
            runs.iter()
                .filter(|r| r.replicas == replicas && (r.history > 0) == history)
                .collect()
        };
        let empty = ArmTotal::of(&of(false));
        let history = (args.history > 0).then(|| ArmTotal::of(&of(true)));
        let by_round: Vec<f64> = (1..=args.rounds)
            .filter_map(|round| {
                let e = of(false).into_iter().find(|r| r.round == round)?;
                let h = of(true).into_iter().find(|r| r.round == round)?;
                Some(ratio(
                    h.cpu_ms_per_message_postgres,
                    e.cpu_ms_per_message_postgres,
                ))
            })
            .collect();
        let carry = cores * 1_000.0 / empty.all_ms_per_message.max(1e-9);
        println!("{replicas} replicas, {} round(s) each arm:", args.rounds);
        print_total("empty", &empty);
        println!(
            "            at the empty arm's CPU per message this machine's {cores} cores would carry {carry:.0} sends/s ({:.2} × Σ L/60 = {budget:.1})",
            carry / budget
        );
        if let Some(h) = &history {
            print_total("history", h);
            let q = |h: Option<f64>, e: Option<f64>| match (h, e) {
                (Some(h), Some(e)) => format!("{:.2}", ratio(h, e)),
                _ => "-".to_owned(),
            };
            println!(
                "            history ÷ empty: PostgreSQL CPU per message {:.2} (each round {}), claim p50 {} p99 {} mean {:.2}, sends/s {:.3}",
                ratio(h.postgres_ms_per_message, empty.postgres_ms_per_message),
                by_round
                    .iter()
                    .map(|r| format!("{r:.2}"))
                    .collect::<Vec<_>>()
                    .join(" / "),
                q(h.claim.p50_ms, empty.claim.p50_ms),
                q(h.claim.p99_ms, empty.claim.p99_ms),
                ratio(h.claim_mean_ms, empty.claim_mean_ms),
                ratio(h.sends_per_s, empty.sends_per_s)
            );
            print_statements(&empty, h);
        }
        out.push(Comparison {
            replicas,
            empty,
            history,
            postgres_ratio_by_round: by_round,
            cores_would_carry_per_s: carry,
        });
    }
    out
}

fn print_run(r: &Run) {
    let list = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.2}"))
            .collect::<Vec<_>>()
            .join("/")
    };
    println!(
        "{:<8} {:>2} replicas, round {}: {:>6.1} sends/s of Σ L/60 {:.1} = {:.3}, of the pacing's ceiling for normal mail {:.1} = {:.3}; {} Graph 429s; {} mailboxes without due work at the end",
        r.arm,
        r.replicas,
        r.round,
        r.sends_per_s,
        r.budget_per_s,
        r.ratio,
        r.pacing_ceiling_per_s,
        r.ratio_of_pacing_ceiling,
        r.graph_429s,
        r.mailboxes_without_due_work
    );
    println!(
        "            claim: {} calls, mean {:.2} ms, stddev {:.2}, max {:.1}, {:.1} rows/call; PostgreSQL {:.2} CPU ms/msg",
        r.claim.calls,
        r.claim.mean_ms,
        r.claim.stddev_ms,
        r.claim.max_ms,
        r.claim.rows_per_call,
        r.cpu_ms_per_message_postgres
    );
    println!(
        "            claim histogram (daemons): {} statements, p50 {} ms, p99 {} ms",
        r.claim_histogram.count,
        ms(r.claim_histogram.p50_ms),
        ms(r.claim_histogram.p99_ms)
    );
    println!(
        "            CPU ms/msg: daemons {}, Redis masters {}, graph-sim+harness {:.2}, all {:.2}; machine {:.0} % busy",
        list(&r.cpu_ms_per_message_daemons),
        list(&r.cpu_ms_per_message_redis),
        r.cpu_ms_per_message_graph_sim_and_harness,
        r.cpu_ms_per_message_total,
        r.machine_busy_percent
    );
    println!(
        "            Redis: {:.1} commands per script call, {:.1} per sent message; {:.1} MiB used, {} keys",
        r.redis_commands_per_script_call,
        r.redis_commands_per_sent,
        r.redis_used_memory as f64 / 1_048_576.0,
        r.redis_keys
    );
}

/// The windows in order: the arms take turns, every other round the other first, so a load
/// that comes and goes falls on both alike; with `--steady-within`, one arm through every
/// replica count and round, then the other, so no arm pauses between its own windows (its
/// slots would pass unsent, and the late bookings then go at up to L a minute, the share
/// reserved for `high` included, until they have caught up: a burst, not the pace).
fn schedule<'a>(args: &Args, arms: &'a [Arm]) -> Vec<(&'a Arm, u32, u32)> {
    let mut out = Vec::new();
    for &replicas in &args.replicas {
        for round in 1..=args.rounds {
            let mut order: Vec<&Arm> = arms.iter().collect();
            if round % 2 == 0 {
                order.reverse();
            }
            out.extend(order.into_iter().map(|arm| (arm, replicas, round)));
        }
    }
    if args.steady_within > 0 {
        // A stable sort: within an arm, the replica counts and rounds keep their order.
        out.sort_by_key(|(arm, _, _)| arm.history);
    }
    out
}

async fn run(args: Args, machine: Machine) -> ExitCode {
    let shared_buffers = format!("shared_buffers={}", args.shared_buffers);
    let pg = PrivatePostgres::start(
        200,
        &[
            "shared_preload_libraries=pg_stat_statements",
            &shared_buffers,
        ],
    );
    let cluster = PrivateCluster::start(3);
    let queue = MeasuredRedis::start().await;
    println!(
        "scale: {} mailboxes in {} tenants, {} messages each, L = {}/min, graph-sim +{} ms; replicas {:?}, {} s warm-up + {} s measured each; history arm {} rows; PostgreSQL shared_buffers {}",
        args.mailboxes,
        args.tenants,
        args.messages,
        args.per_minute,
        args.latency_ms,
        args.replicas,
        args.warmup,
        args.seconds,
        args.history,
        args.shared_buffers
    );
    let mut histories = vec![0];
    if args.history > 0 {
        histories.push(args.history);
    }
    let last = *histories.last().unwrap_or(&0);
    let (mut runs, mut rolling, mut setup_s, mut paged) =
        (Vec::new(), Vec::new(), Vec::new(), None);
    let mut arms = Vec::new();
    for history in histories {
        let arm = Arm::setup(&pg, &args, history).await;
        println!("arm {}: set up in {:.0} s", arm.name, arm.setup_s);
        setup_s.push((arm.name.clone(), arm.setup_s));
        arms.push(arm);
    }
    for (arm, replicas, round) in schedule(&args, &arms) {
        let r = measure(&args, arm, (replicas, round), (&pg, &queue, &cluster)).await;
        print_run(&r);
        runs.push(r);
    }
    for arm in &arms {
        let (mailbox, worst) = max_per_rolling_minute(&arm.sim);
        println!(
            "arm {}: at most {worst} messages of one mailbox ({mailbox}) in a rolling 60 s (L = {})",
            arm.name, args.per_minute
        );
        rolling.push((arm.name.clone(), mailbox, worst));
        if arm.history == last {
            let p = pages(&args, arm, &queue, &cluster).await;
            println!(
                "pages ({} mailboxes, {} rows; p50 / max of 10, ms): first page of 50 {:.1} / {:.1}, last page {:.1} / {:.1}, a page of 500 {:.1} / {:.1}; `mailbox usage --page 1` as a process {:.1} / {:.1}; the first page's 50 mailboxes one at a time {:.1} / {:.1}",
                p.mailboxes,
                p.rows_in_messages,
                p.first_page_of_50_ms.0,
                p.first_page_of_50_ms.1,
                p.last_page_of_50_ms.0,
                p.last_page_of_50_ms.1,
                p.page_of_500_ms.0,
                p.page_of_500_ms.1,
                p.cli_first_page_ms.0,
                p.cli_first_page_ms.1,
                p.fifty_one_at_a_time_ms.0,
                p.fifty_one_at_a_time_ms.1
            );
            paged = Some(p);
        }
    }
    for arm in arms {
        if let Err(e) = arm.sim.shutdown().await {
            eprintln!("warning: graph-sim: {e}");
        }
        arm.db.drop().await;
    }
    let comparisons = compare(&args, &runs);
    let over = rolling
        .iter()
        .any(|(_, _, n)| *n > args.per_minute as usize);
    let throttled = runs.iter().any(|r| r.graph_429s > 0);
    let report = Report {
        run: RunInfo {
            benchmark: "scale",
            machine,
            smoke: args.run.smoke,
        },
        mailboxes: args.mailboxes,
        tenants: args.tenants,
        messages_per_mailbox: args.messages,
        history: args.history,
        per_minute: args.per_minute,
        latency_ms: args.latency_ms,
        seconds: args.seconds,
        setup_s,
        runs,
        max_per_rolling_minute: rolling,
        comparisons,
        pages: paged,
    };
    let path = support::write_json(
        if args.run.smoke {
            "scale-smoke"
        } else {
            "scale"
        },
        &report,
    );
    println!("results: {}", path.display());
    if over || throttled {
        eprintln!("a mailbox went over L in a rolling minute or Graph answered 429");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    support::bench_main(run)
}
