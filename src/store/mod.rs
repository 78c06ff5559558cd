//! PostgreSQL access: connecting, creating the database, migrations (compiled in from
//! `migrations/`), and the queries of each table (`messages/`, `senders.rs`,
//! `sender_settings.rs`, `suppressions.rs`).

use std::str::FromStr;

use sqlx::{
    Connection, PgPool,
    postgres::{PgConnectOptions, PgConnection, PgPoolOptions},
};
use url::Url;
use uuid::Uuid;

/// The schema, embedded at compile time.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Failures of the storage layer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A query or connection failed.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// A migration failed.
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// `DATABASE_URL` names no database.
    #[error("DATABASE_URL names no database (expected postgres://host/dbname)")]
    NoDatabaseName,
    /// A row holds a value the code cannot use.
    #[error("bad row in {table}: {problem}")]
    BadRow {
        /// The table.
        table: &'static str,
        /// What is wrong.
        problem: String,
    },
    /// A named row does not exist: `no system mailbox x@contoso.example`. What to do about it
    /// is said where it is shown (the CLI, the admin UI).
    #[error("no {entity} {key}")]
    NotFound {
        /// What was looked for.
        entity: Entity,
        /// Its key as given (an address).
        key: String,
    },
    /// A value given cannot be stored or used: `address: l***@example.com is not a mailbox
    /// address (expected local@domain)`.
    #[error("{field}: {reason}")]
    Invalid {
        /// The field or argument the value was given for (`address`, `status`).
        field: &'static str,
        /// What is wrong with it, the value named (an address masked).
        reason: String,
    },
    /// The server cannot be reached: `DATABASE_URL (127.0.0.1:5433): connection refused`.
    #[error("DATABASE_URL ({address}): {reason}")]
    Unreachable {
        /// `host:port` of `DATABASE_URL`.
        address: String,
        /// What went wrong, in a few words.
        reason: String,
    },
    /// The database named in `DATABASE_URL` does not exist.
    #[error("DATABASE_URL names database {0:?}, which does not exist")]
    MissingDatabase(String),
    /// The database exists but its schema is missing or behind.
    #[error("database {name:?} {problem}")]
    NotMigrated {
        /// The database.
        name: String,
        /// `has no schema` or `is missing migration <version> (<description>)`.
        problem: String,
    },
}

/// What a [`StoreError::NotFound`] looked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entity {
    /// A row of `system_mailboxes`, by address.
    SystemMailbox,
    /// A tenant's or system mailbox's sender address a pool names.
    Sender,
}

impl std::fmt::Display for Entity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::SystemMailbox => "system mailbox",
            Self::Sender => "sender",
        })
    }
}

/// `host:port` of a database URL.
fn address(url: &Url) -> String {
    format!(
        "{}:{}",
        url.host_str().unwrap_or("localhost"),
        url.port().unwrap_or(5432)
    )
}

/// Turns a connection failure into one line naming `DATABASE_URL`'s address: no `at line`
/// noise, no repeated causes.
fn connect_error(url: &Url, error: sqlx::Error) -> StoreError {
    if let sqlx::Error::Database(db) = &error
        && db.code().as_deref() == Some("3D000")
    {
        return StoreError::MissingDatabase(url.path().trim_start_matches('/').to_owned());
    }
    let reason = match &error {
        sqlx::Error::Io(io) => match io.kind() {
            std::io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
            std::io::ErrorKind::TimedOut => "connection timed out".to_owned(),
            _ => io.to_string(),
        },
        sqlx::Error::PoolTimedOut => "no connection within 10 s (server down or overloaded)".into(),
        sqlx::Error::Database(db) => db.message().to_owned(),
        other => other.to_string(),
    };
    StoreError::Unreachable {
        address: address(url),
        reason,
    }
}

fn options(url: &Url) -> Result<PgConnectOptions, StoreError> {
    Ok(PgConnectOptions::from_str(url.as_str())?.application_name("mail-worker"))
}

/// Opens a pool of at most `max_connections` to `url`.
///
/// # Errors
/// The connection error.
pub async fn connect(url: &Url, max_connections: u32) -> Result<PgPool, StoreError> {
    // One direct attempt first: the pool would retry a refused connection until its acquire
    // timeout and then report only the timeout.
    PgConnection::connect_with(&options(url)?)
        .await
        .map_err(|e| connect_error(url, e))?
        .close()
        .await
        .map_err(|e| connect_error(url, e))?;
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(std::time::Duration::from_secs(10))
        .connect_with(options(url)?)
        .await
        .map_err(|e| connect_error(url, e))
}

/// Connects to an existing, fully migrated database (every command but `migrate`, which alone
/// creates one).
///
/// # Errors
/// [`StoreError::MissingDatabase`] / [`StoreError::NotMigrated`] naming `mail-worker migrate`,
/// [`StoreError::Unreachable`] naming `DATABASE_URL`.
pub(crate) async fn open(url: &Url, max_connections: u32) -> Result<PgPool, StoreError> {
    let pool = connect(url, max_connections).await?;
    let name = url.path().trim_start_matches('/').to_owned();
    let has_table: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
        .fetch_one(&pool)
        .await?;
    if !has_table {
        return Err(StoreError::NotMigrated {
            name,
            problem: "has no schema".into(),
        });
    }
    let applied: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
            .fetch_all(&pool)
            .await?;
    if let Some(missing) = MIGRATOR
        .iter()
        .find(|m| !m.migration_type.is_down_migration() && !applied.contains(&m.version))
    {
        return Err(StoreError::NotMigrated {
            name,
            problem: format!(
                "is missing migration {} ({})",
                missing.version, missing.description
            ),
        });
    }
    Ok(pool)
}

