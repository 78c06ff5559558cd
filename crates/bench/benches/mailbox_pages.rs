//! Benchmark 17, the mailboxes page alone (issue 23): a private PostgreSQL with `--mailboxes`
//! system mailboxes in `--tenants` Graph tenants, `--unfinished` `SCHEDULED` rows over the
//! first `--busy` of them (skewed: a few hold many) and `--history` `SENT` rows over all, then
//! `VACUUM ANALYZE`; a private Redis for the limiter (`paced`). Measures, p50 / max of
//! `--samples`, side by side in one run:
//!
//! - `reports::usage::usage_page` (what `/mailboxes` and `mailbox usage` build) for the first and
//!   the last page of 50 and a page of 500, its order counted live (before: every unfinished
//!   row) and from the order snapshot (`store::mailbox_order`, after);
//! - `mailbox usage --page 1` as a process (start, connect, print), with a fresh snapshot and
//!   with a stale one while another process holds the snapshot's lock (it counts live);
//! - taking the snapshot (`store::mailbox_order::refresh`: what one replica does every 10 s).
//!
//! ```text
//! cargo bench -p mail-worker-bench --bench mailbox_pages
//! cargo test -p mail-worker-bench --bench mailbox_pages -- --smoke     # seconds; figures meaningless
//! ```
//!
//! Results: `bench-results/mailbox_pages.json` (`mailbox_pages-smoke.json`). Exit status 1 when
//! the snapshot's page differs from the live one (their orders must agree on a quiet table); 2
//! when the benchmark could not run.

use mail_worker_bench as support;

use std::{collections::BTreeMap, process::ExitCode, time::Duration, time::Instant};

use clap::Parser;
use mail_worker::{
    config::Config,
    reports::usage::{UsagePage, usage_page_ordered},
    store::{mailbox_list::Order, mailbox_order},
};
use serde::Serialize;
use support::{
    Machine, RunInfo,
    daemon::{BenchDb, DaemonEnv, MeasuredRedis, PrivatePostgres},
    fail,
};

/// Benchmark 17: the mailboxes page with thousands of mailboxes and a big backlog.
#[derive(Debug, Parser)]
#[command(name = "mailbox_pages")]
struct Args {
    /// System mailboxes.
    #[arg(long, default_value_t = 5_000)]
    mailboxes: u64,
    /// Graph tenants they are spread over (round robin).
    #[arg(long, default_value_t = 500)]
    tenants: u64,
    /// Mailboxes the unfinished rows go to (the first ones).
    #[arg(long, default_value_t = 2_000)]
    busy: u64,
    /// `SCHEDULED` rows.
    #[arg(long, default_value_t = 330_000)]
    unfinished: u64,
    /// `SENT` rows of history (over every mailbox).
    #[arg(long, default_value_t = 1_070_000)]
    history: u64,
    /// Samples per figure.
    #[arg(long, default_value_t = 10)]
    samples: usize,
    #[command(flatten)]
    run: support::RunArgs,
}

impl support::BenchArgs for Args {
    const SMOKE: &str = "A smoke run for CI: 100 mailboxes, 2,000 unfinished rows, 5,000 of history, 3 samples (figures meaningless).";

    fn smoke(&mut self) {
        self.mailboxes = 100;
        self.tenants = 10;
        self.busy = 40;
        self.unfinished = 2_000;
        self.history = 5_000;
        self.samples = 3;
    }

    fn invalid(&self) -> Option<&'static str> {
        (self.mailboxes == 0
            || self.tenants == 0
            || self.busy == 0
            || self.busy > self.mailboxes
            || self.samples == 0)
            .then_some("--mailboxes, --tenants, --busy (at most --mailboxes) and --samples must be positive")
    }
}

fn ms(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1_000.0
}

