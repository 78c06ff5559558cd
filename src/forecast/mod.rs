//! When a sender's messages will have been sent: the arithmetic of `mail-worker campaign
//! forecast|status` and the admin UI's campaigns page, pure (no I/O; the inputs are read by
//! [`crate::reports::campaign`]).
//!
//! The limiter hands out one slot per message, in time order, [`spacing`] apart (`paced`:
//! (60 s + [`crate::rate_limit::paced::PACING_ALLOWANCE`]) / L; `fixed-window`: 60 s / L on
//! average), never before the mailbox's next free slot or the end of its cooldown, and never
//! while the message's recipients would take the rolling 24 h past the day budget. [`finish`]
//! replays exactly that for the messages already waiting and then the new ones, so the
//! forecast is the last slot. What it does not model, on the safe side: recipients already in
//! the 24 h window are taken to leave it only 24 h from now (the limiter frees them as their
//! minute buckets age, so a spill can end earlier); the claim's wait and Graph's answer (a few
//! seconds at most) come after the last slot.

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use std::collections::VecDeque;

use crate::{domain::Priority, rate_limit::Algorithm};

mod pool;
#[cfg(test)]
mod tests;
mod warnings;
pub use pool::{MemberSlot, spread};
pub use warnings::{Warning, tenant_warning, warnings};

/// A mailbox's budgets: messages per minute and recipients per rolling 24 h, and the share of
/// them reserved for `high` (`MAIL_RATE_LIMIT_RESERVED_PERCENT`; 0 under `fixed-window`, which
/// ignores priority).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// Messages per minute.
    pub per_minute: u32,
    /// Recipients per rolling 24 h.
    pub recipients_per_day: u32,
    /// Percent of each budget only `high` may use.
    pub reserved_percent: u8,
}

/// The share of `limits` a message of `priority` may use: the `paced` limiter's own rule
/// (`lua/paced/check_and_reserve.lua`'s `low_share`): `high` the whole budget, `normal` and
/// `bulk` ⌊limit × (100 − R) / 100⌋ (at least 1) of each.
pub fn usable_budget(limits: Limits, priority: Priority) -> Limits {
    let r = u64::from(limits.reserved_percent);
    if priority == Priority::High || r == 0 {
        return limits;
    }
    let low = |limit: u32| ((u64::from(limit) * (100 - r) / 100) as u32).max(1);
    Limits {
        per_minute: low(limits.per_minute),
        recipients_per_day: low(limits.recipients_per_day),
        ..limits
    }
}

/// The time between two slots of a mailbox allowed `per_minute` messages.
pub fn spacing(algorithm: Algorithm, per_minute: u32) -> Duration {
    let ms = match algorithm {
        Algorithm::Paced => crate::rate_limit::paced::spacing_ms(per_minute),
        Algorithm::FixedWindow => 60_000_u64.div_ceil(u64::from(per_minute.max(1))),
    };
    Duration::milliseconds(ms as i64)
}

/// What the limiter and PostgreSQL hold for one sender now.
#[derive(Debug, Clone, PartialEq)]
pub struct SenderState {
    /// The time of the reading.
    pub now: DateTime<Utc>,
    /// The limiter's algorithm.
    pub algorithm: Algorithm,
    /// The budgets in force (the sender's overrides or the defaults).
    pub limits: Limits,
    /// The next free slot of the pacing (after every booking), if the limiter has one.
    pub next_free_slot: Option<DateTime<Utc>>,
    /// Until when a provider's `Retry-After` holds the mailbox.
    pub cooldown_until: Option<DateTime<Utc>>,
    /// Recipients the limiter counts in the rolling 24 h (bookings included).
    pub recipients_last_day: u64,
    /// Messages waiting in PostgreSQL that hold no booked slot (they need one, ahead of new
    /// messages), and their recipients.
    pub backlog: Load,
    /// Its warm-up (`None`: none): from each next UTC day on, the day budget is the next
    /// step's, every day taken as a clean sending day (ADR 0047).
    pub warm_up: Option<Ramp>,
}

/// A sender's warm-up as the forecast replays it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ramp {
    /// The ramp and its current step (today's budget).
    pub step: crate::domain::WarmUpStep,
    /// The sender's own day budget (its override or the default), which caps every step.
    pub own_per_day: u32,
}

impl SenderState {
    /// The recipients-per-day budget at `slot`: [`Self::limits`]' own, or under a warm-up the
    /// step of `slot`'s UTC day (one step up per day after today's), capped by the sender's.
    fn per_day_at(&self, slot: DateTime<Utc>) -> u32 {
        match self.warm_up {
            None => self.limits.recipients_per_day,
            Some(r) => {
                let days = (slot.date_naive() - self.now.date_naive()).num_days();
                let days = u32::try_from(days.max(0)).unwrap_or(u32::MAX);
                r.step.day_budget_after(days).get().min(r.own_per_day)
            }
        }
    }

