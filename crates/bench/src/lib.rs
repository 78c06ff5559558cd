//! The benchmarks' shared harness: machine facts, percentiles and medians from sorted samples,
//! a plain-text results table, the JSON results file, Redis key prefixes and their clean-up,
//! and a scaled clock shared by several processes.
//!
//! The library of the `mail-worker-bench` package: every benchmark target under `benches/`
//! (`harness = false`) imports it as `use mail_worker_bench as support;` and uses what it needs,
//! and `tests/harness.rs` tests it (the benchmark targets run without libtest); the daemon benchmarks (backlog drain, end to end, profile — see
//! BENCHMARKS.md) add [`daemon`]: private Redis servers, a benchmark database, graph-sim and the
//! `mail-worker` binary as a child process; [`claim`] hands one given row through the
//! production claim (the send-mode benchmark and `tests/it`).

pub mod campaign;
pub mod cluster;
pub mod daemon;
pub mod e2e;
pub mod perf;
pub mod prom;
pub mod statements;

pub use test_support::{
    claim,
    process::{fail, register_child, unregister_child},
    redis_connection, unlink_prefix,
};

use std::{path::PathBuf, process::Command, time::Duration};

use chrono::{DateTime, TimeDelta, Utc};
use mail_worker::clock::Clock;
use serde::Serialize;

/// The Redis the benchmarks use: `REDIS_URL`, default `redis://127.0.0.1:6379` (the same
/// default as the daemon's config).
pub fn redis_url() -> url::Url {
    let raw = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    url::Url::parse(&raw).unwrap_or_else(|e| fail(&format!("REDIS_URL {raw:?} is not a URL: {e}")))
}

/// Logs the limiter's own warnings (fail-open lines) to stderr, so a benchmark that hits them
/// shows why; figures go to stdout.
pub fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .try_init();
}

/// Runs a benchmark's `main` future on a multi-threaded tokio runtime, logs (warn) to stderr.
pub fn block_on<F: std::future::Future>(main: F) -> F::Output {
    init_logs();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| fail(&format!("cannot start tokio: {e}")))
        .block_on(main)
}

/// The flags every [`bench_main`] benchmark takes (`#[command(flatten)] run: RunArgs` in its
/// [`BenchArgs`]): `--smoke`, whose help is the benchmark's [`BenchArgs::SMOKE`], and the
/// `--bench` that `cargo bench` passes.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct RunArgs {
    /// A smoke run for CI (figures meaningless).
    #[arg(long)]
    pub smoke: bool,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    pub bench: bool,
}

/// A benchmark's command line: every benchmark but `contention` runs through [`bench_main`].
pub trait BenchArgs: clap::Parser {
    /// The help of `--smoke`: what the smoke run does.
    const SMOKE: &'static str;

    /// Shrinks the run to a smoke run (`--smoke`, for CI: a few seconds that prove the
    /// benchmark works; the figures mean nothing).
    fn smoke(&mut self);

    /// Why these arguments cannot run (a count that must be positive, …), if they cannot.
    fn invalid(&self) -> Option<&'static str> {
        None
    }
}

/// A benchmark's `main`: parses its [`BenchArgs`] (shrunk by [`BenchArgs::smoke`] when a
/// `--smoke` flag was given), [`fail`]s when [`BenchArgs::invalid`] says why, prints the
/// [`Machine`], then runs `run` with both on a tokio runtime ([`block_on`]).
pub fn bench_main<A, F>(run: impl FnOnce(A, Machine) -> F) -> std::process::ExitCode
where
    A: BenchArgs,
    F: std::future::Future<Output = std::process::ExitCode>,
{
    let matches = A::command()
        .mut_arg("smoke", |a| a.help(A::SMOKE))
        .get_matches();
    let mut args = A::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if matches.try_get_one::<bool>("smoke").ok().flatten() == Some(&true) {
        args.smoke();
    }
    if let Some(why) = args.invalid() {
        fail(why);
    }
    let machine = Machine::describe();
    machine.print();
    block_on(run(args, machine))
}

