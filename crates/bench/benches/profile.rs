//! Benchmark 5, where the time goes: benchmark 4's scenario (5,000 messages over 500
//! mailboxes, graph-sim +20 ms, `WORKER_CONCURRENCY` 64, one daemon) measured three ways —
//! CPU per message by process (daemon, its PostgreSQL backends, Redis, graph-sim), a `perf`
//! profile of the daemon (software `cpu-clock` sampling, DWARF call graphs) naming its top costs
//! per message by function, by crate and by phase of a send, and the wall time of each phase of
//! a message from PostgreSQL's and graph-sim's timestamps.
//!
//! ```text
//! cargo bench -p mail-worker-bench --bench profile                               # 3 runs + 1 profiled run, ~4 min
//! cargo bench -p mail-worker-bench --bench profile -- --scheduler-interval-ms 100
//! cargo test -p mail-worker-bench --bench profile -- --smoke                    # 100 messages, ~8 s
//! ```
//!
//! The CPU split comes from `--runs` unprofiled runs (medians); the profile from one more run
//! under `perf record -e cpu-clock -F 999 --call-graph dwarf -p <daemon>` (sampling costs CPU
//! of its own, so that run's totals are not used). Without a working `perf` the profile is
//! skipped with a note. Results: `bench-results/profile.json` (`profile-smoke.json`), the
//! perf data in `bench-results/profile.perf.data` (`perf report -i …` to browse).

use mail_worker_bench as support;

use std::{collections::BTreeMap, path::Path, process::ExitCode, time::Duration};

use clap::Parser;
use serde::Serialize;
use support::{
    Machine,
    daemon::{self, PrivatePostgres},
    e2e::{self, CpuSplit, Phase, RunResult, Scenario, World, median_of},
    perf::{self, Sample, crate_of, parse_report_line},
};

/// Benchmark 5: where the daemon's time goes.
#[derive(Debug, Parser)]
#[command(name = "profile")]
struct Args {
    #[command(flatten)]
    load: e2e::Load,
    /// `WORKER_CONCURRENCY`.
    #[arg(long, default_value_t = 64)]
    concurrency: u32,
    /// `SCHEDULER_INTERVAL` (default: the production default, 250 ms).
    #[arg(long, default_value_t = 250)]
    scheduler_interval_ms: u64,
    /// Unprofiled runs for the CPU split (medians).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Rows of the top-functions table.
    #[arg(long, default_value_t = 25)]
    top: usize,
    /// Skip the perf run.
    #[arg(long)]
    no_perf: bool,
    /// Use the local PostgreSQL server instead of a private cluster (see `end_to_end`).
    #[arg(long)]
    shared_postgres: bool,
    #[command(flatten)]
    run: support::RunArgs,
}

#[derive(Debug, Clone, Serialize)]
struct Entry {
    name: String,
    /// Share of the daemon's samples, %.
    percent: f64,
    /// CPU µs per message sent (share × daemon CPU per message of the unprofiled runs).
    us_per_message: f64,
}

#[derive(Debug, Serialize)]
struct Profile {
    samples_file: String,
    samples: u64,
    by_dso: Vec<Entry>,
    by_crate: Vec<Entry>,
    top_functions: Vec<Entry>,
    by_component: Vec<Entry>,
}

#[derive(Debug, Clone, Serialize)]
struct StatementSummary {
    query: String,
    calls_per_message: f64,
    exec_us_per_message: f64,
    mean_exec_us: f64,
}

#[derive(Debug, Clone, Serialize)]
struct CommandSummary {
    command: String,
    calls_per_message: f64,
    redis_us_per_message: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    #[serde(flatten)]
    run: support::RunInfo,
    scenario: Scenario,
    latency_ms: u64,
    mailboxes: usize,
    cpu_ms_per_message: CpuSplit,
    sends_per_s: f64,
    wall_phases: Vec<Phase>,
    /// The daemon's statements (medians over the unprofiled runs), most time first.
    statements: Vec<StatementSummary>,
    /// Redis commands per message (medians), most time first.
    redis_commands: Vec<CommandSummary>,
    profile: Option<Profile>,
    perf_note: Option<String>,
    runs: Vec<RunResult>,
    profiled_run: Option<RunResult>,
}

#[allow(clippy::cast_precision_loss)]
fn per_message(seconds: f64, sent: u64) -> f64 {
    seconds * 1_000.0 / sent.max(1) as f64
}