/// The database name of `url`, and a connection to the same server's `postgres` database
/// (where databases are created and dropped).
async fn admin_connection(url: &Url) -> Result<(String, PgConnection), StoreError> {
    let name = url.path().trim_start_matches('/');
    if name.is_empty() {
        return Err(StoreError::NoDatabaseName);
    }
    let mut admin_url = url.clone();
    admin_url.set_path("/postgres");
    let conn = PgConnection::connect_with(&options(&admin_url)?)
        .await
        .map_err(|e| connect_error(url, e))?;
    Ok((name.to_owned(), conn))
}

/// `name` as a double-quoted SQL identifier.
fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Creates the database named in `url` if it does not exist (connecting to the server's
/// `postgres` database to do so). Returns whether it was created.
///
/// # Errors
/// [`StoreError::NoDatabaseName`], or the server's error.
pub async fn create_database_if_missing(url: &Url) -> Result<bool, StoreError> {
    let (name, mut conn) = admin_connection(url).await?;
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(&name)
            .fetch_one(&mut conn)
            .await?;
    if exists {
        return Ok(false);
    }
    let quoted = quote_identifier(&name);
    let create = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {quoted}")));
    match create.execute(&mut conn).await {
        Ok(_) => Ok(true),
        // Another process created it between our check and our CREATE.
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P04") => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Drops the database named in `url` if it exists (the demo recreates its own each run),
/// disconnecting its sessions.
///
/// # Errors
/// [`StoreError::NoDatabaseName`], or the server's error.
pub async fn drop_database_if_exists(url: &Url) -> Result<(), StoreError> {
    let (name, mut conn) = admin_connection(url).await?;
    let quoted = quote_identifier(&name);
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {quoted} WITH (FORCE)"
    )))
    .execute(&mut conn)
    .await?;
    Ok(())
}

/// Creates the database if needed, applies pending migrations (idempotent; sqlx serialises
/// concurrent runs with an advisory lock) and returns a pool of at most `max_connections`.
///
/// # Errors
/// Connection or migration failures.
pub async fn prepare(url: &Url, max_connections: u32) -> Result<PgPool, StoreError> {
    create_database_if_missing(url).await?;
    let pool = connect(url, max_connections).await?;
    MIGRATOR.run(&pool).await?;
    Ok(pool)
}

/// [`prepare`] with a small pool, for one-shot commands.
///
/// # Errors
/// Connection or migration failures.
pub async fn migrate(url: &Url) -> Result<PgPool, StoreError> {
    prepare(url, 4).await
}
pub mod admin;
mod advisory_lock;
pub(crate) mod bookings;
pub(crate) mod bounce_reads;
pub mod campaigns;
pub mod events;
pub mod history;
pub mod ingest;
pub(crate) mod limit_pauses;
pub mod mailbox_list;
pub mod mailbox_order;
pub mod messages;
pub mod outcomes;
pub mod pool_views;
pub mod pools;
mod read_turns;
pub mod replicas;
pub mod report;
pub mod retention;
pub(crate) mod sender_settings;
pub mod senders;
pub mod suppressions;
pub mod suspensions;
pub mod trace_reads;
pub mod waiting;
pub mod warmups;

/// Who sends a message: exactly one of `tenant_id` / `system_mailbox_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SenderRef {
    /// `messages.tenant_id`.
    Tenant(Uuid),
    /// `messages.system_mailbox_id`.
    SystemMailbox(Uuid),
}

impl SenderRef {
    /// The messages' reference to `sender`.
    pub(crate) fn of(sender: &crate::domain::Sender) -> Self {
        match sender {
            crate::domain::Sender::Tenant(t) => Self::Tenant(t.id),
            crate::domain::Sender::SystemMailbox(m) => Self::SystemMailbox(m.id),
        }
    }

    /// The sender of a row with `tenant_id` and `system_mailbox_id` columns (exactly one set),
    /// or [`StoreError::BadRow`] naming `table` and the row `what` (e.g. "message <id>").
    pub(crate) fn of_row(
        row: &sqlx::postgres::PgRow,
        table: &'static str,
        what: impl FnOnce() -> String,
    ) -> Result<Self, StoreError> {
        use sqlx::Row;
        match (
            row.try_get::<Option<Uuid>, _>("tenant_id")?,
            row.try_get::<Option<Uuid>, _>("system_mailbox_id")?,
        ) {
            (Some(t), None) => Ok(Self::Tenant(t)),
            (None, Some(m)) => Ok(Self::SystemMailbox(m)),
            _ => Err(StoreError::BadRow {
                table,
                problem: format!("{} has not exactly one sender", what()),
            }),
        }
    }

    /// The tenant's or system mailbox's id.
    pub(crate) fn id(self) -> Uuid {
        match self {
            Self::Tenant(id) | Self::SystemMailbox(id) => id,
        }
    }
}
