//! What the daemon benchmarks (3 backlog, 4 end to end, 5 profile) share: private Redis servers,
//! a fresh benchmark database, system mailboxes and messages, graph-sim in process, the real
//! `mail-worker run` binary as a child process (under `/usr/bin/time -v` when it exists), its
//! JSON log, and the counters they read: CPU seconds and peak RSS from `/proc`, `INFO
//! commandstats` of each Redis, `pg_stat_user_tables` of the benchmark database.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Stdio,
    str::FromStr,
    sync::OnceLock,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use graph_sim::{GraphSim, SimConfig, SimMailbox};
use mail_worker::{
    domain::{GraphCredentials, MailboxAddress, SecretRef},
    store::{self, senders},
};
use serde::Serialize;
use sqlx::{
    PgPool,
    postgres::{PgConnectOptions, PgPoolOptions},
};
use url::Url;
use uuid::Uuid;

use crate::fail;

/// The Entra tenant of every benchmark mailbox (graph-sim's and the database's).
pub const TENANT: &str = "contoso.example";
/// The app that sends for every benchmark mailbox.
pub const CLIENT_ID: &str = "b3c0a1e2-5d4f-4a6b-9c8d-7e6f5a4b3c2d";
/// Its secret, stored as a literal in `system_mailboxes.graph_client_secret` and given to
/// graph-sim: a benchmark value, not a real credential.
pub const CLIENT_SECRET: &str = "bench-sim-secret";
/// The daemon binary of the same build as the benchmark: `bench-mail-worker` (the `mail-worker`
/// binary's own entry point, built by this package: Cargo builds a package's binaries for its
/// benchmarks) beside the running benchmark's `deps/` folder — the release build under
/// `cargo bench`, the debug one under `cargo test --bench`.
pub static MAIL_WORKER: std::sync::LazyLock<PathBuf> = std::sync::LazyLock::new(|| {
    let exe = std::env::current_exe()
        .unwrap_or_else(|e| fail(&format!("cannot find this benchmark's binary: {e}")));
    exe.parent()
        .and_then(Path::parent)
        .map(|profile_dir| profile_dir.join("bench-mail-worker"))
        .unwrap_or_else(|| fail(&format!("no build folder above {}", exe.display())))
});
/// GNU time, for the daemon's CPU time and peak RSS (`-v`); without it the figures come from
/// `/proc`.
pub const GNU_TIME: &str = "/usr/bin/time";
/// The `application_name` of the harness's own PostgreSQL connections, so they are never
/// counted as the daemon's (which connect as `mail-worker`).
pub const HARNESS_APP: &str = "mail-worker-bench";
/// The `application_name` of the harness's set-up connections (migrations, mailboxes,
/// messages), closed by [`BenchDb::settle`] before anything is measured.
pub const HARNESS_SETUP_APP: &str = "mail-worker-bench-setup";
/// The body of every benchmark message: a short HTML invitation, 1,004 bytes.
pub const BODY: &str = concat!(
    "<html><body><h1>You are invited</h1><p>Dear guest,</p>",
    "<p>We are delighted to invite you to our annual gathering. The programme starts at ",
    "nine in the morning with coffee in the main hall, followed by talks from our partners ",
    "and a walk through the new exhibition. Lunch is served at half past twelve.</p>",
    "<p>Please let us know before Friday whether you can attend, and whether you bring a ",
    "guest. Parking is available at the north entrance; the nearest station is a ten minute ",
    "walk away.</p><p>We look forward to seeing you there.</p><p>Kind regards,<br>The events ",
    "team</p><p style=\"font-size:small;color:#666\">You receive this invitation because you ",
    "registered for updates from our events team. To stop receiving invitations, reply to ",
    "this message with the word unsubscribe in the subject line.</p></body></html>",
);

/// Clock ticks per second of `/proc/<pid>/stat` times (`getconf CLK_TCK`, 100 on Linux).
fn clock_ticks() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// Fields of `/proc/<pid>/stat` after the command name (the first is field 3, `state`).
fn proc_stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// User + system CPU seconds `pid` has used so far (all its threads), from `/proc/<pid>/stat`;
/// `None` when it is gone.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let fields = proc_stat_fields(pid)?;
    // utime and stime are fields 14 and 15, i.e. 11 and 12 after `state` (field 3).
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / clock_ticks())
}

/// Peak resident set size of `pid` so far, in KiB (`VmHWM` of `/proc/<pid>/status`).
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The ids of `parent`'s child processes (a scan of `/proc/*/stat` for the parent id).
pub fn children_of(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            proc_stat_fields(pid)
                .and_then(|f| f.get(1)?.parse::<u32>().ok())
                .is_some_and(|ppid| ppid == parent)
        })
        .collect()
}

