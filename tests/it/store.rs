//! The schema: migrations and the checks producers rely on.

use crate::support::TestDb;

#[tokio::test]
async fn migrations_apply_to_a_fresh_database_and_a_second_run_is_a_noop() {
    let db = TestDb::new().await;
    let applied = db.rows_in("_sqlx_migrations").await;
    assert_eq!(
        applied as usize,
        mail_worker::store::MIGRATOR.iter().count()
    );
    mail_worker::store::migrate(&db.url).await.unwrap();
    let again = db.rows_in("_sqlx_migrations").await;
    assert_eq!(again, applied);
    let columns: Vec<String> = sqlx::query_scalar(
        "SELECT column_name::text FROM information_schema.columns WHERE table_name = 'messages' ORDER BY ordinal_position",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    for expected in [
        "id",
        "tenant_id",
        "system_mailbox_id",
        "to_recipients",
        "cc_recipients",
        "bcc_recipients",
        "subject",
        "body_content_type",
        "body",
        "headers",
        "status",
        "scheduled_on",
        "attempts",
        "deferrals",
        "last_error",
        "queued_at",
        "sending_at",
        "sent_at",
        "created_at",
        "updated_at",
    ] {
        assert!(
            columns.iter().any(|c| c == expected),
            "messages.{expected} missing: {columns:?}"
        );
    }
    let partial: String =
        sqlx::query_scalar("SELECT indexdef FROM pg_indexes WHERE indexname = 'messages_due_v2'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(
        partial.contains("(scheduled_on) INCLUDE (wait_reason)") && partial.contains("'SCHEDULED'"),
        "{partial}"
    );
}

async fn sender_ids(db: &TestDb) -> (uuid::Uuid, uuid::Uuid) {
    let tenant: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO tenants (name, mail_provider, sender_address, sendgrid_api_key) VALUES ('t', 'sendgrid', 'news@t.example', 'env:K') RETURNING id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let mailbox: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO system_mailboxes (address, graph_tenant_id, graph_client_id, graph_client_secret) VALUES ('ops@t.example', 't.example', 'c', 'env:S') RETURNING id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    (tenant, mailbox)
}

fn constraint_of(err: sqlx::Error) -> String {
    match err {
        sqlx::Error::Database(e) => e.constraint().unwrap_or_default().to_owned(),
        other => panic!("expected a constraint violation, got {other}"),
    }
}

#[tokio::test]
async fn checks_reject_both_or_neither_sender_unknown_status_and_non_positive_limits() {
    let db = TestDb::new().await;
    let (tenant, mailbox) = sender_ids(&db).await;
    let insert = "INSERT INTO messages (id, tenant_id, system_mailbox_id, status) VALUES (gen_random_uuid(), $1, $2, $3)";

    for (case, tenant_id, mailbox_id, status, constraint) in [
        (
            "both",
            Some(tenant),
            Some(mailbox),
            "SCHEDULED",
            "messages_exactly_one_sender",
        ),
        (
            "neither",
            None,
            None,
            "SCHEDULED",
            "messages_exactly_one_sender",
        ),
        (
            "status",
            Some(tenant),
            None,
            "PENDING",
            "messages_status_check",
        ),
    ] {
        let refused = sqlx::query(insert)
            .bind(tenant_id)
            .bind(mailbox_id)
            .bind(status)
            .execute(&db.pool)
            .await;
        assert_eq!(constraint_of(refused.unwrap_err()), constraint, "{case}");
    }
    let ok = sqlx::query(insert)
        .bind(None::<uuid::Uuid>)
        .bind(Some(mailbox))
        .bind("SCHEDULED")
        .execute(&db.pool)
        .await;
    assert_eq!(ok.unwrap().rows_affected(), 1);

    for (column, value) in [
        ("rate_limit_per_minute", 0),
        ("rate_limit_recipients_per_day", -1),
    ] {
        let sql = format!("UPDATE system_mailboxes SET {column} = $1 WHERE id = $2");
        let err = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(value)
            .bind(mailbox)
            .execute(&db.pool)
            .await
            .unwrap_err();
        assert_eq!(
            constraint_of(err),
            format!("system_mailboxes_{column}_check")
        );
    }
    let graph_without_secret = sqlx::query(
        "INSERT INTO tenants (name, mail_provider, sender_address, graph_tenant_id, graph_client_id) VALUES ('g', 'microsoft-graph', 'a@g.example', 'g', 'c')",
    )
    .execute(&db.pool)
    .await;
    assert_eq!(
        constraint_of(graph_without_secret.unwrap_err()),
        "tenants_credentials_match_provider"
    );
}
