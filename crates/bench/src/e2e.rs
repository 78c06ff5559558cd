//! The end-to-end scenario of benchmarks 4 and 5: N messages spread round robin over M system
//! mailboxes, graph-sim in process adding a fixed latency to every sendMail, and one or more
//! `mail-worker run` processes on the same database and queue until every message is `SENT`.
//! Measures throughput, CPU per process (daemons, their PostgreSQL backends, Redis, graph-sim),
//! peak RSS, Redis commands, PostgreSQL row writes and per-message wall phases; optionally
//! records a `perf` profile of the (first) daemon.

use std::{
    collections::BTreeMap,
    path::PathBuf,
    process::Stdio,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use graph_sim::{GraphSim, Latency, Target};
use mail_worker::domain::MailboxAddress;
use serde::Serialize;
use uuid::Uuid;

use crate::{
    daemon::{self, BenchDb, CommandStats, Daemon, DaemonEnv, DaemonExit, MeasuredRedis},
    fail, median,
};

/// The load of benchmarks 4 and 5 (`end_to_end`, `profile`): their first three options.
#[derive(Debug, Clone, clap::Args)]
pub struct Load {
    /// Messages per run (end_to_end: of sections 1–3).
    #[arg(long, default_value_t = 5_000)]
    pub messages: usize,
    /// Mailboxes they are spread over (round robin).
    #[arg(long, default_value_t = 500)]
    pub mailboxes: usize,
    /// Latency graph-sim adds to every sendMail, ms (end_to_end: of sections 1, 2, 4 and 5).
    #[arg(long, default_value_t = 20)]
    pub latency_ms: u64,
}

impl Load {
    /// No messages or no mailboxes: nothing to measure.
    pub fn is_empty(&self) -> bool {
        self.messages == 0 || self.mailboxes == 0
    }

    /// A smoke run's: 100 messages over 20 mailboxes.
    pub fn smoke(&mut self) {
        self.messages = 100;
        self.mailboxes = 20;
    }
}

/// `MAIL_RATE_LIMIT_PER_MINUTE` of the benchmark's mailboxes: high enough that the budgets
/// (`mailboxes × limit / 60` sends/s) never bind; graph-sim's own Exchange limits (30 a rolling
/// minute per mailbox) do not either, with a few dozen messages per mailbox.
pub const BENCH_PER_MINUTE: u32 = 100_000;

/// The fixed parts of the scenario, set up once.
pub struct World {
    /// The benchmark database (mailboxes registered; messages inserted per run).
    pub db: BenchDb,
    /// graph-sim, in this process.
    pub sim: GraphSim,
    /// The mailboxes and their ids.
    pub mailboxes: Vec<(MailboxAddress, Uuid)>,
}

impl World {
    /// Creates the database `bench_<label>_<hex>` on `server`, registers `mailboxes` system
    /// mailboxes `e2e<i>@contoso.example` and starts graph-sim (Exchange's default limits) for
    /// them.
    pub async fn new(server: &url::Url, label: &str, mailboxes: usize) -> Self {
        let db = BenchDb::create(server, label).await;
        let setup = db.setup_pool().await;
        let mailboxes = daemon::add_mailboxes(&setup, "e2e", mailboxes).await;
        db.settle(setup).await;
        let sim = daemon::start_sim(&mailboxes).await;
        Self { db, sim, mailboxes }
    }

    /// `CREATE EXTENSION pg_stat_statements` in the benchmark database (the server must load
    /// it: `shared_preload_libraries`).
    pub async fn enable_statements(&self) {
        sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .execute(&self.db.pool)
            .await
            .unwrap_or_else(|e| fail(&format!("cannot create pg_stat_statements: {e}")));
    }

    /// Drops the database and stops graph-sim.
    pub async fn close(self) {
        if let Err(e) = self.sim.shutdown().await {
            eprintln!("warning: graph-sim: {e}");
        }
        self.db.drop().await;
    }
}

/// One configuration to measure.
#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    /// What it is for, e.g. `defaults` or `scale-out`.
    pub section: String,
    /// `mail-worker run` processes.
    pub daemons: u32,
    /// `WORKER_CONCURRENCY` of each (`None`: the default).
    pub concurrency: Option<u32>,
    /// `SCHEDULER_INTERVAL` of each (`None`: the default).
    pub scheduler_interval_ms: Option<u64>,
    /// Latency graph-sim adds to every sendMail, ms.
    pub latency_ms: u64,
    /// Messages to send.
    pub messages: usize,
    /// `Some(r)`: the messages come due at `r` a second from the start instead of all at once.
    pub arrivals_per_s: Option<f64>,
    /// Give up after this long (the result is then marked incomplete).
    pub timeout: Duration,
}

