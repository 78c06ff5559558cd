//! `suppressions`: the recipients a sender (a tenant or a system mailbox: its scope) no longer
//! sends to. Added by a hard bounce ([`add`]), an operator or a CSV import; read once per intake
//! batch ([`suppressed_among`]) and once per send ([`suppressed_of`]), both on the unique index
//! `(scope, address)`. Addresses are stored in their match form
//! ([`crate::domain::match_key`]): trimmed, the domain in punycode, lower case.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Row};
use uuid::Uuid;

use super::{SenderRef, StoreError};
use crate::domain::{SuppressionSource, suppressed_address};

/// One entry as listed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Suppression {
    /// `suppressions.id`.
    #[serde(skip)]
    pub id: i64,
    /// The sender it applies to.
    #[serde(skip)]
    pub scope: SenderRef,
    /// The scope as an operator names it: the tenant's name or the system mailbox's address.
    #[serde(rename = "scope")]
    pub scope_name: String,
    /// The suppressed address (match form).
    pub address: String,
    /// Why (`5.1.1 recipient address unknown`, an operator's words, or empty).
    pub reason: String,
    /// How it came onto the list.
    pub source: SuppressionSource,
    /// When.
    pub created_at: DateTime<Utc>,
}

/// `(tenant_id, system_mailbox_id)` of a scope.
fn columns(scope: SenderRef) -> (Option<Uuid>, Option<Uuid>) {
    match scope {
        SenderRef::Tenant(id) => (Some(id), None),
        SenderRef::SystemMailbox(id) => (None, Some(id)),
    }
}

/// [`StoreError::Invalid`] for the `address` field.
fn invalid_address(reason: String) -> StoreError {
    StoreError::Invalid {
        field: "address",
        reason,
    }
}