/// A benchmark's exit status: success when `ok` (its goals held and the run was sound).
pub fn exit_code(ok: bool) -> std::process::ExitCode {
    if ok {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}

/// A fresh key prefix for one benchmark run: `bench:<name>:<12 hex>`. Benchmarks never
/// `FLUSHDB`; they delete their own prefix with [`unlink_prefix`].
pub fn bench_prefix(name: &str) -> String {
    format!(
        "bench:{name}:{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// What every results file of a [`bench_main`] benchmark starts with.
#[derive(Debug, Serialize)]
pub struct RunInfo {
    /// The benchmark's name.
    pub benchmark: &'static str,
    pub machine: Machine,
    /// A `--smoke` run (figures meaningless).
    pub smoke: bool,
}

/// The machine the figures come from.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// Logical CPUs this process may use.
    pub cores: usize,
    /// `model name` from `/proc/cpuinfo`.
    pub cpu_model: String,
    /// `/proc/loadavg` when the benchmark started (1, 5 and 15 min): a busy machine shows here.
    pub load_average: String,
    /// The first line of `redis-server --version`.
    pub redis_server: String,
    /// The first line of `psql --version`.
    pub psql: String,
    /// `SHOW server_version` of the PostgreSQL at `DATABASE_URL` (default
    /// `postgres://postgres@127.0.0.1:5432/postgres`).
    pub postgres_server: String,
    /// The first line of `rustc --version`.
    pub rustc: String,
    /// The Cargo profile the benchmark was built with (`release` under `cargo bench`, `debug`
    /// under `cargo test --bench`: smoke runs only, figures meaningless).
    pub build: &'static str,
    /// UTC time the benchmark started.
    pub started_at: DateTime<Utc>,
}

impl Machine {
    /// Reads the facts; a missing tool shows as `unavailable (<why>)`.
    pub fn describe() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|rest| rest.trim_start_matches([' ', '\t', ':']).trim().to_owned())
            .unwrap_or_else(|| "unknown".into());
        Self {
            cores: std::thread::available_parallelism().map_or(0, usize::from),
            cpu_model,
            load_average: std::fs::read_to_string("/proc/loadavg")
                .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
                .unwrap_or_else(|_| "unknown".into()),
            redis_server: tool_version("redis-server", "--version"),
            psql: tool_version("psql", "--version"),
            postgres_server: postgres_server_version(),
            rustc: tool_version("rustc", "--version"),
            build: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            },
            started_at: Utc::now(),
        }
    }

    /// Prints the facts, one per line, as a preamble to the results.
    pub fn print(&self) {
        println!(
            "machine: {} cores ({}), load average {}",
            self.cores, self.cpu_model, self.load_average
        );
        println!("         {}", self.redis_server);
        println!(
            "         {}; PostgreSQL server {}",
            self.psql, self.postgres_server
        );
        println!("         {}, {} build", self.rustc, self.build);
        if self.build == "debug" {
            println!("         (debug build: a smoke run, the figures mean nothing)");
        }
    }
}

fn tool_version(program: &str, arg: &str) -> String {
    match Command::new(program).arg(arg).output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_owned(),
        Ok(out) => format!("unavailable ({program} exited with {})", out.status),
        Err(e) => format!("unavailable ({program}: {e})"),
    }
}

fn postgres_server_version() -> String {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    match Command::new("psql")
        .args([url.as_str(), "-X", "-A", "-t", "-c", "SHOW server_version"])
        .output()
    {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        Ok(out) => format!("unavailable (psql exited with {})", out.status),
        Err(e) => format!("unavailable (psql: {e})"),
    }
}

/// The `p`-th percentile (0 < p ≤ 100) of `sorted` by nearest rank: the smallest sample with at
/// least `p` % of the samples at or below it. `None` for no samples.
pub fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    // Nearest rank: ceil(p/100 × n), 1-based; sample counts are far below 2^52, so the
    // float arithmetic is exact enough.
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// The median of `values` (the mean of the two middle ones for an even count); `None` for
/// none. NaNs sort last.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    })
}

/// The p50 (the upper middle sample for an even count) and the max of `samples`; 0 for none.
pub fn p50_max(mut samples: Vec<f64>) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    (
        samples.get(samples.len() / 2).copied().unwrap_or(0.0),
        samples.last().copied().unwrap_or(0.0),
    )
}

/// `value` per one of `n` (per mail sent, per try …); NaN for none.
#[allow(clippy::cast_precision_loss)]
pub fn per(value: f64, n: u64) -> f64 {
    if n == 0 { f64::NAN } else { value / n as f64 }
}

/// A count as `f64`, for ratios (counts stay far below 2^52).
#[allow(clippy::cast_precision_loss)]
pub fn to_f64(count: u64) -> f64 {
    count as f64
}