/// Sends `signal` (`TERM`, `KILL`) to process `pid` with `kill(1)` — only ever a process this
/// benchmark started.
fn signal(pid: u32, signal: &str) {
    let _ = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status();
}

/// A free TCP port on 127.0.0.1 (bound and released; another process could take it before us,
/// which start-up then reports).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| fail(&format!("cannot find a free port: {e}")))
}

/// One Redis command family's counters from `INFO commandstats`.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CommandCount {
    /// Calls (commands run by Lua scripts count too, under their own name).
    pub calls: u64,
    /// Microseconds Redis spent running them.
    pub usec: u64,
}

/// `INFO commandstats` as command name → counters (`evalsha`, `get`, `client|setinfo`, …).
pub type CommandStats = BTreeMap<String, CommandCount>;

/// The commands the harness itself sends to a private Redis to read it; left out of every
/// figure (the daemon never sends them).
pub const HARNESS_COMMANDS: [&str; 3] = ["info", "hlen", "dbsize"];

/// `after − before` per command, without [`HARNESS_COMMANDS`] and zero rows.
pub fn command_delta(before: &CommandStats, after: &CommandStats) -> CommandStats {
    after
        .iter()
        .filter(|(name, _)| !HARNESS_COMMANDS.contains(&name.as_str()))
        .filter_map(|(name, a)| {
            let b = before.get(name).copied().unwrap_or_default();
            let d = CommandCount {
                calls: a.calls.saturating_sub(b.calls),
                usec: a.usec.saturating_sub(b.usec),
            };
            (d.calls > 0).then(|| (name.clone(), d))
        })
        .collect()
}

/// Total calls of a [`CommandStats`].
pub fn total_calls(stats: &CommandStats) -> u64 {
    stats.values().map(|c| c.calls).sum()
}

/// A `redis-server` of the benchmark's own on a free port (no persistence), so `INFO
/// commandstats`, its CPU time and its memory hold only what the daemon under test did — the
/// machine's shared Redis serves other work. Killed on drop.
pub struct PrivateRedis {
    child: std::process::Child,
    /// `redis://127.0.0.1:<port>`.
    pub url: Url,
    conn: redis::aio::MultiplexedConnection,
}

impl PrivateRedis {
    /// Starts `redis-server` and waits (up to 10 s) until it answers.
    pub async fn start() -> Self {
        let port = free_port();
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--loglevel", "warning"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                fail(&format!(
                    "cannot start redis-server (redis-server package): {e}"
                ))
            });
        crate::register_child(child.id(), "KILL");
        let url = Url::parse(&format!("redis://127.0.0.1:{port}"))
            .unwrap_or_else(|e| fail(&format!("bad Redis URL: {e}")));
        let client = redis::Client::open(url.as_str())
            .unwrap_or_else(|e| fail(&format!("cannot use {url}: {e}")));
        let deadline = Instant::now() + Duration::from_secs(10);
        let conn = loop {
            match client.get_multiplexed_async_connection().await {
                Ok(conn) => break conn,
                Err(e) if Instant::now() > deadline => fail(&format!(
                    "the private redis-server on port {port} never answered: {e}"
                )),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        Self { child, url, conn }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// CPU seconds the server has used.
    pub fn cpu_seconds(&self) -> f64 {
        cpu_seconds(self.pid()).unwrap_or(0.0)
    }

    /// `INFO <section>`.
    async fn info(&mut self, section: &str) -> String {
        redis::cmd("INFO")
            .arg(section)
            .query_async(&mut self.conn)
            .await
            .unwrap_or_else(|e| fail(&format!("INFO {section} failed: {e}")))
    }

    /// `INFO commandstats`.
    pub async fn commandstats(&mut self) -> CommandStats {
        parse_commandstats(&self.info("commandstats").await)
    }

    /// `used_memory` of `INFO memory`, in bytes.
    pub async fn used_memory(&mut self) -> u64 {
        self.info("memory")
            .await
            .lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// `DBSIZE`: keys in database 0.
    pub async fn dbsize(&mut self) -> u64 {
        redis::cmd("DBSIZE")
            .query_async(&mut self.conn)
            .await
            .unwrap_or_else(|e| fail(&format!("DBSIZE failed: {e}")))
    }

    /// `HLEN key`.
    pub async fn hlen(&mut self, key: &str) -> u64 {
        redis::cmd("HLEN")
            .arg(key)
            .query_async(&mut self.conn)
            .await
            .unwrap_or_else(|e| fail(&format!("HLEN failed: {e}")))
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        crate::unregister_child(self.child.id());
    }
}

/// Parses `INFO commandstats` lines `cmdstat_<name>:calls=N,usec=N,…`.
pub fn parse_commandstats(info: &str) -> CommandStats {
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.trim().strip_prefix("cmdstat_")?.split_once(':')?;
            let mut count = CommandCount::default();
            for pair in rest.split(',') {
                match pair.split_once('=') {
                    Some(("calls", v)) => count.calls = v.parse().ok()?,
                    Some(("usec", v)) => count.usec = v.parse().ok()?,
                    _ => {}
                }
            }
            Some((name.to_owned(), count))
        })
        .collect()
}

