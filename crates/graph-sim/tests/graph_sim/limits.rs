//! Exchange's limits: 4 concurrent requests, 30 messages a rolling minute, 10,000 recipients a day, the app's 10-minute quota, the stats.

#[allow(unused_imports)]
use super::*;

#[tokio::test]
async fn five_concurrent_slow_requests_to_one_mailbox_get_four_accepted_and_one_application_throttled()
 {
    let s = Session::start().await;
    s.sim
        .set_latency(Target::mailbox(MAILBOX), Latency::Fixed(1_500))
        .unwrap();
    let body = message(1);
    let requests = (0..5).map(|_| async {
        let started = Instant::now();
        let response = s.send(&body).await;
        let status = response.status();
        let ra = retry_after(&response);
        let text = response.text().await.unwrap();
        (status, ra, text, started.elapsed())
    });
    let answers = futures::future::join_all(requests).await;
    let accepted: Vec<_> = answers
        .iter()
        .filter(|a| a.0 == StatusCode::ACCEPTED)
        .collect();
    let throttled: Vec<_> = answers
        .iter()
        .filter(|a| a.0 == StatusCode::TOO_MANY_REQUESTS)
        .collect();
    assert_eq!(accepted.len(), 4, "{answers:?}");
    assert_eq!(throttled.len(), 1, "{answers:?}");
    let (_, ra, text, elapsed) = throttled[0];
    let body: Value = serde_json::from_str(text).unwrap();
    assert_eq!(body["error"]["code"], "ApplicationThrottled");
    assert_eq!(
        body["error"]["message"],
        "Application is over its MailboxConcurrency limit."
    );
    assert_eq!(ra.as_deref(), Some("1"));
    assert!(
        *elapsed < Duration::from_millis(1_500),
        "refused without waiting: {elapsed:?}"
    );
    assert!(accepted.iter().all(|a| a.3 >= Duration::from_millis(1_500)));
    let stats = s.sim.mailbox_stats(MAILBOX).unwrap();
    assert_eq!(stats.max_concurrent, 4);
    assert_eq!(stats.refused.concurrency, 1);
    assert_eq!(stats.accepted, 4);
}

#[tokio::test]
async fn the_31st_send_within_a_minute_is_refused_until_the_oldest_ages_out() {
    let s = Session::start().await;
    for i in 0..30 {
        let response = s.send_one().await;
        assert_eq!(response.status(), StatusCode::ACCEPTED, "send {i}");
        s.clock.advance(Duration::from_secs(1));
    }
    // 12:00:30 — the 31st within 60 s of the first (12:00:00), which ages out at 12:01:00.
    let response = s.send_one().await;
    assert_eq!(refusal(response).await, throttled("30"));
    s.clock.advance(Duration::from_millis(29_500)); // 12:00:59.5 → 0.5 s left, rounded up to 1
    let response = s.send_one().await;
    assert_eq!(retry_after(&response).as_deref(), Some("1"));
    s.clock.advance(Duration::from_millis(500)); // 12:01:00
    assert_eq!(s.send_one().await.status(), StatusCode::ACCEPTED);
    let stats = s.sim.mailbox_stats(MAILBOX).unwrap();
    assert_eq!(stats.accepted, 31);
    // The second refusal came before the first one's Retry-After: a client that did not wait.
    assert_eq!(stats.refused.minute, 1);
    assert_eq!(stats.refused.retry_after_ignored, 1);
    assert_eq!(stats.max_in_rolling_60s, 30);
    // The other mailbox has its own budget.
    let other = token_for(&s.http, &s.sim, OTHER_TENANT, OTHER_CLIENT, OTHER_SECRET).await;
    assert_eq!(
        send_as(&s.http, &s.sim, &other, OTHER_MAILBOX, &message(1))
            .await
            .status(),
        StatusCode::ACCEPTED
    );
}

#[tokio::test]
async fn by_default_the_31st_message_in_a_minute_is_accepted_and_counted_as_delayed() {
    let s = Session::over(start_with(MailboxLimits::default()).await).await;
    for i in 0..31 {
        let response = s.send_one().await;
        assert_eq!(response.status(), StatusCode::ACCEPTED, "send {i}");
    }
    let stats = s.sim.mailbox_stats(MAILBOX).unwrap();
    assert_eq!(
        (stats.accepted, stats.delayed, stats.refused.minute),
        (31, 1, 0)
    );
    let delayed: Vec<bool> = s.sim.messages().iter().map(|m| m.delayed).collect();
    assert_eq!(delayed.iter().filter(|d| **d).count(), 1);
    assert!(delayed[30]);
}

#[tokio::test]
async fn recipients_over_10000_in_24_hours_get_error_submission_quota_exceeded_until_they_age_out()
{
    let mut s = Session::over(start_refusing_the_day(refusing()).await).await;
    let big = message(500);
    for i in 0..20 {
        let response = s.send(&big).await;
        assert_eq!(response.status(), StatusCode::ACCEPTED, "send {i}");
        s.clock.advance(Duration::from_secs(60));
    }
    // 12:20: 10,000 recipients used; the first 500 leave at 12:00 tomorrow, 23 h 40 min away.
    let response = s.send_one().await;
    assert_eq!(
        refusal(response).await,
        (
            StatusCode::TOO_MANY_REQUESTS,
            Some("85200".into()),
            "ErrorSubmissionQuotaExceeded".into()
        )
    );
    assert_eq!(
        s.sim.mailbox_stats(MAILBOX).unwrap().recipients_last_24h,
        10_000
    );
    s.clock.set(t0() + chrono::Duration::hours(24));
    s.token = self::token(&s.http, &s.sim).await; // the first one expired meanwhile
    assert_eq!(s.send_one().await.status(), StatusCode::ACCEPTED);
    let stats = s.sim.mailbox_stats(MAILBOX).unwrap();
    assert_eq!(stats.recipients_last_24h, 9_501);
    assert_eq!(stats.refused.day, 1);
}

#[tokio::test]
async fn the_10_minute_request_quota_per_app_gets_429_application_throttled() {
    let s = Session::with(|l| l.requests_per_10_minutes = 3).await;
    for _ in 0..3 {
        assert_eq!(s.send_one().await.status(), StatusCode::ACCEPTED);
        s.clock.advance(Duration::from_secs(1));
    }
    // 12:00:03; the first request (12:00:00) ages out at 12:10:00.
    let response = s.send_one().await;
    assert_eq!(refusal(response).await, throttled("597"));
    assert_eq!(
        s.sim.mailbox_stats(MAILBOX).unwrap().refused.request_quota,
        1
    );
}

#[tokio::test]
async fn stats_report_peaks_per_rolling_minute_and_per_utc_minute() {
    let s = Session::with(|l| l.messages_per_minute = 100).await;
    s.clock.set(t0() + chrono::Duration::seconds(40));
    for _ in 0..40 {
        // 12:00:40 … 12:01:19
        assert_eq!(s.send(&message(2)).await.status(), StatusCode::ACCEPTED);
        s.clock.advance(Duration::from_secs(1));
    }
    let stats = s.sim.mailbox_stats(MAILBOX).unwrap();
    assert_eq!(stats.max_in_utc_minute, 20);
    assert_eq!(stats.max_in_rolling_60s, 40);
    assert_eq!(stats.messages_last_60s, 40);
    assert_eq!(stats.recipients_last_24h, 80);
}
