//! MailProviderService, the claim step, the job handler and lease recovery, with a scripted
//! mailer (no HTTP) against real PostgreSQL and Redis.

use std::time::Duration;

use mail_worker::{
    mailer::MailError,
    rate_limit::DenyReason,
    service::{SendOutcome, spread_ms},
    worker::{claim, queue, queue::SendMessageJob, recovery},
};

use crate::support::{TestApp, app::noon, proxy::Gate, redis_url, spawn_app, wait_until};

#[tokio::test]
async fn a_sent_message_is_sent_once_and_a_duplicate_job_does_nothing() {
    let h = spawn_app().await;
    let id = h.insert(0, 1, "QUEUED").await[0];
    assert_eq!(h.process(id).await, Some(SendOutcome::Sent));
    assert_eq!(h.process(id).await, None, "a duplicate delivery is ignored");
    let (status, attempts, deferrals, last_error, _) = h.row(id).await;
    assert_eq!(
        (status.as_str(), attempts, deferrals, last_error),
        ("SENT", 1, 0, None)
    );
    assert_eq!(h.mailer.sent.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_rate_limit_denial_defers_by_retry_after_plus_spread_without_charging_an_attempt() {
    // Unbooked (fixed-window): retry_after + the FNV spread. Booked (paced): exactly the slot.
    for booked in [false, true] {
        let h = TestApp::builder()
            .script(vec![Err(MailError::RateLimitExceeded {
                reason: DenyReason::Minute,
                retry_after: Duration::from_millis(42_000),
                booked,
            })])
            .spawn()
            .await;
        let id = h.insert(0, 1, "QUEUED").await[0];
        let now = h.clock.now_for_test();
        let outcome = h.process(id).await.unwrap();
        let spread = if booked {
            0
        } else {
            spread_ms(id, 30_000) as i64
        };
        let expected = now + chrono::Duration::milliseconds(42_000 + spread);
        assert!(
            matches!(outcome, SendOutcome::Deferred { until, .. } if until == expected),
            "booked {booked}: {outcome:?}"
        );
        let (status, attempts, deferrals, _, scheduled_on) = h.row(id).await;
        assert_eq!((status.as_str(), attempts, deferrals), ("SCHEDULED", 0, 1));
        assert_eq!(scheduled_on, expected);
    }
}

#[tokio::test]
async fn provider_throttling_honours_retry_after_and_backs_off_without_one() {
    let h = TestApp::builder()
        .script(vec![
            Err(MailError::Throttled {
                retry_after: Some(Duration::from_secs(120)),
            }),
            Err(MailError::Throttled { retry_after: None }),
        ])
        .spawn()
        .await;
    let id = h.insert(0, 1, "QUEUED").await[0];
    let now = h.clock.now_for_test();
    h.process(id).await.unwrap();
    let (_, attempts, deferrals, _, scheduled_on) = h.row(id).await;
    assert_eq!((attempts, deferrals), (0, 1));
    assert!(
        scheduled_on >= now + chrono::Duration::seconds(120),
        "{scheduled_on}"
    );
    h.requeue(id).await;
    h.process(id).await.unwrap();
    let (status, _, deferrals, _, scheduled_on) = h.row(id).await;
    assert_eq!((status.as_str(), deferrals), ("SCHEDULED", 2));
    // Second deferral without Retry-After: backoff(2) = 5–10 s, plus a spread under 30 s.
    let wait = (scheduled_on - now).num_milliseconds();
    assert!((5_000..40_000).contains(&wait), "{wait} ms");
}

#[tokio::test]
async fn transient_failures_retry_with_backoff_then_end_in_error_after_max_attempts() {
    let err = || Err(MailError::Transient("HTTP 502 from Graph".into()));
    let h = TestApp::builder().script(vec![err(), err(), err()]).await;
    let id = h.insert(0, 1, "QUEUED").await[0];
    for attempt in 1..=2 {
        let outcome = h.process(id).await.unwrap();
        assert!(
            matches!(outcome, SendOutcome::Deferred { .. }),
            "attempt {attempt}: {outcome:?}"
        );
        let (status, attempts, deferrals, _, _) = h.row(id).await;
        assert_eq!(
            (status.as_str(), attempts, deferrals),
            ("SCHEDULED", attempt, 0)
        );
        h.requeue(id).await;
    }
    let outcome = h.process(id).await.unwrap();
    let (status, attempts, _, last_error, _) = h.row(id).await;
    assert_eq!((status.as_str(), attempts), ("ERROR", 3));
    let last_error = last_error.unwrap();
    assert!(
        last_error.contains("gave up after 3 attempts") && last_error.contains("HTTP 502"),
        "{last_error}"
    );
    assert_eq!(outcome, SendOutcome::Failed { reason: last_error });
}

#[tokio::test]
async fn permanent_failures_end_in_error_with_the_providers_code() {
    let h = TestApp::builder()
        .script(vec![Err(MailError::Permanent {
            code: "ErrorInvalidRecipients".into(),
            message: "At least one recipient is not valid.".into(),
        })])
        .spawn()
        .await;
    let id = h.insert(0, 1, "QUEUED").await[0];
    h.process(id).await.unwrap();
    let (status, _, _, last_error, _) = h.row(id).await;
    assert_eq!(status, "ERROR");
    assert_eq!(
        last_error.unwrap(),
        "ErrorInvalidRecipients: At least one recipient is not valid."
    );
}

#[tokio::test]
async fn a_malformed_recipient_list_fails_that_message_only() {
    let h = spawn_app().await;
    let id = h.insert(0, 1, "QUEUED").await[0];
    sqlx::query(
        "UPDATE messages SET to_recipients = '[\"just-a-string@example.org\"]' WHERE id = $1",
    )
    .bind(id)
    .execute(&h.db.pool)
    .await
    .unwrap();
    h.process(id).await.unwrap();
    let (status, _, _, last_error, _) = h.row(id).await;
    assert_eq!(status, "ERROR");
    assert!(last_error.unwrap().contains("messages.to_recipients"));
    assert!(h.mailer.sent.lock().unwrap().is_empty());
}

#[tokio::test]
async fn two_replicas_claiming_at_once_never_claim_the_same_row() {
    let h = spawn_app().await;
    let ids = h.insert(0, 150, "SCHEDULED").await;
    let name = h.keys.sub("claim");
    let mut q1 = queue::open(&redis_url(), &name, 16).await.unwrap();
    let mut q2 = q1.clone();
    let (p1, p2) = (h.db.pool.clone(), h.db.pool.clone());
    // batch 100, concurrency 100 → cap 200 QUEUED: both may claim.
    let (a, b) = tokio::join!(
        async move { claim::claim_once(&p1, &mut q1, 100, 100).await.unwrap() },
        async move { claim::claim_once(&p2, &mut q2, 100, 100).await.unwrap() },
    );
    assert_eq!(a + b, 150, "every due row claimed exactly once ({a} + {b})");
    let queued: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM messages WHERE status = 'QUEUED' AND queued_at IS NOT NULL",
    )
    .fetch_one(&h.db.pool)
    .await
    .unwrap();
    assert_eq!(queued, ids.len() as i64);
}

#[tokio::test]
async fn claiming_respects_the_cap_on_queued_messages_and_skips_future_rows() {
    let h = spawn_app().await;
    h.insert(0, 50, "SCHEDULED").await;
    let future = h.insert(0, 1, "SCHEDULED").await[0];
    sqlx::query("UPDATE messages SET scheduled_on = now() + interval '1 hour' WHERE id = $1")
        .bind(future)
        .execute(&h.db.pool)
        .await
        .unwrap();
    let mut q = queue::open(&redis_url(), &h.keys.sub("claim"), 4)
        .await
        .unwrap();
    // concurrency 4 → at most 2 × 4 = 8 QUEUED.
    assert_eq!(
        claim::claim_once(&h.db.pool, &mut q, 100, 4).await.unwrap(),
        8
    );
    assert_eq!(
        claim::claim_once(&h.db.pool, &mut q, 100, 4).await.unwrap(),
        0,
        "cap reached"
    );
    let (status, ..) = h.row(future).await;
    assert_eq!(status, "SCHEDULED");
}

#[tokio::test]
async fn a_failed_push_leaves_the_rows_scheduled() {
    let h = spawn_app().await;
    let ids = h.insert(0, 3, "SCHEDULED").await;
    let proxy = Gate::relaying().await;
    let mut q = queue::open(&proxy.url(), &h.keys.sub("claim"), 4)
        .await
        .unwrap();
    proxy.cut();
    let err = claim::claim_once(&h.db.pool, &mut q, 100, 4)
        .await
        .unwrap_err();
    assert!(matches!(err, claim::ClaimError::Push(_)), "{err}");
    for id in ids {
        let (status, ..) = h.row(id).await;
        assert_eq!(status, "SCHEDULED");
    }
}

#[tokio::test]
async fn stale_queued_and_sending_rows_are_recovered_to_scheduled() {
    let h = spawn_app().await;
    let queued = h.insert(0, 2, "QUEUED").await;
    let sending = h.insert(0, 1, "SENDING").await;
    let fresh = h.insert(0, 1, "QUEUED").await[0];
    sqlx::query("UPDATE messages SET queued_at = now() - interval '10 minutes' WHERE id = ANY($1)")
        .bind(&queued)
        .execute(&h.db.pool)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE messages SET sending_at = now() - interval '20 minutes' WHERE id = ANY($1)",
    )
    .bind(&sending)
    .execute(&h.db.pool)
    .await
    .unwrap();
    let config = mail_worker::config::Config::from_lookup(|_| None)
        .unwrap()
        .worker;
    assert_eq!(
        recovery::recover_once(&h.db.pool, &config).await.unwrap(),
        (2, 1)
    );
    for id in queued.iter().chain(&sending) {
        assert_eq!(h.row(*id).await.0, "SCHEDULED");
    }
    assert_eq!(
        h.row(fresh).await.0,
        "QUEUED",
        "a fresh lease is left alone"
    );
    assert!(
        h.row(sending[0])
            .await
            .3
            .unwrap()
            .contains("outcome unknown")
    );
}