/// Rows written to one table (`pg_stat_user_tables`).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct RowWrites {
    /// `n_tup_ins`.
    pub inserted: i64,
    /// `n_tup_upd` (HOT updates included).
    pub updated: i64,
    /// `n_tup_hot_upd`: updates that needed no index change.
    pub hot_updated: i64,
    /// `n_tup_del`.
    pub deleted: i64,
}

impl RowWrites {
    /// Inserted + updated + deleted.
    pub fn total(&self) -> i64 {
        self.inserted + self.updated + self.deleted
    }

    fn minus(&self, before: &Self) -> Self {
        Self {
            inserted: self.inserted - before.inserted,
            updated: self.updated - before.updated,
            hot_updated: self.hot_updated - before.hot_updated,
            deleted: self.deleted - before.deleted,
        }
    }
}

/// Table → rows written.
pub type TableWrites = BTreeMap<String, RowWrites>;

/// `after − before` per table, without tables nothing was written to.
pub fn writes_delta(before: &TableWrites, after: &TableWrites) -> TableWrites {
    after
        .iter()
        .map(|(t, a)| {
            (
                t.clone(),
                a.minus(&before.get(t).copied().unwrap_or_default()),
            )
        })
        .filter(|(_, d)| d.total() != 0)
        .collect()
}

/// The total of a [`TableWrites`].
pub fn total_writes(writes: &TableWrites) -> RowWrites {
    writes
        .values()
        .fold(RowWrites::default(), |acc, w| RowWrites {
            inserted: acc.inserted + w.inserted,
            updated: acc.updated + w.updated,
            hot_updated: acc.hot_updated + w.hot_updated,
            deleted: acc.deleted + w.deleted,
        })
}

/// The local PostgreSQL server: `DATABASE_URL`, default
/// `postgres://postgres@127.0.0.1:5432/postgres` (the database part is replaced).
pub fn shared_postgres() -> Url {
    let raw = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    Url::parse(&raw).unwrap_or_else(|e| fail(&format!("DATABASE_URL {raw:?} is not a URL: {e}")))
}

/// A fresh database `bench_<label>_<12 hex>` on a PostgreSQL server, migrated, dropped by
/// [`BenchDb::drop`]: its `pg_stat_user_tables` counts only the benchmark's writes.
pub struct BenchDb {
    /// Its URL (give it to the daemon as `DATABASE_URL`).
    pub url: Url,
    /// The harness's pool (`application_name` [`HARNESS_APP`]).
    pub pool: PgPool,
}

impl BenchDb {
    /// Creates and migrates the database on the server of `server` (on a set-up pool it then
    /// [settles](BenchDb::settle)).
    pub async fn create(server: &Url, label: &str) -> Self {
        let mut url = server.clone();
        let name = format!(
            "bench_{label}_{}",
            &Uuid::new_v4().simple().to_string()[..12]
        );
        url.set_path(&format!("/{name}"));
        store::create_database_if_missing(&url)
            .await
            .unwrap_or_else(|e| fail(&format!("cannot create database {name}: {e}")));
        let pool = pool_on(&url, HARNESS_APP, 4).await;
        let db = Self { url, pool };
        let setup = db.setup_pool().await;
        store::MIGRATOR
            .run(&setup)
            .await
            .unwrap_or_else(|e| fail(&format!("cannot migrate {name}: {e}")));
        db.settle(setup).await;
        db
    }

    /// A pool for writing the benchmark's set-up (`application_name` [`HARNESS_SETUP_APP`]);
    /// hand it to [`BenchDb::settle`] when done.
    pub async fn setup_pool(&self) -> PgPool {
        pool_on(&self.url, HARNESS_SETUP_APP, 2).await
    }

    /// Closes `setup` and waits (up to 10 s) until its backends have exited: a backend
    /// publishes its row counts to `pg_stat_user_tables` when it exits, but while it lives only
    /// every ~1 s when busy and after up to 10 s idle. After this the set-up's writes are in the
    /// counters, and none of it can land later inside a measurement.
    pub async fn settle(&self, setup: PgPool) {
        setup.close().await;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND application_name = $1",
            )
            .bind(HARNESS_SETUP_APP)
            .fetch_one(&self.pool)
            .await
            .unwrap_or(0);
            if left == 0 || Instant::now() > deadline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Closes the pool and drops the database (disconnecting any session left).
    pub async fn drop(self) {
        self.pool.close().await;
        if let Err(e) = store::drop_database_if_exists(&self.url).await {
            eprintln!(
                "warning: could not drop the benchmark database {}: {e}",
                self.url.path()
            );
        }
    }

