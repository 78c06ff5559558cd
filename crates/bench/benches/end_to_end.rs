//! Benchmark 4, end to end and scale-out (issue 12): `mail-worker run` processes against
//! graph-sim in this process, on one database, until every message is `SENT`. Sections, all in
//! one run so that their figures share the machine's load:
//!
//! 1. **defaults**: 5,000 messages over 500 mailboxes, graph-sim +20 ms per request, one
//!    daemon at every default (`WORKER_CONCURRENCY` 128) — sends/s against min(concurrency ÷
//!    latency, the CPU ceiling measured in the same run: cores × 1,000 ÷ CPU ms per message of
//!    all processes), and the budget bound (mailboxes × `MAIL_RATE_LIMIT_PER_MINUTE` ÷ 60; the
//!    benchmark raises the limit to [`e2e::BENCH_PER_MINUTE`] so that it does not bind);
//! 2. **concurrency 16**: the same at `WORKER_CONCURRENCY` 16 (the default before issue 12);
//! 3. **scale-out**: the same at +200 ms with 1, 2 and 4 daemons at `WORKER_CONCURRENCY` 16 (so
//!    that 4 daemons stay I/O-bound on 2 cores: 64 in flight): the ratios;
//! 4. **queue Redis**: 10,000 sends, `used_memory` and keys of `REDIS_URL`'s server (the job
//!    queue's before issue 12) and of the limiter's, before and after;
//! 5. **latency**: 2,000 messages coming due at 100 a second: claim → `SENT` and due → `SENT`
//!    p50 / p99;
//! 6. **idle**: one daemon with nothing due for 20 s: its CPU and its PostgreSQL backends' per
//!    second (the claim loop looks again every `SCHEDULER_INTERVAL`, 250 ms).
//!
//! Per run also: PostgreSQL CPU per sent message (the daemons' backends, `/proc`), row writes
//! and HOT updates per sent message (`pg_stat_user_tables`), peak PostgreSQL connections per
//! daemon (against `DATABASE_MAX_CONNECTIONS`, default 10).
//!
//! ```text
//! cargo bench -p mail-worker-bench --bench end_to_end                 # every section, ~5 minutes
//! cargo bench -p mail-worker-bench --bench end_to_end -- --runs 3     # medians of 3
//! cargo test -p mail-worker-bench --bench end_to_end -- --smoke      # tiny versions (~20 s)
//! ```
//!
//! Each run gets fresh messages (round robin over the mailboxes), two fresh private
//! `redis-server`s (`REDIS_URL` and the limiter's) and fresh keys. Results:
//! `bench-results/end_to_end.json` (`end_to_end-smoke.json`); daemon logs and GNU time's
//! reports in `bench-results/end_to_end-daemon<N>.{log,time}`.
//!
//! Exit status 1 when a run did not send everything before its timeout or graph-sim refused a
//! request; 2 when the benchmark could not run.

use mail_worker_bench as support;

use std::{process::ExitCode, time::Duration};

use clap::Parser;
use serde::Serialize;
use support::{
    Machine,
    daemon::{self, PrivatePostgres},
    e2e::{self, RunResult, Scenario, World, median_of},
    thousands,
};

/// Benchmark 4: throughput, scale-out, CPU, memory, queue Redis and latency end to end.
#[derive(Debug, Parser)]
#[command(name = "end_to_end")]
struct Args {
    #[command(flatten)]
    load: e2e::Load,
    /// `WORKER_CONCURRENCY` of sections 2 and 3.
    #[arg(long, default_value_t = 16)]
    low_concurrency: u32,
    /// graph-sim's added latency for the scale-out section, ms.
    #[arg(long, default_value_t = 200)]
    scale_latency_ms: u64,
    /// Daemon counts of the scale-out section, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2, 4])]
    scale_daemons: Vec<u32>,
    /// Messages of the queue Redis section.
    #[arg(long, default_value_t = 10_000)]
    redis_messages: usize,
    /// Messages of the latency section.
    #[arg(long, default_value_t = 2_000)]
    paced_messages: usize,
    /// How many come due a second in the latency section.
    #[arg(long, default_value_t = 100.0)]
    paced_rate: f64,
    /// Seconds of the idle measurement.
    #[arg(long, default_value_t = 20)]
    idle_s: u64,
    /// Runs of every scenario; medians are reported.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// Give up on a run after this many seconds.
    #[arg(long, default_value_t = 300)]
    timeout_s: u64,
    /// Use the local PostgreSQL server (`DATABASE_URL`) instead of a private cluster.
    #[arg(long)]
    shared_postgres: bool,
    /// `max_connections` of the private cluster: PostgreSQL's default, 100 (4 daemons ×
    /// `DATABASE_MAX_CONNECTIONS` 10 fit with room to spare).
    #[arg(long, default_value_t = 100)]
    max_connections: u32,
    #[command(flatten)]
    run: support::RunArgs,
}

