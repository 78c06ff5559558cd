//! Priority (issue 24): claims take a sender's due `high` rows first, then `normal`, then
//! `bulk`, through the `messages_due_by_sender` index, and a bulk row is still claimed when no
//! higher one is due.

use uuid::Uuid;

use crate::support::rows::{Sender, due_rows, plan_of, system_mailbox};
use crate::support::{TestDb, claim_due_ids as claim, sorted};

/// The one system mailbox of these tests.
async fn mailbox(db: &TestDb) -> Uuid {
    system_mailbox(db, "ops@prio.example").await
}

/// Inserts a due row of `priority`, due `ago_s` seconds ago; returns its id.
async fn due_row(db: &TestDb, mailbox: Uuid, priority: &str, ago_s: i32) -> Uuid {
    due_rows(db, Sender::Mailbox(mailbox), priority, ago_s, 1).await[0]
}

#[tokio::test]
async fn claims_take_high_then_normal_then_bulk_and_bulk_is_still_claimed() {
    let db = TestDb::new().await;
    let mb = mailbox(&db).await;
    // The bulk rows are the oldest: by due time alone they would go first.
    let mut bulk = Vec::new();
    for ago in [300, 290, 280] {
        bulk.push(due_row(&db, mb, "bulk", ago).await);
    }
    let normal = vec![
        due_row(&db, mb, "normal", 200).await,
        due_row(&db, mb, "normal", 190).await,
    ];
    let high = vec![
        due_row(&db, mb, "high", 10).await,
        due_row(&db, mb, "high", 5).await,
    ];
    // A high row not yet due is not claimed ahead of anything.
    sqlx::query(
        "INSERT INTO messages (id, system_mailbox_id, scheduled_on, priority) \
         VALUES (gen_random_uuid(), $1, now() + interval '1 hour', 'high')",
    )
    .bind(mb)
    .execute(&db.pool)
    .await
    .unwrap();

    assert_eq!(claim(&db, 2).await, sorted(high));
    assert_eq!(claim(&db, 2).await, sorted(normal));
    assert_eq!(
        claim(&db, 10).await,
        sorted(bulk),
        "no higher row due: bulk is claimed"
    );
    assert!(claim(&db, 10).await.is_empty());
}

#[tokio::test]
async fn priority_is_checked_and_defaults_to_normal() {
    let db = TestDb::new().await;
    let mb = mailbox(&db).await;
    let refused = sqlx::query(
        "INSERT INTO messages (id, system_mailbox_id, priority) VALUES (gen_random_uuid(), $1, 'urgent')",
    )
    .bind(mb)
    .execute(&db.pool)
    .await
    .unwrap_err();
    match refused {
        sqlx::Error::Database(e) => assert_eq!(e.constraint(), Some("messages_priority_keyword")),
        other => panic!("expected the CHECK, got {other}"),
    }
    let default: String = sqlx::query_scalar(
        "INSERT INTO messages (id, system_mailbox_id) VALUES (gen_random_uuid(), $1) RETURNING priority",
    )
    .bind(mb)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(default, "normal");
}

/// The claim's per-sender subquery, as `claim_due_from` runs it, on 100,000 due rows: it must
/// read `messages_due_by_sender` in order (no sort of the sender's rows).
#[tokio::test]
async fn the_priority_claim_stays_an_index_scan_on_100k_rows() {
    let db = TestDb::new().await;
    let mb = mailbox(&db).await;
    sqlx::query(
        "INSERT INTO messages (id, system_mailbox_id, scheduled_on, priority) \
         SELECT gen_random_uuid(), $1, now() - make_interval(secs => g), \
                (ARRAY['high', 'normal', 'bulk'])[1 + g % 3] \
         FROM generate_series(1, 100000) g",
    )
    .bind(mb)
    .execute(&db.pool)
    .await
    .unwrap();
    let plan = plan_of(
        &db,
        &format!(
            "EXPLAIN SELECT id FROM messages \
             WHERE coalesce(system_mailbox_id, tenant_id) = '{mb}' AND status = 'SCHEDULED' \
               AND scheduled_on <= now() \
             ORDER BY (CASE priority WHEN 'high' THEN 0 WHEN 'normal' THEN 1 ELSE 2 END), \
                 (deferrals = 0), scheduled_on \
             LIMIT 50 FOR UPDATE SKIP LOCKED"
        ),
    )
    .await;
    assert!(plan.contains("messages_due_by_sender"), "{plan}");
    assert!(
        !plan.contains("Sort"),
        "the rows must come in index order:\n{plan}"
    );
}

/// The senders file's `priority` is the sender's default; a line's own priority wins; a bad
/// word is refused at its path and nothing is written.
#[tokio::test]
async fn a_senders_default_priority_is_stored_and_a_lines_own_wins() {
    let db = TestDb::new().await;
    let file = mail_worker::import::senders::parse(
        r#"{"systemMailboxes":[{"address":"alerts@prio.example","graphTenantId":"prio.example","clientId":"c","clientSecret":"env:S","priority":"high"}],
            "tenants":[{"name":"prio-news","provider":"sendgrid","sender":"news@prio.example","sendgridApiKey":"env:K","priority":"bulk"}]}"#,
    )
    .unwrap();
    mail_worker::import::senders::import(&db.pool, &file)
        .await
        .unwrap();
    let line = |id: u128, sender: &str, extra: &str| {
        format!(
            r#"{{"id":"{}",{sender},"to":[{{"address":"a@example.org"}}],"body":{{"contentType":"text","content":"x"}}{extra}}}"#,
            Uuid::from_u128(id)
        )
    };
    let text = [
        line(1, r#""systemMailbox":"alerts@prio.example""#, ""),
        line(
            2,
            r#""systemMailbox":"alerts@prio.example""#,
            r#","priority":"bulk""#,
        ),
        line(3, r#""tenant":"prio-news""#, ""),
        line(4, r#""tenant":"prio-news""#, r#","priority":"normal""#),
    ]
    .join("\n");
    let enqueued = mail_worker::import::enqueue(&db.pool, &text, Default::default())
        .await
        .unwrap();
    assert_eq!((enqueued.inserted, enqueued.bad.len()), (4, 0));
    let stored: Vec<(Uuid, String)> =
        sqlx::query_as("SELECT id, priority FROM messages ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let want: Vec<(Uuid, String)> = [(1, "high"), (2, "bulk"), (3, "bulk"), (4, "normal")]
        .into_iter()
        .map(|(id, p)| (Uuid::from_u128(id), p.to_owned()))
        .collect();
    assert_eq!(stored, want);

    let bad = mail_worker::import::senders::check(
        r#"{"systemMailboxes":[{"address":"alerts@prio.example","graphTenantId":"prio.example","clientId":"c","clientSecret":"env:S","priority":"urgent"}]}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(
        bad.contains("systemMailboxes[0].priority: must be `high`, `normal` or `bulk`"),
        "{bad}"
    );
}