/// The mailboxes, the backlog and the history, in three inserts, then `VACUUM ANALYZE`.
async fn fill(db: &BenchDb, args: &Args) {
    let setup = db.setup_pool().await;
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let run = |sql: &'static str, binds: [i64; 2]| {
        let setup = &setup;
        async move {
            sqlx::query(sql)
                .bind(binds[0])
                .bind(binds[1])
                .execute(setup)
                .await
                .unwrap_or_else(|e| fail(&format!("set-up: {e}\n{sql}")));
        }
    };
    run(
        "INSERT INTO system_mailboxes (address, graph_tenant_id, graph_client_id, graph_client_secret) \
         SELECT 'mb' || lpad(g::text, 5, '0') || '@t' || (g % $2) || '.example', \
             't' || (g % $2) || '.example', 'bench-client-' || (g % $2), 'bench-secret' \
         FROM generate_series(0, $1 - 1) AS g",
        [n(args.mailboxes), n(args.tenants)],
    )
    .await;
    // Mailbox k of the busy ones (by address) gets a square law's share: a few hold thousands.
    run(
        "WITH m AS (SELECT array_agg(id ORDER BY address) AS ids FROM system_mailboxes) \
         INSERT INTO messages (id, system_mailbox_id, to_recipients, subject, body, scheduled_on) \
         SELECT gen_random_uuid(), \
             m.ids[1 + floor($1 * power((g % 10007)::float8 / 10007, 2))::int], \
             jsonb_build_array(jsonb_build_object('address', 'guest' || g || '@example.org')), \
             'Invitation ' || g, '<p>hi</p>', now() + g * interval '1 millisecond' \
         FROM m, generate_series(0, $2 - 1) AS g",
        [n(args.busy), n(args.unfinished)],
    )
    .await;
    run(
        "WITH m AS (SELECT array_agg(id ORDER BY address) AS ids FROM system_mailboxes) \
         INSERT INTO messages (id, system_mailbox_id, to_recipients, subject, body, status, \
             scheduled_on, sent_at, created_at, updated_at, attempts) \
         SELECT gen_random_uuid(), m.ids[1 + (g % $1)], \
             jsonb_build_array(jsonb_build_object('address', 'old' || g || '@example.org')), \
             'Earlier ' || g, '<p>hi</p>', 'SENT', t, t, t, t, 1 \
         FROM m, generate_series(0, $2 - 1) AS g, \
             LATERAL (SELECT now() - interval '25 hours' - (g % 40000) * interval '1 minute' AS t) at",
        [n(args.mailboxes), n(args.history)],
    )
    .await;
    sqlx::query("VACUUM ANALYZE")
        .execute(&setup)
        .await
        .unwrap_or_else(|e| fail(&format!("VACUUM ANALYZE: {e}")));
    db.settle(setup).await;
}

/// One page's figures, ms (p50, max): its order counted live, and from the snapshot.
#[derive(Debug, Clone, Serialize)]
struct Side {
    live_ms: (f64, f64),
    snapshot_ms: (f64, f64),
}

#[derive(Debug, Serialize)]
struct Report {
    #[serde(flatten)]
    run: RunInfo,
    mailboxes: u64,
    rows_in_messages: i64,
    unfinished_rows: i64,
    samples: usize,
    setup_s: f64,
    first_page_of_50: Side,
    last_page_of_50: Side,
    page_of_500: Side,
    cli_first_page_fresh_snapshot_ms: (f64, f64),
    cli_first_page_counted_live_ms: (f64, f64),
    take_snapshot_ms: (f64, f64),
    orders_agree: bool,
}

struct Bench<'a> {
    config: Config,
    pool: &'a sqlx::PgPool,
    samples: usize,
}

impl Bench<'_> {
    async fn page(&self, page: u32, per_page: u32, order: Order) -> UsagePage {
        let p = usage_page_ordered(&self.config, self.pool, page, per_page, order)
            .await
            .unwrap_or_else(|e| fail(&format!("usage_page: {e}")));
        if let Some(e) = p.mailboxes.iter().find_map(|u| u.limiter_error.as_ref()) {
            fail(&format!("usage_page could not read the limiter: {e}"));
        }
        p
    }

    /// p50/max of the page, live then from the snapshot (taken once before, fresh throughout),
    /// and whether both listed the same mailboxes in the same order.
    async fn side(&self, page: u32, per_page: u32) -> (Side, bool) {
        let snapshot = Order::Snapshot {
            max_age: Duration::from_secs(3_600),
        };
        let (mut live, mut snap) = (Vec::new(), Vec::new());
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..self.samples {
            let started = Instant::now();
            a = self.page(page, per_page, Order::Live).await.mailboxes;
            live.push(ms(started));
            let started = Instant::now();
            b = self.page(page, per_page, snapshot).await.mailboxes;
            snap.push(ms(started));
        }
        let names = |v: &[mail_worker::reports::usage::MailboxUsage]| -> Vec<String> {
            v.iter().map(|u| u.mailbox.clone()).collect()
        };
        let agree = names(&a) == names(&b);
        (
            Side {
                live_ms: support::p50_max(live),
                snapshot_ms: support::p50_max(snap),
            },
            agree,
        )
    }

    fn cli(&self, env: &DaemonEnv) -> f64 {
        let started = Instant::now();
        env.run_cli(&["mailbox", "usage", "--page", "1"]);
        ms(started)
    }
}

