//! The in-process pacer used while the limiter's Redis is unreachable (bounded fail-open): each
//! process paces each mailbox at its per-minute limit ÷ max(the live replicas the heartbeat
//! counted, `MAIL_RATE_LIMIT_FAIL_OPEN_REPLICAS`),
//! spaced as the `paced` slots are, honours the last cooldown it saw, and keeps to its share of
//! both budgets as far as it knows them: in any 60 s its own sends (counted by Redis before the
//! outage, and made while failing open) stay within its share of L, and its fail-open
//! recipients within its share of what the mailbox's 24 h window had left when Redis last
//! answered. What it sends while failing open is kept ([`LocalPacer::take_pending`]) until it
//! has been added to Redis's windows.
//!
//! Times are ms on the limiter's clock (Redis's, as last seen; see `MailRateLimiter`).

use std::{
    collections::{HashMap, VecDeque},
    num::NonZeroU32,
    sync::{Mutex, PoisonError},
    time::Duration,
};

use super::{
    Ask, Decision, DenyReason, LiveReplicas, Reservation, paced::FailOpenSend, paced::spacing_ms,
};
use crate::domain::MailboxAddress;

/// The rolling minute, ms.
const MINUTE_MS: i64 = 60_000;
/// The rolling day, ms.
const DAY_MS: i64 = 86_400_000;
/// A fail-open denial by the day budget comes back after this: the process cannot know when
/// the window frees (Redis knows), and Redis may answer by then.
pub(crate) const DAY_RETRY: Duration = Duration::from_secs(60);

#[derive(Debug, Default)]
struct Pace {
    /// The next free local slot.
    tat: i64,
    /// A cooldown seen by this process.
    cool: i64,
    /// The mailbox's recipients in its 24 h window as Redis last reported them.
    known_total: u32,
    /// This process's sends counted by Redis in the last 60 s.
    counted: VecDeque<i64>,
    /// Sends made while failing open, not yet added to Redis.
    pending: Vec<FailOpenSend>,
}

impl Pace {
    fn sent_since(&self, since: i64) -> usize {
        self.counted.iter().filter(|at| **at > since).count()
            + self.pending.iter().filter(|s| s.at_ms > since).count()
    }
}

/// Per-mailbox local pacing (see the module docs).
#[derive(Debug)]
pub(crate) struct LocalPacer {
    /// The lower bound, `MAIL_RATE_LIMIT_FAIL_OPEN_REPLICAS`.
    replicas: NonZeroU32,
    /// The live replicas the heartbeat counted (0: not known).
    live: LiveReplicas,
    mailboxes: Mutex<HashMap<MailboxAddress, Pace>>,
}

impl LocalPacer {
    pub(crate) fn new(replicas: NonZeroU32) -> Self {
        Self {
            replicas,
            live: LiveReplicas::new(),
            mailboxes: Mutex::new(HashMap::new()),
        }
    }

    /// Shares the budgets among the live replicas `live` counts too (when more than the
    /// configured lower bound).
    pub(crate) fn share_with(&mut self, live: LiveReplicas) {
        self.live = live;
    }

    /// Among how many replicas the budgets are shared: max(live, the configured bound).
    pub(crate) fn replicas(&self) -> u32 {
        self.replicas.get().max(self.live.get())
    }

    /// `f` on the mailbox's pace (created on first use; the address is cloned only then: this
    /// runs on every decision).
    fn with<T>(&self, mailbox: &MailboxAddress, f: impl FnOnce(&mut Pace) -> T) -> T {
        let mut mailboxes = self
            .mailboxes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(pace) = mailboxes.get_mut(mailbox) {
            return f(pace);
        }
        f(mailboxes.entry(mailbox.clone()).or_default())
    }

