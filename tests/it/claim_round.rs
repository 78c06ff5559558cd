//! The claim round's sender list (issue 23, docs/decisions/claim-round-buffers.md): the senders
//! with due rows, longest-waiting first, system mailboxes and tenants alike, from a probe per
//! known sender that reads a few buffers each, however many rows are due.

use uuid::Uuid;

use crate::support::{TestDb, claim_due_ids as claim, sorted};

async fn mailbox(db: &TestDb, address: &str) -> Uuid {
    sqlx::query_scalar(
        "INSERT INTO system_mailboxes (address, graph_tenant_id, graph_client_id, graph_client_secret) \
         VALUES ($1, 'round.example', 'c', 'env:S') RETURNING id",
    )
    .bind(address)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

/// `n` rows of `sender` (`tenant` or system mailbox), the first due `ago_s` seconds ago, each
/// next one a second later (negative: in the future); returns their ids.
async fn rows(db: &TestDb, sender: Uuid, tenant: bool, ago_s: i32, n: i32) -> Vec<Uuid> {
    let column = if tenant {
        "tenant_id"
    } else {
        "system_mailbox_id"
    };
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "INSERT INTO messages (id, {column}, to_recipients, subject, body_content_type, body, \
             scheduled_on) \
         SELECT gen_random_uuid(), $1, '[{{\"address\":\"a@example.org\"}}]', 's', 'text', 'b', \
             now() - make_interval(secs => $2 - g) FROM generate_series(0, $3 - 1) g RETURNING id"
    )))
    .bind(sender)
    .bind(ago_s)
    .bind(n)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn the_round_takes_the_longest_waiting_senders_first_tenants_included() {
    let db = TestDb::new().await;
    let tenant: Uuid = sqlx::query_scalar(
        "INSERT INTO tenants (name, mail_provider, sender_address, sendgrid_api_key) \
         VALUES ('round-news', 'sendgrid', 'news@round.example', 'env:K') RETURNING id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let (a, b, later) = (
        mailbox(&db, "a@round.example").await,
        mailbox(&db, "b@round.example").await,
        mailbox(&db, "later@round.example").await,
    );
    let _idle = mailbox(&db, "idle@round.example").await;
    // Oldest due row: the tenant's 300 s ago, a's 200 s, b's 100 s; `later` has none due.
    let of_tenant = rows(&db, tenant, true, 300, 2).await;
    let of_a = rows(&db, a, false, 200, 2).await;
    let of_b = rows(&db, b, false, 100, 2).await;
    rows(&db, later, false, -600, 3).await;
    // One row each from the two longest-waiting senders.
    let first = claim(&db, 2).await;
    assert_eq!(first, sorted([of_tenant[0], of_a[0]]));
    // Then by each sender's oldest due row again: the tenant's second (299 s), then a's
    // second (199 s) and b's first (100 s), then b's second.
    assert_eq!(claim(&db, 1).await, vec![of_tenant[1]]);
    assert_eq!(claim(&db, 2).await, sorted([of_a[1], of_b[0]]));
    assert_eq!(claim(&db, 10).await, vec![of_b[1]]);
    // `later`'s rows are not due: nothing more.
    assert_eq!(claim(&db, 10).await, Vec::<Uuid>::new());
}

/// The round's statement on 60 senders × 1,000 due rows: each sender's probe reads its oldest
/// due row from `messages_scheduled_by_sender`, a few buffers, not every due row's page.
#[tokio::test]
async fn the_sender_list_reads_a_few_buffers_a_sender_however_many_rows_are_due() {
    let db = TestDb::new().await;
    for i in 0..60 {
        let mb = mailbox(&db, &format!("mb{i}@round.example")).await;
        rows(&db, mb, false, 5_000 + i, 1_000).await;
    }
    sqlx::query("VACUUM ANALYZE messages")
        .execute(&db.pool)
        .await
        .unwrap();
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) \
         SELECT s.id FROM (SELECT id FROM system_mailboxes UNION ALL SELECT id FROM tenants) s \
         CROSS JOIN LATERAL ( \
             SELECT m.scheduled_on FROM messages m \
             WHERE coalesce(m.system_mailbox_id, m.tenant_id) = s.id AND m.status = 'SCHEDULED' \
               AND m.scheduled_on <= now() ORDER BY m.scheduled_on LIMIT 1 \
         ) oldest ORDER BY oldest.scheduled_on",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let plan = plan.join("\n");
    println!("{plan}");
    assert!(plan.contains("messages_scheduled_by_sender"), "{plan}");
    let top = plan
        .lines()
        .find(|l| l.trim_start().starts_with("Buffers: shared"))
        .unwrap();
    let buffers: u64 = top
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse::<u64>().ok())
        .sum();
    // 60,000 due rows fill ~700 heap pages; the probes read ~4 buffers each.
    assert!(buffers <= 60 * 6, "{buffers} buffers:\n{plan}");
    assert!(plan.contains("rows=60 "), "{plan}");
}