#[derive(Debug, Serialize)]
struct Summary {
    scenario: String,
    runs: usize,
    complete_runs: usize,
    sends_per_s: f64,
    concurrency_bound: f64,
    cpu_ceiling: f64,
    budget_bound: f64,
    peak_rss_mib: f64,
    peak_pg_connections_per_daemon: f64,
    cpu_ms_per_message_daemons: f64,
    cpu_ms_per_message_postgres: f64,
    cpu_ms_per_message_redis: f64,
    cpu_ms_per_message_graph_sim: f64,
    redis_commands_per_sent: f64,
    pg_row_writes_per_sent: f64,
    pg_hot_updates_per_sent: f64,
    queue_redis_memory: (u64, u64),
    queue_redis_keys: (u64, u64),
    limiter_redis_keys: (u64, u64),
    claim_to_sent_ms: (f64, f64),
    due_to_sent_ms: (f64, f64),
}

#[derive(Debug, Serialize)]
struct Report {
    #[serde(flatten)]
    run: support::RunInfo,
    messages: usize,
    mailboxes: usize,
    summaries: Vec<Summary>,
    scale_out_ratios: Vec<(u32, f64)>,
    idle: e2e::IdleCost,
    runs: Vec<RunResult>,
}

fn scenarios(args: &Args) -> Vec<Scenario> {
    let timeout = Duration::from_secs(args.timeout_s);
    let base = Scenario {
        section: "defaults".into(),
        daemons: 1,
        concurrency: None,
        scheduler_interval_ms: None,
        latency_ms: args.load.latency_ms,
        messages: args.load.messages,
        arrivals_per_s: None,
        timeout,
    };
    let mut out = vec![
        base.clone(),
        Scenario {
            section: "concurrency 16".into(),
            concurrency: Some(args.low_concurrency),
            ..base.clone()
        },
    ];
    for &daemons in &args.scale_daemons {
        out.push(Scenario {
            section: "scale-out".into(),
            daemons,
            concurrency: Some(args.low_concurrency),
            latency_ms: args.scale_latency_ms,
            ..base.clone()
        });
    }
    out.push(Scenario {
        section: "queue Redis".into(),
        messages: args.redis_messages,
        ..base.clone()
    });
    out.push(Scenario {
        section: "latency".into(),
        messages: args.paced_messages,
        arrivals_per_s: Some(args.paced_rate),
        ..base
    });
    out
}

async fn run(args: Args, machine: Machine) -> ExitCode {
    let private =
        (!args.shared_postgres).then(|| PrivatePostgres::start(args.max_connections, &[]));
    let server = private
        .as_ref()
        .map_or_else(daemon::shared_postgres, |p| p.url.clone());
    println!(
        "PostgreSQL: {}",
        if private.is_some() {
            format!(
                "a private cluster (initdb defaults, max_connections {}) at {server}",
                args.max_connections
            )
        } else {
            format!("the shared server at {server}")
        }
    );
    let world = World::new(&server, "e2e", args.load.mailboxes).await;
    let scenarios = scenarios(&args);
    println!(
        "end to end: {} mailboxes at MAIL_RATE_LIMIT_PER_MINUTE {}, {} run(s) of {} scenario(s)",
        args.load.mailboxes,
        e2e::BENCH_PER_MINUTE,
        args.runs,
        scenarios.len()
    );
    let label = &support::results_name("end_to_end", args.run.smoke);
    let mut results: Vec<RunResult> = Vec::new();
    for run in 0..args.runs {
        let order: Vec<&Scenario> = if run % 2 == 0 {
            scenarios.iter().collect()
        } else {
            scenarios.iter().rev().collect()
        };
        for scenario in order {
            let r = e2e::run_once(&world, scenario, run, label, e2e::Extras::default()).await;
            eprintln!(
                "run {}/{} {}: {} sent in {:.1} s = {:.0}/s; {} claims of {:.1} on average (max {}); daemons {:.2} s CPU, postgres {:.2} s, redis {:.2} s, graph-sim+harness {:.2} s; peak RSS {:.0} MiB; {} PG connections; {} refused; {} warn / {} error lines",
                run + 1,
                args.runs,
                scenario.name(),
                r.sent,
                r.window_s,
                r.sends_per_s,
                r.claim_batches,
                r.mean_claim_batch,
                r.max_claim_batch,
                r.cpu.daemons,
                r.cpu.postgres,
                r.cpu.redis,
                r.cpu.graph_sim_and_harness,
                r.peak_rss_mib,
                r.peak_pg_connections,
                r.graph_refused,
                r.warn_lines,
                r.error_lines,
            );
            results.push(r);
        }
    }

    let summaries: Vec<Summary> = scenarios
        .iter()
        .map(|s| summarise(s, &results, &machine, args.load.mailboxes))
        .collect();
    print_summaries(&summaries, &scenarios, &results);

    let one = summaries
        .iter()
        .find(|s| s.scenario.starts_with("scale-out: 1 daemon,"))
        .map(|s| s.sends_per_s);
    let scale_out_ratios: Vec<(u32, f64)> = scenarios
        .iter()
        .zip(&summaries)
        .filter(|(sc, _)| sc.section == "scale-out")
        .map(|(sc, s)| (sc.daemons, s.sends_per_s / one.unwrap_or(f64::NAN)))
        .collect();
    for (daemons, ratio) in &scale_out_ratios {
        println!(
            "scale-out at +{} ms: {daemons} daemon(s) = {ratio:.2} × one daemon",
            args.scale_latency_ms
        );
    }

    let idle = e2e::idle_cost(&world, args.idle_s, label).await;
    println!(
        "idle ({:.0} s, nothing due): daemon {:.2} ms CPU/s, its PostgreSQL backends {:.2} ms CPU/s",
        idle.seconds, idle.daemon_ms_per_s, idle.postgres_ms_per_s
    );

    let failed = results.iter().any(|r| !r.complete || r.graph_refused > 0);
    if failed {
        println!("FAILURE: a run did not send everything in time, or graph-sim refused requests");
    }
    let report = Report {
        run: support::RunInfo {
            benchmark: "end_to_end",
            machine,
            smoke: args.run.smoke,
        },
        messages: args.load.messages,
        mailboxes: args.load.mailboxes,
        summaries,
        scale_out_ratios,
        idle,
        runs: results,
    };
    let path = support::write_json(label, &report);
    println!("results: {}", path.display());
    world.close().await;
    drop(private);
    support::exit_code(!failed)
}

