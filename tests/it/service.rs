//! MailProviderService, the claim step, the handler and lease recovery, with a scripted
//! mailer (no HTTP) against real PostgreSQL and Redis.

use std::time::Duration;

use mail_worker::{
    mailer::{MailError, MailErrorKind},
    rate_limit::DenyReason,
    service::{SendOutcome, spread_ms},
    worker::{claim, recovery},
};

use crate::support::{TestApp, app::noon, spawn_app};

#[tokio::test]
async fn a_sent_message_is_sent_once_and_a_duplicate_job_does_nothing() {
    let h = spawn_app().await;
    let id = h.insert(0, 1, "SCHEDULED").await[0];
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
            .script(vec![Err(MailErrorKind::RateLimitExceeded {
                reason: DenyReason::Minute,
                retry_after: Duration::from_millis(42_000),
                booked,
            }
            .into())])
            .spawn()
            .await;
        let id = h.insert(0, 1, "SCHEDULED").await[0];
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
            Err(MailError::throttled(Some(Duration::from_secs(120)))),
            Err(MailError::throttled(None)),
        ])
        .spawn()
        .await;
    let id = h.insert(0, 1, "SCHEDULED").await[0];
    let now = h.clock.now_for_test();
    h.process(id).await.unwrap();
    let (_, attempts, deferrals, _, scheduled_on) = h.row(id).await;
    assert_eq!((attempts, deferrals), (0, 1));
    assert!(
        scheduled_on >= now + chrono::Duration::seconds(120),
        "{scheduled_on}"
    );
    h.process(id).await.unwrap();
    let (status, _, deferrals, _, scheduled_on) = h.row(id).await;
    assert_eq!((status.as_str(), deferrals), ("SCHEDULED", 2));
    // Second deferral without Retry-After: backoff(2) = 5–10 s, plus a spread under 30 s.
    let wait = (scheduled_on - now).num_milliseconds();
    assert!((5_000..40_000).contains(&wait), "{wait} ms");
}

/// Asserts message `id` ended `ERROR` after `attempts` attempts; returns its `last_error`.
async fn ended_in_error(h: &TestApp, id: uuid::Uuid, attempts: i32) -> String {
    let (status, tried, _, last_error, _) = h.row(id).await;
    assert_eq!((status.as_str(), tried), ("ERROR", attempts));
    last_error.expect("an ERROR row says why")
}

#[tokio::test]
async fn transient_failures_retry_with_backoff_then_end_in_error_after_max_attempts() {
    let err = || Err(MailError::transient("HTTP 502 from Graph"));
    let h = TestApp::builder().script(vec![err(), err(), err()]).await;
    let id = h.insert(0, 1, "SCHEDULED").await[0];
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
    }
    let outcome = h.process(id).await.unwrap();
    let last_error = ended_in_error(&h, id, 3).await;
    assert!(
        last_error.contains("gave up after 3 attempts") && last_error.contains("HTTP 502"),
        "{last_error}"
    );
    assert_eq!(outcome, SendOutcome::Failed { reason: last_error });
}

#[tokio::test]
async fn permanent_failures_end_in_error_with_the_providers_code() {
    let h = TestApp::builder()
        .script(vec![Err(MailError::permanent(
            "ErrorInvalidRecipients",
            "At least one recipient is not valid.",
        ))])
        .spawn()
        .await;
    let id = h.insert(0, 1, "SCHEDULED").await[0];
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
    let id = h.insert(0, 1, "SCHEDULED").await[0];
    h.execute(
        "UPDATE messages SET to_recipients = '[\"just-a-string@example.org\"]' WHERE id = $1",
        id,
    )
    .await;
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
    // 80 slots + 20 prefetch each: room for 100 rows per replica.
    let (s1, s2) = (claim::Slots::new(80), claim::Slots::new(80));
    let round = || claim::SenderRound::new(std::time::Duration::from_millis(250));
    let (mut r1, mut r2) = (round(), round());
    let (a, b) = tokio::join!(
        claim::claim_for_free_slots(&h.db.pool, &s1, &mut r1, 100),
        claim::claim_for_free_slots(&h.db.pool, &s2, &mut r2, 100),
    );
    let (a, b) = (a.unwrap().0, b.unwrap().0);
    assert_eq!(
        a.len() + b.len(),
        150,
        "every due row claimed ({} + {})",
        a.len(),
        b.len()
    );
    let mut claimed: Vec<_> = a.iter().chain(&b).map(|c| c.message.id).collect();
    claimed.sort();
    claimed.dedup();
    assert_eq!(claimed.len(), 150, "none claimed twice");
    let sending: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM messages WHERE status = 'SENDING' AND sending_at IS NOT NULL \
         AND attempts = 1",
    )
    .fetch_one(&h.db.pool)
    .await
    .unwrap();
    assert_eq!(sending, ids.len() as i64, "claimed straight to SENDING");
}

