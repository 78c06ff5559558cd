//! `tenants` and `system_mailboxes`: read fresh per message (so an admin's change applies on
//! the next one), upserted by `mail-worker senders import`, limits set by `mailbox set-limits`.

use std::num::NonZeroU32;

use sqlx::{PgPool, Row, postgres::PgRow};
use uuid::Uuid;

mod limits;

pub use limits::{LimitsChange, Overrides, overrides_of, set_limits, waiting_above};

use super::StoreError;
use crate::domain::{
    GraphCredentials, MailProvider, MailboxAddress, SecretRef, SystemMailbox, Tenant, TenantBudget,
    TenantTransport,
};

const TENANT_COLUMNS: &str = "id, name, mail_provider, sender_address, graph_tenant_id, \
     graph_client_id, graph_client_secret, sendgrid_api_key, external_recipients_per_day, \
     accepted_domains, (SELECT ARRAY[w.start_per_day, w.growth, w.max_per_day, w.step] \
         FROM sender_warmups w WHERE w.tenant_id = tenants.id) AS warm_up";
const MAILBOX_COLUMNS: &str = "id, address, graph_tenant_id, graph_client_id, \
     graph_client_secret, rate_limit_per_minute, rate_limit_recipients_per_day, \
     rate_limit_reserved_percent, external_recipients_per_day, accepted_domains, \
     (SELECT ARRAY[w.start_per_day, w.growth, w.max_per_day, w.step] \
         FROM sender_warmups w WHERE w.system_mailbox_id = system_mailboxes.id) AS warm_up";

fn bad(table: &'static str, problem: impl Into<String>) -> StoreError {
    StoreError::BadRow {
        table,
        problem: problem.into(),
    }
}

fn tenant_from_row(row: &PgRow) -> Result<Tenant, StoreError> {
    let name: String = row.try_get("name")?;
    let provider: MailProvider = row
        .try_get::<String, _>("mail_provider")?
        .parse()
        .map_err(|e: String| bad("tenants", format!("tenant {name}: {e}")))?;
    let sender: String = row.try_get("sender_address")?;
    let sender_address = MailboxAddress::parse(&sender)
        .map_err(|e| bad("tenants", format!("tenant {name}: sender_address {e}")))?;
    let transport = match provider {
        MailProvider::MicrosoftGraph => TenantTransport::Graph(graph_from_row(row)?),
        MailProvider::SendGrid => TenantTransport::SendGrid {
            api_key: SecretRef::new(row.try_get::<String, _>("sendgrid_api_key")?),
        },
    };
    Ok(Tenant {
        id: row.try_get("id")?,
        name,
        sender_address,
        transport,
        warm_up: warm_up(row)?,
    })
}

/// The Graph app of a `tenants` or `system_mailboxes` row, its tenant budget included.
fn graph_from_row(row: &PgRow) -> Result<GraphCredentials, StoreError> {
    let tenant_budget = match (
        positive(row, "external_recipients_per_day")?,
        row.try_get::<Option<Vec<String>>, _>("accepted_domains")?,
    ) {
        (Some(external_recipients_per_day), Some(accepted_domains)) => Some(TenantBudget {
            external_recipients_per_day,
            accepted_domains,
        }),
        _ => None,
    };
    Ok(GraphCredentials {
        graph_tenant_id: row.try_get("graph_tenant_id")?,
        client_id: row.try_get("graph_client_id")?,
        client_secret: SecretRef::new(row.try_get::<String, _>("graph_client_secret")?),
        tenant_budget,
    })
}

/// `(external_recipients_per_day, accepted_domains)` to bind for an app's tenant budget.
fn budget_columns(graph: Option<&GraphCredentials>) -> (Option<i32>, Option<&[String]>) {
    match graph.and_then(|g| g.tenant_budget.as_ref()) {
        Some(budget) => (
            Some(i32::try_from(budget.external_recipients_per_day.get()).unwrap_or(i32::MAX)),
            Some(budget.accepted_domains.as_slice()),
        ),
        None => (None, None),
    }
}

fn positive(row: &PgRow, column: &str) -> Result<Option<NonZeroU32>, StoreError> {
    Ok(row
        .try_get::<Option<i32>, _>(column)?
        .and_then(|v| u32::try_from(v).ok())
        .and_then(NonZeroU32::new))
}

/// The `warm_up` column: `[start_per_day, growth, max_per_day, step]` of its `sender_warmups`
/// row (one array: the sender's columns are read from one table), `NULL` without a ramp.
fn warm_up(row: &PgRow) -> Result<Option<crate::domain::WarmUpStep>, StoreError> {
    let Some(values) = row.try_get::<Option<Vec<f64>>, _>("warm_up")? else {
        return Ok(None);
    };
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let whole = |v: f64| NonZeroU32::new(v as u32);
    match values.as_slice() {
        [start, growth, max, step] => Ok(Some(crate::domain::WarmUpStep {
            ramp: crate::domain::WarmUp {
                start_per_day: whole(*start)
                    .ok_or_else(|| bad("sender_warmups", "start_per_day"))?,
                growth: *growth,
                max_per_day: whole(*max).ok_or_else(|| bad("sender_warmups", "max_per_day"))?,
            },
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            step: *step as u32,
        })),
        _ => Err(bad("sender_warmups", "warm_up is not 4 numbers")),
    }
}