#[tokio::test]
async fn a_job_that_outruns_its_claims_commit_waits_for_it_and_is_sent() {
    let h = spawn_app().await;
    let id = h.insert(0, 1, "SCHEDULED").await[0];
    let mut tx = h.db.pool.begin().await.unwrap();
    let claimed = mail_worker::store::messages::claim_due(&mut tx, 10)
        .await
        .unwrap();
    assert_eq!(claimed, vec![id]);
    mail_worker::store::messages::mark_queued(&mut tx, &claimed)
        .await
        .unwrap();
    // The job is on the queue and a worker takes it before the claim commits.
    let handler = h.handler.clone();
    let job = tokio::spawn(async move {
        handler
            .process(SendMessageJob { message_id: id })
            .await
            .unwrap()
    });
    // Until its backend waits on the claim's row lock.
    wait_until(
        Duration::from_secs(10),
        "the handler waits on a lock",
        async || {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
            .fetch_one(&h.db.pool)
            .await
            .unwrap();
            waiting > 0
        },
    )
    .await;
    assert!(
        !job.is_finished(),
        "the handler waits for the claim's row lock"
    );
    tx.commit().await.unwrap();
    assert_eq!(job.await.unwrap(), Some(SendOutcome::Sent));
    assert_eq!(h.row(id).await.0, "SENT");
}