async fn run(args: Args, machine: Machine) -> ExitCode {
    let private = (!args.shared_postgres)
        .then(|| PrivatePostgres::start(300, &["shared_preload_libraries=pg_stat_statements"]));
    let server = private
        .as_ref()
        .map_or_else(daemon::shared_postgres, |p| p.url.clone());
    let world = World::new(&server, "profile", args.load.mailboxes).await;
    if private.is_some() {
        world.enable_statements().await;
    }
    let scenario = Scenario {
        section: "profile".into(),
        daemons: 1,
        concurrency: Some(args.concurrency),
        scheduler_interval_ms: Some(args.scheduler_interval_ms),
        latency_ms: args.load.latency_ms,
        messages: args.load.messages,
        arrivals_per_s: None,
        timeout: Duration::from_secs(if args.run.smoke { 60 } else { 300 }),
    };
    println!(
        "profile: {} messages over {} mailboxes, graph-sim +{} ms, {}, WORKER_CONCURRENCY {}; {} unprofiled run(s) + 1 under perf",
        args.load.messages,
        args.load.mailboxes,
        args.load.latency_ms,
        scenario.name(),
        args.concurrency,
        args.runs
    );
    let label = &support::results_name("profile", args.run.smoke);
    let mut runs = Vec::new();
    for run in 0..args.runs {
        let r = e2e::run_once(
            &world,
            &scenario,
            run,
            label,
            e2e::Extras {
                perf_data: None,
                statements: private.is_some(),
            },
        )
        .await;
        eprintln!(
            "run {}/{}: {} sent at {:.0}/s; CPU ms per message: daemon {:.3}, postgres {:.3}, redis {:.3}, graph-sim+harness {:.3}",
            run + 1,
            args.runs,
            r.sent,
            r.sends_per_s,
            per_message(r.cpu.daemons, r.sent),
            per_message(r.cpu.postgres, r.sent),
            per_message(r.cpu.redis, r.sent),
            per_message(r.cpu.graph_sim_and_harness, r.sent),
        );
        runs.push(r);
    }
    let refs: Vec<&RunResult> = runs.iter().collect();
    let cpu = CpuSplit {
        daemons: median_of(&refs, |r| per_message(r.cpu.daemons, r.sent)),
        postgres: median_of(&refs, |r| per_message(r.cpu.postgres, r.sent)),
        redis: median_of(&refs, |r| per_message(r.cpu.redis, r.sent)),
        graph_sim_and_harness: median_of(&refs, |r| {
            per_message(r.cpu.graph_sim_and_harness, r.sent)
        }),
    };
    let sends_per_s = median_of(&refs, |r| r.sends_per_s);
    let wall_phases: Vec<Phase> = (0..runs[0].phases.len())
        .map(|i| Phase {
            name: runs[0].phases[i].name,
            p50: median_of(&refs, |r| r.phases[i].p50),
            p90: median_of(&refs, |r| r.phases[i].p90),
            p99: median_of(&refs, |r| r.phases[i].p99),
        })
        .collect();

    let mut statements: Vec<StatementSummary> = runs[0]
        .statements
        .iter()
        .map(|first| {
            let of = |r: &RunResult| {
                r.statements
                    .iter()
                    .find(|s| s.query == first.query)
                    .cloned()
            };
            StatementSummary {
                query: first.query.clone(),
                calls_per_message: median_of(&refs, |r| of(r).map_or(0.0, |s| s.calls_per_message)),
                exec_us_per_message: median_of(&refs, |r| {
                    of(r).map_or(0.0, |s| s.exec_us_per_message)
                }),
                mean_exec_us: median_of(&refs, |r| of(r).map_or(0.0, |s| s.mean_exec_us)),
            }
        })
        .collect();
    statements.sort_by(|a, b| b.exec_us_per_message.total_cmp(&a.exec_us_per_message));
    let mut redis_commands: Vec<CommandSummary> = runs[0]
        .redis_commands
        .keys()
        .map(|name| CommandSummary {
            command: name.clone(),
            calls_per_message: median_of(&refs, |r| {
                r.redis_commands.get(name).map_or(0.0, |c| c.calls as f64) / r.sent.max(1) as f64
            }),
            redis_us_per_message: median_of(&refs, |r| {
                r.redis_commands.get(name).map_or(0.0, |c| c.usec as f64) / r.sent.max(1) as f64
            }),
        })
        .collect();
    redis_commands.sort_by(|a, b| b.redis_us_per_message.total_cmp(&a.redis_us_per_message));

    let (profile, perf_note, profiled_run) = if args.no_perf {
        (None, Some("skipped (--no-perf)".to_owned()), None)
    } else if !e2e::perf_works() {
        (
            None,
            Some("perf is missing or may not sample here (`perf stat -e cpu-clock true` failed); install linux-perf or run as root".to_owned()),
            None,
        )
    } else {
        let data = daemon::results_path(&format!("{label}.perf.data"));
        let r = e2e::run_once(
            &world,
            &scenario,
            args.runs,
            label,
            e2e::Extras {
                perf_data: Some(data.clone()),
                statements: false,
            },
        )
        .await;
        eprintln!(
            "profiled run: {} sent at {:.0}/s (daemon {:.3} CPU ms per message with perf attached)",
            r.sent,
            r.sends_per_s,
            per_message(r.cpu.daemons, r.sent)
        );
        match analyse(&data, cpu.daemons * 1_000.0, args.top) {
            Ok(p) => (Some(p), None, Some(r)),
            Err(e) => (None, Some(e), Some(r)),
        }
    };

    print_report(
        &machine,
        &cpu,
        sends_per_s,
        &wall_phases,
        profile.as_ref(),
        perf_note.as_deref(),
    );
    print_statements(&statements, &redis_commands, &cpu);
    let report = Report {
        run: support::RunInfo {
            benchmark: "profile",
            machine,
            smoke: args.run.smoke,
        },
        scenario,
        latency_ms: args.load.latency_ms,
        mailboxes: args.load.mailboxes,
        cpu_ms_per_message: cpu,
        sends_per_s,
        wall_phases,
        statements,
        redis_commands,
        profile,
        perf_note,
        runs,
        profiled_run,
    };
    let path = support::write_json(label, &report);
    println!("results: {}", path.display());
    world.close().await;
    drop(private);
    ExitCode::SUCCESS
}

