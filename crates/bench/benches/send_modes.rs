//! Benchmark 6, send modes: `GRAPH_SEND_MODE=sendmail` against `draft` in one run — Graph
//! requests per sent mail, sends per second, and the extra Graph requests a fault after accept
//! costs (the check before any resend), through the real service stack (factory → limiter on
//! Redis → Graph mailer) against graph-sim in this process.
//!
//! ```text
//! cargo bench -p mail-worker-bench --bench send_modes                  # 2,000 messages per mode
//! cargo bench -p mail-worker-bench --bench send_modes -- --messages 5000 --latency-ms 50
//! cargo test -p mail-worker-bench --bench send_modes -- --smoke       # 40 messages, 1 fault each
//! ```
//!
//! Each mode gets a fresh database on the local PostgreSQL (`DATABASE_URL`), a fresh Redis key
//! prefix and a fresh graph-sim (every request `--latency-ms` slower, limits far above the load:
//! the figures are the cost of the requests, not of Exchange's limits). Messages are spread over
//! `--mailboxes` and sent `--concurrency` at a time through `Handler::process` (no claim loop).
//! Then for each fault (504, reset, late answer past `HTTP_TIMEOUT`, 503 with Retry-After,
//! all after the message was accepted) `--fault-messages` messages are sent one by one, each
//! retried until `SENT`; the extra requests are those beyond the fault-free cost per mail.
//! Results: `bench-results/send_modes.json` (`send_modes-smoke.json`). Exit status 1 when a
//! message was delivered twice or not sent.

use mail_worker_bench as support;

use std::{collections::BTreeMap, num::NonZeroU32, process::ExitCode, sync::Arc, time::Duration};

use clap::Parser;
use futures::StreamExt as _;
use graph_sim::{GraphSim, MailboxLimits, ScriptedAnswer, SimConfig, SimMailbox, Target};
use mail_worker::{
    clock::SystemClock,
    config::Config,
    daemon,
    domain::{GraphCredentials, MailboxAddress, SecretRef},
    mailer::graph::GraphSendMode,
    service::SendOutcome,
    store::{self, senders},
    worker::handler::Handler,
};
use serde::Serialize;
use uuid::Uuid;

#[derive(Debug, Parser)]
#[command(name = "send_modes")]
struct Args {
    /// Fault-free messages per mode.
    #[arg(long, default_value_t = 2_000)]
    messages: usize,
    /// Mailboxes they are spread over.
    #[arg(long, default_value_t = 50)]
    mailboxes: usize,
    /// Latency graph-sim adds to every Graph request, ms.
    #[arg(long, default_value_t = 20)]
    latency_ms: u64,
    /// Sends in flight at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Messages per fault kind.
    #[arg(long, default_value_t = 10)]
    fault_messages: usize,
    #[command(flatten)]
    run: support::RunArgs,
}

const TENANT: &str = "contoso.example";
const CLIENT: &str = "bench-send-modes";
const SECRET: &str = "bench-secret";
const TIMEOUT: Duration = Duration::from_millis(5_000);

#[derive(Debug, Serialize)]
struct FaultCost {
    fault: String,
    messages: usize,
    delivered: usize,
    attempts_per_message: f64,
    extra_requests_per_message: f64,
}

#[derive(Debug, Serialize)]
struct ModeResult {
    mode: String,
    messages: usize,
    delivered: usize,
    seconds: f64,
    sends_per_second: f64,
    graph_requests_per_mail: f64,
    requests_by_route: BTreeMap<String, u64>,
    token_requests: u64,
    faults: Vec<FaultCost>,
}

struct World {
    sim: GraphSim,
    handler: Handler,
    pool: sqlx::PgPool,
    db_url: url::Url,
    prefix: String,
    mailboxes: Vec<Uuid>,
}