/// `WORKER_CONCURRENCY`'s default.
pub const DEFAULT_CONCURRENCY: u32 = 128;

impl Scenario {
    /// A short name: `defaults: 1 daemon, concurrency 16, +20 ms`.
    pub fn name(&self) -> String {
        format!(
            "{}: {} daemon{}, concurrency {}, +{} ms{}{}",
            self.section,
            self.daemons,
            if self.daemons == 1 { "" } else { "s" },
            self.concurrency(),
            self.latency_ms,
            self.scheduler_interval_ms
                .map(|ms| format!(", claim idle {ms} ms"))
                .unwrap_or_default(),
            self.arrivals_per_s
                .map(|r| format!(", {r:.0} due/s"))
                .unwrap_or_default(),
        )
    }

    /// `WORKER_CONCURRENCY` in effect.
    pub fn concurrency(&self) -> u32 {
        self.concurrency.unwrap_or(DEFAULT_CONCURRENCY)
    }

    /// The bound set by in-flight sends: daemons × concurrency / latency, sends/s.
    pub fn concurrency_bound(&self) -> f64 {
        f64::from(self.daemons * self.concurrency()) * 1_000.0 / self.latency_ms.max(1) as f64
    }

    /// The bound set by the mailboxes' budgets: mailboxes × [`BENCH_PER_MINUTE`] / 60, sends/s.
    pub fn budget_bound(mailboxes: usize) -> f64 {
        mailboxes as f64 * f64::from(BENCH_PER_MINUTE) / 60.0
    }
}

/// CPU seconds spent on one run, by process.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CpuSplit {
    /// The daemons, from `/proc` just before they were stopped (the send phase and start-up).
    pub daemons: f64,
    /// The daemons' PostgreSQL backends (`/proc` of the server processes serving them).
    pub postgres: f64,
    /// The private Redis (queue and limiter).
    pub redis: f64,
    /// This process: graph-sim and the harness's polling.
    pub graph_sim_and_harness: f64,
}

/// Per-message wall phases, ms (p50, p90, p99).
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    /// What it measures.
    pub name: &'static str,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// The scenario.
    pub scenario: Scenario,
    /// 0-based run number.
    pub run: usize,
    /// Messages `SENT` at the end.
    pub sent: u64,
    /// All of them sent before the timeout.
    pub complete: bool,
    /// From the first claim (`min(queued_at)`) to the last `sent_at`, s.
    pub window_s: f64,
    /// sent / window.
    pub sends_per_s: f64,
    /// CPU by process.
    pub cpu: CpuSplit,
    /// Each daemon's GNU time (or `/proc`) figures over its whole life.
    pub daemon_exits: Vec<DaemonExit>,
    /// Sum of the daemons' user + system CPU over their whole lives (GNU time), s.
    pub daemon_cpu_s: f64,
    /// The largest daemon's peak RSS, MiB.
    pub peak_rss_mib: f64,
    /// The most PostgreSQL connections the daemons held at once (polled every 100 ms).
    pub peak_pg_connections: i64,
    /// Redis commands during the run (the limiter's server).
    pub redis_commands: CommandStats,
    /// Row writes (inserted + updated + deleted) per message sent.
    pub pg_row_writes_per_sent: f64,
    /// Of those, HOT updates per message sent.
    pub pg_hot_updates_per_sent: f64,
    /// `REDIS_URL`'s server (the job queue's, before issue 12): `used_memory` before the daemons
    /// started and after they stopped, bytes.
    pub queue_redis_memory: (u64, u64),
    /// Its key count, before and after.
    pub queue_redis_keys: (u64, u64),
    /// The limiter's Redis: key count before and after (its keys expire with their windows).
    pub limiter_redis_keys: (u64, u64),
    /// Wall phases of each message.
    pub phases: Vec<Phase>,
    /// graph-sim refusals (429s etc.): 0 when the spread kept every mailbox under its limits.
    pub graph_refused: u64,
    /// The most sendMail requests one mailbox had in flight.
    pub graph_max_concurrent_per_mailbox: u32,
    /// `WARN` / `ERROR` lines in the daemons' logs.
    pub warn_lines: u64,
    /// See above.
    pub error_lines: u64,
    /// Messages by status at the end.
    pub status_at_end: BTreeMap<String, i64>,
    /// The perf data file, if one was recorded.
    pub perf_data: Option<PathBuf>,
    /// The daemon's statements, if asked for.
    pub statements: Vec<Statement>,
    /// Claims that claimed something (distinct `queued_at`: `now()` of the claim statement).
    pub claim_batches: i64,
    /// Messages per claim transaction, mean.
    pub mean_claim_batch: f64,
    /// Messages in the largest claim transaction.
    pub max_claim_batch: i64,
}