#[tokio::test]
async fn a_replica_claims_only_for_its_own_free_slots_and_skips_future_rows() {
    let h = spawn_app().await;
    h.insert(0, 50, "SCHEDULED").await;
    let future = h.insert(0, 1, "SCHEDULED").await[0];
    sqlx::query("UPDATE messages SET scheduled_on = now() + interval '1 hour' WHERE id = $1")
        .bind(future)
        .execute(&h.db.pool)
        .await
        .unwrap();
    // 4 worker slots + a prefetch of 1.
    let mine = claim::Slots::new(4);
    let mut round = claim::SenderRound::new(std::time::Duration::from_millis(250));
    assert_eq!((mine.free(), mine.prefetch()), (5, 1));
    let (first, room) = claim::claim_for_free_slots(&h.db.pool, &mine, &mut round, 100)
        .await
        .unwrap();
    assert_eq!((first.len(), room), (5, 5), "its free room, not the batch");
    assert_eq!(mine.free(), 0, "held while they are claimed");
    // Another replica is not held back by this one's claimed rows.
    let other = claim::Slots::new(4);
    let mut their_round = claim::SenderRound::new(std::time::Duration::from_millis(250));
    let (theirs, _) = claim::claim_for_free_slots(&h.db.pool, &other, &mut their_round, 100)
        .await
        .unwrap();
    assert_eq!(theirs.len(), 5);
    // Two of the first replica's sends finish: it claims for those two slots only.
    let mut first = first;
    first.truncate(3);
    assert_eq!(mine.free(), 2);
    let (again, room) = claim::claim_for_free_slots(&h.db.pool, &mine, &mut round, 100)
        .await
        .unwrap();
    assert_eq!((again.len(), room), (2, 2));
    assert_eq!(h.count("SENDING").await, 12);
    let (status, ..) = h.row(future).await;
    assert_eq!(status, "SCHEDULED", "not due: never claimed");
    // A batch smaller than the room caps one claim.
    drop((first, again, theirs));
    let (capped, room) = claim::claim_for_free_slots(&h.db.pool, &mine, &mut round, 3)
        .await
        .unwrap();
    assert_eq!((capped.len(), room), (3, 3));
}

#[tokio::test]
async fn claims_go_round_the_senders_so_a_backlog_never_delays_another_mailbox() {
    let h = TestApp::builder().mailboxes(3).await;
    h.insert(0, 60, "SCHEDULED").await;
    let later = [
        h.insert(1, 4, "SCHEDULED").await,
        h.insert(2, 4, "SCHEDULED").await,
    ];
    let slots = claim::Slots::new(100);
    let mut round = claim::SenderRound::new(std::time::Duration::from_secs(3600));
    let per_mailbox = |claimed: &[claim::Claimed]| {
        let mut n = [0; 3];
        for c in claimed {
            let at = h.mailboxes.iter().position(|(_, id)| {
                c.message.sender == mail_worker::store::messages::SenderRef::SystemMailbox(*id)
            });
            n[at.unwrap()] += 1;
        }
        n
    };
    // An equal share of a claim of 6 each, the backlog's oldest sender first.
    let (first, _) = claim::claim_for_free_slots(&h.db.pool, &slots, &mut round, 6)
        .await
        .unwrap();
    assert_eq!(per_mailbox(&first), [2, 2, 2]);
    // The next claims go on round the same senders until the others are drained.
    let (second, _) = claim::claim_for_free_slots(&h.db.pool, &slots, &mut round, 6)
        .await
        .unwrap();
    assert_eq!(per_mailbox(&second), [2, 2, 2]);
    for id in later.iter().flatten() {
        assert_eq!(h.row(*id).await.0, "SENDING", "not kept behind the backlog");
    }
    let (third, _) = claim::claim_for_free_slots(&h.db.pool, &slots, &mut round, 6)
        .await
        .unwrap();
    assert_eq!(
        per_mailbox(&third),
        [6, 0, 0],
        "the backlog takes what the others leave"
    );
}

