//! Benchmark 4, end to end: 5,000 messages over 500 mailboxes (10 each, so neither our limiter
//! nor graph-sim's Exchange limits ever refuse), graph-sim adding 20 ms to every sendMail,
//! `WORKER_CONCURRENCY` 64, through one `mail-worker run` and then two: sends per second, CPU
//! seconds per 1,000 sends, peak RSS (`/usr/bin/time -v`), beside the bounds — concurrency /
//! latency (64 / 20 ms = 3,200 sends/s per daemon) and the claim loop's batch / interval.
//!
//! ```text
//! cargo bench -p mail-worker-bench --bench end_to_end                       # 3 runs × 4 scenarios, ~6 minutes
//! cargo bench -p mail-worker-bench --bench end_to_end -- --runs 5
//! cargo bench -p mail-worker-bench --bench end_to_end -- --scheduler-interval-ms 1000   # production defaults only
//! cargo test -p mail-worker-bench --bench end_to_end -- --smoke            # 100 messages, 1 run (~7 s)
//! ```
//!
//! Scenarios: 1 and 2 daemons × `SCHEDULER_INTERVAL_MS` 1,000 (the default) and 100; every
//! other setting at its default. Each run gets fresh messages (round robin over the mailboxes,
//! so claims come in mailbox order), a fresh private `redis-server` (queue and limiter, as in
//! production; its CPU and `INFO commandstats` are the run's alone) and fresh keys; the
//! scenarios alternate their order from run to run. graph-sim runs in this process. Results:
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

/// Benchmark 4: throughput, CPU and memory of the daemon end to end.
#[derive(Debug, Parser)]
#[command(name = "end_to_end")]
struct Args {
    /// Messages per run.
    #[arg(long, default_value_t = 5_000)]
    messages: usize,
    /// Mailboxes they are spread over (round robin).
    #[arg(long, default_value_t = 500)]
    mailboxes: usize,
    /// Latency graph-sim adds to every sendMail, ms.
    #[arg(long, default_value_t = 20)]
    latency_ms: u64,
    /// `WORKER_CONCURRENCY` of each daemon.
    #[arg(long, default_value_t = 64)]
    concurrency: u32,
    /// Daemon counts to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2])]
    daemons: Vec<u32>,
    /// `SCHEDULER_INTERVAL_MS` values to measure, comma-separated (default 1,000 ms).
    #[arg(long, value_delimiter = ',', default_values_t = [1_000, 100])]
    scheduler_interval_ms: Vec<u64>,
    /// Runs of every scenario; medians are reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Give up on a run after this many seconds.
    #[arg(long, default_value_t = 300)]
    timeout_s: u64,
    /// A smoke run for CI: 100 messages over 20 mailboxes, `WORKER_CONCURRENCY` 16, claims
    /// every 100 ms, 1 run, 60 s timeout (figures meaningless).
    #[arg(long)]
    smoke: bool,
    /// Use the local PostgreSQL server (`DATABASE_URL`) instead of a private cluster. Its
    /// `max_connections` (default 100, shared with other work) cannot hold two daemons at
    /// concurrency 64 (up to 2 × 68 connections).
    #[arg(long)]
    shared_postgres: bool,
    /// `max_connections` of the private cluster.
    #[arg(long, default_value_t = 300)]
    max_connections: u32,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Debug, Serialize)]
struct Summary {
    scenario: String,
    runs: usize,
    complete_runs: usize,
    sends_per_s: f64,
    concurrency_bound: f64,
    claim_bound: f64,
    daemon_cpu_s_per_1000: f64,
    peak_rss_mib: f64,
    peak_pg_connections: f64,
    cpu_ms_per_message_daemons: f64,
    cpu_ms_per_message_postgres: f64,
    cpu_ms_per_message_redis: f64,
    cpu_ms_per_message_graph_sim: f64,
    redis_commands_per_sent: f64,
    pg_row_writes_per_sent: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    benchmark: &'static str,
    machine: Machine,
    smoke: bool,
    messages: usize,
    mailboxes: usize,
    latency_ms: u64,
    summaries: Vec<Summary>,
    runs: Vec<RunResult>,
}

fn main() -> ExitCode {
    let mut args = Args::parse();
    if args.smoke {
        args.messages = 100;
        args.mailboxes = 20;
        args.concurrency = 16;
        args.runs = 1;
        args.timeout_s = 60;
        args.scheduler_interval_ms = vec![100];
    }
    if args.messages == 0
        || args.mailboxes == 0
        || args.runs == 0
        || args.concurrency == 0
        || args.daemons.contains(&0)
        || args.scheduler_interval_ms.contains(&0)
    {
        support::fail("every count and interval must be positive");
    }
    support::block_on(run(args))
}

