//! Test doubles, one of each (like lettre's stub transport): [`FakeLimiter`], a limiter that
//! answers from a script and records its calls, and [`ScriptedMailer`] (with
//! [`ScriptedSource`], the `MailerSource` that hands it out for every sender), a mailer that
//! answers from a script and records what it was asked to send.

use std::{
    collections::VecDeque,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
};

use chrono::{DateTime, Utc};
use mail_worker::{
    domain::{MailboxAddress, OutgoingMail, SystemMailbox, Tenant},
    mailer::{MailError, MailResult, Mailer, MailerSource, SendAttempt, SendReceipt},
    rate_limit::{
        Ask, Counted, Decision, RateLimitError, RateLimiter, RateLimits, RequestEnd, Reservation,
    },
};
use uuid::Uuid;

/// A limiter that answers from a script (allowing when empty) and records every call.
#[derive(Default)]
pub struct FakeLimiter {
    script: Mutex<VecDeque<Result<Decision, RateLimitError>>>,
    checks: Mutex<Vec<(MailboxAddress, u32, RateLimits)>>,
    releases: AtomicUsize,
}

impl FakeLimiter {
    /// Every `check_and_reserve` so far: mailbox, recipients, limits.
    pub fn checks(&self) -> Vec<(MailboxAddress, u32, RateLimits)> {
        self.checks.lock().unwrap().clone()
    }

    /// How many reservations were given back (the request surely never reached the provider);
    /// a request that ended `Done` keeps its budget and is not counted.
    pub fn releases(&self) -> usize {
        self.releases.load(Ordering::SeqCst)
    }

    /// The answer to a coming call, after those already scripted.
    pub fn then(&self, answer: Result<Decision, RateLimitError>) {
        self.script.lock().unwrap().push_back(answer);
    }
}

impl RateLimiter for FakeLimiter {
    async fn release(&self, _reservation: &Reservation, end: RequestEnd) {
        if end == RequestEnd::Unsent {
            self.releases.fetch_add(1, Ordering::SeqCst);
        }
    }

    async fn cooldown(&self, _ask: &Ask<'_>, _until: DateTime<Utc>, _now: DateTime<Utc>) {}

    async fn check_and_reserve(
        &self,
        ask: &Ask<'_>,
        _now: DateTime<Utc>,
    ) -> Result<Decision, RateLimitError> {
        self.checks
            .lock()
            .unwrap()
            .push((ask.mailbox.clone(), ask.recipients, ask.limits));
        let scripted = self.script.lock().unwrap().pop_front();
        scripted.unwrap_or_else(|| {
            Ok(Decision::Allowed(Reservation {
                mailbox: ask.mailbox.clone(),
                recipients: ask.recipients,
                counted: Counted::FixedWindow("m".into(), "d".into()),
            }))
        })
    }
}

/// A mailer answering from a script (then `Ok`), recording what it was asked to send.
#[derive(Debug, Default)]
pub struct ScriptedMailer {
    script: Mutex<VecDeque<Result<SendReceipt, MailError>>>,
    /// The ids of the messages it was asked to send, in order.
    pub sent: Mutex<Vec<Uuid>>,
}

impl ScriptedMailer {
    /// A mailer giving `answers` in order, then `Ok`.
    pub fn with(answers: Vec<Result<SendReceipt, MailError>>) -> Arc<Self> {
        Arc::new(Self {
            script: Mutex::new(answers.into()),
            sent: Mutex::default(),
        })
    }
}

#[async_trait::async_trait]
impl Mailer for ScriptedMailer {
    async fn send_with(&self, mail: &OutgoingMail, _attempt: &SendAttempt<'_>) -> MailResult {
        self.sent.lock().unwrap().push(mail.id);
        self.script
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Ok(SendReceipt::default()))
    }
}

/// A `MailerSource` handing out the same [`ScriptedMailer`] for every sender.
pub struct ScriptedSource(pub Arc<ScriptedMailer>);

#[async_trait::async_trait]
impl MailerSource for ScriptedSource {
    async fn mailer_for_tenant(&self, _: &Tenant) -> Result<Arc<dyn Mailer>, MailError> {
        Ok(self.0.clone())
    }
    async fn mailer_for_system_mailbox(
        &self,
        _: &SystemMailbox,
    ) -> Result<Arc<dyn Mailer>, MailError> {
        Ok(self.0.clone())
    }
}
