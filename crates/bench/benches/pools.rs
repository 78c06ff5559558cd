//! Benchmark 25, sender pools and overflow through the daemon (issue 43 points 1 and 2,
//! docs/decisions/0046-sender-pools.md). Side by side in one run, each arm one `mail-worker run`
//! against graph-sim (Exchange's limits, 429 on any overshoot), the limiter on a private Redis:
//!
//! - **one** mailbox against a **pool** of 5, the same N pooled messages (one recipient each),
//!   every mailbox at L a minute: sends/s (first to last acceptance), the most any member sent
//!   in a rolling 60 s, graph-sim's 429s. Goal: pool ≥ 0.95 × 5 × one, every member ≤ L,
//!   0 429s.
//! - **overflow**: a pool of 2 whose day budgets (D each) hold 2 × D recipients, a campaign of
//!   3 × D, overflow to a SendGrid tenant (`budgetsSpent`): sent by Graph, overflowed, sent
//!   twice, overflowed before the members' budgets were booked full. Goal: 2 × D, D, 0, 0.
//! - **misses**: a pool of 2, a campaign whose lines give `by` = the enqueue + B s, twice the
//!   lines the members' slots before `by` hold, overflow to the SendGrid tenant
//!   (`forecastMisses`): sent by Graph against the slots that fit between each member's first
//!   send and `by`, overflowed, sent twice, Graph sends after `by` (arrival over 1 s past it).
//!   Goal: by Graph ≥ fit − 2, overflowed = the rest, 0, 0.
//!
//! Scaled: L defaults to 600 (not Exchange's 30) so that 5,000 messages through one mailbox take
//! 8.3 min, not 2.8 h; the ratio is what the figure is about, and graph-sim enforces the same L.
//!
//! ```text
//! cargo bench -p mail-worker-bench --bench pools                  # N 5,000, L 600, D 1,000, B 60 (~13 min)
//! cargo test -p mail-worker-bench --bench pools -- --smoke       # N 60, D 10, B 10 (~1 min)
//! ```
//!
//! Results: `bench-results/pools.json` (`pools-smoke.json`), each daemon's log beside it.
//! Exit status 1 when a goal is missed.

use mail_worker_bench as support;

use std::{
    collections::{BTreeMap, HashSet},
    process::ExitCode,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use clap::Parser;
use graph_sim::{GraphSim, SimConfig, SimMailbox, sendgrid::SendGridSim};
use serde::Serialize;
use uuid::Uuid;

use support::{
    Machine,
    daemon::{self, BenchDb, CLIENT_ID, CLIENT_SECRET, Daemon, DaemonEnv, MeasuredRedis, TENANT},
};

/// The SendGrid overflow tenant's key (the stand-in accepts it).
const SENDGRID_KEY: &str = "SG.bench-pools";

/// Benchmark 25: sender pools and overflow.
#[derive(Debug, Parser)]
#[command(name = "pools")]
struct Args {
    /// Messages of the one-mailbox and pool arms.
    #[arg(long, default_value_t = 5_000)]
    messages: usize,
    /// Messages per mailbox per rolling minute (daemon and graph-sim alike); scaled from
    /// Exchange's 30.
    #[arg(long, default_value_t = 600)]
    per_minute: u32,
    /// Recipients per member per rolling 24 h in the overflow arm (the campaign is 3 × this).
    #[arg(long, default_value_t = 1_000)]
    day_budget: u32,
    /// Seconds from the enqueue to the lines' `by` in the misses arm.
    #[arg(long, default_value_t = 60)]
    by_s: u64,
    /// Minutes to wait for an arm before reporting what it did.
    #[arg(long, default_value_t = 20)]
    wait_min: u64,
    #[command(flatten)]
    run: support::RunArgs,
}

/// One arm's figures.
#[derive(Debug, Clone, Serialize)]
struct Arm {
    arm: &'static str,
    members: usize,
    messages: usize,
    /// Accepted by graph-sim.
    by_graph: usize,
    /// Rows overflowed (`overflow_reason`), and accepted by the SendGrid stand-in.
    overflowed: i64,
    by_sendgrid: usize,
    /// Receipts beyond one per message (Graph and SendGrid together).
    sent_twice: usize,
    /// Overflowed rows placed before the last row placed on a member.
    overflowed_early: i64,
    /// The misses arm: Graph sends whose slots fit between each member's first send and `by`,
    /// and Graph sends that arrived over 1 s after `by`.
    fit_before_by: usize,
    graph_after_by: usize,
    /// First to last graph-sim acceptance.
    seconds: f64,
    sends_per_s: f64,
    /// The most any member sent in a rolling 60 s.
    max_member_in_60s: usize,
    per_member: BTreeMap<String, usize>,
    graph_429: u64,
}

/// The senders file of an arm: `members` system mailboxes `<arm><i>@contoso.example` in pool
/// `pool`, and a SendGrid tenant as the overflow sender when `overflow` names its rule.
fn senders_file(arm: &str, members: usize, overflow: Option<&str>) -> (String, Vec<String>) {
    let addresses: Vec<String> = (0..members).map(|i| format!("{arm}{i}@{TENANT}")).collect();
    let mailboxes: Vec<String> = addresses
        .iter()
        .map(|a| {
            format!(
                r#"{{"address":"{a}","graphTenantId":"{TENANT}","clientId":"{CLIENT_ID}","clientSecret":"{CLIENT_SECRET}"}}"#
            )
        })
        .collect();
    let spill = overflow.map_or(String::new(), |when| {
        format!(r#","overflow":{{"sender":"news@adatum.example","when":"{when}"}}"#)
    });
    let text = format!(
        r#"{{"systemMailboxes":[{}],
            "tenants":[{{"name":"adatum","provider":"sendgrid","sender":"news@adatum.example","sendgridApiKey":"{SENDGRID_KEY}"}}],
            "senderPools":[{{"name":"{arm}","members":[{}]{spill}}}]}}"#,
        mailboxes.join(","),
        addresses
            .iter()
            .map(|a| format!("\"{a}\""))
            .collect::<Vec<_>>()
            .join(",")
    );
    (text, addresses)
}