    /// The next UTC midnight after `slot` when a warm-up's budget grows then.
    fn grows_after(&self, slot: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let midnight = slot
            .date_naive()
            .succ_opt()?
            .and_hms_opt(0, 0, 0)?
            .and_utc();
        (self.warm_up.is_some() && self.per_day_at(midnight) > self.per_day_at(slot))
            .then_some(midnight)
    }
}

/// A number of messages and their recipients.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Load {
    /// Messages.
    pub messages: u64,
    /// Their recipients (To + Cc + Bcc).
    pub recipients: u64,
}

/// One new message to forecast.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewSend {
    /// Its `scheduledOn` (`None`: now).
    pub not_before: Option<DateTime<Utc>>,
    /// Its own `by` (the campaign line's), if any.
    pub by: Option<DateTime<Utc>>,
    /// Its recipients.
    pub recipients: u32,
    /// Its priority.
    pub priority: Priority,
}

/// When a sender's messages will have been sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finish {
    /// The first slot (of the backlog or the new messages); `None` when nothing waits.
    pub first: Option<DateTime<Utc>>,
    /// The last new message's slot (`now` when there are none): the forecast finish.
    pub finish: DateTime<Utc>,
    /// New messages sent only once the day budget let them (from the first that waited for
    /// recipients to leave the rolling 24 h on): the campaign spills into the next day.
    pub spilled: u64,
    /// New messages with more recipients than the whole day budget: never sent (refused).
    pub too_large: u64,
    /// New messages whose slot is after their own `by`.
    pub missed_by: u64,
}

/// Replays the limiter's slots for `state`'s backlog and then `sends` (in `scheduledOn` order,
/// as the claim takes due rows) and returns the last slot. See the module doc for what is and
/// is not modelled.
pub fn finish(state: &SenderState, sends: &[NewSend]) -> Finish {
    let mut replay = Replay::new(state);
    replay.take_backlog();
    replay.new_ones = true;
    let mut ordered: Vec<NewSend> = sends.to_vec();
    ordered.sort_by_key(|s| s.not_before);
    let mut missed_by = 0;
    for send in ordered {
        let slot = replay.take(send.not_before, u64::from(send.recipients), send.priority);
        missed_by += u64::from(slot.zip(send.by).is_some_and(|(slot, by)| slot > by));
    }
    Finish {
        first: replay.first,
        finish: replay.last_new.unwrap_or(state.now),
        spilled: replay.spilled,
        too_large: replay.too_large,
        missed_by,
    }
}

/// When the messages already waiting for `state`'s sender will have been sent: the last slot
/// of its unbooked backlog replayed after every booking, or the booked ones' end (the next free
/// slot, one spacing after the last booking: the safe side) when none is unbooked; `None` when
/// nothing waits.
pub fn backlog_end(state: &SenderState) -> Option<DateTime<Utc>> {
    let mut replay = Replay::new(state);
    replay.take_backlog();
    let booked = state.next_free_slot.filter(|t| *t > state.now);
    replay.last.max(booked)
}

/// The limiter's slots as [`finish`] replays them.
struct Replay<'a> {
    state: &'a SenderState,
    /// The earliest any message may go: now, or the end of the cooldown.
    open: DateTime<Utc>,
    /// The next free slot of `normal` and `bulk` (the limiter's `tat`).
    next: DateTime<Utc>,
    /// The slots of the `high` messages replayed (the limiter's `h` log), in order.
    high: Vec<DateTime<Utc>>,
    /// Recipients in the rolling 24 h: (the time they leave it, how many).
    window: VecDeque<(DateTime<Utc>, u64)>,
    in_window: u64,
    first: Option<DateTime<Utc>>,
    /// The latest slot replayed (backlog or new).
    last: Option<DateTime<Utc>>,
    last_new: Option<DateTime<Utc>>,
    new_ones: bool,
    /// Whether a new message has waited for the day budget (every later one is past it too).
    spilling: bool,
    spilled: u64,
    too_large: u64,
}

impl<'a> Replay<'a> {
    fn new(state: &'a SenderState) -> Self {
        let open = state.cooldown_until.map_or(state.now, |c| c.max(state.now));
        let next = state.next_free_slot.map_or(open, |t| t.max(open));
        let day = Duration::hours(24);
        Self {
            state,
            open,
            next,
            high: Vec::new(),
            // The safe side: what the window holds leaves it 24 h from now at the latest.
            window: VecDeque::from([(state.now + day, state.recipients_last_day)]),
            in_window: state.recipients_last_day,
            first: None,
            last: None,
            last_new: None,
            new_ones: false,
            spilling: false,
            spilled: 0,
            too_large: 0,
        }
    }