/// Extra measurements of one run.
#[derive(Debug, Clone, Default)]
pub struct Extras {
    /// Record a `perf` profile of the first daemon into this file, from its start to the
    /// last send.
    pub perf_data: Option<PathBuf>,
    /// Read `pg_stat_statements` (reset before the daemons start; the extension must be
    /// loaded: see [`World::enable_statements`]).
    pub statements: bool,
}

/// One statement's share of a run, from `pg_stat_statements`.
#[derive(Debug, Clone, Serialize)]
pub struct Statement {
    /// The normalised text (`$1` for constants), whitespace collapsed.
    pub query: String,
    /// Executions.
    pub calls: i64,
    /// Executions per message sent.
    pub calls_per_message: f64,
    /// Execution time inside PostgreSQL per message sent, µs (planning not included).
    pub exec_us_per_message: f64,
    /// Mean execution time, µs.
    pub mean_exec_us: f64,
}

/// Runs `scenario` once on `world`: fresh messages, a fresh private Redis, fresh queue and key
/// prefix, `daemons` × `mail-worker run`, and the `extras` asked for.
pub async fn run_once(
    world: &World,
    scenario: &Scenario,
    run: usize,
    label: &str,
    extras: Extras,
) -> RunResult {
    let perf_data = extras.perf_data;
    let db = &world.db;
    // Fresh messages, written on a set-up pool that is closed before the measurement.
    let setup = empty_messages(db).await;
    let ids: Vec<Uuid> = world.mailboxes.iter().map(|(_, id)| *id).collect();
    daemon::insert_messages(&setup, &ids, scenario.messages).await;
    if let Some(rate) = scenario.arrivals_per_s {
        // Due at `rate` a second from 2 s after now (the daemons start meanwhile), in order.
        sqlx::query(
            "UPDATE messages m SET scheduled_on = now() + interval '2 seconds' \
                 + (o.k / $1) * interval '1 second' \
             FROM (SELECT id, (row_number() OVER (ORDER BY scheduled_on) - 1)::float8 AS k \
                   FROM messages) o WHERE m.id = o.id",
        )
        .bind(rate)
        .execute(&setup)
        .await
        .unwrap_or_else(|e| fail(&format!("cannot pace the messages: {e}")));
    }
    db.settle(setup).await;
    world.sim.reset();
    world
        .sim
        .set_latency(Target::Global, Latency::Fixed(scenario.latency_ms))
        .unwrap_or_else(|e| fail(&e.to_string()));

    let mut queue_redis = MeasuredRedis::start().await;
    let mut redis = MeasuredRedis::start().await;
    let redis_before = redis.commandstats().await;
    let queue_before = (queue_redis.used_memory().await, queue_redis.dbsize().await);
    let limiter_keys_before = redis.dbsize().await;
    let pg_before = db.row_writes().await;
    let me = std::process::id();
    let harness_cpu_before = daemon::cpu_seconds(me).unwrap_or(0.0);
    let tag = format!("{}", Uuid::new_v4().simple());
    let mut env = DaemonEnv::new(&db.url, &queue_redis.url, &redis.url, &world.sim);
    env.set("MAIL_RATE_LIMIT_PER_MINUTE", BENCH_PER_MINUTE).set(
        "MAIL_RATE_LIMIT_KEY_PREFIX",
        format!("bench:e2e:{}:rl", &tag[..12]),
    );
    if let Some(concurrency) = scenario.concurrency {
        env.set("WORKER_CONCURRENCY", concurrency);
    }
    if let Some(ms) = scenario.scheduler_interval_ms {
        env.set("SCHEDULER_INTERVAL", format!("{ms}ms"));
    }

    if extras.statements {
        sqlx::query("SELECT pg_stat_statements_reset()")
            .execute(&db.pool)
            .await
            .unwrap_or_else(|e| fail(&format!("cannot reset pg_stat_statements: {e}")));
    }
    let mut daemons = Vec::new();
    for d in 0..scenario.daemons {
        let log = daemon::results_path(&format!("{label}-daemon{}.log", d + 1));
        daemons.push(Daemon::spawn(&env, &log).await);
    }
    let perf = perf_data
        .as_ref()
        .map(|path| start_perf(daemons[0].pid, path));

    let total = scenario.messages as i64;
    let deadline = Instant::now() + scenario.timeout;
    let mut peak_connections = 0;
    let mut sent: i64;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (s, conns): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM messages WHERE status = 'SENT'), \
                    (SELECT count(*) FROM pg_stat_activity \
                     WHERE datname = current_database() AND application_name = 'mail-worker')",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap_or((0, 0));
        sent = s;
        peak_connections = peak_connections.max(conns);
        if sent >= total || Instant::now() > deadline {
            break;
        }
    }
    let complete = sent >= total;
    if !complete {
        eprintln!(
            "warning: {} run {run}: only {sent} of {total} sent within {:?}",
            scenario.name(),
            scenario.timeout
        );
    }

    // CPU by process, before anything stops.
    let perf_data = match perf {
        Some(child) => {
            stop_perf(child).await;
            perf_data
        }
        None => None,
    };
    let daemon_cpu: f64 = daemons.iter().filter_map(Daemon::cpu_seconds).sum();
    let postgres_cpu = db.daemon_backends_cpu().await;
    let redis_cpu = redis.cpu_seconds() + queue_redis.cpu_seconds();
    let harness_cpu = daemon::cpu_seconds(me).unwrap_or(0.0) - harness_cpu_before;

    let statements = if extras.statements {
        statements(db, sent).await
    } else {
        Vec::new()
    };
    let mut exits = Vec::new();
    let logs: Vec<PathBuf> = daemons.iter().map(|d| d.log.clone()).collect();
    for d in daemons {
        exits.push(d.stop(Duration::from_secs(30)).await);
    }
    db.wait_backends_gone().await;
    let redis_commands = daemon::command_delta(&redis_before, &redis.commandstats().await);
    let queue_after = (queue_redis.used_memory().await, queue_redis.dbsize().await);
    let limiter_keys_after = redis.dbsize().await;
    let pg_writes = daemon::total_writes(&daemon::writes_delta(&pg_before, &db.row_writes().await));
    drop(redis);
    drop(queue_redis);

    let (first_claim, last_sent): (Option<DateTime<Utc>>, Option<DateTime<Utc>>) =
        sqlx::query_as("SELECT min(queued_at), max(sent_at) FROM messages WHERE status = 'SENT'")
            .fetch_one(&db.pool)
            .await
            .unwrap_or((None, None));
    let window_s = match (first_claim, last_sent) {
        (Some(a), Some(b)) => (b - a).as_seconds_f64(),
        _ => f64::NAN,
    };
    let phases = phases(world, scenario.latency_ms).await;
    let (claim_batches, mean_claim_batch, max_claim_batch): (i64, f64, i64) = sqlx::query_as(
        "SELECT count(*), coalesce(avg(n), 0)::float8, coalesce(max(n), 0) \
         FROM (SELECT count(*) AS n FROM messages WHERE queued_at IS NOT NULL GROUP BY queued_at) b",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap_or((0, 0.0, 0));
    let stats = world.sim.stats();
    let mut warn_lines = 0;
    let mut error_lines = 0;
    for log in &logs {
        for line in daemon::read_log(log) {
            match line.level.as_str() {
                "WARN" => warn_lines += 1,
                "ERROR" => error_lines += 1,
                _ => {}
            }
        }
    }
    #[allow(clippy::cast_precision_loss)]
    let sent_f = sent as f64;
    RunResult {
        scenario: scenario.clone(),
        run,
        sent: u64::try_from(sent).unwrap_or(0),
        complete,
        window_s,
        sends_per_s: sent_f / window_s,
        cpu: CpuSplit {
            daemons: daemon_cpu,
            postgres: postgres_cpu,
            redis: redis_cpu,
            graph_sim_and_harness: harness_cpu,
        },
        daemon_cpu_s: exits.iter().map(|e| e.cpu_s).sum(),
        peak_rss_mib: exits.iter().map(|e| e.max_rss_kib).max().unwrap_or(0) as f64 / 1024.0,
        daemon_exits: exits,
        peak_pg_connections: peak_connections,
        redis_commands,
        pg_row_writes_per_sent: pg_writes.total() as f64 / sent_f,
        pg_hot_updates_per_sent: pg_writes.hot_updated as f64 / sent_f,
        queue_redis_memory: (queue_before.0, queue_after.0),
        queue_redis_keys: (queue_before.1, queue_after.1),
        limiter_redis_keys: (limiter_keys_before, limiter_keys_after),
        phases,
        graph_refused: stats.refused_total(),
        graph_max_concurrent_per_mailbox: stats
            .mailboxes
            .iter()
            .map(|m| m.max_concurrent)
            .max()
            .unwrap_or(0),
        warn_lines,
        error_lines,
        status_at_end: db.status_counts().await,
        perf_data,
        statements,
        claim_batches,
        mean_claim_batch,
        max_claim_batch,
    }
}

