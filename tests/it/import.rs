//! `senders import`, `enqueue` and `mailbox set-limits` against a real database and the
//! realistic campaign shipped in `examples/` (a slice of a real export, with its faults).

use std::num::NonZeroU32;

use mail_worker::{
    domain::{MailboxAddress, SystemMailbox},
    import,
    store::senders,
};

use crate::support::TestDb;

pub const SENDERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/senders.json");
pub const CAMPAIGN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/campaign.jsonl");
/// Lines (messages) in `examples/campaign.jsonl`.
pub const CAMPAIGN_LINES: usize = 400;

/// The example campaign with every `scheduledOn` moved to `now + 1 day`, so "later" messages
/// stay later whatever the day the tests run; returns the text and how many lines have one.
pub fn campaign_scheduled_from_now() -> (String, usize) {
    let later = (chrono::Utc::now() + chrono::Duration::days(1)).to_rfc3339();
    let mut scheduled = 0;
    let text = std::fs::read_to_string(CAMPAIGN)
        .expect(CAMPAIGN)
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            if v.get("scheduledOn").is_some() {
                v["scheduledOn"] = serde_json::Value::String(later.clone());
                scheduled += 1;
            }
            format!("{v}\n")
        })
        .collect();
    (text, scheduled)
}

/// The stored system mailbox `id`.
async fn system_mailbox(db: &TestDb, id: uuid::Uuid) -> SystemMailbox {
    senders::system_mailbox_by_id(&db.pool, id)
        .await
        .unwrap()
        .expect("the system mailbox is stored")
}

/// Its overrides: messages per UTC minute, recipients per UTC day.
fn overrides(m: &SystemMailbox) -> (Option<u32>, Option<u32>) {
    (
        m.rate_limit_per_minute.map(NonZeroU32::get),
        m.rate_limit_recipients_per_day.map(NonZeroU32::get),
    )
}

pub async fn import_shared_senders(db: &TestDb) {
    let text = std::fs::read_to_string(SENDERS).expect(SENDERS);
    let file = import::senders::parse(&text).unwrap();
    let report = import::senders::import(&db.pool, &file).await.unwrap();
    assert_eq!((report.tenants, report.system_mailboxes), (3, 3));
}

#[tokio::test]
async fn senders_import_is_idempotent_and_keeps_secret_references() {
    let db = TestDb::new().await;
    import_shared_senders(&db).await;
    import_shared_senders(&db).await;
    let (tenants, mailboxes) = senders::sender_ids(&db.pool).await.unwrap();
    assert_eq!(tenants.len(), 3);
    assert_eq!(mailboxes.len(), 3);
    let events = system_mailbox(&db, mailboxes["events@contoso.example"]).await;
    assert_eq!(overrides(&events), (Some(20), Some(5000)));
    assert_eq!(
        events.graph.client_secret.describe(),
        "env:CONTOSO_GRAPH_SECRET"
    );
    let adatum = senders::tenant_by_id(&db.pool, tenants["adatum"])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        adatum.provider(),
        mail_worker::domain::MailProvider::SendGrid
    );
}

#[tokio::test]
async fn a_senders_file_with_bad_entries_names_them_and_writes_nothing() {
    let db = TestDb::new().await;
    let file = import::senders::parse(
        r#"{"systemMailboxes":[{"address":"not-an-address","graphTenantId":"t","clientId":"c","clientSecret":"s","rateLimitPerMinute":0}],
            "tenants":[{"name":"x","provider":"smtp","sender":"a@x.example"},{"name":"ok","provider":"sendgrid","sender":"a@ok.example","sendgridApiKey":"env:K"}]}"#,
    )
    .unwrap();
    let err = import::senders::import(&db.pool, &file)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("systemMailboxes[0].address"), "{err}");
    assert!(err.contains("tenants[0].provider"), "{err}");
    let (tenants, _) = senders::sender_ids(&db.pool).await.unwrap();
    assert!(tenants.is_empty(), "nothing written: {tenants:?}");
}

#[tokio::test]
async fn a_senders_file_naming_a_mailbox_twice_is_refused() {
    let db = TestDb::new().await;
    let entry = |address: &str| {
        format!(
            r#"{{"address":"{address}","graphTenantId":"t","clientId":"c","clientSecret":"env:S"}}"#
        )
    };
    let file = import::senders::parse(&format!(
        r#"{{"systemMailboxes":[{},{}]}}"#,
        entry("ops@contoso.example"),
        entry("OPS@contoso.example")
    ))
    .unwrap();
    let err = import::senders::import(&db.pool, &file)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("mailbox ops@contoso.example: appears more than once"),
        "{err}"
    );
}