/// Suppresses `address` for `scope` (the tenant or system mailbox that sent to it), with
/// `reason` and `source`; an address already on the scope's list keeps its first entry. Takes
/// any executor, so a bounce is suppressed in the transaction that records it. Returns whether
/// the entry is new.
///
/// # Errors
/// [`StoreError::Invalid`] for an address that is not `local@domain` (masked in the text);
/// database errors (an unknown scope violates the foreign key).
pub async fn add<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    scope: SenderRef,
    address: &str,
    reason: &str,
    source: SuppressionSource,
) -> Result<bool, StoreError> {
    let address = suppressed_address(address).map_err(invalid_address)?;
    let (tenant, mailbox) = columns(scope);
    let done = sqlx::query(
        "INSERT INTO suppressions (tenant_id, system_mailbox_id, address, reason, source) \
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (scope, address) DO NOTHING",
    )
    .bind(tenant)
    .bind(mailbox)
    .bind(&address)
    .bind(reason.trim())
    .bind(source.as_str())
    .execute(executor)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// One entry of [`add_many`]: scope, address (checked), reason.
pub type NewSuppression = (SenderRef, String, String);

/// Adds every entry in one statement (all or nothing), skipping those already listed (also an
/// entry repeated within `entries`: its first). Returns how many are new.
///
/// # Errors
/// Database errors; nothing is added then.
pub async fn add_many(
    pool: &PgPool,
    entries: &[NewSuppression],
    source: SuppressionSource,
) -> Result<u64, StoreError> {
    let (tenants, mailboxes): (Vec<Option<Uuid>>, Vec<Option<Uuid>>) =
        entries.iter().map(|(scope, _, _)| columns(*scope)).unzip();
    let addresses: Vec<&str> = entries.iter().map(|(_, a, _)| a.as_str()).collect();
    let reasons: Vec<&str> = entries.iter().map(|(_, _, r)| r.trim()).collect();
    let done = sqlx::query(
        "INSERT INTO suppressions (tenant_id, system_mailbox_id, address, reason, source) \
         SELECT tenant_id, system_mailbox_id, address, reason, $5 \
         FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[]) \
             AS e(tenant_id, system_mailbox_id, address, reason) \
         ON CONFLICT (scope, address) DO NOTHING",
    )
    .bind(tenants)
    .bind(mailboxes)
    .bind(addresses)
    .bind(reasons)
    .bind(source.as_str())
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// Removes `address` from `scope`'s list; whether it was there.
///
/// # Errors
/// [`StoreError::Invalid`] for an address that is not `local@domain`; database errors.
pub async fn remove(pool: &PgPool, scope: SenderRef, address: &str) -> Result<bool, StoreError> {
    let address = suppressed_address(address).map_err(invalid_address)?;
    let done = sqlx::query("DELETE FROM suppressions WHERE scope = $1 AND address = $2")
        .bind(scope.id())
        .bind(&address)
        .execute(pool)
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Which entries [`list`] and [`count`] take.
#[derive(Debug, Clone, Copy, Default)]
pub struct Filter<'a> {
    /// Only this scope.
    pub scope: Option<SenderRef>,
    /// Only addresses containing this text (case-insensitive).
    pub address_contains: Option<&'a str>,
}

const FILTER: &str = "($1::uuid IS NULL OR s.scope = $1) \
     AND ($2::text IS NULL OR strpos(s.address, lower($2)) > 0)";

/// The entries `filter` takes, newest first, `limit` of them after `offset`.
///
/// # Errors
/// Database errors, or a row the code cannot use.
pub async fn list(
    pool: &PgPool,
    filter: Filter<'_>,
    limit: i64,
    offset: i64,
) -> Result<Vec<Suppression>, StoreError> {
    let sql = format!(
        "SELECT s.id, s.tenant_id, s.system_mailbox_id, coalesce(m.address, t.name) AS scope_name, \
             s.address, s.reason, s.source, s.created_at \
         FROM suppressions s \
         LEFT JOIN system_mailboxes m ON m.id = s.system_mailbox_id \
         LEFT JOIN tenants t ON t.id = s.tenant_id \
         WHERE {FILTER} ORDER BY s.created_at DESC, s.id DESC LIMIT $3 OFFSET $4"
    );
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(filter.scope.map(SenderRef::id))
        .bind(filter.address_contains)
        .bind(limit)
        .bind(offset)
        .fetch_all(pool)
        .await?;
    rows.iter()
        .map(|row| {
            let id: i64 = row.try_get("id")?;
            let scope = SenderRef::of_row(row, "suppressions", || format!("entry {id}"))?;
            Ok(Suppression {
                id,
                scope,
                scope_name: row.try_get("scope_name")?,
                address: row.try_get("address")?,
                reason: row.try_get("reason")?,
                source: row.try_get::<String, _>("source")?.parse().map_err(
                    |problem: String| StoreError::BadRow {
                        table: "suppressions",
                        problem: format!("entry {id}: source {problem}"),
                    },
                )?,
                created_at: row.try_get("created_at")?,
            })
        })
        .collect()
}

/// How many entries `filter` takes.
///
/// # Errors
/// Database errors.
pub async fn count(pool: &PgPool, filter: Filter<'_>) -> Result<i64, StoreError> {
    let sql = format!("SELECT count(*) FROM suppressions s WHERE {FILTER}");
    Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(filter.scope.map(SenderRef::id))
        .bind(filter.address_contains)
        .fetch_one(pool)
        .await?)
}

/// Of the `(scope, match key)` pairs (a batch's recipients), those on the list: one query for a
/// whole intake batch.
///
/// # Errors
/// Database errors.
pub(crate) async fn suppressed_among(
    conn: &mut sqlx::PgConnection,
    pairs: &[(Uuid, String)],
) -> Result<HashSet<(Uuid, String)>, StoreError> {
    if pairs.is_empty() {
        return Ok(HashSet::new());
    }
    // Each pair once, in index order: the probes walk the index forward instead of at random
    // (1,000 probes into 1,000,000 entries: 5.0 ms sorted, 21 ms in arrival order).
    let sorted: std::collections::BTreeSet<(Uuid, &str)> =
        pairs.iter().map(|(s, a)| (*s, a.as_str())).collect();
    let (scopes, addresses): (Vec<Uuid>, Vec<&str>) = sorted.into_iter().unzip();
    let rows: Vec<(Uuid, String)> = sqlx::query_as(
        "SELECT DISTINCT s.scope, s.address FROM suppressions s \
         JOIN unnest($1::uuid[], $2::text[]) AS r(scope, address) \
             ON s.scope = r.scope AND s.address = r.address",
    )
    .bind(scopes)
    .bind(addresses)
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().collect())
}

/// Of `keys` (one message's recipients, match form), those on `scope`'s list: the send's one
/// indexed lookup.
///
/// # Errors
/// Database errors.
pub(crate) async fn suppressed_of(
    pool: &PgPool,
    scope: Uuid,
    keys: &[String],
) -> Result<HashSet<String>, StoreError> {
    let rows: Vec<String> = sqlx::query_scalar(
        "SELECT address FROM suppressions WHERE scope = $1 AND address = ANY($2)",
    )
    .bind(scope)
    .bind(keys)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().collect())
}
