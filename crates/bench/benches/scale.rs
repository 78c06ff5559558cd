//! Benchmark 13, a campaign day at scale (issue 23): a private PostgreSQL, a private 3-master
//! Redis Cluster for the limiter, graph-sim in this process with latency and Exchange's
//! limits, `--mailboxes` system mailboxes in `--tenants` Graph tenants with `--messages` due
//! each, and `mail-worker run` replicas (the real binary). Two arms, each on a fresh database:
//! the `messages` table empty, then pre-filled with `--history` finished (`SENT`) rows of the
//! last 29 days (one `generate_series` insert, then `VACUUM ANALYZE`). Each arm runs each
//! `--replicas` count for `--warmup` s, then measures `--seconds` s:
//!
//! - sends/s (graph-sim's accepted messages in the window) against Σ L/60 (every mailbox at
//!   `MAIL_RATE_LIMIT_PER_MINUTE` = `--per-minute`; goal ≥ 0.95 while every mailbox has due
//!   work, which the benchmark checks at the window's end);
//! - Graph 429s (graph-sim's refusals) and the most messages of one mailbox in any rolling 60 s
//!   (graph-sim's records; goal ≤ L);
//! - the claim statement (pg_stat_statements: calls, mean, stddev, max) and PostgreSQL's CPU
//!   (the whole private server) per sent message, empty table against history (goal within 10 %);
//! - Redis commands per script call and per sent message, and `used_memory` (all masters);
//! - CPU ms per sent message of each process (`/proc/PID/stat`) and the machine's busy share
//!   (`/proc/stat`): where the sends/s stop growing with replicas, the CPU binds.
//!
//! Then, on the history arm with its backlog in place and mailboxes added up to
//! `--page-mailboxes`: the mailboxes page's report (`admin::usage::usage_page`, what the admin
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
//! `bench-results/scale-<arm>-r<replicas>-<n>.log`. Exit status 1 when a Graph 429 was seen or a
//! mailbox went over L in a rolling minute; 2 when the benchmark could not run.

use mail_worker_bench as support;

use std::{collections::BTreeMap, process::ExitCode, time::Duration, time::Instant};

