//! Benchmark 19, ingest_http — the HTTP ingest (src/ingest, `POST /v1/messages`) from
//! producers' requests into committed rows, side by side in one run with the file import's
//! multi-row insert (the same lines, the same parser and insert, no HTTP): lines/s committed at
//! 1 and 4 concurrent producers posting batches of 500 (JSONL, each with its own
//! `Idempotency-Key`, as a real producer sends), and each request's latency (p50/p99).
//!
//! ```text
//! cargo bench -p mail-worker-bench --bench ingest_http                    # 50,000 lines a phase (~1 min)
//! cargo bench -p mail-worker-bench --bench ingest_http -- --lines 20000   # smaller
//! cargo test -p mail-worker-bench --bench ingest_http -- --smoke          # 4,000 lines (a few seconds)
//! ```
//!
//! The listener runs in this process (`mail_worker::ingest::serve`, the production settings,
//! a pool of 10 connections as `DATABASE_MAX_CONNECTIONS`' default), the producers are reqwest
//! clients in the same process: everything shares the machine's cores with PostgreSQL. Each
//! phase gets a fresh database (`bench_ingest_<hex>`). Results:
//! `bench-results/ingest_http.json` (`ingest_http-smoke.json`).
//!
//! Exit status 1 when a phase lost or doubled a line (rows ≠ lines) or a request was not
//! answered 200; 2 when it could not run; never for slowness.

use mail_worker_bench as support;

use std::{
    process::ExitCode,
    sync::Arc,
    time::{Duration, Instant},
};

use clap::Parser;
use mail_worker::{
    ingest::{self, IngestSettings, Producers},
    ops::Metrics,
};
use serde::Serialize;
use support::{
    Machine,
    campaign::{self, lines, rows},
    fail, percentile, thousands, to_f64 as f,
};

const TOKEN: &str = "bench-producer-0123456789abcdef";
/// Lines a request carries.
const BATCH: usize = 500;

/// Benchmark 19: the HTTP ingest against the file import's insert.
#[derive(Debug, Parser)]
#[command(name = "ingest_http")]
struct Args {
    /// Lines each phase posts.
    #[arg(long, default_value_t = 50_000)]
    lines: usize,
    #[command(flatten)]
    run: support::RunArgs,
}

impl support::BenchArgs for Args {
    const SMOKE: &str = "A smoke run for CI: 4,000 lines a phase.";

    fn smoke(&mut self) {
        self.lines = 4_000;
    }

    fn invalid(&self) -> Option<&'static str> {
        (self.lines < BATCH).then_some("--lines must be at least 500 (one batch)")
    }
}