/// The medians of `scenario`'s runs.
fn summarise(
    scenario: &Scenario,
    results: &[RunResult],
    machine: &Machine,
    mailboxes: usize,
) -> Summary {
    let runs: Vec<&RunResult> = results
        .iter()
        .filter(|r| r.scenario.name() == scenario.name())
        .collect();
    let per_msg =
        |cpu: fn(&RunResult) -> f64| median_of(&runs, |r| cpu(r) * 1_000.0 / r.sent.max(1) as f64);
    let total =
        per_msg(|r| r.cpu.daemons + r.cpu.postgres + r.cpu.redis + r.cpu.graph_sim_and_harness);
    let phase = |name: &str| {
        let i = runs
            .first()
            .and_then(|r| r.phases.iter().position(|p| p.name.starts_with(name)));
        i.map_or((f64::NAN, f64::NAN), |i| {
            (
                median_of(&runs, |r| r.phases[i].p50),
                median_of(&runs, |r| r.phases[i].p99),
            )
        })
    };
    let last = runs.last();
    Summary {
        scenario: scenario.name(),
        runs: runs.len(),
        complete_runs: runs.iter().filter(|r| r.complete).count(),
        sends_per_s: median_of(&runs, |r| r.sends_per_s),
        concurrency_bound: scenario.concurrency_bound(),
        cpu_ceiling: machine.cores as f64 * 1_000.0 / total,
        budget_bound: Scenario::budget_bound(mailboxes),
        peak_rss_mib: median_of(&runs, |r| r.peak_rss_mib),
        peak_pg_connections_per_daemon: median_of(&runs, |r| {
            r.peak_pg_connections as f64 / f64::from(r.scenario.daemons)
        }),
        cpu_ms_per_message_daemons: per_msg(|r| r.cpu.daemons),
        cpu_ms_per_message_postgres: per_msg(|r| r.cpu.postgres),
        cpu_ms_per_message_redis: per_msg(|r| r.cpu.redis),
        cpu_ms_per_message_graph_sim: per_msg(|r| r.cpu.graph_sim_and_harness),
        redis_commands_per_sent: median_of(&runs, |r| {
            daemon::total_calls(&r.redis_commands) as f64 / r.sent.max(1) as f64
        }),
        pg_row_writes_per_sent: median_of(&runs, |r| r.pg_row_writes_per_sent),
        pg_hot_updates_per_sent: median_of(&runs, |r| r.pg_hot_updates_per_sent),
        queue_redis_memory: last.map_or((0, 0), |r| r.queue_redis_memory),
        queue_redis_keys: last.map_or((0, 0), |r| r.queue_redis_keys),
        limiter_redis_keys: last.map_or((0, 0), |r| r.limiter_redis_keys),
        claim_to_sent_ms: phase("claimed → SENT"),
        due_to_sent_ms: phase("due → SENT"),
    }
}