/// What an idle daemon costs: CPU per second of the daemon and of its PostgreSQL backends,
/// measured over `seconds` with nothing due (the claim loop looks again every
/// `SCHEDULER_INTERVAL`), after a 2 s start-up.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct IdleCost {
    /// Seconds measured.
    pub seconds: f64,
    /// Daemon CPU, ms per second.
    pub daemon_ms_per_s: f64,
    /// Its PostgreSQL backends' CPU, ms per second.
    pub postgres_ms_per_s: f64,
}

/// Runs one `mail-worker run` at its defaults on `world`'s database with no messages for
/// `seconds` (a fixed measuring window: the figure is a rate over time).
pub async fn idle_cost(world: &World, seconds: u64, label: &str) -> IdleCost {
    let db = &world.db;
    db.settle(empty_messages(db).await).await;
    let redis = MeasuredRedis::start().await;
    let mut env = DaemonEnv::new(&db.url, &redis.url, &redis.url, &world.sim);
    env.set("MAIL_RATE_LIMIT_KEY_PREFIX", "bench:e2e:idle:rl");
    let log = daemon::results_path(&format!("{label}-idle.log"));
    let d = Daemon::spawn(&env, &log).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let daemon_before = d.cpu_seconds().unwrap_or(0.0);
    let pg_before = db.daemon_backends_cpu().await;
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let elapsed = started.elapsed().as_secs_f64();
    let daemon_cpu = d.cpu_seconds().unwrap_or(0.0) - daemon_before;
    let pg_cpu = db.daemon_backends_cpu().await - pg_before;
    d.stop(Duration::from_secs(30)).await;
    db.wait_backends_gone().await;
    IdleCost {
        seconds: elapsed,
        daemon_ms_per_s: daemon_cpu * 1_000.0 / elapsed,
        postgres_ms_per_s: pg_cpu * 1_000.0 / elapsed,
    }
}