    /// `pg_stat_user_tables` of this database. PostgreSQL 15 publishes a backend's counts when
    /// its transaction ends, at most once a second while it is busy and within ~10 s once idle,
    /// and at its exit: exact totals need the daemon's backends gone ([`BenchDb::wait_backends_gone`]).
    pub async fn row_writes(&self) -> TableWrites {
        let rows: Vec<(String, i64, i64, i64, i64)> = sqlx::query_as(
            "SELECT relname::text, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del \
             FROM pg_stat_user_tables",
        )
        .fetch_all(&self.pool)
        .await
        .unwrap_or_else(|e| fail(&format!("cannot read pg_stat_user_tables: {e}")));
        rows.into_iter()
            .map(|(t, ins, upd, hot, del)| {
                (
                    t,
                    RowWrites {
                        inserted: ins,
                        updated: upd,
                        hot_updated: hot,
                        deleted: del,
                    },
                )
            })
            .collect()
    }

    /// Claims so far: every claim counts an attempt, a deferral gives it back and counts a
    /// deferral, so `attempts + deferrals` summed over the messages.
    pub async fn claims(&self) -> u64 {
        let n: i64 = sqlx::query_scalar(
            "SELECT coalesce(sum(attempts + deferrals), 0)::bigint FROM messages",
        )
        .fetch_one(&self.pool)
        .await
        .unwrap_or_else(|e| fail(&format!("cannot count claims: {e}")));
        u64::try_from(n).unwrap_or(0)
    }

    /// Process ids of the daemon's backends on this database (`application_name` `mail-worker`).
    pub async fn daemon_backends(&self) -> Vec<u32> {
        let pids: Vec<i32> = sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity \
             WHERE datname = current_database() AND application_name = 'mail-worker'",
        )
        .fetch_all(&self.pool)
        .await
        .unwrap_or_default();
        pids.into_iter()
            .filter_map(|p| u32::try_from(p).ok())
            .collect()
    }

    /// CPU seconds of the daemon's backends so far ([`cpu_seconds`] of each).
    pub async fn daemon_backends_cpu(&self) -> f64 {
        self.daemon_backends()
            .await
            .into_iter()
            .filter_map(cpu_seconds)
            .sum()
    }

    /// Waits (up to 10 s) until the daemon's backends have exited, so their statistics are
    /// published.
    pub async fn wait_backends_gone(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.daemon_backends().await.is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Messages by status.
    pub async fn status_counts(&self) -> BTreeMap<String, i64> {
        sqlx::query_as::<_, (String, i64)>("SELECT status, count(*) FROM messages GROUP BY status")
            .fetch_all(&self.pool)
            .await
            .unwrap_or_default()
            .into_iter()
            .collect()
    }
}

async fn pool_on(url: &Url, application_name: &str, connections: u32) -> PgPool {
    let options = PgConnectOptions::from_str(url.as_str())
        .unwrap_or_else(|e| fail(&format!("bad database URL: {e}")))
        .application_name(application_name);
    PgPoolOptions::new()
        .max_connections(connections)
        .connect_with(options)
        .await
        .unwrap_or_else(|e| fail(&format!("cannot connect to {}: {e}", url.path())))
}

/// Registers `n` system mailboxes `<prefix><i>@contoso.example` (i from 0) with the
/// benchmark app's credentials and the default limits; returns them with their ids.
pub async fn add_mailboxes(pool: &PgPool, prefix: &str, n: usize) -> Vec<(MailboxAddress, Uuid)> {
    let credentials = GraphCredentials {
        graph_tenant_id: TENANT.into(),
        client_id: CLIENT_ID.into(),
        client_secret: SecretRef::new(CLIENT_SECRET),
        tenant_budget: None,
    };
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let address = MailboxAddress::parse(&format!("{prefix}{i}@{TENANT}"))
            .unwrap_or_else(|e| fail(&e.to_string()));
        let id = senders::upsert_system_mailbox(pool, &address, &credentials, None, None)
            .await
            .unwrap_or_else(|e| fail(&format!("cannot register {address}: {e}")));
        out.push((address, id));
    }
    out
}