    /// Allowed (uncounted, and kept for recording) when the mailbox's local slot is free and
    /// this process's shares of the minute and the day have room, else denied until then.
    /// `ledger`: the recipients the send history (PostgreSQL) holds for the mailbox's last
    /// 24 h, every replica's sends; the day share is taken from what is left after the larger
    /// of it (this process's fail-open sends taken out: they count as its own) and the total
    /// Redis last reported, which may be stale (another replica sent since, or a reply that
    /// came too late said the day was full).
    pub(crate) fn decide(&self, ask: &Ask<'_>, now_ms: i64, ledger: Option<u32>) -> Decision {
        let shared_by = self.replicas();
        let replicas = i64::from(shared_by);
        let spacing = i64::try_from(spacing_ms(ask.limits.per_minute.get()))
            .unwrap_or(i64::MAX)
            .saturating_mul(replicas);
        let minute_share = (ask.limits.per_minute.get() / shared_by).max(1) as usize;
        let per_day = ask.limits.recipients_per_day.get();
        let wait = |until: i64| Duration::from_millis(u64::try_from(until - now_ms).unwrap_or(1));
        let denied = |reason, retry_after| Decision::Denied {
            reason,
            retry_after,
            booked: false,
        };
        self.with(ask.mailbox, |pace| {
            if pace.cool > now_ms {
                return denied(DenyReason::Cooldown, wait(pace.cool));
            }
            if pace.tat > now_ms {
                return denied(DenyReason::Minute, wait(pace.tat));
            }
            pace.counted.retain(|at| *at > now_ms - MINUTE_MS);
            if pace.sent_since(now_ms - MINUTE_MS) >= minute_share {
                let oldest = pace
                    .counted
                    .iter()
                    .chain(pace.pending.iter().map(|s| &s.at_ms))
                    .filter(|at| **at > now_ms - MINUTE_MS)
                    .min()
                    .copied()
                    .unwrap_or(now_ms);
                return denied(DenyReason::Minute, wait(oldest + MINUTE_MS + 1));
            }
            let fail_open_recipients: u32 = pace
                .pending
                .iter()
                .filter(|s| s.at_ms > now_ms - DAY_MS)
                .map(|s| s.recipients)
                .sum();
            let known = ledger.map_or(pace.known_total, |sent| {
                pace.known_total
                    .max(sent.saturating_sub(fail_open_recipients))
            });
            let day_share = per_day.saturating_sub(known) / shared_by;
            if fail_open_recipients + ask.recipients > day_share {
                return denied(DenyReason::Day, DAY_RETRY);
            }
            pace.tat = now_ms + spacing;
            pace.pending.push(FailOpenSend {
                at_ms: now_ms,
                recipients: ask.recipients,
                external: ask.tenant_budget.map_or(0, |(external, _)| external),
            });
            Decision::Allowed(Reservation::uncounted(ask.mailbox.clone(), ask.recipients))
        })
    }

    /// What Redis reported for the mailbox: its 24 h total and, for an allowed send, the
    /// reservation's time (it counts against this process's share while failing open).
    pub(crate) fn saw(&self, mailbox: &MailboxAddress, total: i64, sent_at: Option<i64>) {
        self.with(mailbox, |pace| {
            pace.known_total = u32::try_from(total.max(0)).unwrap_or(u32::MAX);
            if let Some(at) = sent_at {
                pace.counted.retain(|t| *t > at - MINUTE_MS);
                pace.counted.push_back(at);
            }
        });
    }

    /// The sends made while failing open that Redis has not counted yet, taken out (give them
    /// back with [`Self::put_back`] when recording them failed).
    pub(crate) fn take_pending(&self, mailbox: &MailboxAddress) -> Vec<FailOpenSend> {
        let mut mailboxes = self
            .mailboxes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        mailboxes
            .get_mut(mailbox)
            .map(|pace| std::mem::take(&mut pace.pending))
            .unwrap_or_default()
    }

    /// Recording `sends` failed: keep them for the next try.
    pub(crate) fn put_back(&self, mailbox: &MailboxAddress, mut sends: Vec<FailOpenSend>) {
        self.with(mailbox, |pace| {
            sends.append(&mut pace.pending);
            pace.pending = sends;
        });
    }

    /// Redis counted `sends` (or seeded the mailbox from the send history, which holds them):
    /// they still count against this process's minute share.
    pub(crate) fn recorded(&self, mailbox: &MailboxAddress, sends: &[FailOpenSend]) {
        self.with(mailbox, |pace| {
            pace.counted.extend(sends.iter().map(|s| s.at_ms));
            pace.counted.make_contiguous().sort_unstable();
        });
    }