    /// One message of `recipients`, not before `not_before`: its slot (`None`: never sent).
    fn take(
        &mut self,
        not_before: Option<DateTime<Utc>>,
        recipients: u64,
        priority: Priority,
    ) -> Option<DateTime<Utc>> {
        let limits = usable_budget(self.state.limits, priority);
        if recipients > u64::from(self.state.limits.recipients_per_day) {
            self.too_large += u64::from(self.new_ones);
            return None;
        }
        let ahead = self.ahead(priority);
        let mut slot = self.high_slot(not_before.map_or(ahead, |t| t.max(ahead)), priority);
        let mut day_full = false;
        loop {
            while let Some(&(leaves, n)) = self.window.front() {
                if leaves > slot {
                    break;
                }
                self.window.pop_front();
                self.in_window -= n;
            }
            // A message larger than its share may use the whole day (the limiter's
            // `max(share, need)`).
            let per_day = u64::from(self.usable_per_day(slot, priority)).max(recipients);
            if self.in_window + recipients <= per_day {
                break;
            }
            day_full = true;
            // Wait for the oldest recipients to leave the window, or a warm-up's next step.
            let freed = self.window.front().map(|&(leaves, _)| leaves);
            slot = match (freed, self.state.grows_after(slot)) {
                (Some(f), Some(g)) => f.min(g),
                (f, g) => f.or(g).unwrap_or(slot),
            };
        }
        self.window
            .push_back((slot + Duration::hours(24), recipients));
        self.in_window += recipients;
        if self.goes_ahead(priority) {
            let at = self.high.partition_point(|t| *t <= slot);
            self.high.insert(at, slot);
        } else {
            self.next = slot + spacing(self.state.algorithm, limits.per_minute);
        }
        // A `high` slot can come before the slots replayed ahead of it.
        self.first = Some(self.first.map_or(slot, |f| f.min(slot)));
        self.last = self.last.max(Some(slot));
        if self.new_ones {
            self.last_new = Some(self.last_new.map_or(slot, |l| l.max(slot)));
            self.spilling |= day_full;
            self.spilled += u64::from(self.spilling);
        }
        Some(slot)
    }
}

impl Replay<'_> {
    /// The day budget `priority` may use at `slot` ([`SenderState::per_day_at`], its share).
    fn usable_per_day(&self, slot: DateTime<Utc>, priority: Priority) -> u32 {
        let limits = Limits {
            recipients_per_day: self.state.per_day_at(slot),
            ..self.state.limits
        };
        usable_budget(limits, priority).recipients_per_day
    }

    /// The messages waiting with no booked slot ([`SenderState::backlog`]), `normal`, their
    /// recipients spread evenly (only their sum is known).
    fn take_backlog(&mut self) {
        let backlog = self.state.backlog;
        let per_backlog = backlog
            .recipients
            .checked_div(backlog.messages)
            .unwrap_or(0);
        let mut left_over = backlog.recipients - per_backlog * backlog.messages;
        for _ in 0..backlog.messages {
            let extra = u64::from(left_over > 0);
            left_over = left_over.saturating_sub(1);
            let _ = self.take(None, per_backlog + extra, Priority::Normal);
        }
    }

    /// Whether `priority` goes ahead of the others' pacing: `high` under `paced` with a
    /// reserved share (the limiter's `high`); otherwise every message takes the next slot.
    fn goes_ahead(&self, priority: Priority) -> bool {
        priority == Priority::High
            && self.state.limits.reserved_percent > 0
            && self.state.algorithm == Algorithm::Paced
    }

    /// The earliest a message of `priority` may go before its own rate: `high` now (or after
    /// the cooldown), ignoring the others' bookings; the others their next free slot.
    fn ahead(&self, priority: Priority) -> DateTime<Utc> {
        if self.goes_ahead(priority) {
            self.open
        } else {
            self.next
        }
    }

    /// A `high` message's slot from `slot` on, as the limiter's direct check and `h` log place
    /// it: at most S = L − L' `high` slots in any window of 60 s + half the pacing allowance
    /// while `normal` or `bulk` is paced ahead (their slot is later), at most L with nothing
    /// ahead; past that, the oldest slot counted + the window. The others' slots: unchanged.
    fn high_slot(&self, mut slot: DateTime<Utc>, priority: Priority) -> DateTime<Utc> {
        if !self.goes_ahead(priority) {
            return slot;
        }
        let limits = self.state.limits;
        let window = Duration::milliseconds(
            60_000 + crate::rate_limit::paced::PACING_ALLOWANCE.as_millis() as i64 / 2,
        );
        let low = usable_budget(limits, Priority::Normal).per_minute;
        loop {
            let cap = if self.next > slot {
                limits.per_minute.saturating_sub(low).max(1)
            } else {
                limits.per_minute
            } as usize;
            let from = self.high.partition_point(|t| *t <= slot - window);
            let to = self.high.partition_point(|t| *t <= slot);
            if to - from < cap {
                return slot;
            }
            slot = self.high[to - cap] + window;
        }
    }
}
