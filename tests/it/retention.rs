//! Retention (`MAIL_RETENTION`, `mail-worker messages purge`): only finished rows past the
//! cut-off go, with their attachments, never one of the last 24 h, one process at a time, while
//! the daemon claims and sends.

use std::{process::Command, time::Duration};

use mail_worker::{
    daemon::{self, Options},
    store::retention::{self, MIN_RETENTION, Purged},
};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{TestApp, spawn_app, wait_until};

const DAY: Duration = Duration::from_secs(86_400);

/// Inserts `n` rows of `mailbox` in `status`, created `created_ago` and last written (and for
/// `SENT`, sent) `finished_ago` ago, each with `files` attachments; returns their ids.
async fn aged(
    pool: &PgPool,
    mailbox: Uuid,
    status: &str,
    n: i32,
    (created_ago, finished_ago): (Duration, Duration),
    files: i32,
) -> Vec<Uuid> {
    let ids: Vec<Uuid> = sqlx::query_scalar(
        "INSERT INTO messages (id, system_mailbox_id, to_recipients, subject, status, \
                               created_at, updated_at, sent_at, scheduled_on) \
         SELECT gen_random_uuid(), $1, '[{\"address\": \"guest@example.org\"}]', 'old', $2, \
                now() - $3::interval, now() - $4::interval, \
                CASE WHEN $2 = 'SENT' THEN now() - $4::interval END, now() \
         FROM generate_series(1, $5) RETURNING id",
    )
    .bind(mailbox)
    .bind(status)
    .bind(format!("{} seconds", created_ago.as_secs()))
    .bind(format!("{} seconds", finished_ago.as_secs()))
    .bind(n)
    .fetch_all(pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO message_attachments (message_id, position, name, content) \
         SELECT id, p, 'a' || p || '.txt', '\\x00010203' FROM unnest($1::uuid[]) AS id, \
                generate_series(1, $2) AS p",
    )
    .bind(&ids)
    .bind(files)
    .execute(pool)
    .await
    .unwrap();
    ids
}

/// How many of `ids` are still in `messages`, and how many attachments they still have.
async fn left(pool: &PgPool, ids: &[Uuid]) -> (i64, i64) {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM messages WHERE id = ANY($1)), \
                (SELECT count(*) FROM message_attachments WHERE message_id = ANY($1))",
    )
    .bind(ids)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// A stop that never comes.
fn never() -> mail_worker::shutdown::CancellationToken {
    mail_worker::shutdown::CancellationToken::new()
}

