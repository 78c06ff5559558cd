//! A scripted limiter for the decorator's tests.

use std::{collections::VecDeque, sync::Mutex};

use chrono::{DateTime, Utc};

use crate::{
    domain::MailboxAddress,
    rate_limit::{
        Ask, Counted, Decision, RateLimitError, RateLimiter, RateLimits, RequestEnd, Reservation,
    },
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
    pub releases: Mutex<Vec<(Reservation, RequestEnd)>>,
    pub cooldowns: Mutex<Vec<(MailboxAddress, DateTime<Utc>)>>,
    /// `hold_until` and `cut_off` calls: (which, until).
    pub holds: Mutex<Vec<(&'static str, DateTime<Utc>)>>,
}

impl FakeLimiter {
    pub(crate) fn scripted(answers: Vec<Result<Decision, RateLimitError>>) -> Self {
        Self {
            script: Mutex::new(answers.into()),
            ..Self::default()
        }
    }
    pub(crate) fn checks(&self) -> Vec<Check> {
        self.checks.lock().unwrap().clone()
    }
    pub(crate) fn releases(&self) -> Vec<(Reservation, RequestEnd)> {
        self.releases.lock().unwrap().clone()
    }
}

impl RateLimiter for FakeLimiter {
    async fn check_and_reserve(
        &self,
        ask: &Ask<'_>,
        now: DateTime<Utc>,
    ) -> Result<Decision, RateLimitError> {
        let mailbox = ask.mailbox;
        self.checks.lock().unwrap().push(Check {
            mailbox: mailbox.clone(),
            recipients: ask.recipients,
            limits: ask.limits,
            now,
        });
        let scripted = self.script.lock().unwrap().pop_front();
        scripted.unwrap_or_else(|| {
            Ok(Decision::Allowed(Reservation {
                mailbox: mailbox.clone(),
                recipients: ask.recipients,
                counted: Counted::FixedWindow(format!("m:{mailbox}"), format!("d:{mailbox}")),
            }))
        })
    }

    async fn release(&self, reservation: &Reservation, end: RequestEnd) {
        self.releases
            .lock()
            .unwrap()
            .push((reservation.clone(), end));
    }

    fn hold_until(&self, _reservation: &Reservation, until: DateTime<Utc>) {
        self.holds.lock().unwrap().push(("hold_until", until));
    }

    async fn cut_off(&self, _reservation: &Reservation, until: DateTime<Utc>) {
        self.holds.lock().unwrap().push(("cut_off", until));
    }

    async fn cooldown(&self, ask: &Ask<'_>, until: DateTime<Utc>, _now: DateTime<Utc>) {
        self.cooldowns
            .lock()
            .unwrap()
            .push((ask.mailbox.clone(), until));
    }
}
