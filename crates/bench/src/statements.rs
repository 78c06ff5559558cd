//! pg_stat_statements per statement, for a benchmark window: what each statement of one
//! database cost (calls, execution time, buffers), read after a `pg_stat_statements_reset()`.

use serde::Serialize;
use sqlx::PgPool;

/// One statement's figures in the window.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Statement {
    /// The statement's text, whitespace folded, its first 90 characters.
    pub query: String,
    /// Calls.
    pub calls: i64,
    /// Total execution time, ms.
    pub total_ms: f64,
    /// Mean execution time, ms.
    pub mean_ms: f64,
    /// Rows returned or written per call.
    pub rows_per_call: f64,
    /// Shared buffers found in PostgreSQL's cache per call.
    pub hit_per_call: f64,
    /// Shared buffers read from the OS per call.
    pub read_per_call: f64,
}

/// The `top` statements of the current database by total execution time since the last reset.
pub async fn top(pool: &PgPool, top: i64) -> Vec<Statement> {
    sqlx::query_as::<_, (String, i64, f64, f64, i64, i64, i64)>(
        "SELECT regexp_replace(query, '\\s+', ' ', 'g'), calls, total_exec_time, mean_exec_time, \
             rows, shared_blks_hit, shared_blks_read \
         FROM pg_stat_statements \
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
           AND query NOT LIKE '%pg_stat_statements%' \
         ORDER BY total_exec_time DESC LIMIT $1",
    )
    .bind(top)
    .fetch_all(pool)
    .await
    .unwrap_or_default()
    .into_iter()
    .map(|(query, calls, total_ms, mean_ms, rows, hit, read)| {
        let per = |n: i64| n as f64 / calls.max(1) as f64;
        Statement {
            query: query.chars().take(90).collect(),
            calls,
            total_ms,
            mean_ms,
            rows_per_call: per(rows),
            hit_per_call: per(hit),
            read_per_call: per(read),
        }
    })
    .collect()
}