#[tokio::test]
async fn the_whole_campaign_enqueues_once_with_its_attachments() {
    let db = TestDb::new().await;
    import_shared_senders(&db).await;
    let (text, scheduled_later) = campaign_scheduled_from_now();
    let attachments_in_file: usize = text
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["attachments"]
                .as_array()
                .map_or(0, Vec::len)
        })
        .sum();
    let enqueued = mail_worker::import::enqueue(&db.pool, &text, Default::default())
        .await
        .unwrap();
    let (inserted, good, bad) = (enqueued.inserted, enqueued.good, enqueued.bad);
    assert_eq!(
        (inserted as usize, good, bad.len()),
        (CAMPAIGN_LINES, CAMPAIGN_LINES, 0),
        "{bad:?}"
    );
    let again = mail_worker::import::enqueue(&db.pool, &text, Default::default())
        .await
        .unwrap()
        .inserted;
    assert_eq!(again, 0, "re-running the same file inserts nothing");
    let (rows, stored_attachments, future): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM message_attachments), \
                (SELECT count(*) FROM messages WHERE scheduled_on > now() + interval '12 hours')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows as usize, CAMPAIGN_LINES);
    assert_eq!(stored_attachments as usize, attachments_in_file);
    assert_eq!(future as usize, scheduled_later);
    assert_eq!(
        scheduled_later, 46,
        "the example's lines with a scheduledOn"
    );
}

#[tokio::test]
async fn set_limits_overrides_keeps_omitted_ones_clears_and_names_an_unknown_mailbox() {
    let db = TestDb::new().await;
    import_shared_senders(&db).await;
    let address = MailboxAddress::parse("noreply@contoso.example").unwrap();
    let set = |per_minute, recipients_per_day| senders::LimitsChange::Set {
        per_minute,
        recipients_per_day,
        reserved_percent: None,
    };
    senders::set_limits(
        &db.pool,
        &address,
        set(NonZeroU32::new(7), NonZeroU32::new(500)),
    )
    .await
    .unwrap();
    let now = senders::set_limits(&db.pool, &address, set(NonZeroU32::new(9), None))
        .await
        .unwrap();
    assert_eq!(
        (now.per_minute, now.recipients_per_day, now.reserved_percent),
        (NonZeroU32::new(9), NonZeroU32::new(500), None),
        "an omitted override is kept"
    );
    let (_, ids) = senders::sender_ids(&db.pool).await.unwrap();
    let m = system_mailbox(&db, ids["noreply@contoso.example"]).await;
    assert_eq!(overrides(&m), (Some(9), Some(500)));
    senders::set_limits(&db.pool, &address, senders::LimitsChange::Clear)
        .await
        .unwrap();
    let m = system_mailbox(&db, ids["noreply@contoso.example"]).await;
    assert_eq!(overrides(&m), (None, None));
    let unknown = MailboxAddress::parse("nobody@contoso.example").unwrap();
    let err = senders::set_limits(&db.pool, &unknown, set(NonZeroU32::new(1), None))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("nobody@contoso.example"), "{err}");
}

#[tokio::test]
async fn a_mailboxs_reserved_percent_is_stored_and_a_reimport_without_it_clears_it() {
    let db = TestDb::new().await;
    let file = |extra: &str| {
        import::senders::parse(&format!(
            r#"{{"systemMailboxes":[{{"address":"alerts@contoso.example","graphTenantId":"contoso.example","clientId":"c","clientSecret":"env:S","priority":"high"{extra}}}]}}"#
        ))
        .unwrap()
    };
    import::senders::import(&db.pool, &file(r#","rateLimitReservedPercent":35"#))
        .await
        .unwrap();
    let (_, mailboxes) = senders::sender_ids(&db.pool).await.unwrap();
    let id = mailboxes["alerts@contoso.example"];
    assert_eq!(
        system_mailbox(&db, id).await.rate_limit_reserved_percent,
        Some(35)
    );
    import::senders::import(&db.pool, &file("")).await.unwrap();
    assert_eq!(
        system_mailbox(&db, id).await.rate_limit_reserved_percent,
        None,
        "back to MAIL_RATE_LIMIT_RESERVED_PERCENT"
    );
    // The column refuses what the file's check refuses.
    let refused =
        sqlx::query("UPDATE system_mailboxes SET rate_limit_reserved_percent = 91 WHERE id = $1")
            .bind(id)
            .execute(&db.pool)
            .await
            .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("system_mailboxes_reserved_percent_range"),
        "{refused}"
    );
}
