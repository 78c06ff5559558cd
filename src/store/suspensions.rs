//! `operator_suspensions`: what `mail-worker suspend` holds (docs/decisions/0048-adaptive-rules.md),
//! kept so that a limiter Redis that comes back empty gets it back (the daemon writes the rows
//! in force back every tick), and read by `mailbox usage`.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::StoreError;

/// One operator suspension.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Suspension {
    /// `mailbox`, `tenant` or `campaign`.
    pub scope: String,
    /// The mailbox address, the Graph tenant or the campaign id.
    pub key: String,
    /// A mailbox's Graph tenant.
    pub tenant: Option<String>,
    /// When it started.
    pub suspended_at: DateTime<Utc>,
    /// When it ends by itself.
    pub suspended_until: DateTime<Utc>,
    /// The operator's reason.
    pub reason: Option<String>,
}

/// Keeps `s`, replacing the row of its scope and key.
///
/// # Errors
/// Database errors.
pub async fn record(pool: &PgPool, s: &Suspension) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO operator_suspensions \
             (scope, key, tenant, suspended_at, suspended_until, reason) \
         VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (scope, key) DO UPDATE SET tenant = EXCLUDED.tenant, \
             suspended_at = EXCLUDED.suspended_at, suspended_until = EXCLUDED.suspended_until, \
             reason = EXCLUDED.reason",
    )
    .bind(&s.scope)
    .bind(&s.key)
    .bind(&s.tenant)
    .bind(s.suspended_at)
    .bind(s.suspended_until)
    .bind(&s.reason)
    .execute(pool)
    .await?;
    Ok(())
}

/// Deletes the row of `scope` and `key`; whether there was one.
///
/// # Errors
/// Database errors.
pub async fn remove(pool: &PgPool, scope: &str, key: &str) -> Result<bool, StoreError> {
    let done = sqlx::query("DELETE FROM operator_suspensions WHERE scope = $1 AND key = $2")
        .bind(scope)
        .bind(key)
        .execute(pool)
        .await?;
    Ok(done.rows_affected() > 0)
}

/// The suspensions in force at `now` (ended ones are deleted on the way).
///
/// # Errors
/// Database errors.
pub async fn in_force(pool: &PgPool, now: DateTime<Utc>) -> Result<Vec<Suspension>, StoreError> {
    sqlx::query("DELETE FROM operator_suspensions WHERE suspended_until <= $1")
        .bind(now)
        .execute(pool)
        .await?;
    Ok(sqlx::query_as(
        "SELECT scope, key, tenant, suspended_at, suspended_until, reason \
         FROM operator_suspensions ORDER BY scope, key",
    )
    .fetch_all(pool)
    .await?)
}

/// The suspension of `scope` and `key` in force at `now`, if there is one (`campaign status`
/// shows a campaign's): one of [`of_scope`]'s few rows.
///
/// # Errors
/// Database errors.
pub async fn of(
    pool: &PgPool,
    scope: &str,
    key: &str,
    now: DateTime<Utc>,
) -> Result<Option<Suspension>, StoreError> {
    Ok(of_scope(pool, scope, now)
        .await?
        .into_iter()
        .find(|s| s.key == key))
}

/// The suspensions of `scope` in force at `now`, by key (read only, unlike [`in_force`]).
///
/// # Errors
/// Database errors.
pub async fn of_scope(
    pool: &PgPool,
    scope: &str,
    now: DateTime<Utc>,
) -> Result<Vec<Suspension>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT scope, key, tenant, suspended_at, suspended_until, reason \
         FROM operator_suspensions WHERE scope = $1 AND suspended_until > $2 ORDER BY key",
    )
    .bind(scope)
    .bind(now)
    .fetch_all(pool)
    .await?)
}

/// Whether any message of `campaign` is stored (`suspend --campaign` notes a campaign with
/// none: a typo, or lines not yet sent).
///
/// # Errors
/// Database errors.
pub async fn campaign_has_messages(pool: &PgPool, campaign: &str) -> Result<bool, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM messages WHERE campaign_id = $1)")
            .bind(campaign)
            .fetch_one(pool)
            .await?,
    )
}

/// Makes every message a suspension deferred due in 2 s (`resume`): after every replica's 1 s
/// cache of the action it lifted; those still held by another suspension are deferred again at
/// their next claim. Returns how many.
///
/// # Errors
/// Database errors.
pub async fn make_due(pool: &PgPool) -> Result<u64, StoreError> {
    let done = sqlx::query(
        "UPDATE messages SET scheduled_on = now() + interval '2 seconds' \
         WHERE status = 'SCHEDULED' AND wait_reason = 'suspended' AND scheduled_on > now()",
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// The Graph tenant `given` names for `suspend --tenant`/`resume --tenant`: a Graph tenant id
/// of a known Graph sender (tenants' or system mailboxes'), or the name of a tenant whose
/// sender is a Graph one (its Graph tenant id then); lower case. `None` when no sender knows
/// it (the CLI refuses it: a suspension of an unknown key would hold nothing).
///
/// # Errors
/// Database errors.
pub async fn graph_tenant_named(pool: &PgPool, given: &str) -> Result<Option<String>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT lower(graph_tenant_id) FROM ( \
             SELECT graph_tenant_id, name FROM tenants WHERE graph_tenant_id IS NOT NULL \
             UNION ALL SELECT graph_tenant_id, NULL FROM system_mailboxes) t \
         WHERE lower(graph_tenant_id) = lower($1) OR lower(name) = lower($1) \
         ORDER BY lower(graph_tenant_id) = lower($1) DESC LIMIT 1",
    )
    .bind(given.trim())
    .fetch_optional(pool)
    .await?)
}
