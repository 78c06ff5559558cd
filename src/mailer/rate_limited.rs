//! `RateLimitedGraphMailer`: the decorator that reserves a place in the sending mailbox's
//! minute and day budgets before the inner Graph mailer sends, and gives it back when the send
//! fails. Wrapper anatomy as in tower: `new`, `inner`, `into_inner`; same [`Mailer`] interface.

use std::{fmt, sync::Arc};

use crate::{
    clock::Clock,
    domain::OutgoingMail,
    events,
    mailer::{MailError, Mailer, SendReceipt, validate::validate},
    rate_limit::{Decision, RateLimitError, RateLimiter, RateLimits},
};

/// `Permanent.code` when a message's recipients alone exceed the mailbox's day budget.
pub const CODE_RECIPIENTS_EXCEED_DAY_LIMIT: &str = "RecipientsExceedDayLimit";

/// Wraps `inner` with the limiter, for one mailbox budget (`limits`).
///
/// `send`: validate locally (a bad message costs no budget) → `check_and_reserve(mail.from,
/// To + Cc + Bcc, limits, clock.now())`:
/// - denied → [`MailError::RateLimitExceeded`] at once; `inner` is not called, nothing sleeps;
/// - [`RateLimitError::RecipientsExceedDayLimit`] → [`MailError::Permanent`] with code
///   [`CODE_RECIPIENTS_EXCEED_DAY_LIMIT`];
/// - allowed → `inner.send`; on success the reservation is kept (that budget was used); on
///   [`MailError::Throttled`] it is kept too (see below); on any other error it is released
///   exactly once (event `mail.rateLimit.released`) and the error returned.
///
/// Why a provider's 429/503 keeps the reservation: the mailbox is over Exchange's limit right
/// now (its rolling 60 s window or its 4 concurrent requests). Giving the slot back would let
/// the next queued message go out at once into the same refusal, and again, turning our minute
/// budget into a retry loop against the provider — measured before this rule: 707 minute 429s
/// in 50 s for one mailbox. Keeping it means at most `per_minute` attempts per UTC minute,
/// refused or not.
pub struct RateLimitedGraphMailer<M: Mailer, L: RateLimiter> {
    inner: M,
    limiter: Arc<L>,
    limits: RateLimits,
    clock: Arc<dyn Clock>,
}

impl<M: Mailer, L: RateLimiter> fmt::Debug for RateLimitedGraphMailer<M, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitedGraphMailer")
            .field("limits", &self.limits)
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<M: Mailer, L: RateLimiter> RateLimitedGraphMailer<M, L> {
    /// Wraps `inner`; `limiter` is the process's shared limiter, `limits` this mailbox's budget,
    /// `clock` the time the limiter buckets by.
    pub fn new(inner: M, limiter: Arc<L>, limits: RateLimits, clock: Arc<dyn Clock>) -> Self {
        Self {
            inner,
            limiter,
            limits,
            clock,
        }
    }

    /// The wrapped mailer.
    pub fn inner(&self) -> &M {
        &self.inner
    }

    /// Unwraps the mailer.
    pub fn into_inner(self) -> M {
        self.inner
    }

    /// The budget this wrapper applies.
    pub fn limits(&self) -> RateLimits {
        self.limits
    }
}

