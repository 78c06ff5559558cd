//! Tests of the decorator against a scripted limiter and a scripted inner mailer.

use super::*;
use crate::{
    clock::ManualClock,
    domain::{MailboxAddress, Recipient},
    mailer::{SendReceipt, validate::tests::mail},
    rate_limit::DenyReason,
};
use chrono::{DateTime, TimeZone, Utc};
use std::{
    collections::VecDeque,
    num::NonZeroU32,
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

mod fake_limiter;
use fake_limiter::FakeLimiter;

/// An inner mailer that answers from a script (sent when empty) and counts calls.
#[derive(Debug, Default)]
struct StubMailer {
    answers: Mutex<VecDeque<Result<SendReceipt, MailError>>>,
    calls: AtomicUsize,
}

impl StubMailer {
    fn answering(answers: Vec<Result<SendReceipt, MailError>>) -> Self {
        Self {
            answers: Mutex::new(answers.into()),
            calls: AtomicUsize::new(0),
        }
    }
    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait::async_trait]
impl Mailer for StubMailer {
    async fn send_with(&self, _mail: &OutgoingMail, _attempt: &SendAttempt<'_>) -> MailResult {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let next = self.answers.lock().unwrap().pop_front();
        next.unwrap_or_else(|| {
            Ok(SendReceipt {
                provider_id: Some("stub".into()),
                ..SendReceipt::default()
            })
        })
    }
}

fn limits() -> RateLimits {
    RateLimits {
        per_minute: NonZeroU32::new(25).unwrap(),
        recipients_per_day: NonZeroU32::new(9000).unwrap(),
        reserved_percent: 0,
    }
}

fn at() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 3, 1, 12, 0, 30).unwrap()
}

fn wrap(
    inner: StubMailer,
    limiter: &Arc<FakeLimiter>,
) -> RateLimitedGraphMailer<StubMailer, FakeLimiter> {
    RateLimitedGraphMailer::new(
        inner,
        Arc::clone(limiter),
        limits(),
        Arc::new(ManualClock::new(at())),
    )
}

fn rcpts(prefix: &str, n: usize) -> Vec<Recipient> {
    (0..n)
        .map(|i| Recipient {
            address: format!("{prefix}{i}@example.org"),
            name: None,
        })
        .collect()
}

#[tokio::test]
async fn a_denial_never_calls_the_inner_mailer() {
    let limiter = Arc::new(FakeLimiter::scripted(vec![Ok(Decision::Denied {
        reason: DenyReason::Minute,
        retry_after: Duration::from_millis(29_500),
        booked: true,
    })]));
    let mailer = wrap(StubMailer::default(), &limiter);
    let result = mailer.send(&mail()).await;
    assert_eq!(
        result.map_err(|e| e.kind),
        Err(MailError::from(MailErrorKind::RateLimitExceeded {
            reason: DenyReason::Minute,
            retry_after: Duration::from_millis(29_500),
            booked: true,
        })
        .kind)
    );
    assert_eq!(mailer.inner.calls(), 0);
    assert_eq!(limiter.checks().len(), 1);
    assert!(limiter.releases().is_empty());
}

#[tokio::test]
async fn provider_throttling_keeps_the_reservation() {
    let limiter = Arc::new(FakeLimiter::default());
    let throttled = MailError::throttled(Some(Duration::from_secs(3)));
    let mailer = wrap(
        StubMailer::answering(vec![Err(throttled.clone())]),
        &limiter,
    );
    assert_eq!(
        mailer.send(&mail()).await.map_err(|e| e.kind),
        Err(throttled.kind)
    );
    assert_eq!(mailer.inner.calls(), 1);
    let releases = limiter.releases();
    assert_eq!(releases.len(), 1);
    assert_eq!(releases[0].1, RequestEnd::Done, "a 429 keeps its slot");
    let cooldowns = limiter.cooldowns.lock().unwrap().clone();
    assert_eq!(
        cooldowns,
        [(mail().from, at() + chrono::Duration::seconds(3))],
        "its Retry-After holds the whole mailbox"
    );
}