async fn run(args: Args, machine: Machine) -> ExitCode {
    let started = Instant::now();
    let pg = PrivatePostgres::start(50, &[]);
    let limiter = MeasuredRedis::start().await;
    let db = BenchDb::create(&pg.url, "pages").await;
    fill(&db, &args).await;
    let setup_s = started.elapsed().as_secs_f64();
    let mut env = BTreeMap::new();
    for (k, v) in [
        ("DATABASE_URL", db.url.to_string()),
        ("REDIS_URL", limiter.url.to_string()),
        ("MAIL_RATE_LIMIT_REDIS_URL", limiter.url.to_string()),
        ("MAIL_RATE_LIMIT_ALGORITHM", "paced".to_owned()),
        ("MAIL_RATE_LIMIT_KEY_PREFIX", support::bench_prefix("pages")),
        ("INTAKE_QUEUE", "off".to_owned()),
        ("METRICS_LISTEN", "off".to_owned()),
    ] {
        env.insert(k.to_owned(), v);
    }
    let env = DaemonEnv(env);
    let config = Config::from_lookup(|n| env.get(n).map(str::to_owned))
        .unwrap_or_else(|e| fail(&format!("the config: {e}")));
    let pool = &db.pool;
    let bench = Bench {
        config,
        pool,
        samples: args.samples,
    };
    let mut take = Vec::new();
    for _ in 0..args.samples {
        let started = Instant::now();
        mailbox_order::refresh(pool, Duration::ZERO)
            .await
            .unwrap_or_else(|e| fail(&format!("refresh: {e}")));
        take.push(ms(started));
    }
    let (first, a) = bench.side(1, 50).await;
    let total = bench.page(1, 1, Order::Live).await.total;
    let last_page = u32::try_from(total.div_ceil(50)).unwrap_or(1).max(1);
    let (last, b) = bench.side(last_page, 50).await;
    let (of_500, c) = bench.side(1, 500).await;
    // The CLI with a fresh snapshot (as with daemons running) ...
    mailbox_order::refresh(pool, Duration::ZERO)
        .await
        .unwrap_or_else(|e| fail(&format!("refresh: {e}")));
    let fresh: Vec<f64> = (0..args.samples).map(|_| bench.cli(&env)).collect();
    // ... and with a stale one while another process holds the lock: it counts live.
    sqlx::query("UPDATE mailbox_order SET taken_at = taken_at - interval '1 hour'")
        .execute(pool)
        .await
        .unwrap_or_else(|e| fail(&format!("ageing the snapshot: {e}")));
    let mut holder = pool
        .acquire()
        .await
        .unwrap_or_else(|e| fail(&e.to_string()));
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(mailbox_order::LOCK_KEY)
        .execute(&mut *holder)
        .await
        .unwrap_or_else(|e| fail(&format!("the lock: {e}")));
    let counted: Vec<f64> = (0..args.samples).map(|_| bench.cli(&env)).collect();
    drop(holder);
    let rows: (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE status IN ('SCHEDULED', 'SENDING')) FROM messages",
    )
    .fetch_one(pool)
    .await
    .unwrap_or((0, 0));
    let report = Report {
        run: RunInfo {
            benchmark: "mailbox_pages",
            machine,
            smoke: args.run.smoke,
        },
        mailboxes: total,
        rows_in_messages: rows.0,
        unfinished_rows: rows.1,
        samples: args.samples,
        setup_s,
        first_page_of_50: first,
        last_page_of_50: last,
        page_of_500: of_500,
        cli_first_page_fresh_snapshot_ms: support::p50_max(fresh),
        cli_first_page_counted_live_ms: support::p50_max(counted),
        take_snapshot_ms: support::p50_max(take),
        orders_agree: a && b && c,
    };
    let side = |s: &Side| {
        format!(
            "live {:.1} / {:.1}, snapshot {:.1} / {:.1} (÷ {:.2})",
            s.live_ms.0,
            s.live_ms.1,
            s.snapshot_ms.0,
            s.snapshot_ms.1,
            s.snapshot_ms.0 / s.live_ms.0.max(0.001)
        )
    };
    println!(
        "mailbox pages ({} mailboxes, {} rows, {} unfinished; p50 / max of {}, ms; set-up {:.0} s):",
        report.mailboxes, report.rows_in_messages, report.unfinished_rows, args.samples, setup_s
    );
    println!("  first page of 50: {}", side(&report.first_page_of_50));
    println!("  last page of 50:  {}", side(&report.last_page_of_50));
    println!("  a page of 500:    {}", side(&report.page_of_500));
    println!(
        "  `mailbox usage --page 1` as a process: snapshot fresh {:.1} / {:.1}, stale and locked (counts live) {:.1} / {:.1}",
        report.cli_first_page_fresh_snapshot_ms.0,
        report.cli_first_page_fresh_snapshot_ms.1,
        report.cli_first_page_counted_live_ms.0,
        report.cli_first_page_counted_live_ms.1
    );
    println!(
        "  taking the snapshot: {:.1} / {:.1}",
        report.take_snapshot_ms.0, report.take_snapshot_ms.1
    );
    println!(
        "  the snapshot's pages list what the live ones do: {}",
        report.orders_agree
    );
    let path = support::write_json(
        if args.run.smoke {
            "mailbox_pages-smoke"
        } else {
            "mailbox_pages"
        },
        &report,
    );
    println!("results: {}", path.display());
    db.drop().await;
    drop(limiter);
    drop(pg);
    if !report.orders_agree {
        eprintln!("the snapshot's order differs from the live one");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    support::bench_main(run)
}