use chrono::{DateTime, Utc};
use clap::Parser;
use graph_sim::{GraphSim, Latency, SimConfig, SimMailbox, Target};
use serde::Serialize;
use support::{
    Machine, RunInfo,
    cluster::PrivateCluster,
    daemon::{self, BenchDb, Daemon, DaemonEnv, PrivatePostgres, PrivateRedis, total_calls},
    fail,
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
    /// `MAIL_RATE_LIMIT_PER_MINUTE` (L) of every mailbox.
    #[arg(long, default_value_t = 25)]
    per_minute: u32,
    /// graph-sim's latency per sendMail, ms.
    #[arg(long, default_value_t = 50)]
    latency_ms: u64,
    /// Mailboxes for the pages section (at least `--mailboxes`).
    #[arg(long, default_value_t = 5_000)]
    page_mailboxes: usize,
    /// A smoke run for CI: 20 mailboxes in 4 tenants, 10 messages each, 2,000 rows of
    /// history, 1 replica for 3 s, 100 mailboxes paged (figures meaningless).
    #[arg(long)]
    smoke: bool,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

impl support::BenchArgs for Args {
    fn smoke(&mut self) {
        self.mailboxes = 20;
        self.tenants = 4;
        self.messages = 10;
        self.history = 2_000;
        self.replicas = vec![1];
        self.seconds = 3;
        self.warmup = 2;
        self.page_mailboxes = 100;
    }

    fn invalid(&self) -> Option<&'static str> {
        (self.mailboxes == 0 || self.tenants == 0 || self.messages == 0 || self.seconds == 0)
            .then_some("--mailboxes, --tenants, --messages and --seconds must be positive")
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
            config = config.with_mailbox(SimMailbox::new(address, &tenant));
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

    fn env(&self, args: &Args, queue: &PrivateRedis, cluster: &PrivateCluster) -> DaemonEnv {
        let mut env = DaemonEnv::new(&self.db.url, &queue.url, &queue.url, &self.sim);
        env.set("MAIL_RATE_LIMIT_REDIS_URL", cluster.seeds())
            .set("MAIL_RATE_LIMIT_KEY_PREFIX", &self.prefix)
            .set("MAIL_RATE_LIMIT_ALGORITHM", "paced")
            .set("MAIL_RATE_LIMIT_PER_MINUTE", args.per_minute);
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

/// One replica count of one arm.
#[derive(Debug, Clone, Serialize)]
struct Run {
    arm: String,
    history: u64,
    replicas: u32,
    window_s: f64,
    sent: usize,
    sends_per_s: f64,
    budget_per_s: f64,
    ratio: f64,
    mailboxes_without_due_work: i64,
    graph_429s: usize,
    claim: ClaimStatement,
    cpu_ms_per_message_daemons: Vec<f64>,
    cpu_ms_per_message_postgres: f64,
    cpu_ms_per_message_redis: Vec<f64>,
    cpu_ms_per_message_graph_sim_and_harness: f64,
    machine_busy_percent: f64,
    redis_commands_per_script_call: f64,
    redis_commands_per_sent: f64,
    redis_used_memory: u64,
    redis_keys: u64,
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

async fn measure(
    args: &Args,
    arm: &Arm,
    replicas: u32,
    (pg, queue, cluster): (&PrivatePostgres, &PrivateRedis, &PrivateCluster),
) -> Run {
    let env = arm.env(args, queue, cluster);
    let mut daemons = Vec::new();
    for d in 0..replicas {
        let log = daemon::results_path(&format!("scale-{}-r{replicas}-{}.log", arm.name, d + 1));
        daemons.push(Daemon::spawn(&env, &log).await);
    }
    tokio::time::sleep(Duration::from_secs(args.warmup)).await;
    sqlx::query("SELECT pg_stat_statements_reset()")
        .execute(&arm.db.pool)
        .await
        .unwrap_or_else(|e| fail(&format!("pg_stat_statements_reset: {e}")));
    let before = Snapshot::take(&daemons, pg, cluster);
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    let after = Snapshot::take(&daemons, pg, cluster);
    let claim = claim_statement(&arm.db).await;
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
    let sends_per_s = sent as f64 / window_s;
    Run {
        arm: arm.name.clone(),
        history: arm.history,
        replicas,
        window_s,
        sent,
        sends_per_s,
        budget_per_s,
        ratio: sends_per_s / budget_per_s,
        mailboxes_without_due_work: idle,
        graph_429s: arm
            .sim
            .refusals()
            .iter()
            .filter(|r| r.at >= before.utc && r.at < after.utc)
            .count(),
        claim,
        cpu_ms_per_message_daemons: support::deltas(&before.daemons, &after.daemons)
            .map(per)
            .collect(),
        cpu_ms_per_message_postgres: per(after.postgres - before.postgres),
        cpu_ms_per_message_redis: support::deltas(&before.redis, &after.redis)
            .map(per)
            .collect(),
        cpu_ms_per_message_graph_sim_and_harness: per(after.harness - before.harness),
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

/// p50 and max of `samples`, ms.
fn p50_max(mut samples: Vec<f64>) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    (
        samples.get(samples.len() / 2).copied().unwrap_or(0.0),
        samples.last().copied().unwrap_or(0.0),
    )
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

async fn pages(args: &Args, arm: &Arm, queue: &PrivateRedis, cluster: &PrivateCluster) -> Pages {
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
                let p = mail_worker::admin::usage::usage_page(config, pool, page, per_page)
                    .await
                    .unwrap_or_else(|e| fail(&format!("usage_page: {e}")));
                samples.push(started.elapsed().as_secs_f64() * 1_000.0);
                if let Some(e) = p.mailboxes.iter().find_map(|u| u.limiter_error.as_ref()) {
                    fail(&format!("usage_page could not read the limiter: {e}"));
                }
                listed = p.mailboxes;
            }
            (p50_max(samples), listed)
        }
    };
    let (first, listed) = report(1, 50).await;
    let total = mail_worker::admin::usage::usage_page(&config, pool, 1, 1)
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
            mail_worker::admin::usage::mailbox_usage(&config, pool, &address)
                .await
                .unwrap_or_else(|e| fail(&format!("mailbox_usage: {e}")));
        }
        one_at_a_time.push(started.elapsed().as_secs_f64() * 1_000.0);
    }
    let mut cli = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let out = std::process::Command::new(&*daemon::MAIL_WORKER)
            .args(["mailbox", "usage", "--page", "1"])
            .env_clear()
            .envs(&env.0)
            .output()
            .unwrap_or_else(|e| fail(&format!("mailbox usage: {e}")));
        if !out.status.success() {
            fail(&format!(
                "mailbox usage failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
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
        cli_first_page_ms: p50_max(cli),
        fifty_one_at_a_time_ms: p50_max(one_at_a_time),
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
    pages: Option<Pages>,
}

fn print_run(r: &Run) {
    let list = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.2}"))
            .collect::<Vec<_>>()
            .join("/")
    };
    println!(
        "{:<8} {:>2} replicas: {:>6.1} sends/s of Σ L/60 {:.1} = {:.3}; {} Graph 429s; {} mailboxes without due work at the end",
        r.arm,
        r.replicas,
        r.sends_per_s,
        r.budget_per_s,
        r.ratio,
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
        "            CPU ms/msg: daemons {}, Redis masters {}, graph-sim+harness {:.2}; machine {:.0} % busy",
        list(&r.cpu_ms_per_message_daemons),
        list(&r.cpu_ms_per_message_redis),
        r.cpu_ms_per_message_graph_sim_and_harness,
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

async fn run(args: Args, machine: Machine) -> ExitCode {
    let pg = PrivatePostgres::start(200, &["shared_preload_libraries=pg_stat_statements"]);
    let cluster = PrivateCluster::start(3);
    let queue = PrivateRedis::start().await;
    println!(
        "scale: {} mailboxes in {} tenants, {} messages each, L = {}/min, graph-sim +{} ms; replicas {:?}, {} s warm-up + {} s measured each; history arm {} rows",
        args.mailboxes,
        args.tenants,
        args.messages,
        args.per_minute,
        args.latency_ms,
        args.replicas,
        args.warmup,
        args.seconds,
        args.history
    );
    let mut histories = vec![0];
    if args.history > 0 {
        histories.push(args.history);
    }
    let last = *histories.last().unwrap_or(&0);
    let (mut runs, mut rolling, mut setup_s, mut paged) =
        (Vec::new(), Vec::new(), Vec::new(), None);
    for history in histories {
        let arm = Arm::setup(&pg, &args, history).await;
        println!("arm {}: set up in {:.0} s", arm.name, arm.setup_s);
        setup_s.push((arm.name.clone(), arm.setup_s));
        for &replicas in &args.replicas {
            let r = measure(&args, &arm, replicas, (&pg, &queue, &cluster)).await;
            print_run(&r);
            runs.push(r);
        }
        let (mailbox, worst) = max_per_rolling_minute(&arm.sim);
        println!(
            "arm {}: at most {worst} messages of one mailbox ({mailbox}) in a rolling 60 s (L = {})",
            arm.name, args.per_minute
        );
        rolling.push((arm.name.clone(), mailbox, worst));
        if history == last {
            let p = pages(&args, &arm, &queue, &cluster).await;
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
        if let Err(e) = arm.sim.shutdown().await {
            eprintln!("warning: graph-sim: {e}");
        }
        arm.db.drop().await;
    }
    // History against empty at each replica count.
    for r in runs.iter().filter(|r| r.history > 0) {
        if let Some(e) = runs
            .iter()
            .find(|e| e.history == 0 && e.replicas == r.replicas)
        {
            println!(
                "{} replicas, history ÷ empty: PostgreSQL CPU per message {:.2}, claim mean {:.2}, sends/s {:.3}",
                r.replicas,
                r.cpu_ms_per_message_postgres / e.cpu_ms_per_message_postgres.max(1e-9),
                r.claim.mean_ms / e.claim.mean_ms.max(1e-9),
                r.sends_per_s / e.sends_per_s.max(1e-9)
            );
        }
    }
    let over = rolling
        .iter()
        .any(|(_, _, n)| *n > args.per_minute as usize);
    let throttled = runs.iter().any(|r| r.graph_429s > 0);
    let report = Report {
        run: RunInfo {
            benchmark: "scale",
            machine,
            smoke: args.smoke,
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
        pages: paged,
    };
    let path = support::write_json(if args.smoke { "scale-smoke" } else { "scale" }, &report);
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