/// Inserts `total` due messages (one recipient each, [`BODY`]) spread round robin over
/// `mailboxes`: message k goes to mailbox k mod n and is due 1 minute ago + k µs, so the claim
/// order (oldest `scheduled_on` first) is round robin too.
pub async fn insert_messages(pool: &PgPool, mailboxes: &[Uuid], total: usize) {
    let total = i64::try_from(total).unwrap_or(i64::MAX);
    sqlx::query(
        "INSERT INTO messages (id, system_mailbox_id, to_recipients, subject, body, scheduled_on) \
         SELECT gen_random_uuid(), ($1::uuid[])[(g % cardinality($1::uuid[])) + 1], \
             jsonb_build_array(jsonb_build_object('address', 'guest' || g || '@example.org', \
                 'name', 'Guest ' || g)), \
             'Invitation ' || g, $3, \
             now() - interval '1 minute' + g * interval '1 microsecond' \
         FROM generate_series(0, $2 - 1) AS g",
    )
    .bind(mailboxes)
    .bind(total)
    .bind(BODY)
    .execute(pool)
    .await
    .unwrap_or_else(|e| fail(&format!("cannot insert the messages: {e}")));
}

/// graph-sim in process, serving `mailboxes` with Exchange Online's default limits (4
/// concurrent requests, 30 messages a rolling minute, …) for the benchmark app.
pub async fn start_sim(mailboxes: &[(MailboxAddress, Uuid)]) -> GraphSim {
    let mut config = SimConfig::new().with_app(TENANT, CLIENT_ID, CLIENT_SECRET);
    for (address, _) in mailboxes {
        // Refused, not delayed, past 30 a minute: a benchmark counts any overshoot.
        config = config.with_mailbox(SimMailbox::new(address.as_str(), TENANT).with_limits(
            graph_sim::MailboxLimits {
                minute_overflow: graph_sim::MinuteOverflow::Refuse,
                ..graph_sim::MailboxLimits::default()
            },
        ));
    }
    GraphSim::start(config)
        .await
        .unwrap_or_else(|e| fail(&format!("cannot start graph-sim: {e}")))
}

/// The environment of one `mail-worker run`: `NAME=value` pairs (nothing else of the
/// benchmark's environment is passed on).
#[derive(Debug, Clone, Default, Serialize)]
pub struct DaemonEnv(pub BTreeMap<String, String>);

