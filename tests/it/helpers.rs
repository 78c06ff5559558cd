//! Shared test helpers: a fresh database per test, a random Redis key prefix per test.
#![allow(dead_code)]

use sqlx::PgPool;
use url::Url;

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

/// A unique name fragment: `t<12 hex>`.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// A fresh, migrated database of its own.
pub struct TestDb {
    /// Its URL.
    pub url: Url,
    /// A pool on it.
    pub pool: PgPool,
}

impl TestDb {
    /// Creates and migrates `mw_test_<random>`.
    pub async fn new() -> Self {
        let mut url = server_url();
        url.set_path(&format!("/{}", unique("mw_test_")));
        let pool = mail_worker::store::migrate(&url)
            .await
            .expect("migrate a fresh test database");
        Self { url, pool }
    }
}

/// A unique Redis key prefix / queue name for one test, so tests never collide and never
/// need FLUSHDB.
pub fn redis_prefix() -> String {
    unique("test:")
}

/// A TCP forwarder to `target` that can be cut, to simulate a Redis that goes away.
pub struct TcpProxy {
    /// `127.0.0.1:<port>` to connect to instead of `target`.
    pub addr: std::net::SocketAddr,
    tasks: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl TcpProxy {
    /// Starts forwarding every accepted connection to `target`.
    pub async fn start(target: std::net::SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let tasks = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let inner = tasks.clone();
        let acceptor = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let pipe = tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                inner.lock().unwrap().push(pipe);
            }
        });
        tasks.lock().unwrap().push(acceptor);
        Self { addr, tasks }
    }

    /// A `redis://` URL through the proxy.
    pub fn redis_url(&self) -> Url {
        Url::parse(&format!("redis://{}", self.addr)).unwrap()
    }

    /// Closes the listener and every forwarded connection.
    pub fn cut(&self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

static LOGS: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());

struct LogSink;

impl std::io::Write for LogSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LOGS.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs (once) a global JSON subscriber that records every log line of this test binary,
/// in the product's format. Tests filter the lines by their own message ids or mailboxes.
pub fn capture_logs() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        use tracing_subscriber::{EnvFilter, fmt, layer::SubscriberExt, util::SubscriberInitExt};
        let _ = tracing_subscriber::registry()
            .with(EnvFilter::new("info"))
            .with(
                fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(false)
                    .with_span_list(false)
                    .with_writer(|| LogSink),
            )
            .try_init();
    });
}

/// Every captured log line that contains `needle`, parsed.
pub fn logs_containing(needle: &str) -> Vec<serde_json::Value> {
    let bytes = LOGS.lock().unwrap().clone();
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter(|l| l.contains(needle))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
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
                },
                now,
            )
            .await
        }
    }
}

impl<L: mail_worker::rate_limit::RateLimiter> LimiterExt for L {}