/// `n` pooled lines of pool `pool`, one recipient each, with `by` when given.
fn campaign(pool: &str, n: usize, by: Option<DateTime<Utc>>) -> String {
    let by = by.map_or(String::new(), |t| format!(r#""by":"{}","#, t.to_rfc3339()));
    (0..n)
        .map(|i| {
            format!(
                r#"{{"id":"{}",{by}"senderPool":"{pool}","to":[{{"address":"guest{i}@example.org"}}],"subject":"Invitation {i}","body":{{"contentType":"html","content":"{}"}}}}"#,
                Uuid::new_v4(),
                daemon::BODY.replace('"', "'")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

async fn count(db: &BenchDb, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(&db.pool)
        .await
        .unwrap_or_else(|e| support::fail(&format!("{sql}: {e}")))
}

/// One arm: `members` in a pool, `messages` lines, the pool's overflow rule, and the lines'
/// `by` this long after the enqueue.
async fn arm(
    args: &Args,
    (name, members, messages): (&'static str, usize, usize),
    overflow: Option<&'static str>,
    by_after: Option<Duration>,
) -> Arm {
    let limiter = MeasuredRedis::start().await;
    let queue = MeasuredRedis::start().await;
    let db = BenchDb::create(&daemon::shared_postgres(), "pools").await;
    let setup = db.setup_pool().await;
    let (file, addresses) = senders_file(name, members, overflow);
    let file = mail_worker::import::senders::check(&file)
        .unwrap_or_else(|e| support::fail(&format!("senders file: {e}")));
    mail_worker::import::senders::import(&setup, &file)
        .await
        .unwrap_or_else(|e| support::fail(&format!("senders import: {e}")));
    let by = by_after.map(|d| Utc::now() + chrono::Duration::from_std(d).unwrap_or_default());
    let stored = mail_worker::import::enqueue(
        &setup,
        campaign(name, messages, by),
        mail_worker::store::events::Outbox::Off,
    )
    .await
    .unwrap_or_else(|e| support::fail(&format!("enqueue: {e}")));
    if stored.inserted != messages as u64 {
        support::fail(&format!(
            "enqueued {} of {messages}: {:?}",
            stored.inserted, stored.bad
        ));
    }
    db.settle(setup).await;
    let mut config = SimConfig::new().with_app(TENANT, CLIENT_ID, CLIENT_SECRET);
    for address in &addresses {
        config = config.with_mailbox(SimMailbox::new(address, TENANT).with_limits(
            graph_sim::MailboxLimits {
                messages_per_minute: args.per_minute,
                minute_overflow: graph_sim::MinuteOverflow::Refuse,
                ..graph_sim::MailboxLimits::default()
            },
        ));
    }
    let sim = GraphSim::start(config)
        .await
        .unwrap_or_else(|e| support::fail(&format!("graph-sim: {e}")));
    let sendgrid = SendGridSim::start([SENDGRID_KEY.to_owned()])
        .await
        .unwrap_or_else(|e| support::fail(&format!("SendGrid stand-in: {e}")));
    let mut env = DaemonEnv::new(&db.url, &queue.url, &limiter.url, &sim);
    env.set("MAIL_RATE_LIMIT_PER_MINUTE", args.per_minute)
        .set("MAIL_RATE_LIMIT_RESERVED_PERCENT", 0)
        .set("SENDGRID_API_BASE_URL", sendgrid.base_url())
        .set("WORKER_CONCURRENCY", 32);
    if overflow == Some("budgetsSpent") {
        env.set("MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY", args.day_budget);
    }
    let log = daemon::results_path(&format!(
        "pools-{name}{}-daemon.log",
        if args.run.smoke { "-smoke" } else { "" }
    ));
    let worker = Daemon::spawn(&env, &log).await;
    let deadline = Instant::now() + Duration::from_secs(args.wait_min * 60);
    // Every message ends SENT: by a member, or (overflow) by the SendGrid stand-in.
    let expected = messages as i64;
    while count(&db, "SELECT count(*) FROM messages WHERE status = 'SENT'").await < expected
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let _ = worker.stop(Duration::from_secs(30)).await;
    let graph = sim.messages();
    let sg = sendgrid.messages();
    let mut ids: Vec<String> = graph
        .iter()
        .filter_map(|m| m.client_request_id.clone())
        .collect();
    ids.extend(sg.iter().filter_map(|m| m.message_id.clone()));
    let distinct: HashSet<&String> = ids.iter().collect();
    let mut per_member: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for m in &graph {
        per_member
            .entry(m.mailbox.clone())
            .or_default()
            .push(m.received_at_ms);
    }
    let mut max_member_in_60s = 0;
    let (mut fit_before_by, mut graph_after_by) = (0, 0);
    let spacing_ms = 62_000.0 / f64::from(args.per_minute);
    for times in per_member.values_mut() {
        times.sort_unstable();
        if let (Some(by), Some(first)) = (by.map(|t| t.timestamp_millis()), times.first()) {
            fit_before_by += (((by - first) as f64 / spacing_ms).floor() + 1.0).max(0.0) as usize;
            graph_after_by += times.iter().filter(|t| **t > by + 1_000).count();
        }
        let most = (0..times.len())
            .map(|i| times[i..].partition_point(|t| *t < times[i] + 60_000))
            .max()
            .unwrap_or(0);
        max_member_in_60s = max_member_in_60s.max(most);
    }
    let mut all: Vec<i64> = graph.iter().map(|m| m.received_at_ms).collect();
    all.sort_unstable();
    let seconds = match (all.first(), all.last()) {
        (Some(a), Some(b)) if b > a => (b - a) as f64 / 1000.0,
        _ => 0.0,
    };
    let result = Arm {
        arm: name,
        members,
        messages,
        by_graph: graph.len(),
        overflowed: count(
            &db,
            "SELECT count(*) FROM messages WHERE overflow_reason IS NOT NULL",
        )
        .await,
        by_sendgrid: sg.len(),
        sent_twice: ids.len() - distinct.len(),
        overflowed_early: count(
            &db,
            "SELECT count(*) FROM messages WHERE overflow_reason IS NOT NULL AND pool_placed_at < \
             (SELECT max(pool_placed_at) FROM messages WHERE overflow_reason IS NULL)",
        )
        .await,
        fit_before_by,
        graph_after_by,
        seconds,
        sends_per_s: if seconds > 0.0 {
            (graph.len() - 1) as f64 / seconds
        } else {
            0.0
        },
        max_member_in_60s,
        per_member: per_member.into_iter().map(|(k, v)| (k, v.len())).collect(),
        graph_429: sim.stats().refused_total(),
    };
    db.drop().await;
    result
}

async fn run(args: Args, machine: Machine) -> ExitCode {
    let mut arms = Vec::new();
    // The misses arm: twice the lines its 2 members' slots hold before `by`.
    let misses = 2 * 2 * (args.by_s as f64 * f64::from(args.per_minute) / 62.0).ceil() as usize;
    for (name, members, messages, overflow, by_after) in [
        ("one", 1, args.messages, None, None),
        ("pool", 5, args.messages, None, None),
        (
            "overflow",
            2,
            3 * args.day_budget as usize,
            Some("budgetsSpent"),
            None,
        ),
        (
            "misses",
            2,
            misses,
            Some("forecastMisses"),
            Some(Duration::from_secs(args.by_s)),
        ),
    ] {
        let a = arm(&args, (name, members, messages), overflow, by_after).await;
        println!(
            "{name}: {} by Graph, {} overflowed, {:.2} sends/s, max {} a member in 60 s{}",
            a.by_graph,
            a.overflowed,
            a.sends_per_s,
            a.max_member_in_60s,
            if by_after.is_some() {
                format!(
                    "; {} fit before by, {} by Graph after by, {} sent twice",
                    a.fit_before_by, a.graph_after_by, a.sent_twice
                )
            } else {
                String::new()
            }
        );
        arms.push(a);
    }
    support::print_table_of(
        &[
            "arm",
            "members",
            "messages",
            "by Graph",
            "overflowed",
            "by SendGrid",
            "sent twice",
            "overflowed early",
            "fit before by",
            "Graph after by",
            "s",
            "sends/s",
            "max/member/60 s",
            "429s",
        ],
        &arms,
        |a| {
            vec![
                a.arm.to_owned(),
                a.members.to_string(),
                a.messages.to_string(),
                a.by_graph.to_string(),
                a.overflowed.to_string(),
                a.by_sendgrid.to_string(),
                a.sent_twice.to_string(),
                a.overflowed_early.to_string(),
                a.fit_before_by.to_string(),
                a.graph_after_by.to_string(),
                format!("{:.1}", a.seconds),
                format!("{:.2}", a.sends_per_s),
                a.max_member_in_60s.to_string(),
                a.graph_429.to_string(),
            ]
        },
    );
    let (one, pool, spill, missed) = (&arms[0], &arms[1], &arms[2], &arms[3]);
    let ratio = if one.sends_per_s > 0.0 {
        pool.sends_per_s / one.sends_per_s
    } else {
        0.0
    };
    let d = args.day_budget as usize;
    // A smoke run's throughput means nothing (startup dominates 60 messages).
    let ok = (args.run.smoke || ratio >= 0.95 * 5.0)
        && arms
            .iter()
            .all(|a| a.graph_429 == 0 && a.max_member_in_60s <= args.per_minute as usize)
        && pool.per_member.len() == 5
        && spill.by_graph == 2 * d
        && spill.overflowed == d as i64
        && spill.by_sendgrid == d
        && arms.iter().all(|a| a.sent_twice == 0)
        && spill.overflowed_early == 0
        && missed.by_graph + 2 >= missed.fit_before_by
        && missed.by_graph <= missed.fit_before_by
        && missed.overflowed == (missed.messages - missed.by_graph) as i64
        && missed.by_sendgrid == missed.messages - missed.by_graph
        && missed.graph_after_by == 0;
    println!("pool / one: {ratio:.2} × (goal ≥ 4.75)");
    #[derive(Serialize)]
    struct Report {
        machine: Machine,
        smoke: bool,
        per_minute: u32,
        day_budget: u32,
        by_s: u64,
        pool_over_one: f64,
        arms: Vec<Arm>,
    }
    let path = support::write_json(
        &support::results_name("pools", args.run.smoke),
        &Report {
            machine,
            smoke: args.run.smoke,
            per_minute: args.per_minute,
            day_budget: args.day_budget,
            by_s: args.by_s,
            pool_over_one: ratio,
            arms,
        },
    );
    println!("results: {}", path.display());
    support::exit_code(ok)
}

fn main() -> ExitCode {
    support::bench_main(run)
}

impl support::BenchArgs for Args {
    const SMOKE: &str = "A smoke run for CI: 60 messages, day budgets of 10 (30 overflowing to 10), `by` 10 s ahead.";

    fn invalid(&self) -> Option<&'static str> {
        if self.messages < 2 || self.per_minute == 0 || self.day_budget == 0 || self.by_s == 0 {
            Some("--messages must be at least 2, --per-minute, --day-budget and --by-s positive")
        } else {
            None
        }
    }

    fn smoke(&mut self) {
        self.messages = 60;
        self.day_budget = 10;
        self.by_s = 10;
        self.wait_min = 3;
    }
}