impl DaemonEnv {
    /// Runs `mail-worker <args>` with this environment only, to its end; [`fail`]s when it
    /// cannot start or exits unsuccessfully (with its stderr). Returns its stdout.
    pub fn run_cli(&self, args: &[&str]) -> Vec<u8> {
        let what = args.join(" ");
        let out = std::process::Command::new(&*MAIL_WORKER)
            .args(args)
            .env_clear()
            .envs(&self.0)
            .output()
            .unwrap_or_else(|e| fail(&format!("{what}: {e}")));
        if !out.status.success() {
            fail(&format!(
                "{what} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        out.stdout
    }

    /// The daemon's configuration for `db`, the queue on `queue_redis`, the limiter on
    /// `limiter_redis`, graph-sim `sim`; JSON logs at `info`; every other variable at its
    /// default (config/mail-worker.env.example).
    pub fn new(db: &Url, queue_redis: &Url, limiter_redis: &Url, sim: &GraphSim) -> Self {
        let mut env = BTreeMap::new();
        let mut set = |k: &str, v: String| {
            env.insert(k.to_owned(), v);
        };
        set("DATABASE_URL", db.to_string());
        set("REDIS_URL", queue_redis.to_string());
        set("MAIL_RATE_LIMIT_REDIS_URL", limiter_redis.to_string());
        set("GRAPH_API_BASE_URL", sim.graph_base_url().to_string());
        set("GRAPH_LOGIN_BASE_URL", sim.login_base_url().to_string());
        set("LOG_FORMAT", "json".into());
        set("RUST_LOG", "info".into());
        set("SHUTDOWN_GRACE", "5s".into());
        // Several daemons run at once here: none of them serves metrics (the default port
        // would be taken by the first).
        set("METRICS_LISTEN", "off".into());
        set("HOSTNAME", "bench".into());
        // The send path's figures: no intake consumer polling the queue's Redis beside it.
        set("INTAKE_QUEUE", "off".into());
        Self(env)
    }

    /// Sets `name` to `value`.
    pub fn set(&mut self, name: &str, value: impl ToString) -> &mut Self {
        self.0.insert(name.to_owned(), value.to_string());
        self
    }

    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }
}

/// A running `mail-worker run`.
pub struct Daemon {
    /// `/usr/bin/time -v mail-worker run`, or `mail-worker run` itself without GNU time.
    child: tokio::process::Child,
    /// The daemon's own process id.
    pub pid: u32,
    /// Where its stderr (the JSON log) goes.
    pub log: PathBuf,
    /// GNU time's report, if it runs under GNU time.
    time_report: Option<PathBuf>,
    /// When it was started.
    pub started: Instant,
}

/// How a daemon ended and what it used.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DaemonExit {
    /// `exit 0`, `signal 9`, … as GNU time or the wait reported it.
    pub status: String,
    /// User + system CPU seconds over its whole life.
    pub cpu_s: f64,
    /// Of which user CPU seconds (GNU time only).
    pub user_s: Option<f64>,
    /// Of which system CPU seconds (GNU time only).
    pub system_s: Option<f64>,
    /// Peak resident set size, KiB.
    pub max_rss_kib: u64,
    /// Voluntary context switches (GNU time only).
    pub voluntary_switches: Option<u64>,
    /// Involuntary context switches (GNU time only).
    pub involuntary_switches: Option<u64>,
    /// `/usr/bin/time -v`, or `/proc` (read just before the stop) without GNU time.
    pub source: &'static str,
}

impl Daemon {
    /// Starts `mail-worker run` with exactly `env`, its stderr to `log`, under `/usr/bin/time
    /// -v -o <log>.time` when GNU time exists.
    pub async fn spawn(env: &DaemonEnv, log: &Path) -> Self {
        let log_file = std::fs::File::create(log)
            .unwrap_or_else(|e| fail(&format!("cannot create {}: {e}", log.display())));
        let timed = Path::new(GNU_TIME).exists();
        let time_report = timed.then(|| log.with_extension("time"));
        let mut command = match &time_report {
            Some(report) => {
                let mut c = tokio::process::Command::new(GNU_TIME);
                c.arg("-v").arg("-o").arg(report).arg(&*MAIL_WORKER);
                c
            }
            None => tokio::process::Command::new(&*MAIL_WORKER),
        };
        command
            .arg("run")
            .env_clear()
            .envs(&env.0)
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .kill_on_drop(true);
        let started = Instant::now();
        let child = command
            .spawn()
            .unwrap_or_else(|e| fail(&format!("cannot start {}: {e}", MAIL_WORKER.display())));
        let outer = child.id().unwrap_or(0);
        let pid = if timed {
            // GNU time forks the daemon at once; find it by its parent id.
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                if let Some(&pid) = children_of(outer).first() {
                    break pid;
                }
                if Instant::now() > deadline {
                    fail("GNU time did not start mail-worker within 5 s");
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        } else {
            outer
        };
        crate::register_child(pid, "KILL");
        Self {
            child,
            pid,
            log: log.to_owned(),
            time_report,
            started,
        }
    }

    /// CPU seconds the daemon has used so far.
    pub fn cpu_seconds(&self) -> Option<f64> {
        cpu_seconds(self.pid)
    }

    /// Sends SIGTERM (a graceful stop: in-flight sends finish) and waits up to `timeout` for
    /// the exit, then SIGKILL. Returns what it used.
    pub async fn stop(mut self, timeout: Duration) -> DaemonExit {
        let from_proc = DaemonExit {
            status: String::new(),
            cpu_s: cpu_seconds(self.pid).unwrap_or(0.0),
            user_s: None,
            system_s: None,
            max_rss_kib: peak_rss_kib(self.pid).unwrap_or(0),
            voluntary_switches: None,
            involuntary_switches: None,
            source: "/proc, just before the stop",
        };
        signal(self.pid, "TERM");
        let waited = tokio::time::timeout(timeout, self.child.wait()).await;
        let status = match waited {
            Ok(Ok(s)) => s.to_string(),
            Ok(Err(e)) => format!("wait failed: {e}"),
            Err(_) => {
                eprintln!(
                    "warning: mail-worker {} did not stop within {timeout:?}; killing it",
                    self.pid
                );
                signal(self.pid, "KILL");
                let _ = self.child.wait().await;
                "killed after the stop timeout".into()
            }
        };
        crate::unregister_child(self.pid);
        match self
            .time_report
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
        {
            Some(report) => parse_time_report(&report),
            None => DaemonExit {
                status,
                ..from_proc
            },
        }
    }
}

/// Parses GNU time's `-v` report.
pub fn parse_time_report(report: &str) -> DaemonExit {
    let field = |name: &str| {
        report
            .lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .map(|v| v.trim_start_matches(':').trim().to_owned())
    };
    let num = |name: &str| field(name).and_then(|v| v.parse::<f64>().ok());
    let int = |name: &str| field(name).and_then(|v| v.parse::<u64>().ok());
    let status = match (
        field("Exit status"),
        report.lines().find(|l| l.contains("terminated by signal")),
    ) {
        (_, Some(signal)) => signal.trim().to_owned(),
        (Some(code), None) => format!("exit {code}"),
        (None, None) => "unknown".into(),
    };
    let user_s = num("User time (seconds)");
    let system_s = num("System time (seconds)");
    DaemonExit {
        status,
        cpu_s: user_s.unwrap_or(0.0) + system_s.unwrap_or(0.0),
        user_s,
        system_s,
        max_rss_kib: int("Maximum resident set size (kbytes)").unwrap_or(0),
        voluntary_switches: int("Voluntary context switches"),
        involuntary_switches: int("Involuntary context switches"),
        source: "/usr/bin/time -v",
    }
}

/// One JSON log line of the daemon.
#[derive(Debug, Clone)]
pub struct LogLine {
    /// Its `timestamp`.
    pub at: DateTime<Utc>,
    /// Its `level` (`INFO`, `WARN`, `ERROR`, …).
    pub level: String,
    /// Its `event` field, if any.
    pub event: Option<String>,
    /// The whole object.
    pub json: serde_json::Value,
}

/// Reads a daemon's JSON log; lines that are not JSON objects with a timestamp are skipped.
pub fn read_log(path: &Path) -> Vec<LogLine> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let json: serde_json::Value = serde_json::from_str(line).ok()?;
            let at = json
                .get("timestamp")?
                .as_str()?
                .parse::<DateTime<Utc>>()
                .ok()?;
            Some(LogLine {
                at,
                level: json
                    .get("level")
                    .and_then(|v| v.as_str())
                    .unwrap_or("")
                    .to_owned(),
                event: json
                    .get("event")
                    .and_then(|v| v.as_str())
                    .map(str::to_owned),
                json,
            })
        })
        .collect()
}