#[async_trait::async_trait]
impl<M: Mailer, L: RateLimiter> Mailer for RateLimitedGraphMailer<M, L> {
    async fn send(&self, mail: &OutgoingMail) -> Result<SendReceipt, MailError> {
        validate(mail)?;
        let recipients = mail.recipient_count();
        let decision = self
            .limiter
            .check_and_reserve(&mail.from, recipients, self.limits, self.clock.now())
            .await;
        let reservation = match decision {
            Ok(Decision::Allowed(reservation)) => reservation,
            Ok(Decision::Denied {
                reason,
                retry_after,
            }) => {
                return Err(MailError::RateLimitExceeded {
                    reason,
                    retry_after,
                });
            }
            Err(RateLimitError::RecipientsExceedDayLimit {
                mailbox,
                recipients,
                recipients_per_day,
            }) => {
                return Err(MailError::Permanent {
                    code: CODE_RECIPIENTS_EXCEED_DAY_LIMIT.to_owned(),
                    message: format!(
                        "the message has {recipients} recipients but mailbox {mailbox} may send to at most {recipients_per_day} recipients per day; split it into smaller messages"
                    ),
                });
            }
            // `validate` already refused it; kept for exhaustiveness.
            Err(e @ RateLimitError::NoRecipients { .. }) => {
                return Err(MailError::Permanent {
                    code: crate::mailer::validate::CODE_NO_RECIPIENTS.to_owned(),
                    message: e.to_string(),
                });
            }
        };
        match self.inner.send(mail).await {
            Ok(receipt) => Ok(receipt),
            Err(error @ MailError::Throttled { .. }) => Err(error),
            Err(error) => {
                self.limiter.release(&reservation).await;
                tracing::info!(
                    event = events::MAIL_RATE_LIMIT_RELEASED,
                    message.id = %mail.id,
                    mailbox = %mail.from,
                    recipients,
                    counted = reservation.is_counted(),
                    error = %error,
                    "gave the reservation back because the send failed"
                );
                Err(error)
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::{
        clock::ManualClock,
        domain::{MailboxAddress, Recipient},
        mailer::validate::tests::mail,
        rate_limit::{DenyReason, Reservation},
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

    /// One `check_and_reserve` call as the fake saw it.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(crate) struct Check {
        pub mailbox: MailboxAddress,
        pub recipients: u32,
        pub limits: RateLimits,
        pub now: DateTime<Utc>,
    }

    /// A limiter that answers from a script (allowing when the script is empty) and records
    /// every call.
    #[derive(Default)]
    pub(crate) struct FakeLimiter {
        pub script: Mutex<VecDeque<Result<Decision, RateLimitError>>>,
        pub checks: Mutex<Vec<Check>>,
        pub releases: Mutex<Vec<Reservation>>,
    }

    impl FakeLimiter {
        pub fn scripted(answers: Vec<Result<Decision, RateLimitError>>) -> Self {
            Self {
                script: Mutex::new(answers.into()),
                ..Self::default()
            }
        }
        pub fn checks(&self) -> Vec<Check> {
            self.checks.lock().unwrap().clone()
        }
        pub fn releases(&self) -> Vec<Reservation> {
            self.releases.lock().unwrap().clone()
        }
    }

    impl RateLimiter for FakeLimiter {
        async fn check_and_reserve(
            &self,
            mailbox: &MailboxAddress,
            recipients: u32,
            limits: RateLimits,
            now: DateTime<Utc>,
        ) -> Result<Decision, RateLimitError> {
            self.checks.lock().unwrap().push(Check {
                mailbox: mailbox.clone(),
                recipients,
                limits,
                now,
            });
            let scripted = self.script.lock().unwrap().pop_front();
            scripted.unwrap_or_else(|| {
                Ok(Decision::Allowed(Reservation {
                    mailbox: mailbox.clone(),
                    recipients,
                    keys: Some((format!("m:{mailbox}"), format!("d:{mailbox}"))),
                }))
            })
        }

        async fn release(&self, reservation: &Reservation) {
            self.releases.lock().unwrap().push(reservation.clone());
        }
    }

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
        async fn send(&self, _mail: &OutgoingMail) -> Result<SendReceipt, MailError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let next = self.answers.lock().unwrap().pop_front();
            next.unwrap_or_else(|| {
                Ok(SendReceipt {
                    provider_id: Some("stub".into()),
                })
            })
        }
    }

    fn limits() -> RateLimits {
        RateLimits {
            per_minute: NonZeroU32::new(25).unwrap(),
            recipients_per_day: NonZeroU32::new(9000).unwrap(),
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
        })]));
        let mailer = wrap(StubMailer::default(), &limiter);
        let result = mailer.send(&mail()).await;
        assert_eq!(
            result,
            Err(MailError::RateLimitExceeded {
                reason: DenyReason::Minute,
                retry_after: Duration::from_millis(29_500)
            })
        );
        assert_eq!(mailer.inner().calls(), 0);
        assert_eq!(limiter.checks().len(), 1);
        assert!(limiter.releases().is_empty());
    }

    #[tokio::test]
    async fn provider_throttling_keeps_the_reservation() {
        let limiter = Arc::new(FakeLimiter::default());
        let throttled = MailError::Throttled {
            retry_after: Some(Duration::from_secs(3)),
        };
        let mailer = wrap(
            StubMailer::answering(vec![Err(throttled.clone())]),
            &limiter,
        );
        assert_eq!(mailer.send(&mail()).await, Err(throttled));
        assert_eq!(mailer.inner().calls(), 1);
        assert!(
            limiter.releases().is_empty(),
            "a 429 keeps the slot it used"
        );
    }

    #[tokio::test]
    async fn an_inner_failure_releases_exactly_once_and_returns_the_error() {
        let errors = [
            MailError::Transient("boom".into()),
            MailError::Unauthorized("no".into()),
            MailError::Permanent {
                code: "ErrorInvalidRecipients".into(),
                message: "bad".into(),
            },
        ];
        for error in errors {
            let limiter = Arc::new(FakeLimiter::default());
            let mailer = wrap(StubMailer::answering(vec![Err(error.clone())]), &limiter);
            let m = mail();
            assert_eq!(mailer.send(&m).await, Err(error.clone()));
            assert_eq!(mailer.inner().calls(), 1);
            let releases = limiter.releases();
            assert_eq!(releases.len(), 1, "{error:?}");
            assert_eq!(releases[0].mailbox, m.from);
            assert_eq!(releases[0].recipients, 1);
            assert!(releases[0].is_counted());
        }
    }

    #[tokio::test]
    async fn a_success_keeps_the_reservation_and_passes_the_receipt_through() {
        let limiter = Arc::new(FakeLimiter::default());
        let mailer = wrap(StubMailer::default(), &limiter);
        let receipt = mailer.send(&mail()).await.unwrap();
        assert_eq!(receipt.provider_id.as_deref(), Some("stub"));
        assert!(limiter.releases().is_empty());
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
            m.to = rcpts("t", 2);
            m.cc = rcpts("c", 1);
            m.bcc = rcpts("b", 2);
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
        m.to = rcpts("t", 120);
        let err = mailer.send(&m).await.unwrap_err();
        let MailError::Permanent { code, message } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(code, CODE_RECIPIENTS_EXCEED_DAY_LIMIT);
        assert!(
            message.contains("120 recipients") && message.contains("at most 100"),
            "{message}"
        );
        assert_eq!(mailer.inner().calls(), 0);
        assert!(limiter.releases().is_empty());
    }

    #[tokio::test]
    async fn an_invalid_message_costs_no_budget() {
        let limiter = Arc::new(FakeLimiter::default());
        let mailer = wrap(StubMailer::default(), &limiter);
        let mut m = mail();
        m.to[0].address = "a@example.org; b@example.org".into();
        assert!(matches!(
            mailer.send(&m).await,
            Err(MailError::Permanent { .. })
        ));
        assert!(limiter.checks().is_empty());
        assert_eq!(mailer.inner().calls(), 0);
    }

    #[tokio::test]
    async fn into_inner_returns_the_wrapped_mailer() {
        let limiter = Arc::new(FakeLimiter::default());
        let mailer = wrap(StubMailer::default(), &limiter);
        mailer.send(&mail()).await.unwrap();
        let inner = mailer.into_inner();
        assert_eq!(inner.calls(), 1);
    }
}