    /// Remembers a cooldown, for the calls that fail open.
    pub(crate) fn cooldown(&self, mailbox: &MailboxAddress, until_ms: i64) {
        self.with(mailbox, |pace| pace.cool = pace.cool.max(until_ms));
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::*;
    use crate::rate_limit::{RateLimits, epoch_ms};

    #[test]
    fn paces_each_mailbox_at_its_share_of_the_limit() {
        let pacer = LocalPacer::new(NonZeroU32::new(2).unwrap());
        let mailbox = MailboxAddress::parse("a@contoso.example").unwrap();
        let other = MailboxAddress::parse("b@contoso.example").unwrap();
        let limits = RateLimits {
            per_minute: NonZeroU32::new(60).unwrap(),
            recipients_per_day: NonZeroU32::new(100).unwrap(),
            reserved_percent: 0,
        };
        let ask = |m| Ask {
            message_id: uuid::Uuid::nil(),
            mailbox: m,
            tenant: "contoso.example",
            recipients: 1,
            limits,
            tenant_budget: None,
            priority: crate::domain::Priority::Normal,
        };
        let t0 = Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap();
        let mut allowed = 0;
        for ms in 0..60_000 {
            let now = t0 + chrono::Duration::milliseconds(ms);
            if matches!(
                pacer.decide(&ask(&mailbox), epoch_ms(now), None),
                Decision::Allowed(_)
            ) {
                allowed += 1;
            }
        }
        // 60 a minute shared by 2 replicas, spaced (60 s + 2 s) / 60 × 2 apart: 30 in 60 s.
        assert_eq!(allowed, 30);
        assert!(matches!(
            pacer.decide(&ask(&other), epoch_ms(t0), None),
            Decision::Allowed(_)
        ));
        pacer.cooldown(&other, epoch_ms(t0 + chrono::Duration::seconds(300)));
        let Decision::Denied {
            reason,
            retry_after,
            ..
        } = pacer.decide(
            &ask(&other),
            epoch_ms(t0 + chrono::Duration::seconds(10)),
            None,
        )
        else {
            panic!("a cooldown holds the mailbox");
        };
        assert_eq!(
            (reason, retry_after),
            (DenyReason::Cooldown, Duration::from_secs(290))
        );
    }

    #[test]
    fn a_process_keeps_to_its_shares_of_the_minute_and_of_what_the_day_had_left() {
        let pacer = LocalPacer::new(NonZeroU32::new(2).unwrap());
        let mailbox = MailboxAddress::parse("a@contoso.example").unwrap();
        let limits = RateLimits {
            per_minute: NonZeroU32::new(60).unwrap(),
            recipients_per_day: NonZeroU32::new(40).unwrap(),
            reserved_percent: 0,
        };
        let ask = Ask {
            message_id: uuid::Uuid::nil(),
            mailbox: &mailbox,
            tenant: "contoso.example",
            recipients: 1,
            limits,
            tenant_budget: None,
            priority: crate::domain::Priority::Normal,
        };
        // Redis counted 30 sends of this process between 50 s and 59 s; the day stands at 30.
        for i in 0..30 {
            pacer.saw(&mailbox, 30, Some(50_000 + i * 300));
        }
        let now = 60_000;
        let allowed = |from: i64, to: i64| {
            (from..to)
                .step_by(100)
                .filter(|ms| matches!(pacer.decide(&ask, *ms, None), Decision::Allowed(_)))
                .count()
        };
        // Its 30 in 60 s are used: nothing until the first of them leaves the window.
        let Decision::Denied {
            reason,
            retry_after,
            ..
        } = pacer.decide(&ask, now, None)
        else {
            panic!("the minute share is spent");
        };
        assert_eq!(
            (reason, retry_after),
            (DenyReason::Minute, Duration::from_millis(50_001))
        );
        assert_eq!(allowed(now, 110_000), 0);
        // The day had 10 left: its share is 5, whatever the minute allows.
        assert_eq!(allowed(110_000, 600_000), 5);
        let Decision::Denied { reason, .. } = pacer.decide(&ask, now + 700_000, None) else {
            panic!("the day share is spent");
        };
        assert_eq!(reason, DenyReason::Day);
        let pending = pacer.take_pending(&mailbox);
        assert_eq!(pending.len(), 5);
        assert!(pacer.take_pending(&mailbox).is_empty(), "taken once");
        pacer.put_back(&mailbox, pending);
        assert_eq!(
            pacer.take_pending(&mailbox).len(),
            5,
            "kept when recording failed"
        );
    }
}