/// A set-up pool on `db` (closed before anything is measured) after emptying `messages`.
async fn empty_messages(db: &BenchDb) -> sqlx::PgPool {
    let setup = db.setup_pool().await;
    sqlx::query("TRUNCATE messages CASCADE")
        .execute(&setup)
        .await
        .unwrap_or_else(|e| fail(&format!("cannot empty messages: {e}")));
    setup
}

/// The daemon's statements from `pg_stat_statements` (the harness's own — those reading
/// `pg_stat_*` views, the reset — left out), most execution time first.
async fn statements(db: &BenchDb, sent: i64) -> Vec<Statement> {
    let rows: Vec<(String, i64, f64)> = sqlx::query_as(
        "SELECT query, calls, total_exec_time FROM pg_stat_statements \
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
           AND query NOT LIKE '%pg_stat%' \
         ORDER BY total_exec_time DESC",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap_or_else(|e| fail(&format!("cannot read pg_stat_statements: {e}")));
    let per = sent.max(1) as f64;
    rows.into_iter()
        .map(|(query, calls, total_ms)| Statement {
            query: query.split_whitespace().collect::<Vec<_>>().join(" "),
            calls,
            calls_per_message: calls as f64 / per,
            exec_us_per_message: total_ms * 1_000.0 / per,
            mean_exec_us: total_ms * 1_000.0 / calls.max(1) as f64,
        })
        .collect()
}

/// `subject, scheduled_on, queued_at, sent_at` of one sent message.
type TimestampRow = (String, DateTime<Utc>, DateTime<Utc>, DateTime<Utc>);

/// Per-message wall phases from PostgreSQL's timestamps and graph-sim's records (matched by
/// subject): `queued_at` is the claim (which also starts the `SENDING` lease), graph-sim's
/// `received_at` the moment it accepted the message (after its added latency), `sent_at` the
/// `SENT` write; `scheduled_on` when it came due (for paced arrivals).
async fn phases(world: &World, latency_ms: u64) -> Vec<Phase> {
    let rows: Vec<TimestampRow> = sqlx::query_as(
        "SELECT subject, scheduled_on, queued_at, sent_at FROM messages \
         WHERE status = 'SENT' AND queued_at IS NOT NULL",
    )
    .fetch_all(&world.db.pool)
    .await
    .unwrap_or_default();
    let received: BTreeMap<String, DateTime<Utc>> = world
        .sim
        .messages()
        .into_iter()
        .filter_map(|m| Some((m.subject?, m.received_at)))
        .collect();
    let latency = latency_ms as f64;
    let mut before = Vec::new();
    let mut after = Vec::new();
    let mut whole = Vec::new();
    let mut due = Vec::new();
    for (subject, scheduled, claimed, sent) in rows {
        let ms = |a: DateTime<Utc>, b: DateTime<Utc>| (b - a).as_seconds_f64() * 1_000.0;
        whole.push(ms(claimed, sent));
        due.push(ms(scheduled, sent));
        if let Some(&at) = received.get(&subject) {
            before.push(ms(claimed, at) - latency);
            after.push(ms(at, sent));
        }
    }
    let phase = |name: &'static str, mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let pick = |p: f64| {
            if v.is_empty() {
                return f64::NAN;
            }
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                clippy::cast_precision_loss
            )]
            let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
            v[rank.clamp(1, v.len()) - 1]
        };
        Phase {
            name,
            p50: pick(50.0),
            p90: pick(90.0),
            p99: pick(99.0),
        }
    };
    vec![
        phase(
            "claimed → request at graph-sim (slot wait, sender lookup, limiter, HTTP)",
            before,
        ),
        phase("graph-sim's added latency", vec![latency]),
        phase(
            "graph-sim accepted → SENT written (answer, batched SENT write)",
            after,
        ),
        phase("claimed → SENT (the whole message)", whole),
        phase(
            "due → SENT (paced runs; otherwise due a minute before the start)",
            due,
        ),
    ]
}