/// One phase: `producers` posting concurrently.
#[derive(Debug, Clone, Serialize)]
struct Phase {
    producers: usize,
    lines: usize,
    requests: usize,
    seconds: f64,
    lines_per_s: f64,
    /// Against the file import's rate in this run (goal ≥ 0.5).
    of_file_import: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
struct Results {
    machine: Machine,
    lines: usize,
    batch: usize,
    file_import_rows_per_s: f64,
    phases: Vec<Phase>,
}

fn main() -> ExitCode {
    support::bench_main(run)
}

/// `lines` posted by `producers` concurrently in batches of [`BATCH`] into a fresh database.
async fn phase(producers: usize, total: usize, ceiling: f64) -> Result<Phase, String> {
    let (db, mailbox) = campaign::database("ingest").await;
    let settings = IngestSettings {
        producers: Arc::new(Producers::from_secrets([("bench", TOKEN, None)])),
        max_body_bytes: 10 * 1024 * 1024,
        max_lines: 1_000,
        outbox: Default::default(),
        retry_after: Duration::from_secs(5),
    };
    let listener = ingest::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap_or_else(|e| fail(&e.to_string()));
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(ingest::serve(
        listener,
        db.pool.clone(),
        settings,
        Arc::new(Metrics::new()),
        async {
            let _ = stopped.await;
        },
    ));
    let bodies: Vec<String> = lines(&mailbox, total)
        .chunks(BATCH)
        .map(|chunk| {
            let mut body = Vec::new();
            for (_, line) in chunk {
                body.extend_from_slice(line);
                body.push(b'\n');
            }
            String::from_utf8(body).unwrap_or_else(|e| fail(&e.to_string()))
        })
        .collect();
    let requests = bodies.len();
    let queue = Arc::new(std::sync::Mutex::new(bodies.into_iter().enumerate()));
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/v1/messages");
    let started = Instant::now();
    let tasks: Vec<_> = (0..producers)
        .map(|_| {
            let (queue, client, url) = (Arc::clone(&queue), client.clone(), url.clone());
            tokio::spawn(async move {
                let mut took = Vec::new();
                loop {
                    let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                    let Some((n, body)) = next else { break };
                    let sent = Instant::now();
                    let answer = client
                        .post(&url)
                        .bearer_auth(TOKEN)
                        .header("idempotency-key", format!("batch-{n}"))
                        .body(body)
                        .send()
                        .await
                        .map_err(|e| e.to_string())?;
                    if answer.status() != 200 {
                        return Err(format!("batch {n}: {}", answer.status()));
                    }
                    let _ = answer.bytes().await;
                    took.push(sent.elapsed().as_micros() as u64);
                }
                Ok::<_, String>(took)
            })
        })
        .collect();
    let mut micros = Vec::new();
    let mut failed = None;
    for t in tasks {
        match t.await {
            Ok(Ok(took)) => micros.extend(took),
            Ok(Err(e)) => failed = Some(e),
            Err(e) => failed = Some(e.to_string()),
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let _ = stop.send(());
    let _ = server.await;
    let stored = rows(&db).await;
    db.drop().await;
    if let Some(e) = failed {
        return Err(format!("{producers} producers: {e}"));
    }
    if stored != total as i64 {
        return Err(format!(
            "{producers} producers: {stored} rows for {total} lines"
        ));
    }
    micros.sort_unstable();
    let ms = |p: f64| percentile(&micros, p).map_or(0.0, |v| f(v) / 1000.0);
    let lines_per_s = f(total as u64) / seconds;
    Ok(Phase {
        producers,
        lines: total,
        requests,
        seconds,
        lines_per_s,
        of_file_import: lines_per_s / ceiling,
        p50_ms: ms(50.0),
        p99_ms: ms(99.0),
        max_ms: micros.last().map_or(0.0, |v| f(*v) / 1000.0),
    })
}

async fn run(args: Args, machine: Machine) -> ExitCode {
    println!(
        "\ningest_http: {} lines a phase in requests of {BATCH}, file import vs POST /v1/messages",
        thousands(f(args.lines as u64))
    );
    let ceiling = campaign::file_import_rate("ingest", args.lines).await;
    let mut phases = Vec::new();
    let mut failed = Vec::new();
    for producers in [1, 4] {
        match phase(producers, args.lines, ceiling).await {
            Ok(p) => phases.push(p),
            Err(e) => failed.push(e),
        }
    }
    let mut table = vec![vec![
        "file import (multi-row insert)".to_owned(),
        thousands(ceiling),
        "1.00".into(),
        "-".into(),
        "-".into(),
    ]];
    for p in &phases {
        table.push(vec![
            format!(
                "HTTP ingest, {} producer{}",
                p.producers,
                if p.producers == 1 { "" } else { "s" }
            ),
            thousands(p.lines_per_s),
            format!("{:.2}", p.of_file_import),
            format!("{:.1}", p.p50_ms),
            format!("{:.1}", p.p99_ms),
        ]);
    }
    support::print_table(
        &[
            "path",
            "lines/s",
            "× file import",
            "p50 ms/request",
            "p99 ms/request",
        ],
        &table,
    );
    let results = Results {
        machine,
        lines: args.lines,
        batch: BATCH,
        file_import_rows_per_s: ceiling,
        phases,
    };
    let path = support::write_json(
        &support::results_name("ingest_http", args.run.smoke),
        &results,
    );
    println!("results: {}", path.display());
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        for e in failed {
            eprintln!("ingest_http: {e}");
        }
        ExitCode::from(1)
    }
}