/// The results file's name of `benchmark`: `<benchmark>-smoke` for a smoke run.
pub fn results_name(benchmark: &str, smoke: bool) -> String {
    if smoke {
        format!("{benchmark}-smoke")
    } else {
        benchmark.to_owned()
    }
}

/// Nanoseconds as microseconds, for tables and JSON.
#[allow(clippy::cast_precision_loss)]
pub fn us(nanos: u64) -> f64 {
    nanos as f64 / 1_000.0
}

/// `1234567.8` → `1,234,568`: whole numbers with thousands separators.
pub fn thousands(value: f64) -> String {
    #[allow(clippy::cast_possible_truncation)]
    let whole = value.round() as i64;
    let digits = whole.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if whole < 0 { format!("-{out}") } else { out }
}

/// Prints `rows` under `headers` as a left-aligned text table with a rule under the header.
pub fn print_table(headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut out = String::new();
        for (cell, w) in cells.zip(&widths) {
            out.push_str(cell);
            out.push_str(&" ".repeat(w.saturating_sub(cell.chars().count()) + 2));
        }
        println!("{}", out.trim_end());
    };
    line(&mut headers.iter().copied());
    let rules: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    line(&mut rules.iter().map(String::as_str));
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
}

/// Prints one row per item of `items`, made by `row`, under `headers` (as [`print_table`]).
pub fn print_table_of<T>(
    headers: &[&str],
    items: impl IntoIterator<Item = T>,
    row: impl FnMut(T) -> Vec<String>,
) {
    let rows: Vec<Vec<String>> = items.into_iter().map(row).collect();
    print_table(headers, &rows);
}

/// `after - before`, item by item (two readings of the same counters, e.g. CPU seconds per
/// process).
pub fn deltas<'a>(before: &'a [f64], after: &'a [f64]) -> impl Iterator<Item = f64> + 'a {
    before.iter().zip(after).map(|(b, a)| a - b)
}

/// `bench-results/` at the workspace root (gitignored), where every benchmark writes.
pub fn results_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench-results"))
}

/// Writes `value` as pretty JSON to `<workspace root>/bench-results/<name>.json` (gitignored) and
/// returns the path.
pub fn write_json(name: &str, value: &impl Serialize) -> PathBuf {
    let dir = results_dir();
    let path = dir.join(format!("{name}.json"));
    let written = std::fs::create_dir_all(&dir).and_then(|()| {
        let json = serde_json::to_string_pretty(value).map_err(std::io::Error::other)?;
        std::fs::write(&path, json + "\n")
    });
    if let Err(e) = written {
        fail(&format!("cannot write {}: {e}", path.display()));
    }
    path
}

/// A clock that runs `speedup` times faster than the system clock from a common origin, so
/// several processes agree on the time without talking to each other:
/// `now = virtual_origin + (system now − real_origin) × speedup`. With `speedup` 1 and both
/// origins equal it is the system clock.
#[derive(Debug, Clone, Copy)]
pub struct ScaledClock {
    /// The system time at which the clock shows `virtual_origin`.
    pub real_origin: DateTime<Utc>,
    /// What the clock shows at `real_origin`.
    pub virtual_origin: DateTime<Utc>,
    /// Virtual milliseconds per real millisecond (≥ 1).
    pub speedup: i32,
}

impl ScaledClock {
    /// The system time at which this clock will show `at`.
    pub fn real_time_of(&self, at: DateTime<Utc>) -> DateTime<Utc> {
        self.real_origin + (at - self.virtual_origin) / self.speedup
    }

    /// How long to sleep (real time) until the clock shows `at`; zero if it already has.
    pub fn real_wait_until(&self, at: DateTime<Utc>) -> Duration {
        (self.real_time_of(at) - Utc::now())
            .to_std()
            .unwrap_or(Duration::ZERO)
    }
}

impl Clock for ScaledClock {
    fn now(&self) -> DateTime<Utc> {
        let real_elapsed: TimeDelta = Utc::now() - self.real_origin;
        self.virtual_origin + real_elapsed * self.speedup
    }
}

/// Milliseconds since the Unix epoch, for passing a time to a child process.
pub fn epoch_ms(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
}

/// The inverse of [`epoch_ms`].
pub fn from_epoch_ms(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms)
        .unwrap_or_else(|| fail(&format!("{ms} ms is not a representable time")))
}