#[tokio::test]
async fn a_transient_failure_gives_up_by_time_not_by_count() {
    let err = || Err(MailError::Transient("HTTP 500 from Graph".into()));
    let h = TestApp::builder().script(vec![err(), err()]).await;
    let [young, old] = h.insert(0, 2, "QUEUED").await[..] else {
        unreachable!()
    };
    // First tried an hour ago (by the handler's clock): retried, backoff capped.
    // First tried 25 h ago: past MAIL_RETRY_FOR (24 h), it ends ERROR on its 1st attempt here.
    for (id, hours) in [(young, 1), (old, 25)] {
        sqlx::query("UPDATE messages SET first_attempt_at = $2 WHERE id = $1")
            .bind(id)
            .bind(noon() - chrono::Duration::hours(hours))
            .execute(&h.db.pool)
            .await
            .unwrap();
    }
    let outcome = h.process(young).await.unwrap();
    let SendOutcome::Deferred { until, .. } = outcome else {
        panic!("{outcome:?}")
    };
    assert!(until - noon() <= chrono::Duration::minutes(15), "{until}");
    assert_eq!(h.row(young).await.0, "SCHEDULED");
    h.process(old).await.unwrap();
    let (status, attempts, _, last_error, _) = h.row(old).await;
    assert_eq!((status.as_str(), attempts), ("ERROR", 1));
    let last_error = last_error.unwrap();
    assert!(
        last_error.contains("MAIL_RETRY_FOR") && last_error.contains("25h 0m"),
        "{last_error}"
    );
}

#[tokio::test]
async fn refused_credentials_pause_the_sender_instead_of_failing_and_a_permanent_error_still_fails()
{
    let refused = || {
        Err(MailError::Unauthorized(
            "AADSTS7000215: Invalid client secret provided".into(),
        ))
    };
    let h = TestApp::builder()
        .script(vec![
            refused(),
            Err(MailError::Permanent {
                code: "ErrorInvalidRecipients".into(),
                message: "bad".into(),
            }),
        ])
        .await;
    let ids = h.insert(0, 3, "QUEUED").await;
    // The first is tried and refused; the second finds the sender paused and is not tried.
    for &id in &ids[..2] {
        let outcome = h.process(id).await.unwrap();
        assert!(
            matches!(outcome, SendOutcome::Deferred { .. }),
            "{outcome:?}"
        );
        let (status, attempts, deferrals, last_error, scheduled_on) = h.row(id).await;
        assert_eq!((status.as_str(), attempts, deferrals), ("SCHEDULED", 0, 1));
        assert!(
            last_error
                .unwrap()
                .starts_with("sender paused: unauthorized: AADSTS7000215")
        );
        // The first probe: 5 s (+ the spread, under 30 s).
        let wait = (scheduled_on - noon()).num_milliseconds();
        assert!((5_000..35_000).contains(&wait), "{wait}");
    }
    // While paused and before the probe, a message waits without being tried.
    assert_eq!(
        h.mailer.sent.lock().unwrap().len(),
        1,
        "only the first was tried"
    );
    let outcome = h.process(ids[2]).await.unwrap();
    assert!(
        matches!(outcome, SendOutcome::Deferred { .. }),
        "{outcome:?}"
    );
    assert_eq!(
        h.mailer.sent.lock().unwrap().len(),
        1,
        "not tried while paused"
    );
    // At the probe time it is tried: a permanent per-message error still ends ERROR at once.
    h.clock.set(noon() + chrono::Duration::seconds(6));
    h.requeue(ids[2]).await;
    h.process(ids[2]).await.unwrap();
    assert_eq!(h.row(ids[2]).await.0, "ERROR");
    assert_eq!(h.count("ERROR").await, 1);
}