/// `perf record` of `pid`: software `cpu-clock` events (this VM has no hardware counters),
/// 999 Hz, DWARF call graphs (the release build keeps no frame pointers) from 32 KiB of stack
/// per sample (about 30 frames; ~33 MB per second of daemon CPU).
fn start_perf(pid: u32, out: &PathBuf) -> tokio::process::Child {
    let child = tokio::process::Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-F", "999"])
        .args(["--call-graph", "dwarf,32768", "-p"])
        .arg(pid.to_string())
        .arg("-o")
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| fail(&format!("cannot start perf: {e}")));
    if let Some(pid) = child.id() {
        crate::register_child(pid, "INT");
    }
    child
}

/// Stops `perf record` with SIGINT (it then writes its file) and waits up to 60 s.
async fn stop_perf(mut child: tokio::process::Child) {
    if let Some(pid) = child.id() {
        let _ = std::process::Command::new("kill")
            .arg("-INT")
            .arg(pid.to_string())
            .status();
        crate::unregister_child(pid);
    }
    if tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .is_err()
    {
        eprintln!("warning: perf did not stop within 60 s");
        let _ = child.kill().await;
    }
}

/// Whether `perf record -e cpu-clock` works here (installed, allowed to sample).
pub fn perf_works() -> bool {
    std::process::Command::new("perf")
        .args(["stat", "-e", "cpu-clock", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The median of `f` over `runs`.
pub fn median_of(runs: &[&RunResult], f: impl Fn(&RunResult) -> f64) -> f64 {
    median(&runs.iter().map(|r| f(r)).collect::<Vec<_>>()).unwrap_or(f64::NAN)
}
