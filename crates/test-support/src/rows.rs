//! Senders and due rows written straight into the tables, for the tests of the claim's SQL
//! (`claim_round.rs`, `priority.rs`) that need no app around them.

use uuid::Uuid;

use crate::TestDb;

/// Registers system mailbox `address` (its Graph tenant its domain, secret `env:S`); returns its
/// id.
pub async fn system_mailbox(db: &TestDb, address: &str) -> Uuid {
    let (_, domain) = address.split_once('@').expect("an address");
    sqlx::query_scalar(
        "INSERT INTO system_mailboxes (address, graph_tenant_id, graph_client_id, graph_client_secret) \
         VALUES ($1, $2, 'c', 'env:S') RETURNING id",
    )
    .bind(address)
    .bind(domain)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

/// Whose rows [`due_rows`] writes: a system mailbox's or a tenant's.
#[derive(Clone, Copy)]
pub enum Sender {
    Mailbox(Uuid),
    Tenant(Uuid),
}

/// `n` rows of `sender` at `priority`, the first due `ago_s` seconds ago, each next one a second
/// later (negative: in the future); returns their ids.
pub async fn due_rows(
    db: &TestDb,
    sender: Sender,
    priority: &str,
    ago_s: i32,
    n: i32,
) -> Vec<Uuid> {
    let (column, id) = match sender {
        Sender::Mailbox(id) => ("system_mailbox_id", id),
        Sender::Tenant(id) => ("tenant_id", id),
    };
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "INSERT INTO messages (id, {column}, to_recipients, subject, body_content_type, body, \
             scheduled_on, priority) \
         SELECT gen_random_uuid(), $1, '[{{\"address\":\"a@example.org\"}}]', 's', 'text', 'b', \
             now() - make_interval(secs => $2 - g), $4 FROM generate_series(0, $3 - 1) g \
         RETURNING id"
    )))
    .bind(id)
    .bind(ago_s)
    .bind(n)
    .bind(priority)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

/// The plan of `statement` (an `EXPLAIN …`) after `VACUUM ANALYZE messages` (fresh statistics,
/// as autovacuum leaves them), one line a node; printed too, for a failing run's log.
pub async fn plan_of(db: &TestDb, statement: &str) -> String {
    sqlx::query("VACUUM ANALYZE messages")
        .execute(&db.pool)
        .await
        .unwrap();
    let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(statement))
        .fetch_all(&db.pool)
        .await
        .unwrap();
    let plan = plan.join("\n");
    println!("{plan}");
    plan
}