async fn world(args: &Args, mode: GraphSendMode) -> World {
    let mut db_url = url::Url::parse(
        &std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into()),
    )
    .unwrap_or_else(|e| support::fail(&format!("DATABASE_URL: {e}")));
    db_url.set_path(&format!(
        "/bench_send_modes_{}",
        &Uuid::new_v4().simple().to_string()[..12]
    ));
    let pool = store::migrate(&db_url)
        .await
        .unwrap_or_else(|e| support::fail(&format!("cannot create the database: {e}")));
    let mut sim_config = SimConfig::new().with_app(TENANT, CLIENT, SECRET);
    let mut mailboxes = Vec::new();
    for i in 0..args.mailboxes {
        let address = MailboxAddress::parse(&format!("mb{i}@contoso.example")).unwrap();
        sim_config = sim_config.with_mailbox(
            SimMailbox::new(address.as_str(), TENANT).with_limits(MailboxLimits {
                concurrent_requests: 1_000,
                messages_per_minute: 1_000_000,
                recipients_per_day: 1_000_000,
                requests_per_10_minutes: 10_000_000,
                ..MailboxLimits::default()
            }),
        );
        let id = senders::upsert_system_mailbox(
            &pool,
            &address,
            &GraphCredentials {
                graph_tenant_id: TENANT.into(),
                client_id: CLIENT.into(),
                client_secret: SecretRef::new(SECRET),
                tenant_budget: None,
            },
            NonZeroU32::new(1_000_000),
            NonZeroU32::new(1_000_000),
        )
        .await
        .unwrap_or_else(|e| support::fail(&format!("cannot register a mailbox: {e}")));
        mailboxes.push(id);
    }
    let sim = GraphSim::start(sim_config)
        .await
        .unwrap_or_else(|e| support::fail(&e.to_string()));
    sim.set_latency(Target::Global, graph_sim::Latency::Fixed(args.latency_ms))
        .unwrap();
    let prefix = support::bench_prefix("send_modes");
    let mut config = Config::from_lookup(|_| None).unwrap();
    config.database_url = db_url.clone();
    config.redis_url = support::redis_url().into();
    config.rate_limit.redis_url = support::redis_url().into();
    config.rate_limit.key_prefix = format!("{prefix}:rl");
    config.rate_limit.max_in_flight = NonZeroU32::new(1_000).unwrap();
    config.graph.api_base_url = sim.graph_base_url();
    config.graph.login_base_url = sim.login_base_url();
    config.graph.send_mode = mode;
    config.graph.send_settle = Duration::from_millis(1_500);
    config.http_timeout = TIMEOUT;
    config.defer_spread_max = Duration::from_millis(1);
    let service = daemon::build_service(&config, pool.clone(), Arc::new(SystemClock))
        .unwrap_or_else(|e| support::fail(&format!("{e:#}")));
    World {
        sim,
        handler: Handler::new(service),
        pool,
        db_url,
        prefix,
        mailboxes,
    }
}

async fn insert(world: &World, n: usize) -> Vec<Uuid> {
    let mut ids = Vec::with_capacity(n);
    for k in 0..n {
        let id = Uuid::new_v4();
        sqlx::query(
            "INSERT INTO messages (id, system_mailbox_id, to_recipients, subject, body, status) \
             VALUES ($1, $2, $3, 'Invitation', '<p>hi</p>', 'SCHEDULED')",
        )
        .bind(id)
        .bind(world.mailboxes[k % world.mailboxes.len()])
        .bind(serde_json::json!([{ "address": format!("guest{k}@example.org") }]))
        .execute(&world.pool)
        .await
        .unwrap_or_else(|e| support::fail(&format!("insert: {e}")));
        ids.push(id);
    }
    ids
}

/// Claims and sends `id` until `SENT`/`ERROR`, again after each attempt (after an unconfirmed
/// check or a limiter deferral, once it is due; other retries at once). Returns the attempts.
async fn drive(world: &World, id: Uuid) -> usize {
    for attempt in 1..=20 {
        let outcome = support::claim::claim_and_send(&world.pool, &world.handler, id)
            .await
            .unwrap_or_else(|e| support::fail(&e.to_string()));
        match outcome {
            Some(SendOutcome::Sent | SendOutcome::Failed { .. }) | None => return attempt,
            Some(SendOutcome::Deferred { until, reason }) => {
                // A check not confirmed yet, or the mailbox's cooldown after a Retry-After:
                // come back when due (other retries are claimed again at once: the backoff
                // is the same request later).
                if reason.contains("not confirmed") || reason.contains("rate limit") {
                    let wait = (until - chrono::Utc::now())
                        .to_std()
                        .unwrap_or_default()
                        .min(Duration::from_secs(10));
                    tokio::time::sleep(wait).await;
                }
            }
            Some(SendOutcome::Superseded) => {}
        }
    }
    20
}

