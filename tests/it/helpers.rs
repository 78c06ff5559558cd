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
