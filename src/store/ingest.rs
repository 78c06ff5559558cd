//! `ingest_requests`: the HTTP ingest's requests ([`crate::ingest`]). A request's row is
//! written in the transaction of its lines; with an `Idempotency-Key` it keeps the answer (a
//! `json` column: PostgreSQL keeps its text as given, where `jsonb` would reorder its keys), which
//! a repeat of the key (same token) within [`KEY_TTL_HOURS`] gets again byte for byte. Also the counts the
//! admin UI's queue page shows, and the clean-up of rows past the window.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};

use super::StoreError;

/// How long a key's answer is kept: 24 h.
pub const KEY_TTL_HOURS: i32 = 24;

/// What a request did, as its row keeps it.
#[derive(Debug, Clone)]
pub(crate) struct RequestRow<'a> {
    /// The token's name.
    pub token: &'a str,
    /// Its `Idempotency-Key`, if any.
    pub key: Option<&'a str>,
    /// SHA-256 of the body.
    pub body_sha256: &'a [u8],
    /// The HTTP status answered.
    pub status: u16,
    /// The answer's JSON exactly as sent (kept only with a key).
    pub answer: Option<&'a str>,
    /// Lines: all, stored now, stored before, refused.
    pub counts: [u32; 4],
}

/// A key's first answer, as [`remembered`] finds it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Remembered {
    /// SHA-256 of the first request's body.
    pub body_sha256: Vec<u8>,
    /// Its HTTP status.
    pub status: u16,
    /// Its answer's JSON, byte for byte as first sent.
    pub answer: String,
    /// Its lines: all, stored, duplicate, refused.
    pub counts: [u32; 4],
}

/// The answer kept for `key` of `token` within the window, if any.
///
/// # Errors
/// Database errors.
pub(crate) async fn remembered(
    conn: &mut PgConnection,
    token: &str,
    key: &str,
) -> Result<Option<Remembered>, StoreError> {
    type Row = (Vec<u8>, i16, Option<String>, i32, i32, i32, i32);
    let row: Option<Row> = sqlx::query_as(
        "SELECT body_sha256, status, answer::text, lines, stored, duplicate, refused \
         FROM ingest_requests \
         WHERE token_name = $1 AND idempotency_key = $2 \
           AND created_at > now() - make_interval(hours => $3)",
    )
    .bind(token)
    .bind(key)
    .bind(KEY_TTL_HOURS)
    .fetch_optional(conn)
    .await?;
    Ok(row.map(
        |(body_sha256, status, answer, lines, stored, duplicate, refused)| Remembered {
            body_sha256,
            status: u16::try_from(status).unwrap_or(500),
            answer: answer.unwrap_or_default(),
            counts: [lines, stored, duplicate, refused].map(|n| u32::try_from(n).unwrap_or(0)),
        },
    ))
}

/// Records a request in the transaction `conn` is in. Returns `false` when its key was
/// recorded meanwhile by a concurrent request (which committed first): the caller rolls back
/// and answers what that one answered. A key past the window is replaced.
///
/// # Errors
/// Database errors.
pub(crate) async fn record(
    conn: &mut PgConnection,
    row: &RequestRow<'_>,
) -> Result<bool, StoreError> {
    if let Some(key) = row.key {
        sqlx::query(
            "DELETE FROM ingest_requests WHERE token_name = $1 AND idempotency_key = $2 \
             AND created_at <= now() - make_interval(hours => $3)",
        )
        .bind(row.token)
        .bind(key)
        .bind(KEY_TTL_HOURS)
        .execute(&mut *conn)
        .await?;
    }
    let [lines, stored, duplicate, refused] =
        row.counts.map(|n| i32::try_from(n).unwrap_or(i32::MAX));
    let inserted = sqlx::query(
        "INSERT INTO ingest_requests (token_name, idempotency_key, body_sha256, status, answer, \
             lines, stored, duplicate, refused) \
         VALUES ($1, $2, $3, $4, $5::json, $6, $7, $8, $9) \
         ON CONFLICT (token_name, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING",
    )
    .bind(row.token)
    .bind(row.key)
    .bind(row.body_sha256)
    .bind(i16::try_from(row.status).unwrap_or(500))
    .bind(row.answer)
    .bind(lines)
    .bind(stored)
    .bind(duplicate)
    .bind(refused)
    .execute(conn)
    .await?;
    Ok(inserted.rows_affected() == 1)
}

/// Deletes the rows past the window (any replica; cheap on the `created_at` index).
///
/// # Errors
/// Database errors.
pub(crate) async fn forget_old(pool: &PgPool) -> Result<u64, StoreError> {
    Ok(sqlx::query(
        "DELETE FROM ingest_requests WHERE created_at <= now() - make_interval(hours => $1)",
    )
    .bind(KEY_TTL_HOURS)
    .execute(pool)
    .await?
    .rows_affected())
}

/// One producer's requests in the window, for the admin UI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerCounts {
    /// The token's name.
    pub token: String,
    /// Requests that stored their lines.
    pub requests: i64,
    /// Lines stored now.
    pub stored: i64,
    /// Lines whose id was stored before.
    pub duplicate: i64,
    /// Lines refused.
    pub refused: i64,
    /// The latest request.
    pub last: DateTime<Utc>,
}

/// Each producer's counts over the window, busiest first.
///
/// # Errors
/// Database errors.
pub async fn counts(pool: &PgPool) -> Result<Vec<ProducerCounts>, StoreError> {
    let rows: Vec<(String, i64, i64, i64, i64, DateTime<Utc>)> = sqlx::query_as(
        "SELECT token_name, count(*), coalesce(sum(stored), 0)::int8, \
             coalesce(sum(duplicate), 0)::int8, coalesce(sum(refused), 0)::int8, max(created_at) \
         FROM ingest_requests WHERE created_at > now() - make_interval(hours => $1) \
         GROUP BY token_name ORDER BY 3 DESC, 1",
    )
    .bind(KEY_TTL_HOURS)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(token, requests, stored, duplicate, refused, last)| ProducerCounts {
                token,
                requests,
                stored,
                duplicate,
                refused,
                last,
            },
        )
        .collect())
}
