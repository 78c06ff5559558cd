//! The in-process pacer used while the limiter's Redis is unreachable (bounded fail-open): each
//! process paces each mailbox at its per-minute limit ÷ `MAIL_RATE_LIMIT_FAIL_OPEN_REPLICAS`,
//! spaced as the `paced` slots are, and honours the last cooldown it saw. Mail keeps flowing
//! while Redis is down, but no faster than the budget (with the replica count set right).

use std::{
    collections::HashMap,
    num::NonZeroU32,
    sync::{Mutex, PoisonError},
    time::Duration,
};

use chrono::{DateTime, Utc};

use super::{Ask, Decision, DenyReason, Reservation, epoch_ms, paced::spacing_ms};
use crate::domain::MailboxAddress;

#[derive(Debug, Default, Clone, Copy)]
struct Pace {
    /// The next free local slot (ms since the epoch).
    tat: i64,
    /// A cooldown seen by this process (ms since the epoch).
    cool: i64,
}

/// Per-mailbox local pacing (see the module docs).
#[derive(Debug)]
pub(crate) struct LocalPacer {
    replicas: NonZeroU32,
    mailboxes: Mutex<HashMap<MailboxAddress, Pace>>,
}

impl LocalPacer {
    pub(crate) fn new(replicas: NonZeroU32) -> Self {
        Self {
            replicas,
            mailboxes: Mutex::new(HashMap::new()),
        }
    }

    /// Allowed (uncounted) when the mailbox's local slot is free, else denied until it is.
    pub(crate) fn decide(&self, ask: &Ask<'_>, now: DateTime<Utc>) -> Decision {
        let now_ms = epoch_ms(now);
        let spacing = i64::try_from(spacing_ms(ask.limits.per_minute.get()))
            .unwrap_or(i64::MAX)
            .saturating_mul(i64::from(self.replicas.get()));
        let mut mailboxes = self
            .mailboxes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let pace = mailboxes.entry(ask.mailbox.clone()).or_default();
        let wait = |until: i64| Duration::from_millis(u64::try_from(until - now_ms).unwrap_or(1));
        if pace.cool > now_ms {
            return Decision::Denied {
                reason: DenyReason::Cooldown,
                retry_after: wait(pace.cool),
                booked: false,
            };
        }
        if pace.tat > now_ms {
            return Decision::Denied {
                reason: DenyReason::Minute,
                retry_after: wait(pace.tat),
                booked: false,
            };
        }
        pace.tat = now_ms + spacing;
        Decision::Allowed(Reservation::uncounted(ask.mailbox.clone(), ask.recipients))
    }

    /// Remembers a cooldown, for the calls that fail open.
    pub(crate) fn cooldown(&self, mailbox: &MailboxAddress, until: DateTime<Utc>) {
        let mut mailboxes = self
            .mailboxes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let pace = mailboxes.entry(mailbox.clone()).or_default();
        pace.cool = pace.cool.max(epoch_ms(until));
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::rate_limit::RateLimits;

    #[test]
    fn paces_each_mailbox_at_its_share_of_the_limit() {
        let pacer = LocalPacer::new(NonZeroU32::new(2).unwrap());
        let mailbox = MailboxAddress::parse("a@contoso.example").unwrap();
        let other = MailboxAddress::parse("b@contoso.example").unwrap();
        let limits = RateLimits {
            per_minute: NonZeroU32::new(60).unwrap(),
            recipients_per_day: NonZeroU32::new(100).unwrap(),
        };
        let ask = |m| Ask {
            message_id: uuid::Uuid::nil(),
            mailbox: m,
            tenant: "contoso.example",
            recipients: 1,
            limits,
            tenant_budget: None,
        };
        let t0 = Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap();
        let mut allowed = 0;
        for ms in 0..60_000 {
            let now = t0 + chrono::Duration::milliseconds(ms);
            if matches!(pacer.decide(&ask(&mailbox), now), Decision::Allowed(_)) {
                allowed += 1;
            }
        }
        // 60 a minute shared by 2 replicas, spaced (60 s + 2 s) / 60 × 2 apart: 30 in 60 s.
        assert_eq!(allowed, 30);
        assert!(matches!(
            pacer.decide(&ask(&other), t0),
            Decision::Allowed(_)
        ));
        pacer.cooldown(&other, t0 + chrono::Duration::seconds(300));
        let Decision::Denied {
            reason,
            retry_after,
            ..
        } = pacer.decide(&ask(&other), t0 + chrono::Duration::seconds(10))
        else {
            panic!("a cooldown holds the mailbox");
        };
        assert_eq!(
            (reason, retry_after),
            (DenyReason::Cooldown, Duration::from_secs(290))
        );
    }
}