/// `<workspace root>/bench-results/<file>` (the directory is created), for daemon logs.
pub fn results_path(file: &str) -> PathBuf {
    let dir = crate::results_dir();
    if let Err(e) = std::fs::create_dir_all(&dir) {
        fail(&format!("cannot create {}: {e}", dir.display()));
    }
    dir.join(file)
}

/// A throwaway PostgreSQL cluster of the benchmark's own (`initdb` defaults, same PostgreSQL
/// version as the local server) on a free port, with room for more connections than a default
/// server's 100: each daemon's pool holds up to `WORKER_CONCURRENCY` + 4 connections, so two
/// daemons at 64 need 136. Runs as the `postgres` user when the benchmark runs as root
/// (PostgreSQL refuses root). Stopped (fast shutdown) and deleted on drop.
pub struct PrivatePostgres {
    dir: PathBuf,
    bin: PathBuf,
    as_postgres: bool,
    pid: u32,
    options: String,
    /// `postgres://postgres@127.0.0.1:<port>/postgres`.
    pub url: Url,
}

impl PrivatePostgres {
    /// `initdb` + `pg_ctl start` with `max_connections` and `settings` (`name=value`, e.g.
    /// `shared_preload_libraries=pg_stat_statements`); takes a few seconds.
    pub fn start(max_connections: u32, settings: &[&str]) -> Self {
        let bin = postgres_bin_dir();
        let as_postgres = std::process::Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
        let dir = std::env::temp_dir().join(format!(
            "mail-worker-bench-pg-{}",
            &Uuid::new_v4().simple().to_string()[..12]
        ));
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| fail(&format!("cannot create {}: {e}", dir.display())));
        if as_postgres {
            run_quiet(
                std::process::Command::new("chown")
                    .arg("postgres:postgres")
                    .arg(&dir),
                "chown",
            );
        }
        let mut pg = Self {
            dir: dir.clone(),
            bin,
            as_postgres,
            pid: 0,
            options: String::new(),
            url: Url::parse("postgres://postgres@127.0.0.1:1/postgres")
                .unwrap_or_else(|e| fail(&e.to_string())),
        };
        let data = dir.join("data");
        run_quiet(
            pg.tool("initdb").arg("-D").arg(&data).args([
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
            ]),
            "initdb",
        );
        let port = free_port();
        pg.options = format!(
            "-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c max_connections={max_connections}{}",
            dir.display(),
            settings
                .iter()
                .map(|s| format!(" -c {s}"))
                .collect::<String>()
        );
        pg.start_server();
        pg.url = Url::parse(&format!("postgres://postgres@127.0.0.1:{port}/postgres"))
            .unwrap_or_else(|e| fail(&e.to_string()));
        pg
    }

    /// The postmaster's process id (0 while stopped).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// CPU seconds of the whole server so far: the postmaster, its live processes (backends,
    /// autovacuum, checkpointer, …) and the ones that exited (`cutime` + `cstime`).
    pub fn cpu_seconds(&self) -> f64 {
        let own = proc_stat_fields(self.pid).map_or(0.0, |f| {
            f.get(11..15)
                .unwrap_or_default()
                .iter()
                .filter_map(|v| v.parse::<f64>().ok())
                .sum::<f64>()
                / clock_ticks()
        });
        own + children_of(self.pid)
            .into_iter()
            .filter_map(cpu_seconds)
            .sum::<f64>()
    }

    fn start_server(&mut self) {
        let data = self.dir.join("data");
        run_quiet(
            self.tool("pg_ctl")
                .arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(self.dir.join("server.log"))
                .args(["-w", "-t", "60", "-o"])
                .arg(&self.options)
                .arg("start"),
            "pg_ctl start",
        );
        let pid = std::fs::read_to_string(data.join("postmaster.pid"))
            .ok()
            .and_then(|s| s.lines().next()?.trim().parse().ok())
            .unwrap_or_else(|| fail("the private PostgreSQL wrote no postmaster.pid"));
        crate::register_child(pid, "INT");
        self.pid = pid;
    }

    /// Stops the server (fast shutdown: sessions are cut), keeping its data and port, so
    /// [`Self::restart`] brings the same cluster back. For outage tests.
    pub fn stop(&mut self) {
        if self.pid == 0 {
            return;
        }
        run_quiet(
            self.tool("pg_ctl")
                .arg("-D")
                .arg(self.dir.join("data"))
                .args(["-m", "fast", "-w", "stop"]),
            "pg_ctl stop",
        );
        crate::unregister_child(self.pid);
        self.pid = 0;
    }

    /// Starts the stopped server again, on the same port with the same data.
    pub fn restart(&mut self) {
        if self.pid == 0 {
            self.start_server();
        }
    }

    fn tool(&self, name: &str) -> std::process::Command {
        let program = self.bin.join(name);
        if self.as_postgres {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            std::process::Command::new(program)
        }
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        if self.pid != 0 {
            let _ = self
                .tool("pg_ctl")
                .arg("-D")
                .arg(self.dir.join("data"))
                .args(["-m", "fast", "-w", "stop"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            crate::unregister_child(self.pid);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The directory of `initdb` and `pg_ctl`: `PG_BIN` if set, else the newest
/// `/usr/lib/postgresql/<version>/bin` (Debian's layout), else whatever `PATH` holds.
fn postgres_bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("PG_BIN") {
        return PathBuf::from(dir);
    }
    let newest = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let e = e.ok()?;
            let version: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .max_by_key(|(v, _)| *v);
    newest.map_or_else(PathBuf::new, |(_, bin)| bin)
}

fn run_quiet(command: &mut std::process::Command, what: &str) {
    match command.output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => fail(&format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => fail(&format!("cannot run {what}: {e}")),
    }
}

/// What both drain benchmarks (backlog, budgets) read at every snapshot: the command counts
/// of the limiter's and the queue's Redis, and the claims so far.
#[derive(Debug, Clone, Serialize)]
pub struct DrainCounters {
    pub at: DateTime<Utc>,
    pub limiter_commands: CommandStats,
    pub queue_commands: CommandStats,
    /// Claims so far ([`BenchDb::claims`]).
    pub claims: u64,
}

impl DrainCounters {
    /// Reads them now.
    pub async fn read(limiter: &mut PrivateRedis, queue: &mut PrivateRedis, db: &BenchDb) -> Self {
        let at = Utc::now();
        Self {
            at,
            limiter_commands: limiter.commandstats().await,
            queue_commands: queue.commandstats().await,
            claims: db.claims().await,
        }
    }
}

/// How long a drain benchmark (backlog, budgets) runs, for its first line: a smoke run until
/// each message was tried once, else `minutes`.
pub fn drain_span(smoke: bool, minutes: u32) -> String {
    if smoke {
        "until each message was tried once".to_owned()
    } else {
        format!("{minutes} minute(s)")
    }
}

/// The options both drain benchmarks (backlog, budgets) take for the daemon and the run.
#[derive(Debug, Clone, clap::Args)]
pub struct DrainArgs {
    /// The mailboxes' limit, messages per UTC minute (`MAIL_RATE_LIMIT_PER_MINUTE`).
    #[arg(long, default_value_t = 25)]
    pub limit: u32,
    /// Whole UTC minutes to measure (budgets: per backlog size).
    #[arg(long, default_value_t = 5)]
    pub minutes: u32,
    /// `WORKER_CONCURRENCY` of the daemon (16, as in the earlier runs; production default 128).
    #[arg(long, default_value_t = 16)]
    pub concurrency: u32,
}

impl DrainArgs {
    /// A limit, a minute or a worker is missing: nothing would drain.
    pub fn is_empty(&self) -> bool {
        self.limit == 0 || self.minutes == 0 || self.concurrency == 0
    }
}
