//! The claim round's sender list (issue 23, docs/decisions/0024-claim-round-buffers.md): the senders
//! with due rows, longest-waiting first, system mailboxes and tenants alike, from a probe per
//! known sender that reads a few buffers each, however many rows are due.

use uuid::Uuid;

use crate::support::rows::{Sender, due_rows, plan_of, system_mailbox as mailbox};
use crate::support::{TestDb, claim_due_ids as claim, sorted};

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
    let of_tenant = due_rows(&db, Sender::Tenant(tenant), "normal", 300, 2).await;
    let of_a = due_rows(&db, Sender::Mailbox(a), "normal", 200, 2).await;
    let of_b = due_rows(&db, Sender::Mailbox(b), "normal", 100, 2).await;
    due_rows(&db, Sender::Mailbox(later), "normal", -600, 3).await;
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
        due_rows(&db, Sender::Mailbox(mb), "normal", 5_000 + i, 1_000).await;
    }
    let plan = plan_of(
        &db,
        "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) \
         SELECT s.id FROM (SELECT id FROM system_mailboxes UNION ALL SELECT id FROM tenants) s \
         CROSS JOIN LATERAL ( \
             SELECT m.scheduled_on FROM messages m \
             WHERE coalesce(m.system_mailbox_id, m.tenant_id) = s.id AND m.status = 'SCHEDULED' \
               AND m.scheduled_on <= now() ORDER BY m.scheduled_on LIMIT 1 \
         ) oldest ORDER BY oldest.scheduled_on",
    )
    .await;
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