async fn run(args: Args) -> ExitCode {
    let machine = Machine::describe();
    machine.print();
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
    let world = World::new(&server, "e2e", args.mailboxes, args.latency_ms).await;
    let mut scenarios = Vec::new();
    for &interval in &args.scheduler_interval_ms {
        for &daemons in &args.daemons {
            scenarios.push(Scenario {
                daemons,
                concurrency: args.concurrency,
                scheduler_interval_ms: interval,
                messages: args.messages,
                timeout: Duration::from_secs(args.timeout_s),
            });
        }
    }
    println!(
        "end to end: {} messages over {} mailboxes, graph-sim +{} ms per sendMail, WORKER_CONCURRENCY {}, {} run(s) of {} scenario(s)",
        args.messages,
        args.mailboxes,
        args.latency_ms,
        args.concurrency,
        args.runs,
        scenarios.len()
    );
    let label = if args.smoke {
        "end_to_end-smoke"
    } else {
        "end_to_end"
    };
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
                "run {}/{} {}: {} sent in {:.1} s = {:.0}/s; {} claims of {:.0} messages on average (max {}); daemons {:.2} s CPU, postgres {:.2} s, redis {:.2} s, graph-sim+harness {:.2} s; peak RSS {:.0} MiB; {} PG connections; {} refused; {} warn / {} error lines",
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

    let mut summaries = Vec::new();
    for scenario in &scenarios {
        let runs: Vec<&RunResult> = results
            .iter()
            .filter(|r| r.scenario.name() == scenario.name())
            .collect();
        let per_msg = |cpu: fn(&RunResult) -> f64| {
            median_of(&runs, |r| cpu(r) * 1_000.0 / r.sent.max(1) as f64)
        };
        summaries.push(Summary {
            scenario: scenario.name(),
            runs: runs.len(),
            complete_runs: runs.iter().filter(|r| r.complete).count(),
            sends_per_s: median_of(&runs, |r| r.sends_per_s),
            concurrency_bound: scenario.concurrency_bound(args.latency_ms),
            claim_bound: scenario.claim_bound(),
            daemon_cpu_s_per_1000: median_of(&runs, |r| {
                r.daemon_cpu_s * 1_000.0 / r.sent.max(1) as f64
            }),
            peak_rss_mib: median_of(&runs, |r| r.peak_rss_mib),
            peak_pg_connections: median_of(&runs, |r| r.peak_pg_connections as f64),
            cpu_ms_per_message_daemons: per_msg(|r| r.cpu.daemons),
            cpu_ms_per_message_postgres: per_msg(|r| r.cpu.postgres),
            cpu_ms_per_message_redis: per_msg(|r| r.cpu.redis),
            cpu_ms_per_message_graph_sim: per_msg(|r| r.cpu.graph_sim_and_harness),
            redis_commands_per_sent: median_of(&runs, |r| {
                daemon::total_calls(&r.redis_commands) as f64 / r.sent.max(1) as f64
            }),
            pg_row_writes_per_sent: median_of(&runs, |r| r.pg_row_writes_per_sent),
        });
    }

    println!();
    let rows: Vec<Vec<String>> = summaries
        .iter()
        .map(|s| {
            vec![
                s.scenario.clone(),
                thousands(s.sends_per_s),
                thousands(s.concurrency_bound),
                thousands(s.claim_bound),
                format!(
                    "{:.2}",
                    s.sends_per_s / s.concurrency_bound.min(s.claim_bound)
                ),
                format!("{:.2}", s.daemon_cpu_s_per_1000),
                format!("{:.0}", s.peak_rss_mib),
                format!("{:.0}", s.peak_pg_connections),
                format!("{}/{}", s.complete_runs, s.runs),
            ]
        })
        .collect();
    support::print_table(
        &[
            "scenario",
            "sends/s",
            "bound: conc/latency",
            "bound: claim batch/interval",
            "÷ lower bound",
            "daemon CPU s per 1,000",
            "peak RSS MiB",
            "PG conns",
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
                thousands(machine.cores as f64 * 1_000.0 / total),
                format!("{:.1}", s.redis_commands_per_sent),
                format!("{:.1}", s.pg_row_writes_per_sent),
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
            "cores' ceiling /s",
            "Redis cmds/msg",
            "PG row writes/msg",
        ],
        &rows,
    );
    println!();
    for scenario in &scenarios {
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

    let failed = results.iter().any(|r| !r.complete || r.graph_refused > 0);
    if failed {
        println!("FAILURE: a run did not send everything in time, or graph-sim refused requests");
    }
    let report = Report {
        benchmark: "end_to_end",
        machine,
        smoke: args.smoke,
        messages: args.messages,
        mailboxes: args.mailboxes,
        latency_ms: args.latency_ms,
        summaries,
        runs: results,
    };
    let path = support::write_json(label, &report);
    println!("results: {}", path.display());
    world.close().await;
    drop(private);
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