fn print_report(
    machine: &Machine,
    cpu: &CpuSplit,
    sends_per_s: f64,
    wall: &[Phase],
    profile: Option<&Profile>,
    perf_note: Option<&str>,
) {
    let total = cpu.daemons + cpu.postgres + cpu.redis + cpu.graph_sim_and_harness;
    println!();
    println!("CPU per message sent, by process (medians; {sends_per_s:.0} sends/s):");
    let row = |process: &str, cpu_s: f64, share: String| {
        vec![process.to_owned(), format!("{:.0}", cpu_s * 1_000.0), share]
    };
    let mut rows: Vec<Vec<String>> = [
        ("mail-worker (daemon)", cpu.daemons),
        ("PostgreSQL (its backends)", cpu.postgres),
        ("Redis (queue + limiter)", cpu.redis),
        ("graph-sim + harness", cpu.graph_sim_and_harness),
    ]
    .into_iter()
    .map(|(process, v)| row(process, v, format!("{:.0} %", v / total * 100.0)))
    .collect();
    rows.push(row("total", total, "100 %".into()));
    support::print_table(&["process", "CPU µs per message", "share"], &rows);
    println!(
        "→ {} cores could carry at most {} sends/s at this cost",
        machine.cores,
        support::thousands(machine.cores as f64 * 1_000.0 / total)
    );
    println!();
    println!("wall time of one message (ms, medians over runs):");
    support::print_table_of(&["phase", "p50", "p90", "p99"], wall, |p| {
        vec![
            p.name.to_owned(),
            format!("{:.1}", p.p50),
            format!("{:.1}", p.p90),
            format!("{:.1}", p.p99),
        ]
    });
    println!();
    match profile {
        None => println!("perf profile: {}", perf_note.unwrap_or("none")),
        Some(p) => {
            println!(
                "perf profile of the daemon ({} samples, {}): by component (a sample counts for the innermost library on its stack)",
                p.samples, p.samples_file
            );
            for (title, column, entries) in [
                (None, "component", &p.by_component),
                (Some("by library (self time):"), "object", &p.by_dso),
                (
                    Some("by crate (self time; `[kernel]` = system calls and scheduling):"),
                    "crate",
                    &p.by_crate,
                ),
                (
                    Some("top functions (self time):"),
                    "function",
                    &p.top_functions,
                ),
            ] {
                if let Some(title) = title {
                    println!("{title}");
                }
                let headers = [column, "% of daemon CPU", "µs per message"];
                support::print_table_of(&headers, entries.iter(), |e| {
                    vec![
                        e.name.clone(),
                        format!("{:.1} %", e.percent),
                        format!("{:.0}", e.us_per_message),
                    ]
                });
                println!();
            }
        }
    }
}

fn print_statements(statements: &[StatementSummary], commands: &[CommandSummary], cpu: &CpuSplit) {
    if !statements.is_empty() {
        let total: f64 = statements.iter().map(|s| s.exec_us_per_message).sum();
        let calls: f64 = statements.iter().map(|s| s.calls_per_message).sum();
        println!(
            "PostgreSQL statements per message (pg_stat_statements; execution only, {calls:.1} statements and {total:.0} µs per message of {:.0} µs backend CPU):",
            cpu.postgres * 1_000.0
        );
        let headers = ["statement", "calls/msg", "exec µs/msg", "mean µs"];
        support::print_table_of(&headers, statements.iter().take(15), |s| {
            vec![
                shorten(&s.query),
                format!("{:.2}", s.calls_per_message),
                format!("{:.0}", s.exec_us_per_message),
                format!("{:.0}", s.mean_exec_us),
            ]
        });
        println!();
    }
    if !commands.is_empty() {
        let calls: f64 = commands.iter().map(|c| c.calls_per_message).sum();
        println!(
            "Redis commands per message ({calls:.1} in all; Lua scripts' inner commands count twice):"
        );
        let headers = ["command", "calls/msg", "Redis µs/msg"];
        support::print_table_of(&headers, commands.iter().take(12), |c| {
            vec![
                c.command.clone(),
                format!("{:.2}", c.calls_per_message),
                format!("{:.1}", c.redis_us_per_message),
            ]
        });
        println!();
    }
}

