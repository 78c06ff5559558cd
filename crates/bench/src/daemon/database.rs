//! The benchmark database: a fresh database per run on a PostgreSQL server, its mailboxes and
//! messages, and what `pg_stat_user_tables` says was written.

use std::{
    collections::BTreeMap,
    str::FromStr,
    time::{Duration, Instant},
};

use mail_worker::{
    domain::{GraphCredentials, MailboxAddress, SecretRef},
    store::{self, senders},
};
use serde::Serialize;
use sqlx::{
    PgPool,
    postgres::{PgConnectOptions, PgPoolOptions},
};
use test_support::{proc_stats::cpu_seconds, process::fail};
use url::Url;
use uuid::Uuid;

use super::{BODY, CLIENT_ID, CLIENT_SECRET, HARNESS_APP, HARNESS_SETUP_APP, TENANT};

/// Rows written to one table (`pg_stat_user_tables`).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct RowWrites {
    /// `n_tup_ins`.
    pub inserted: i64,
    /// `n_tup_upd` (HOT updates included).
    pub updated: i64,
    /// `n_tup_hot_upd`: updates that needed no index change.
    pub hot_updated: i64,
    /// `n_tup_del`.
    pub deleted: i64,
}

impl RowWrites {
    /// Inserted + updated + deleted.
    pub fn total(&self) -> i64 {
        self.inserted + self.updated + self.deleted
    }

    fn minus(&self, before: &Self) -> Self {
        Self {
            inserted: self.inserted - before.inserted,
            updated: self.updated - before.updated,
            hot_updated: self.hot_updated - before.hot_updated,
            deleted: self.deleted - before.deleted,
        }
    }
}

/// Table → rows written.
pub type TableWrites = BTreeMap<String, RowWrites>;

/// `after − before` per table, without tables nothing was written to.
pub fn writes_delta(before: &TableWrites, after: &TableWrites) -> TableWrites {
    after
        .iter()
        .map(|(t, a)| {
            (
                t.clone(),
                a.minus(&before.get(t).copied().unwrap_or_default()),
            )
        })
        .filter(|(_, d)| d.total() != 0)
        .collect()
}

/// The total of a [`TableWrites`].
pub fn total_writes(writes: &TableWrites) -> RowWrites {
    writes
        .values()
        .fold(RowWrites::default(), |acc, w| RowWrites {
            inserted: acc.inserted + w.inserted,
            updated: acc.updated + w.updated,
            hot_updated: acc.hot_updated + w.hot_updated,
            deleted: acc.deleted + w.deleted,
        })
}

/// The local PostgreSQL server: `DATABASE_URL`, default
/// `postgres://postgres@127.0.0.1:5432/postgres` (the database part is replaced).
pub fn shared_postgres() -> Url {
    let raw = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    Url::parse(&raw).unwrap_or_else(|e| fail(&format!("DATABASE_URL {raw:?} is not a URL: {e}")))
}

/// A fresh database `bench_<label>_<12 hex>` on a PostgreSQL server, migrated, dropped by
/// [`BenchDb::drop`]: its `pg_stat_user_tables` counts only the benchmark's writes.
pub struct BenchDb {
    /// Its URL (give it to the daemon as `DATABASE_URL`).
    pub url: Url,
    /// The harness's pool (`application_name` [`HARNESS_APP`]).
    pub pool: PgPool,
}

impl BenchDb {
    /// Creates and migrates the database on the server of `server` (on a set-up pool it then
    /// [settles](BenchDb::settle)).
    pub async fn create(server: &Url, label: &str) -> Self {
        let mut url = server.clone();
        let name = format!(
            "bench_{label}_{}",
            &Uuid::new_v4().simple().to_string()[..12]
        );
        url.set_path(&format!("/{name}"));
        store::create_database_if_missing(&url)
            .await
            .unwrap_or_else(|e| fail(&format!("cannot create database {name}: {e}")));
        let pool = pool_on(&url, HARNESS_APP, 4).await;
        let db = Self { url, pool };
        let setup = db.setup_pool().await;
        store::MIGRATOR
            .run(&setup)
            .await
            .unwrap_or_else(|e| fail(&format!("cannot migrate {name}: {e}")));
        db.settle(setup).await;
        db
    }

    /// A pool for writing the benchmark's set-up (`application_name` [`HARNESS_SETUP_APP`]);
    /// hand it to [`BenchDb::settle`] when done.
    pub async fn setup_pool(&self) -> PgPool {
        pool_on(&self.url, HARNESS_SETUP_APP, 2).await
    }

    /// Closes `setup` and waits (up to 10 s) until its backends have exited: a backend
    /// publishes its row counts to `pg_stat_user_tables` when it exits, but while it lives only
    /// every ~1 s when busy and after up to 10 s idle. After this the set-up's writes are in the
    /// counters, and none of it can land later inside a measurement.
    pub async fn settle(&self, setup: PgPool) {
        setup.close().await;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND application_name = $1",
            )
            .bind(HARNESS_SETUP_APP)
            .fetch_one(&self.pool)
            .await
            .unwrap_or(0);
            if left == 0 || Instant::now() > deadline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Closes the pool and drops the database (disconnecting any session left).
    pub async fn drop(self) {
        self.pool.close().await;
        if let Err(e) = store::drop_database_if_exists(&self.url).await {
            eprintln!(
                "warning: could not drop the benchmark database {}: {e}",
                self.url.path()
            );
        }
    }