async fn run_mode(args: &Args, mode: GraphSendMode) -> ModeResult {
    let world = world(args, mode).await;
    let ids = insert(&world, args.messages).await;
    let started = std::time::Instant::now();
    futures::stream::iter(ids.iter().copied())
        .map(|id| {
            let world = &world;
            async move { drive(world, id).await }
        })
        .buffer_unordered(args.concurrency)
        .collect::<Vec<_>>()
        .await;
    let seconds = started.elapsed().as_secs_f64();
    let stats = world.sim.stats();
    let delivered = world.sim.messages().len();
    let requests = stats.total_requests();
    let per_mail = requests as f64 / delivered.max(1) as f64;
    let mut result = ModeResult {
        mode: mode.to_string(),
        messages: args.messages,
        delivered,
        seconds,
        sends_per_second: delivered as f64 / seconds,
        graph_requests_per_mail: per_mail,
        requests_by_route: stats.requests.clone(),
        token_requests: world.sim.token_requests(CLIENT),
        faults: Vec::new(),
    };
    let faults = [
        (
            "504 after accept",
            ScriptedAnswer::gateway_timeout_after_delivery(),
        ),
        ("reset after accept", ScriptedAnswer::reset_after_delivery()),
        (
            "answered after HTTP_TIMEOUT",
            ScriptedAnswer::late_after_delivery(TIMEOUT.as_millis() as u64 + 500),
        ),
        (
            "503 Retry-After 1 after accept",
            ScriptedAnswer::unavailable_after_delivery("1"),
        ),
    ];
    for (name, fault) in faults {
        let before_requests = world.sim.stats().total_requests();
        let before_delivered = world.sim.messages().len();
        let ids = insert(&world, args.fault_messages).await;
        let mut attempts = 0;
        for id in ids {
            world
                .sim
                .push_script(Target::Global, [fault.clone()])
                .unwrap();
            attempts += drive(&world, id).await;
        }
        let spent = world.sim.stats().total_requests() - before_requests;
        let n = args.fault_messages as f64;
        result.faults.push(FaultCost {
            fault: name.into(),
            messages: args.fault_messages,
            delivered: world.sim.messages().len() - before_delivered,
            attempts_per_message: attempts as f64 / n,
            extra_requests_per_message: spent as f64 / n - per_mail,
        });
    }
    world.sim.reset();
    drop(world.handler);
    world.pool.close().await;
    if let Err(e) = store::drop_database_if_exists(&world.db_url).await {
        eprintln!("cannot drop {}: {e}", world.db_url.path());
    }
    let mut conn = support::redis_connection(&support::redis_url()).await;
    let _ = support::unlink_prefix(&mut conn, &world.prefix).await;
    result
}

async fn run(args: Args, _: support::Machine) -> ExitCode {
    let mut results = Vec::new();
    for mode in [GraphSendMode::SendMail, GraphSendMode::Draft] {
        results.push(run_mode(&args, mode).await);
    }
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            vec![
                r.mode.clone(),
                format!("{}/{}", r.delivered, r.messages),
                format!("{:.0}", r.sends_per_second),
                format!("{:.2}", r.graph_requests_per_mail),
                r.token_requests.to_string(),
            ]
        })
        .collect();
    println!(
        "\n{} messages over {} mailboxes, {} in flight, graph-sim +{} ms per request",
        args.messages, args.mailboxes, args.concurrency, args.latency_ms
    );
    support::print_table(
        &[
            "mode",
            "delivered",
            "sends/s",
            "Graph requests/mail",
            "token requests",
        ],
        &rows,
    );
    let mut fault_rows = Vec::new();
    let mut doubled = false;
    for r in &results {
        for f in &r.faults {
            doubled |= f.delivered != f.messages;
            fault_rows.push(vec![
                r.mode.clone(),
                f.fault.clone(),
                format!("{}/{}", f.delivered, f.messages),
                format!("{:.1}", f.attempts_per_message),
                format!("{:+.2}", f.extra_requests_per_message),
            ]);
        }
    }
    println!();
    support::print_table(
        &[
            "mode",
            "fault",
            "delivered/messages",
            "attempts/msg",
            "extra requests/msg",
        ],
        &fault_rows,
    );
    let name = &support::results_name("send_modes", args.run.smoke);
    let path = support::write_json(name, &results);
    println!("\nresults: {}", path.display());
    let lost = results.iter().any(|r| r.delivered != r.messages);
    if doubled || lost {
        eprintln!("a message was delivered twice or not at all");
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    support::bench_main(run)
}

impl support::BenchArgs for Args {
    const SMOKE: &str =
        "A smoke run for CI: 40 messages, 1 message per fault (figures meaningless).";

    fn smoke(&mut self) {
        self.messages = 40;
        self.mailboxes = 4;
        self.fault_messages = 1;
        self.concurrency = 8;
    }
}
