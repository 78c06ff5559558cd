//! PostgreSQL access: connecting, creating the database, migrations (compiled in from
//! `migrations/`), and the queries of each table (`messages.rs`, `senders.rs`).

use std::str::FromStr;

use sqlx::{
    Connection, PgPool,
    postgres::{PgConnectOptions, PgConnection, PgPoolOptions},
};
use url::Url;

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
    /// A named row does not exist.
    #[error("{0}")]
    NotFound(String),
}

fn options(url: &Url) -> Result<PgConnectOptions, StoreError> {
    Ok(PgConnectOptions::from_str(url.as_str())?.application_name("mail-worker"))
}

/// Opens a pool of at most `max_connections` to `url`.
///
/// # Errors
/// The connection error.
pub async fn connect(url: &Url, max_connections: u32) -> Result<PgPool, StoreError> {
    Ok(PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(std::time::Duration::from_secs(10))
        .connect_with(options(url)?)
        .await?)
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
    let conn = PgConnection::connect_with(&options(&admin_url)?).await?;
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
pub mod history;
pub mod messages;
pub mod report;
pub mod senders;