#[tokio::test]
async fn an_unknown_outcome_keeps_the_budget() {
    let limiter = Arc::new(FakeLimiter::default());
    let unknown = MailError::outcome_unknown("timed out after the request was sent");
    let mailer = wrap(StubMailer::answering(vec![Err(unknown.clone())]), &limiter);
    assert_eq!(
        mailer.send(&mail()).await.map_err(|e| e.kind),
        Err(unknown.kind)
    );
    let releases = limiter.releases();
    assert_eq!(releases.len(), 1);
    assert_eq!(releases[0].1, RequestEnd::Done, "Graph may have sent it");
    assert!(limiter.cooldowns.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_inner_failure_releases_exactly_once_and_returns_the_error() {
    let errors = [
        MailError::transient("boom"),
        MailError::unauthorized("no"),
        MailError::permanent("ErrorInvalidRecipients", "bad"),
    ];
    for error in errors {
        let limiter = Arc::new(FakeLimiter::default());
        let mailer = wrap(StubMailer::answering(vec![Err(error.clone())]), &limiter);
        let m = mail();
        assert_eq!(
            mailer.send(&m).await.map_err(|e| e.kind),
            Err(error.clone().kind)
        );
        assert_eq!(mailer.inner.calls(), 1);
        let releases = limiter.releases();
        assert_eq!(releases.len(), 1, "{error:?}");
        assert_eq!(releases[0].1, RequestEnd::Unsent, "{error:?}");
        assert_eq!(releases[0].0.mailbox, m.from);
        assert_eq!(releases[0].0.recipients, 1);
        assert!(releases[0].0.is_counted());
    }
}

#[tokio::test]
async fn a_success_keeps_the_reservation_and_passes_the_receipt_through() {
    let limiter = Arc::new(FakeLimiter::default());
    let mailer = wrap(StubMailer::default(), &limiter);
    let receipt = mailer.send(&mail()).await.unwrap();
    assert_eq!(receipt.provider_id.as_deref(), Some("stub"));
    let releases = limiter.releases();
    assert_eq!(releases.len(), 1, "the lease ends with the request");
    assert_eq!(releases[0].1, RequestEnd::Done, "the budget stays used");
    let checks = limiter.checks();
    assert_eq!(checks.len(), 1);
    assert_eq!(checks[0].mailbox.as_str(), "events@contoso.example");
    assert_eq!(checks[0].limits, limits());
    assert_eq!(checks[0].now, at());
}

#[tokio::test]
async fn recipients_are_counted_to_plus_cc_plus_bcc() {
    let limiter = Arc::new(FakeLimiter::default());
    let mailer = wrap(StubMailer::default(), &limiter);
    for _ in 0..3 {
        let mut m = mail();
        m.content.to = rcpts("t", 2);
        m.content.cc = rcpts("c", 1);
        m.content.bcc = rcpts("b", 2);
        mailer.send(&m).await.unwrap();
    }
    let per_message: Vec<u32> = limiter.checks().iter().map(|c| c.recipients).collect();
    assert_eq!(per_message, [5, 5, 5]);
    assert_eq!(per_message.iter().sum::<u32>(), 15);
}

#[tokio::test]
async fn too_many_recipients_for_a_whole_day_is_permanent_naming_both_numbers() {
    let mailbox = MailboxAddress::parse("events@contoso.example").unwrap();
    let limiter = Arc::new(FakeLimiter::scripted(vec![Err(
        RateLimitError::RecipientsExceedDayLimit {
            mailbox,
            recipients: 120,
            recipients_per_day: 100,
        },
    )]));
    let mailer = wrap(StubMailer::default(), &limiter);
    let mut m = mail();
    m.content.to = rcpts("t", 120);
    let err = mailer.send(&m).await.unwrap_err();
    let MailErrorKind::Permanent { code, message } = &err.kind else {
        panic!("{err:?}")
    };
    assert_eq!(code, CODE_RECIPIENTS_EXCEED_DAY_LIMIT);
    assert!(
        message.contains("120 recipients") && message.contains("at most 100"),
        "{message}"
    );
    assert_eq!(mailer.inner.calls(), 0);
    assert!(limiter.releases().is_empty());
}

#[tokio::test]
async fn an_invalid_message_costs_no_budget() {
    let limiter = Arc::new(FakeLimiter::default());
    let mailer = wrap(StubMailer::default(), &limiter);
    let mut m = mail();
    m.content.to[0].address = "a@example.org; b@example.org".into();
    assert!(matches!(
        mailer.send(&m).await,
        Err(MailError {
            kind: MailErrorKind::Permanent { .. },
            ..
        })
    ));
    assert!(limiter.checks().is_empty());
    assert_eq!(mailer.inner.calls(), 0);
}

#[tokio::test]
async fn a_message_found_already_sent_gives_this_attempts_budget_back() {
    let limiter = Arc::new(FakeLimiter::default());
    let mailer = wrap(
        StubMailer::answering(vec![Ok(SendReceipt {
            already_sent: true,
            ..SendReceipt::default()
        })]),
        &limiter,
    );
    assert!(mailer.send(&mail()).await.unwrap().already_sent);
    let releases = limiter.releases();
    assert_eq!(releases.len(), 1);
    assert_eq!(
        releases[0].1,
        RequestEnd::Unsent,
        "the earlier attempt's reservation already counted it"
    );
}

#[tokio::test]
async fn an_unconfirmed_check_gives_the_budget_back() {
    let limiter = Arc::new(FakeLimiter::default());
    let unconfirmed = MailError::unconfirmed(Duration::from_secs(5), "still a draft");
    let mailer = wrap(
        StubMailer::answering(vec![Err(unconfirmed.clone())]),
        &limiter,
    );
    assert_eq!(
        mailer.send(&mail()).await.map_err(|e| e.kind),
        Err(unconfirmed.kind)
    );
    assert_eq!(limiter.releases()[0].1, RequestEnd::Unsent);
    assert!(limiter.cooldowns.lock().unwrap().is_empty());
}

/// An inner mailer whose send never ends.
#[derive(Debug)]
struct Hanging;

#[async_trait::async_trait]
impl Mailer for Hanging {
    async fn send_with(&self, _mail: &OutgoingMail, _attempt: &SendAttempt<'_>) -> MailResult {
        std::future::pending().await
    }
}

#[tokio::test]
async fn a_send_dropped_mid_flight_releases_its_lease_as_done() {
    let limiter = Arc::new(FakeLimiter::default());
    let mailer = RateLimitedGraphMailer::new(
        Hanging,
        Arc::clone(&limiter),
        limits(),
        Arc::new(ManualClock::new(at())),
    );
    let cut = tokio::time::timeout(Duration::from_millis(20), mailer.send(&mail())).await;
    assert!(cut.is_err());
    tokio::task::yield_now().await;
    let releases = limiter.releases();
    assert_eq!(releases.len(), 1, "released once, by the guard");
    assert_eq!(releases[0].1, RequestEnd::Done, "the request may have gone");
}

/// An inner mailer that starts a provider request at `at` and never hears back.
#[derive(Debug)]
struct HangingAfterARequest(DateTime<Utc>);

#[async_trait::async_trait]
impl Mailer for HangingAfterARequest {
    async fn send_with(&self, _mail: &OutgoingMail, _attempt: &SendAttempt<'_>) -> MailResult {
        crate::mailer::request_start::mark(self.0);
        std::future::pending().await
    }
}

#[tokio::test]
async fn a_send_dropped_after_its_request_started_holds_its_lease_until_the_request_times_out() {
    let limiter = Arc::new(FakeLimiter::default());
    let started = at() + chrono::Duration::seconds(2);
    let mailer = RateLimitedGraphMailer::new(
        HangingAfterARequest(started),
        Arc::clone(&limiter),
        limits(),
        Arc::new(ManualClock::new(at())),
    )
    .with_request_timeout(Duration::from_secs(30));
    let cut = tokio::time::timeout(Duration::from_millis(20), mailer.send(&mail())).await;
    assert!(cut.is_err());
    tokio::task::yield_now().await;
    let until = started + chrono::Duration::seconds(30);
    assert_eq!(
        *limiter.holds.lock().unwrap(),
        [("hold_until", until), ("cut_off", until)],
        "noted at once, then held in Redis"
    );
    assert!(limiter.releases().is_empty(), "not released");
}

#[tokio::test]
async fn into_inner_returns_the_wrapped_mailer() {
    let limiter = Arc::new(FakeLimiter::default());
    let mailer = wrap(StubMailer::default(), &limiter);
    mailer.send(&mail()).await.unwrap();
    let inner = mailer.inner;
    assert_eq!(inner.calls(), 1);
}