async fn purge(pool: &PgPool, older_than: Duration) -> Option<Purged> {
    retention::purge(pool, older_than, Duration::ZERO, never())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_purge_deletes_finished_rows_past_the_cut_off_with_their_attachments_and_nothing_else() {
    let world = spawn_app().await;
    let (pool, mb) = (&world.db.pool, world.mailboxes[0].1);
    let old = (40 * DAY, 40 * DAY);
    // 2,500 old SENT rows: three batches of at most 1,000.
    let sent = aged(pool, mb, "SENT", 2_500, old, 1).await;
    let failed = aged(pool, mb, "ERROR", 30, old, 2).await;
    let cancelled = aged(pool, mb, "ERROR", 20, old, 0).await;
    sqlx::query("UPDATE messages SET last_error = 'cancelled by an operator' WHERE id = ANY($1)")
        .bind(&cancelled)
        .execute(pool)
        .await
        .unwrap();
    // Never finished, however old: kept.
    let scheduled = aged(pool, mb, "SCHEDULED", 10, old, 1).await;
    let sending = aged(pool, mb, "SENDING", 10, old, 1).await;
    // Finished inside the retention (created long before: a row scheduled far ahead): kept.
    let recent = aged(pool, mb, "SENT", 10, (40 * DAY, 10 * DAY), 1).await;
    let recent_error = aged(pool, mb, "ERROR", 10, (40 * DAY, 10 * DAY), 1).await;

    let purged = purge(pool, 30 * DAY)
        .await
        .expect("nobody else holds the lock");
    assert_eq!(
        purged,
        Purged {
            messages: 2_550,
            attachments: 2_500 + 60,
            batches: 3,
            events: 0,
        }
    );
    for (what, ids) in [
        ("SENT", &sent),
        ("ERROR", &failed),
        ("cancelled", &cancelled),
    ] {
        assert_eq!(
            left(pool, ids).await,
            (0, 0),
            "old {what} rows and files gone"
        );
    }
    for (what, ids) in [
        ("SCHEDULED", &scheduled),
        ("SENDING", &sending),
        ("recently SENT", &recent),
        ("recently ERROR", &recent_error),
    ] {
        assert_eq!(
            left(pool, ids).await,
            (10, 10),
            "{what} rows kept with their files"
        );
    }
    assert_eq!(
        purge(pool, 30 * DAY).await,
        Some(Purged {
            messages: 0,
            attachments: 0,
            batches: 1,
            events: 0,
        }),
        "a second round finds nothing"
    );
}

#[tokio::test]
async fn nothing_of_the_last_24_hours_goes_whatever_the_cut_off() {
    let world = spawn_app().await;
    let (pool, mb) = (&world.db.pool, world.mailboxes[0].1);
    let hour = Duration::from_secs(3_600);
    let young = aged(pool, mb, "SENT", 5, (2 * hour, 2 * hour), 1).await;
    let young_error = aged(pool, mb, "ERROR", 5, (23 * hour, 23 * hour), 1).await;
    let day_old = aged(pool, mb, "SENT", 7, (25 * hour, 25 * hour), 1).await;
    // The store clamps: asked for 1 h, it deletes what is past 24 h only.
    assert_eq!(retention::count(pool, hour).await.unwrap().messages, 7);
    let purged = purge(pool, hour).await.unwrap();
    assert_eq!((purged.messages, purged.attachments), (7, 7));
    assert_eq!(left(pool, &day_old).await, (0, 0));
    assert_eq!(left(pool, &young).await, (5, 5));
    assert_eq!(left(pool, &young_error).await, (5, 5));
    assert_eq!(MIN_RETENTION, DAY);
}

#[tokio::test]
async fn replicas_purging_at_once_take_turns_on_the_lock_and_delete_each_row_once() {
    let world = spawn_app().await;
    let (pool, mb) = (&world.db.pool, world.mailboxes[0].1);
    let ids = aged(pool, mb, "SENT", 5_000, (40 * DAY, 40 * DAY), 1).await;

    // While another process holds the lock, a round is skipped and deletes nothing.
    let mut holder = pool.acquire().await.unwrap();
    let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(retention::LOCK_KEY)
        .fetch_one(&mut *holder)
        .await
        .unwrap();
    assert!(got);
    assert_eq!(purge(pool, 30 * DAY).await, None);
    assert_eq!(left(pool, &ids).await.0, 5_000);
    let _: bool = sqlx::query_scalar("SELECT pg_advisory_unlock($1)")
        .bind(retention::LOCK_KEY)
        .fetch_one(&mut *holder)
        .await
        .unwrap();
    drop(holder);

    // Two replicas (their own pools) at once: one deletes everything, the other skips the
    // round or, if it came after, finds nothing.
    let other = mail_worker::store::connect(&world.db.url, 2).await.unwrap();
    let slow = Duration::from_millis(100);
    let (a, b) = tokio::join!(
        retention::purge(pool, 30 * DAY, slow, never()),
        retention::purge(&other, 30 * DAY, slow, never()),
    );
    let rounds = [a.unwrap(), b.unwrap()];
    let deleted: Vec<u64> = rounds.iter().flatten().map(|p| p.messages).collect();
    assert_eq!(deleted.iter().sum::<u64>(), 5_000, "{rounds:?}");
    assert_eq!(
        deleted.iter().filter(|&&n| n > 0).count(),
        1,
        "one replica deleted: {rounds:?}"
    );
    assert_eq!(left(pool, &ids).await, (0, 0));
    // The lock is free again.
    assert!(purge(&other, 30 * DAY).await.is_some());
}

fn mail_worker(db: &TestApp, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_mail-worker"))
        .args(args)
        .env("DATABASE_URL", db.db.url.as_str())
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

fn stdout(out: &std::process::Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[tokio::test]
async fn messages_purge_counts_on_a_dry_run_deletes_otherwise_and_refuses_under_24h() {
    let world = spawn_app().await;
    let (pool, mb) = (&world.db.pool, world.mailboxes[0].1);
    let old = aged(pool, mb, "SENT", 12, (40 * DAY, 40 * DAY), 2).await;
    let kept = aged(pool, mb, "ERROR", 3, (20 * DAY, 20 * DAY), 1).await;

    let dry = mail_worker(
        &world,
        &["messages", "purge", "--older-than", "30d", "--dry-run"],
    );
    assert_eq!(
        stdout(&dry),
        "12 messages (24 attachments) finished more than 30d ago; dry run: nothing deleted"
    );
    assert_eq!(
        left(pool, &old).await,
        (12, 24),
        "a dry run deletes nothing"
    );

    let short = mail_worker(&world, &["messages", "purge", "--older-than", "23h"]);
    assert_eq!(short.status.code(), Some(1));
    let why = String::from_utf8_lossy(&short.stderr);
    assert!(
        why.contains("--older-than 23h: must be at least 24h"),
        "{why}"
    );
    let zero = mail_worker(&world, &["messages", "purge", "--older-than", "0d"]);
    let why = String::from_utf8_lossy(&zero.stderr);
    assert!(
        why.contains("--older-than 0d: must be at least 24h"),
        "{why}"
    );
    let bad = mail_worker(&world, &["messages", "purge", "--older-than", "30"]);
    assert!(
        String::from_utf8_lossy(&bad.stderr)
            .contains("--older-than 30: must be a whole number with a unit")
    );
    assert_eq!(
        left(pool, &old).await,
        (12, 24),
        "a refused purge deletes nothing"
    );

    let done = mail_worker(&world, &["messages", "purge", "--older-than", "30d"]);
    assert_eq!(
        stdout(&done),
        "12 messages deleted (24 attachments, 1 batch), finished more than 30d ago"
    );
    assert_eq!(left(pool, &old).await, (0, 0));
    assert_eq!(left(pool, &kept).await, (3, 3));
    let json = |extra: &[&str]| {
        let args = [
            &["messages", "purge", "--older-than", "15d", "--json"],
            extra,
        ]
        .concat();
        serde_json::from_str::<serde_json::Value>(&stdout(&mail_worker(&world, &args))).unwrap()
    };
    let (dry, done) = (json(&["--dry-run"]), json(&[]));
    for (json, dry_run) in [(&dry, true), (&done, false)] {
        assert_eq!(
            (json["messages"].as_u64(), json["attachments"].as_u64()),
            (Some(3), Some(3))
        );
        assert_eq!(json["dry_run"], dry_run, "{json}");
    }
}

/// The value of the sample line `name` in Prometheus text.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Runs a daemon with `retention` while 10 due rows, created 40 days ago, are claimed and sent;
/// returns `mail_worker_messages_purged_total` once they are `SENT`.
async fn daemon_sends_while_retention_runs(
    world: &TestApp,
    retention: Option<Duration>,
) -> (Vec<Uuid>, f64) {
    let (pool, mb) = (&world.db.pool, world.mailboxes[0].1);
    let due = aged(pool, mb, "SCHEDULED", 10, (40 * DAY, 40 * DAY), 1).await;
    let mut config = world.config.clone();
    config.retention = retention;
    config.metrics_listen = None;
    config.worker.scheduler_interval = Duration::from_millis(100);
    config.shutdown_grace = Duration::from_secs(5);
    let (handle, run) = daemon::start(config, Options::default()).await.unwrap();
    let test = async {
        wait_until(
            Duration::from_secs(60),
            "the 10 old due rows SENT",
            async || {
                let sent: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM messages WHERE id = ANY($1) AND status = 'SENT'",
                )
                .bind(&due)
                .fetch_one(pool)
                .await
                .unwrap();
                sent == 10
            },
        )
        .await;
        if retention.is_some() {
            wait_until(
                Duration::from_secs(60),
                "the first round counted",
                async || {
                    sample(
                        &handle.metrics.encode(),
                        "mail_worker_messages_purged_total",
                    )
                    .is_some_and(|n| n > 0.0)
                },
            )
            .await;
        }
        let purged = sample(
            &handle.metrics.encode(),
            "mail_worker_messages_purged_total",
        );
        handle.stop();
        purged.expect("the metric is always exported")
    };
    let (result, purged) = tokio::join!(run, test);
    result.expect("the daemon stops cleanly");
    assert_eq!(
        left(pool, &due).await,
        (10, 10),
        "sent rows are just finished: kept"
    );
    (due, purged)
}

#[tokio::test]
async fn the_daemon_deletes_expired_rows_while_it_claims_and_counts_them() {
    let world = spawn_app().await;
    let (pool, mb) = (&world.db.pool, world.mailboxes[0].1);
    let expired = aged(pool, mb, "SENT", 3_000, (40 * DAY, 40 * DAY), 1).await;
    let failed = aged(pool, mb, "ERROR", 40, (40 * DAY, 31 * DAY), 1).await;
    let kept = aged(pool, mb, "SENT", 20, (40 * DAY, 29 * DAY), 1).await;
    let (_, purged) = daemon_sends_while_retention_runs(&world, Some(30 * DAY)).await;
    assert_eq!(purged, 3_040.0, "mail_worker_messages_purged_total");
    assert_eq!(left(pool, &expired).await, (0, 0));
    assert_eq!(left(pool, &failed).await, (0, 0));
    assert_eq!(left(pool, &kept).await, (20, 20));
}

#[tokio::test]
async fn retention_off_deletes_nothing() {
    let world = spawn_app().await;
    let (pool, mb) = (&world.db.pool, world.mailboxes[0].1);
    let old = aged(pool, mb, "SENT", 50, (400 * DAY, 400 * DAY), 1).await;
    let (_, purged) = daemon_sends_while_retention_runs(&world, None).await;
    assert_eq!(purged, 0.0);
    assert_eq!(left(pool, &old).await, (50, 50));
}
