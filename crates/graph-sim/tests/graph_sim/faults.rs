//! Fault injection: scripted answers per mailbox or global, added latency.

#[allow(unused_imports)]
use super::*;

#[tokio::test]
async fn scripted_answers_are_served_in_order_for_their_mailbox() {
    let s = Session::over(start_probing().await).await;
    let at = s.clock.now_plus(Duration::from_secs(2));
    s.sim
        .push_script(
            Target::mailbox(MAILBOX),
            [
                ScriptedAnswer::unavailable(),
                ScriptedAnswer::throttled("2.128"),
                ScriptedAnswer::status(429).with_retry_after_date(at),
                ScriptedAnswer::gateway_timeout_after_delivery(),
                ScriptedAnswer::accepted_with_retry_after("7"),
            ],
        )
        .unwrap();
    let body = message(1);
    let send = || s.send(&body);
    assert_eq!(
        refusal(send().await).await,
        refused(StatusCode::SERVICE_UNAVAILABLE, "ErrorServerBusy")
    );
    assert_eq!(refusal(send().await).await, throttled("2.128"));
    assert_eq!(
        refusal(send().await).await,
        throttled("Mon, 03 Mar 2025 12:00:02 GMT")
    );
    assert_eq!(s.sim.messages().len(), 0, "no message recorded yet");
    assert_eq!(
        refusal(send().await).await,
        refused(StatusCode::GATEWAY_TIMEOUT, "UnknownError")
    );
    assert_eq!(s.sim.messages().len(), 1, "the 504 was delivered anyway");
    let accepted = send().await;
    assert_eq!(accepted.status(), StatusCode::ACCEPTED);
    assert_eq!(retry_after(&accepted).as_deref(), Some("7"));
    assert_eq!(send().await.status(), StatusCode::ACCEPTED);
    assert!(retry_after(&send().await).is_none(), "script used up");
    let statuses: Vec<u16> = s.sim.messages().iter().map(|m| m.answered_status).collect();
    assert_eq!(statuses, vec![504, 202, 202, 202]);
    let stats = s.sim.mailbox_stats(MAILBOX).unwrap();
    assert_eq!(
        (
            stats.refused.scripted,
            stats.scripted_answers,
            stats.accepted
        ),
        (3, 5, 4)
    );
}

pub(crate) trait NowPlus {
    fn now_plus(&self, by: Duration) -> DateTime<Utc>;
}

impl NowPlus for ManualClock {
    fn now_plus(&self, by: Duration) -> DateTime<Utc> {
        use graph_sim::clock::Clock;
        self.now() + chrono::Duration::from_std(by).unwrap()
    }
}

#[tokio::test]
async fn a_global_script_applies_to_any_mailbox_without_its_own() {
    let s = Session::over(start_probing().await).await;
    let other = token_for(&s.http, &s.sim, OTHER_TENANT, OTHER_CLIENT, OTHER_SECRET).await;
    s.sim
        .push_script(
            Target::Global,
            [ScriptedAnswer::unavailable(), ScriptedAnswer::status(500)],
        )
        .unwrap();
    s.sim
        .push_script(Target::mailbox(MAILBOX), [ScriptedAnswer::throttled("3")])
        .unwrap();
    // The mailbox's own script first, then the global one.
    let r = s.send_one().await;
    assert_eq!(refusal(r).await, throttled("3"));
    let r = send_as(&s.http, &s.sim, &other, OTHER_MAILBOX, &message(1)).await;
    assert_eq!(
        refusal(r).await,
        refused(StatusCode::SERVICE_UNAVAILABLE, "ErrorServerBusy")
    );
    let r = s.send_one().await;
    assert_eq!(
        refusal(r).await,
        refused(
            StatusCode::INTERNAL_SERVER_ERROR,
            "ErrorInternalServerError"
        )
    );
    assert_eq!(
        send_as(&s.http, &s.sim, &other, OTHER_MAILBOX, &message(1))
            .await
            .status(),
        StatusCode::ACCEPTED
    );
    assert!(matches!(
        s.sim.push_script(
            Target::mailbox("nobody@contoso.example"),
            [ScriptedAnswer::unavailable()]
        ),
        Err(graph_sim::SimError::UnknownMailbox(_))
    ));
}

#[tokio::test]
async fn added_latency_delays_answers_fixed_or_uniform() {
    let s = Session::start().await;
    let timed = || async {
        let started = Instant::now();
        let status = s.send_one().await.status();
        assert_eq!(status, StatusCode::ACCEPTED);
        started.elapsed()
    };
    s.sim
        .set_latency(Target::Global, Latency::Fixed(300))
        .unwrap();
    assert!(timed().await >= Duration::from_millis(300));
    s.sim
        .set_latency(Target::mailbox(MAILBOX), Latency::Uniform(100, 150))
        .unwrap();
    let elapsed = timed().await;
    assert!(elapsed >= Duration::from_millis(100), "{elapsed:?}");
    s.sim
        .set_latency(Target::mailbox(MAILBOX), Latency::None)
        .unwrap();
    assert!(
        timed().await < Duration::from_millis(300),
        "the mailbox's own setting wins"
    );
    assert!(
        s.sim
            .set_latency(Target::Global, Latency::Uniform(5, 1))
            .is_err()
    );
}
