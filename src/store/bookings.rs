//! What the limiter's bookings need from the rows: the sender (Graph tenant, mailbox) of the
//! messages an operator cancelled or retried, whose bookings go at once, and the rows a
//! mailbox's old limits booked later, made due when its limits change.

use sqlx::PgPool;
use uuid::Uuid;

use super::StoreError;
use crate::domain::sql_status;

/// The sending mailbox of each message and its Graph tenant (its domain when none is set).
const SENDERS_OF: &str = "SELECT m.id, \
        CASE WHEN m.system_mailbox_id IS NOT NULL THEN s.address ELSE t.sender_address END AS mailbox, \
        CASE WHEN m.system_mailbox_id IS NOT NULL THEN s.graph_tenant_id ELSE t.graph_tenant_id END AS graph \
     FROM messages m \
     LEFT JOIN system_mailboxes s ON s.id = m.system_mailbox_id \
     LEFT JOIN tenants t ON t.id = m.tenant_id \
     WHERE m.id = ANY($1)";

/// The (Graph tenant, mailbox, message ids) groups of `ids`; messages without a sending
/// mailbox are left out.
///
/// # Errors
/// Database errors.
pub(crate) async fn senders_of(
    pool: &PgPool,
    ids: &[Uuid],
) -> Result<Vec<(String, String, Vec<Uuid>)>, StoreError> {
    let rows: Vec<(Uuid, Option<String>, Option<String>)> =
        sqlx::query_as(SENDERS_OF).bind(ids).fetch_all(pool).await?;
    let mut groups: std::collections::BTreeMap<(String, String), Vec<Uuid>> =
        std::collections::BTreeMap::new();
    for (id, mailbox, graph) in rows {
        let Some(mailbox) = mailbox else { continue };
        groups
            .entry((key_tenant(graph, &mailbox), mailbox))
            .or_default()
            .push(id);
    }
    Ok(groups
        .into_iter()
        .map(|((tenant, mailbox), ids)| (tenant, mailbox, ids))
        .collect())
}

/// The limiter's keys' tenant: the Graph tenant, lower case, or the mailbox's domain when none
/// is set (as the mailer asks).
fn key_tenant(graph: Option<String>, mailbox: &str) -> String {
    graph
        .filter(|g| !g.is_empty())
        .unwrap_or_else(|| mailbox.rsplit('@').next().unwrap_or_default().to_owned())
        .to_lowercase()
}

/// The Graph tenant of the sending mailbox `$1`.
const GRAPH_TENANT: &str = "SELECT graph_tenant_id FROM system_mailboxes WHERE address = $1 \
     UNION ALL SELECT graph_tenant_id FROM tenants WHERE sender_address = $1 LIMIT 1";

/// The limiter's tenant of `mailbox` (its Graph tenant, lower case, or its domain).
///
/// # Errors
/// Database errors.
pub(crate) async fn tenant_of(pool: &PgPool, mailbox: &str) -> Result<String, StoreError> {
    let graph: Option<Option<String>> = sqlx::query_scalar(GRAPH_TENANT)
        .bind(mailbox)
        .fetch_optional(pool)
        .await?;
    Ok(key_tenant(graph.flatten(), mailbox))
}

/// `SCHEDULED` rows of the mailbox `$1` that its limits deferred to a later slot.
const DUE_NOW: &str = concat!(
    "UPDATE messages m SET scheduled_on = now(), wait_reason = NULL, updated_at = now() \
     WHERE m.status = ",
    sql_status!(Scheduled),
    " AND m.scheduled_on > now() AND m.wait_reason IN ('minute', 'day', 'tenant') \
       AND coalesce(m.system_mailbox_id, m.tenant_id) IN ( \
           SELECT id FROM system_mailboxes WHERE address = $1 \
           UNION ALL SELECT id FROM tenants WHERE sender_address = $1)"
);

/// Makes the rows `mailbox`'s limits deferred (booked later: reason minute, day or tenant) due
/// now, after its limits changed: each takes a fresh decision under the new ones (their old
/// reason goes with the booking). Returns how many.
///
/// # Errors
/// Database errors.
pub(crate) async fn due_now_after_limit_change(
    pool: &PgPool,
    mailbox: &str,
) -> Result<u64, StoreError> {
    Ok(sqlx::query(DUE_NOW)
        .bind(mailbox)
        .execute(pool)
        .await?
        .rows_affected())
}