fn mailbox_from_row(row: &PgRow) -> Result<SystemMailbox, StoreError> {
    let raw: String = row.try_get("address")?;
    Ok(SystemMailbox {
        id: row.try_get("id")?,
        address: MailboxAddress::parse(&raw).map_err(|e| bad("system_mailboxes", e.to_string()))?,
        graph: graph_from_row(row)?,
        rate_limit_per_minute: positive(row, "rate_limit_per_minute")?,
        rate_limit_recipients_per_day: positive(row, "rate_limit_recipients_per_day")?,
        rate_limit_reserved_percent: row
            .try_get::<Option<i32>, _>("rate_limit_reserved_percent")?
            .and_then(|v| u8::try_from(v).ok()),
        warm_up: warm_up(row)?,
    })
}

/// The tenant with this id, if any.
///
/// # Errors
/// Database errors, or a row the code cannot use.
pub async fn tenant_by_id(pool: &PgPool, id: Uuid) -> Result<Option<Tenant>, StoreError> {
    let sql = format!("SELECT {TENANT_COLUMNS} FROM tenants WHERE id = $1");
    one_by(pool, sql, id, tenant_from_row).await
}

/// The tenant named `name` (what `senders import` upserts by), if any.
///
/// # Errors
/// Database errors, or a row the code cannot use.
pub(crate) async fn tenant_by_name(
    pool: &PgPool,
    name: &str,
) -> Result<Option<Tenant>, StoreError> {
    let sql = format!("SELECT {TENANT_COLUMNS} FROM tenants WHERE name = $1");
    one_by(pool, sql, name, tenant_from_row).await
}

/// The system mailbox with this id, if any.
///
/// # Errors
/// Database errors, or a row the code cannot use.
pub async fn system_mailbox_by_id(
    pool: &PgPool,
    id: Uuid,
) -> Result<Option<SystemMailbox>, StoreError> {
    let sql = format!("SELECT {MAILBOX_COLUMNS} FROM system_mailboxes WHERE id = $1");
    one_by(pool, sql, id, mailbox_from_row).await
}

/// The row `sql` selects with `key` as `$1`, if any, read by `from_row`.
async fn one_by<T, K>(
    pool: &PgPool,
    sql: String,
    key: K,
    from_row: fn(&PgRow) -> Result<T, StoreError>,
) -> Result<Option<T>, StoreError>
where
    K: for<'q> sqlx::Encode<'q, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send,
{
    let row = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(key)
        .fetch_optional(pool)
        .await?;
    row.as_ref().map(from_row).transpose()
}

/// The sender whose `From` address is `address`: a system mailbox first, else a tenant.
///
/// # Errors
/// Database errors, or a row the code cannot use.
pub async fn by_address(
    pool: &PgPool,
    address: &MailboxAddress,
) -> Result<Option<crate::domain::Sender>, StoreError> {
    use crate::domain::Sender;
    let sql = format!("SELECT {MAILBOX_COLUMNS} FROM system_mailboxes WHERE address = $1");
    if let Some(mailbox) = one_by(pool, sql, address.as_str(), mailbox_from_row).await? {
        return Ok(Some(Sender::SystemMailbox(mailbox)));
    }
    let sql = format!(
        "SELECT {TENANT_COLUMNS} FROM tenants WHERE lower(sender_address) = $1 ORDER BY name LIMIT 1"
    );
    Ok(one_by(pool, sql, address.as_str(), tenant_from_row)
        .await?
        .map(Sender::Tenant))
}

/// Every sender, in two queries: each system mailbox, then each tenant whose sender address no
/// system mailbox has (by name), as [`by_address`] would pick them.
///
/// # Errors
/// Database errors, or a row the code cannot use.
pub(crate) async fn all(pool: &PgPool) -> Result<Vec<crate::domain::Sender>, StoreError> {
    matching(pool, None).await
}

/// As [`all`], of the sending addresses `only` (lower case) when given.
///
/// # Errors
/// As [`all`].
pub(crate) async fn matching(
    pool: &PgPool,
    only: Option<&[String]>,
) -> Result<Vec<crate::domain::Sender>, StoreError> {
    let sql = format!(
        "SELECT {MAILBOX_COLUMNS} FROM system_mailboxes \
         WHERE $1::text[] IS NULL OR address = ANY($1) ORDER BY address"
    );
    let mut senders = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(only)
        .fetch_all(pool)
        .await?
        .iter()
        .map(|row| mailbox_from_row(row).map(crate::domain::Sender::SystemMailbox))
        .collect::<Result<Vec<_>, _>>()?;
    let sql = format!(
        "SELECT {TENANT_COLUMNS} FROM tenants \
         WHERE $1::text[] IS NULL OR lower(sender_address) = ANY($1) ORDER BY name"
    );
    for row in sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(only)
        .fetch_all(pool)
        .await?
    {
        let tenant = crate::domain::Sender::Tenant(tenant_from_row(&row)?);
        if !senders.iter().any(|s| s.mailbox() == tenant.mailbox()) {
            senders.push(tenant);
        }
    }
    Ok(senders)
}

