//! The test base: what the integration tests (`tests/it`) and the benchmarks (`crates/bench`)
//! both stand on, one place each (docs/architecture.md, "Tests").
//!
//! Processes and servers:
//! - [`process`]: a free port, a signal by process id, [`process::fail`] (stops every
//!   registered child, then exits);
//! - [`proc_stats`]: CPU seconds, peak RSS and children of a process, from `/proc`;
//! - [`private_redis`]: a `redis-server` of a test's own (stop, freeze, restart) and a real
//!   Redis Cluster of them; [`measured_redis`]: one whose `INFO commandstats` a benchmark reads;
//! - [`private_postgres`]: a throwaway PostgreSQL cluster (stop, restart, its CPU seconds);
//! - the shared servers: [`server_url`], [`redis_url`], [`redis_conn`], [`unlink_prefix`].
//!
//! The harness:
//! - [`app`]: `spawn_app()` → [`TestApp`]: a fresh database, a fresh Redis key prefix and queue,
//!   graph-sim on port 0 and the daemon's parts in process, all dropped when the test ends, also
//!   when it fails;
//! - [`doubles`] (the fake limiter and the scripted mailer), [`proxy`] (a TCP gate in front of
//!   Redis), [`logs`] (log capture in the product's JSON format), [`rows`] (senders and due rows
//!   straight into the tables), [`claim`] (given rows through the production claim),
//!   [`webhook`] (a receiving webhook), [`python`] and [`node`] (the reference libraries);
//! - [`wait_until`]: wait on a condition with a deadline, never a fixed sleep.
//!
//! `tests/it/support` re-exports all of it, so a test writes `use crate::support::…`.

pub mod app;
pub mod claim;
pub mod doubles;
pub mod logs;
pub mod measured_redis;
pub mod node;
pub mod private_postgres;
pub mod private_redis;
pub mod proc_stats;
pub mod process;
pub mod proxy;
pub mod python;
pub mod rows;
pub mod webhook;

use std::time::Duration;

use redis::AsyncCommands;
use url::Url;

use process::fail;

/// The workspace's root folder (where `target/test-venv` and `target/test-node` are set up).
pub const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

pub use app::{TestApp, TestDb, TestKeys, spawn_app};
pub use claim::{claim_and_send, claim_and_send_all};

/// The PostgreSQL server tests use (`TEST_DATABASE_URL`, default the local one); each test gets
/// its own database on it.
pub fn server_url() -> Url {
    let raw = std::env::var("TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    Url::parse(&raw).expect("TEST_DATABASE_URL is a URL")
}

/// The Redis tests use (`TEST_REDIS_URL`, default `redis://127.0.0.1:6379`).
pub fn redis_url() -> Url {
    let raw = std::env::var("TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    Url::parse(&raw).expect("TEST_REDIS_URL is a URL")
}

/// A plain connection to the tests' Redis, for reading and planting keys.
pub async fn redis_conn() -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis_url().as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// A unique name: `prefix` and 12 hex digits.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// A temporary folder named `prefix` and random characters, removed with all it holds when
/// dropped, a failing test's too.
pub fn temp_dir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(prefix).tempdir().unwrap()
}

/// The ids of what [`mail_worker::store::messages::claim_due`] claims (up to `limit`), sorted.
pub async fn claim_due_ids(db: &TestDb, limit: i64) -> Vec<uuid::Uuid> {
    let claimed = mail_worker::store::messages::claim_due(&db.pool, limit).await;
    sorted(claimed.unwrap().into_iter().map(|m| m.id))
}

/// `items` collected and sorted: for comparing what comes in no promised order.
pub fn sorted<T: Ord>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut items: Vec<T> = items.into_iter().collect();
    items.sort();
    items
}

/// Waits until `condition` holds, checking every 20 ms; panics naming `what` if it still does
/// not hold after `within`. Instead of sleeping "long enough".
pub async fn wait_until(within: Duration, what: &str, condition: impl AsyncFnMut() -> bool) {
    wait_until_showing(within, what, condition, String::new).await;
}

/// [`wait_until`], and when it panics it also prints `progress()`: where things stood (counts
/// per party), so a timeout in CI says which part lagged.
pub async fn wait_until_showing(
    within: Duration,
    what: &str,
    mut condition: impl AsyncFnMut() -> bool,
    progress: impl Fn() -> String,
) {
    let deadline = std::time::Instant::now() + within;
    while !condition().await {
        assert!(
            std::time::Instant::now() < deadline,
            "not within {within:?}: {what} ({})",
            progress()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The next round of a bounce `reader` that read a mailbox, as soon as one is due (by
/// PostgreSQL's clock, the reader's interval after its last read); panics after 10 s.
pub async fn next_bounce_round(
    reader: &mail_worker::bounces::BounceReader,
) -> Vec<(String, mail_worker::bounces::ReadOutcome)> {
    let mut done = Vec::new();
    wait_until(
        Duration::from_secs(10),
        "a mailbox's next read is due",
        async || {
            done = reader.round().await.unwrap();
            !done.is_empty()
        },
    )
    .await;
    done
}

/// What the next round of `reader` read of its one mailbox ([`next_bounce_round`]).
pub async fn next_bounce_read(
    reader: &mail_worker::bounces::BounceReader,
) -> mail_worker::bounces::ReadOutcome {
    let mut done = next_bounce_round(reader).await;
    assert_eq!(done.len(), 1, "one mailbox read: {done:?}");
    done.remove(0).1
}

/// `check_and_reserve` in the design note's shape (mailbox, recipients, limits, now) for tests
/// of one mailbox: a fresh message id per call, Graph tenant `contoso.example`, no tenant budget.
pub trait LimiterExt: mail_worker::rate_limit::RateLimiter {
    fn check<'a>(
        &'a self,
        mailbox: &'a mail_worker::domain::MailboxAddress,
        recipients: u32,
        limits: mail_worker::rate_limit::RateLimits,
        now: chrono::DateTime<chrono::Utc>,
    ) -> impl Future<
        Output = Result<mail_worker::rate_limit::Decision, mail_worker::rate_limit::RateLimitError>,
    > + Send
    + 'a {
        async move {
            self.check_and_reserve(
                &mail_worker::rate_limit::Ask {
                    message_id: uuid::Uuid::new_v4(),
                    mailbox,
                    tenant: "contoso.example",
                    recipients,
                    limits,
                    tenant_budget: None,
                    priority: mail_worker::domain::Priority::Normal,
                },
                now,
            )
            .await
        }
    }
}

impl<L: mail_worker::rate_limit::RateLimiter> LimiterExt for L {}

/// Deletes every key under `prefix:` (SCAN + UNLINK in batches of up to 1,000) and returns how
/// many it deleted. `prefix` must hold no glob characters (`*?[\`), which
/// a benchmark's `bench_prefix` and a test's [`TestKeys`] never do.
pub async fn unlink_prefix(
    conn: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
) -> redis::RedisResult<usize> {
    let pattern = format!("{prefix}:*");
    let mut cursor: u64 = 0;
    let mut deleted = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1_000)
            .query_async(conn)
            .await?;
        if !keys.is_empty() {
            let n: usize = conn.unlink(&keys).await?;
            deleted += n;
        }
        if next == 0 {
            return Ok(deleted);
        }
        cursor = next;
    }
}

/// A plain multiplexed connection for the harness's own reads and clean-up.
pub async fn redis_connection(url: &url::Url) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(url.as_str())
        .unwrap_or_else(|e| fail(&format!("cannot use {url} as a Redis URL: {e}")));
    client
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| fail(&format!("cannot connect to Redis at {url}: {e}")))
}