    /// `pg_stat_user_tables` of this database. PostgreSQL 15 publishes a backend's counts when
    /// its transaction ends, at most once a second while it is busy and within ~10 s once idle,
    /// and at its exit: exact totals need the daemon's backends gone ([`BenchDb::wait_backends_gone`]).
    pub async fn row_writes(&self) -> TableWrites {
        let rows: Vec<(String, i64, i64, i64, i64)> = sqlx::query_as(
            "SELECT relname::text, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del \
             FROM pg_stat_user_tables",
        )
        .fetch_all(&self.pool)
        .await
        .unwrap_or_else(|e| fail(&format!("cannot read pg_stat_user_tables: {e}")));
        rows.into_iter()
            .map(|(t, ins, upd, hot, del)| {
                (
                    t,
                    RowWrites {
                        inserted: ins,
                        updated: upd,
                        hot_updated: hot,
                        deleted: del,
                    },
                )
            })
            .collect()
    }

    /// Claims so far: every claim counts an attempt, a deferral gives it back and counts a
    /// deferral, so `attempts + deferrals` summed over the messages.
    pub async fn claims(&self) -> u64 {
        let n: i64 = sqlx::query_scalar(
            "SELECT coalesce(sum(attempts + deferrals), 0)::bigint FROM messages",
        )
        .fetch_one(&self.pool)
        .await
        .unwrap_or_else(|e| fail(&format!("cannot count claims: {e}")));
        u64::try_from(n).unwrap_or(0)
    }

    /// Process ids of the daemon's backends on this database (`application_name` `mail-worker`).
    pub async fn daemon_backends(&self) -> Vec<u32> {
        let pids: Vec<i32> = sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity \
             WHERE datname = current_database() AND application_name = 'mail-worker'",
        )
        .fetch_all(&self.pool)
        .await
        .unwrap_or_default();
        pids.into_iter()
            .filter_map(|p| u32::try_from(p).ok())
            .collect()
    }

    /// CPU seconds of the daemon's backends so far ([`cpu_seconds`] of each).
    pub async fn daemon_backends_cpu(&self) -> f64 {
        self.daemon_backends()
            .await
            .into_iter()
            .filter_map(cpu_seconds)
            .sum()
    }

    /// Waits (up to 10 s) until the daemon's backends have exited, so their statistics are
    /// published.
    pub async fn wait_backends_gone(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.daemon_backends().await.is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Messages by status.
    pub async fn status_counts(&self) -> BTreeMap<String, i64> {
        sqlx::query_as::<_, (String, i64)>("SELECT status, count(*) FROM messages GROUP BY status")
            .fetch_all(&self.pool)
            .await
            .unwrap_or_default()
            .into_iter()
            .collect()
    }
}

async fn pool_on(url: &Url, application_name: &str, connections: u32) -> PgPool {
    let options = PgConnectOptions::from_str(url.as_str())
        .unwrap_or_else(|e| fail(&format!("bad database URL: {e}")))
        .application_name(application_name);
    PgPoolOptions::new()
        .max_connections(connections)
        .connect_with(options)
        .await
        .unwrap_or_else(|e| fail(&format!("cannot connect to {}: {e}", url.path())))
}

/// Registers `n` system mailboxes `<prefix><i>@contoso.example` (i from 0) with the
/// benchmark app's credentials and the default limits; returns them with their ids.
pub async fn add_mailboxes(pool: &PgPool, prefix: &str, n: usize) -> Vec<(MailboxAddress, Uuid)> {
    let credentials = GraphCredentials {
        graph_tenant_id: TENANT.into(),
        client_id: CLIENT_ID.into(),
        client_secret: SecretRef::new(CLIENT_SECRET),
        tenant_budget: None,
    };
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let address = MailboxAddress::parse(&format!("{prefix}{i}@{TENANT}"))
            .unwrap_or_else(|e| fail(&e.to_string()));
        let id = senders::upsert_system_mailbox(pool, &address, &credentials, None, None)
            .await
            .unwrap_or_else(|e| fail(&format!("cannot register {address}: {e}")));
        out.push((address, id));
    }
    out
}

/// Inserts `total` due messages (one recipient each, [`BODY`]) spread round robin over
/// `mailboxes`: message k goes to mailbox k mod n and is due 1 minute ago + k µs, so the claim
/// order (oldest `scheduled_on` first) is round robin too.
pub async fn insert_messages(pool: &PgPool, mailboxes: &[Uuid], total: usize) {
    let total = i64::try_from(total).unwrap_or(i64::MAX);
    sqlx::query(
        "INSERT INTO messages (id, system_mailbox_id, to_recipients, subject, body, scheduled_on) \
         SELECT gen_random_uuid(), ($1::uuid[])[(g % cardinality($1::uuid[])) + 1], \
             jsonb_build_array(jsonb_build_object('address', 'guest' || g || '@example.org', \
                 'name', 'Guest ' || g)), \
             'Invitation ' || g, $3, \
             now() - interval '1 minute' + g * interval '1 microsecond' \
         FROM generate_series(0, $2 - 1) AS g",
    )
    .bind(mailboxes)
    .bind(total)
    .bind(BODY)
    .execute(pool)
    .await
    .unwrap_or_else(|e| fail(&format!("cannot insert the messages: {e}")));
}