#[tokio::test]
async fn a_message_and_its_attachments_come_back_from_the_claim_in_position_order() {
    let h = spawn_app().await;
    let id = h.insert(0, 1, "SCHEDULED").await[0];
    for (position, name) in [(1, "b.txt"), (0, "a.txt")] {
        sqlx::query(
            "INSERT INTO message_attachments (message_id, position, name, content_type, content) \
             VALUES ($1, $2, $3, 'text/plain', $4)",
        )
        .bind(id)
        .bind(position)
        .bind(name)
        .bind(name.as_bytes())
        .execute(&h.db.pool)
        .await
        .unwrap();
    }
    let claimed = mail_worker::store::messages::claim_due(&h.db.pool, 10)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    let attachments = &claimed[0].content.as_ref().unwrap().attachments;
    let names: Vec<&str> = attachments.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["a.txt", "b.txt"]);
    assert_eq!(attachments[1].content, b"b.txt");
    assert_eq!(claimed[0].attempts, 1);
}

#[tokio::test]
async fn stale_sending_rows_are_recovered_to_scheduled() {
    let h = spawn_app().await;
    let sending = h.insert(0, 1, "SENDING").await;
    let fresh = h.insert(0, 1, "SENDING").await[0];
    sqlx::query(
        "UPDATE messages SET sending_at = now() - CASE WHEN id = ANY($1) \
             THEN interval '20 minutes' ELSE interval '0' END",
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
        1
    );
    assert_eq!(h.row(sending[0]).await.0, "SCHEDULED");
    assert_eq!(
        h.row(fresh).await.0,
        "SENDING",
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
async fn a_transient_failure_gives_up_by_time_not_by_count() {
    let err = || Err(MailError::transient("HTTP 500 from Graph"));
    let h = TestApp::builder().script(vec![err(), err()]).await;
    let [young, old] = h.insert(0, 2, "SCHEDULED").await[..] else {
        unreachable!()
    };
    // First tried an hour ago (by PostgreSQL's clock, which `first_attempt_at` is in): retried,
    // backoff capped. First tried 25 h ago: past MAIL_RETRY_FOR (24 h), it ends ERROR on its
    // 1st attempt here.
    for (id, hours) in [(young, 1), (old, 25)] {
        sqlx::query(
            "UPDATE messages SET first_attempt_at = now() - make_interval(hours => $2) WHERE id = $1",
        )
        .bind(id)
        .bind(hours)
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
    let last_error = ended_in_error(&h, old, 1).await;
    assert!(
        last_error.contains("MAIL_RETRY_FOR") && last_error.contains("25h 0m"),
        "{last_error}"
    );
}

#[tokio::test]
async fn refused_credentials_pause_the_sender_instead_of_failing_and_a_permanent_error_still_fails()
{
    let refused = || {
        Err(MailError::unauthorized(
            "AADSTS7000215: Invalid client secret provided",
        ))
    };
    let h = TestApp::builder()
        .script(vec![
            refused(),
            Err(MailError::permanent("ErrorInvalidRecipients", "bad")),
        ])
        .await;
    let ids = h.insert(0, 3, "SCHEDULED").await;
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
    h.process(ids[2]).await.unwrap();
    assert_eq!(h.row(ids[2]).await.0, "ERROR");
    assert_eq!(h.count("ERROR").await, 1);
}