/// Runs `perf report` on `data` and builds the tables; `daemon_us` is the daemon's CPU µs per
/// message (to turn shares into µs).
fn analyse(data: &Path, daemon_us: f64, top: usize) -> Result<Profile, String> {
    let text = perf(
        "report",
        data,
        &[
            "--stdio",
            "--no-children",
            "--sort",
            "dso,sym",
            "-g",
            "none",
            "--percent-limit",
            "0",
            "-q",
            "--no-inline",
        ],
    )?;
    let samples: Vec<Sample> = text.lines().filter_map(parse_report_line).collect();
    if samples.is_empty() {
        return Err("perf recorded no samples of the daemon".into());
    }
    let count = std::process::Command::new("perf")
        .args(["report", "-i"])
        .arg(data)
        .args(["--stdio", "--no-children", "--sort", "dso", "-q", "-n"])
        .args(["-g", "none", "--no-inline"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum::<u64>()
        })
        .unwrap_or(0);
    let entry = |name: String, percent: f64| Entry {
        name,
        percent,
        us_per_message: percent / 100.0 * daemon_us,
    };
    let mut by_dso: BTreeMap<String, f64> = BTreeMap::new();
    let mut by_crate: BTreeMap<String, f64> = BTreeMap::new();
    for s in &samples {
        *by_dso.entry(s.dso.clone()).or_default() += s.own;
        *by_crate.entry(crate_of(&s.dso, &s.symbol)).or_default() += s.own;
    }
    let sorted = |m: BTreeMap<String, f64>, n: usize| {
        let mut v: Vec<(String, f64)> = m.into_iter().filter(|(_, p)| *p > 0.0).collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        v.truncate(n);
        v.into_iter().map(|(k, p)| entry(k, p)).collect::<Vec<_>>()
    };
    let mut own: Vec<&Sample> = samples.iter().filter(|s| s.own > 0.0).collect();
    own.sort_by(|a, b| b.own.total_cmp(&a.own));
    let top_functions = own
        .iter()
        .take(top)
        .map(|s| entry(shorten(&s.symbol), s.own))
        .collect();
    let by_component = components(data)?
        .into_iter()
        .map(|(name, percent)| entry(name, percent))
        .collect();
    Ok(Profile {
        samples_file: data.display().to_string(),
        samples: count,
        by_dso: sorted(by_dso, 8),
        by_crate: sorted(by_crate, 15),
        top_functions,
        by_component,
    })
}

/// Trims a long symbol to 110 characters for the table.
fn shorten(symbol: &str) -> String {
    if symbol.chars().count() <= 110 {
        symbol.to_owned()
    } else {
        let cut: String = symbol.chars().take(107).collect();
        format!("{cut}…")
    }
}

/// Runs `perf script` on `data` and shares out the samples by component
/// ([`perf::components_of_script`]), in %.
fn components(data: &Path) -> Result<Vec<(String, f64)>, String> {
    let text = perf("script", data, &["-F", "ip,sym,dso", "--no-inline"])?;
    perf::components_of_script(&text)
}

/// The output of `perf <command> -i <data> <args>`; the error says why it did not run or
/// failed.
fn perf(command: &str, data: &Path, args: &[&str]) -> Result<String, String> {
    let output = std::process::Command::new("perf")
        .args([command, "-i"])
        .arg(data)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run perf {command}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "perf {command} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn main() -> ExitCode {
    support::bench_main(run)
}

impl support::BenchArgs for Args {
    const SMOKE: &str = "A smoke run for CI: 100 messages over 20 mailboxes, `WORKER_CONCURRENCY` 16, claims every 100 ms, 1 run + 1 profiled run when perf works.";

    fn invalid(&self) -> Option<&'static str> {
        (self.load.is_empty() || self.runs == 0 || self.concurrency == 0)
            .then_some("every count must be positive")
    }

    fn smoke(&mut self) {
        self.load.smoke();
        self.concurrency = 16;
        self.runs = 1;
        self.top = 10;
        self.scheduler_interval_ms = 100;
    }
}