fn print_summaries(summaries: &[Summary], scenarios: &[Scenario], results: &[RunResult]) {
    println!();
    let rows: Vec<Vec<String>> = summaries
        .iter()
        .map(|s| {
            let lower = s.concurrency_bound.min(s.cpu_ceiling).min(s.budget_bound);
            vec![
                s.scenario.clone(),
                thousands(s.sends_per_s),
                thousands(s.concurrency_bound),
                thousands(s.cpu_ceiling),
                thousands(s.budget_bound),
                format!("{:.2}", s.sends_per_s / lower),
                format!("{:.0}", s.peak_rss_mib),
                format!("{:.1}", s.peak_pg_connections_per_daemon),
                format!("{}/{}", s.complete_runs, s.runs),
            ]
        })
        .collect();
    support::print_table(
        &[
            "scenario",
            "sends/s",
            "bound: conc/latency",
            "bound: CPU ceiling",
            "bound: budgets",
            "÷ lowest bound",
            "peak RSS MiB",
            "PG conns/daemon",
            "complete",
        ],
        &rows,
    );
    println!();
    let rows: Vec<Vec<String>> = summaries
        .iter()
        .map(|s| {
            let total = s.cpu_ms_per_message_daemons
                + s.cpu_ms_per_message_postgres
                + s.cpu_ms_per_message_redis
                + s.cpu_ms_per_message_graph_sim;
            vec![
                s.scenario.clone(),
                format!("{:.2}", s.cpu_ms_per_message_daemons),
                format!("{:.2}", s.cpu_ms_per_message_postgres),
                format!("{:.2}", s.cpu_ms_per_message_redis),
                format!("{:.2}", s.cpu_ms_per_message_graph_sim),
                format!("{total:.2}"),
                format!("{:.1}", s.redis_commands_per_sent),
                format!("{:.2}", s.pg_row_writes_per_sent),
                format!("{:.2}", s.pg_hot_updates_per_sent),
            ]
        })
        .collect();
    support::print_table(
        &[
            "CPU ms per message",
            "daemons",
            "PostgreSQL",
            "Redis",
            "graph-sim+harness",
            "total",
            "Redis cmds/msg",
            "PG row writes/msg",
            "of which HOT",
        ],
        &rows,
    );
    println!();
    let rows: Vec<Vec<String>> = summaries
        .iter()
        .map(|s| {
            vec![
                s.scenario.clone(),
                format!("{} → {}", s.queue_redis_memory.0, s.queue_redis_memory.1),
                format!("{} → {}", s.queue_redis_keys.0, s.queue_redis_keys.1),
                format!("{} → {}", s.limiter_redis_keys.0, s.limiter_redis_keys.1),
                format!("{:.1} / {:.1}", s.claim_to_sent_ms.0, s.claim_to_sent_ms.1),
                format!("{:.1} / {:.1}", s.due_to_sent_ms.0, s.due_to_sent_ms.1),
            ]
        })
        .collect();
    support::print_table(
        &[
            "scenario",
            "REDIS_URL used_memory before → after",
            "its keys",
            "limiter keys",
            "claim → SENT p50 / p99 ms",
            "due → SENT p50 / p99 ms",
        ],
        &rows,
    );
    println!();
    for scenario in scenarios {
        let runs: Vec<&RunResult> = results
            .iter()
            .filter(|r| r.scenario.name() == scenario.name())
            .collect();
        let Some(first) = runs.first() else { continue };
        let rows: Vec<Vec<String>> = (0..first.phases.len())
            .map(|i| {
                vec![
                    first.phases[i].name.to_owned(),
                    format!("{:.1}", median_of(&runs, |r| r.phases[i].p50)),
                    format!("{:.1}", median_of(&runs, |r| r.phases[i].p90)),
                    format!("{:.1}", median_of(&runs, |r| r.phases[i].p99)),
                ]
            })
            .collect();
        println!(
            "{}: wall phases per message (ms, medians over runs)",
            scenario.name()
        );
        support::print_table(&["phase", "p50", "p90", "p99"], &rows);
        println!();
    }
}

fn main() -> ExitCode {
    support::bench_main(run)
}

impl support::BenchArgs for Args {
    const SMOKE: &str = "A smoke run for CI: 100 messages over 20 mailboxes, scale-out 1 and 2 daemons at +20 ms, 200 for the queue Redis, 100 paced at 100/s; 1 run, 60 s timeout (figures meaningless).";

    fn invalid(&self) -> Option<&'static str> {
        (self.load.is_empty()
            || self.runs == 0
            || self.scale_daemons.contains(&0)
            || self.paced_rate <= 0.0)
            .then_some("every count and rate must be positive")
    }

    fn smoke(&mut self) {
        self.load.smoke();
        self.scale_latency_ms = 20;
        self.scale_daemons = vec![1, 2];
        self.redis_messages = 200;
        self.paced_messages = 100;
        self.idle_s = 2;
        self.runs = 1;
        self.timeout_s = 60;
    }
}