/// Every sending address: each system mailbox and each tenant's sender, once, in order.
///
/// # Errors
/// Database errors.
pub(crate) async fn addresses(pool: &PgPool) -> Result<Vec<String>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT address FROM system_mailboxes UNION SELECT lower(sender_address) FROM tenants \
         ORDER BY 1",
    )
    .fetch_all(pool)
    .await?)
}

/// Name → id of every tenant, and address → id of every system mailbox (for `enqueue`).
///
/// # Errors
/// Database errors.
pub async fn sender_ids(
    pool: &PgPool,
) -> Result<
    (
        std::collections::HashMap<String, Uuid>,
        std::collections::HashMap<String, Uuid>,
    ),
    StoreError,
> {
    let tenants = sqlx::query_as::<_, (String, Uuid)>("SELECT name, id FROM tenants")
        .fetch_all(pool)
        .await?;
    let mailboxes = sqlx::query_as::<_, (String, Uuid)>("SELECT address, id FROM system_mailboxes")
        .fetch_all(pool)
        .await?;
    Ok((
        tenants.into_iter().collect(),
        mailboxes.into_iter().collect(),
    ))
}

/// Inserts or updates (by `name`) a tenant; returns its id.
///
/// # Errors
/// Database errors (including the provider/credentials check).
pub(crate) async fn upsert_tenant(
    pool: &PgPool,
    name: &str,
    sender_address: &MailboxAddress,
    transport: &TenantTransport,
) -> Result<Uuid, StoreError> {
    let (provider, graph, sendgrid) = match transport {
        TenantTransport::Graph(g) => (MailProvider::MicrosoftGraph, Some(g), None),
        TenantTransport::SendGrid { api_key } => (MailProvider::SendGrid, None, Some(api_key)),
    };
    let (external_per_day, accepted_domains) = budget_columns(graph);
    let id = sqlx::query_scalar(
        "INSERT INTO tenants (name, mail_provider, sender_address, graph_tenant_id, \
             graph_client_id, graph_client_secret, sendgrid_api_key, \
             external_recipients_per_day, accepted_domains) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
         ON CONFLICT (name) DO UPDATE SET mail_provider = EXCLUDED.mail_provider, \
             sender_address = EXCLUDED.sender_address, graph_tenant_id = EXCLUDED.graph_tenant_id, \
             graph_client_id = EXCLUDED.graph_client_id, \
             graph_client_secret = EXCLUDED.graph_client_secret, \
             sendgrid_api_key = EXCLUDED.sendgrid_api_key, \
             external_recipients_per_day = EXCLUDED.external_recipients_per_day, \
             accepted_domains = EXCLUDED.accepted_domains, updated_at = now() \
         RETURNING id",
    )
    .bind(name)
    .bind(provider.as_str())
    .bind(sender_address.as_str())
    .bind(graph.map(|g| g.graph_tenant_id.as_str()))
    .bind(graph.map(|g| g.client_id.as_str()))
    .bind(graph.map(|g| g.client_secret.raw()))
    .bind(sendgrid.map(|k| k.raw()))
    .bind(external_per_day)
    .bind(accepted_domains)
    .fetch_one(pool)
    .await?;
    Ok(id)
}

/// Inserts or updates (by `address`) a system mailbox, limits included; returns its id.
///
/// # Errors
/// Database errors.
pub async fn upsert_system_mailbox(
    pool: &PgPool,
    address: &MailboxAddress,
    graph: &GraphCredentials,
    per_minute: Option<NonZeroU32>,
    recipients_per_day: Option<NonZeroU32>,
) -> Result<Uuid, StoreError> {
    let (external_per_day, accepted_domains) = budget_columns(Some(graph));
    let id = sqlx::query_scalar(
        "INSERT INTO system_mailboxes (address, graph_tenant_id, graph_client_id, \
             graph_client_secret, rate_limit_per_minute, rate_limit_recipients_per_day, \
             external_recipients_per_day, accepted_domains) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
         ON CONFLICT (address) DO UPDATE SET graph_tenant_id = EXCLUDED.graph_tenant_id, \
             graph_client_id = EXCLUDED.graph_client_id, \
             graph_client_secret = EXCLUDED.graph_client_secret, \
             rate_limit_per_minute = EXCLUDED.rate_limit_per_minute, \
             rate_limit_recipients_per_day = EXCLUDED.rate_limit_recipients_per_day, \
             external_recipients_per_day = EXCLUDED.external_recipients_per_day, \
             accepted_domains = EXCLUDED.accepted_domains, \
             updated_at = now() \
         RETURNING id",
    )
    .bind(address.as_str())
    .bind(&graph.graph_tenant_id)
    .bind(&graph.client_id)
    .bind(graph.client_secret.raw())
    .bind(per_minute.map(|v| v.get() as i32))
    .bind(recipients_per_day.map(|v| v.get() as i32))
    .bind(external_per_day)
    .bind(accepted_domains)
    .fetch_one(pool)
    .await?;
    Ok(id)
}
