//! A pooled message's placement (docs/decisions/0046-sender-pools.md): at its first attempt,
//! before any Graph request, it is given to the member whose next free slot is earliest (one
//! read of every member's slot from the limiter, not one decision per member), skipping
//! paused members; with every member's day budget spent, to the pool's overflow sender when
//! its rule is `budgetsSpent`. The choice is written on the row (fenced by the claim) before
//! the send, so the message keeps that sender for good.

use std::{collections::HashSet, time::Duration};

use uuid::Uuid;

use super::{MailProviderService, SendOutcome};
use crate::{
    domain::{EventKind, OverflowWhen, Sender},
    log_events,
    mailer::MemberRoom,
    store::{
        StoreError, events,
        messages::{SenderRef, StoredMessage},
        pools::{self, PoolSenders},
    },
};

/// What the placement did.
pub(super) enum Placement {
    /// Placed on this sender (a member, or the overflow sender).
    On(Sender),
    /// Not placed: the pool is gone or has no member left; the row keeps its stand-in.
    Kept,
    /// Another claim took the row over: nothing was written.
    Superseded,
}

/// Whether `message` is a pooled one still to be placed: no Graph request may have been made
/// for it yet.
pub(super) fn to_place(message: &StoredMessage) -> Option<Uuid> {
    match message.pool {
        Some((pool, false))
            if message.graph_draft_id.is_none() && message.send_attempted_at.is_none() =>
        {
            Some(pool)
        }
        _ => None,
    }
}

/// The member to take, by index into `rooms`: the earliest free slot (to the second) among
/// those with room for `recipients` in their day budget; ties go round by `start` (the
/// message's id), so a pool with every member free, or the messages of one claim placed at
/// once from the same read, spread over the members instead of all taking the one whose slot
/// is a few milliseconds earlier. `Err(earliest)` when none has room:
/// the earliest free slot regardless (its booking goes into the next day), `None` if there is
/// no member.
pub(crate) fn earliest(
    rooms: &[Option<MemberRoom>],
    recipients: i64,
    start: usize,
) -> Result<usize, Option<usize>> {
    let n = rooms.len();
    let key = |i: usize| {
        let free = rooms[i].map_or(0, |r| r.free_at_ms.div_euclid(TIE_MS));
        (free, (i + n - start % n.max(1)) % n.max(1))
    };
    let with_room = (0..n)
        .filter(|&i| rooms[i].is_none_or(|r| r.day_left >= recipients))
        .min_by_key(|&i| key(i));
    with_room.ok_or_else(|| (0..n).min_by_key(|&i| key(i)))
}

/// Whether a denial says the member's day budget is spent: its reason is the day budget, or
/// its booked slot is [`DAY_SPENT_AHEAD`] or more ahead (`paced` names the minute budget when it
/// books a day-spent message into the next day's first free slot).
pub(super) fn day_spent(reason: crate::rate_limit::DenyReason, retry_after: Duration) -> bool {
    reason == crate::rate_limit::DenyReason::Day || retry_after >= DAY_SPENT_AHEAD
}

/// 23 h: a minute-budget backlog books at most D messages ahead (D ≤ 10,000 recipients a
/// day, each message one at least), D ÷ L minutes: under 23 h for any L of 8 a minute or more,
/// so a booking this far ahead is the rolling 24 h's.
const DAY_SPENT_AHEAD: Duration = Duration::from_secs(23 * 3_600);

/// Free slots within the same second tie.
const TIE_MS: i64 = 1_000;

impl MailProviderService {
    /// Places the pooled `message` of pool `pool_id` (see the module docs).
    ///
    /// # Errors
    /// PostgreSQL errors.
    pub(super) async fn place(
        &self,
        message: &StoredMessage,
        pool_id: Uuid,
    ) -> Result<Placement, StoreError> {
        let Some(pool) = pools::senders_of(&self.pool, pool_id).await? else {
            return Ok(Placement::Kept);
        };
        // Credential pauses are this process's; a limit pause (quota or reputation NDR) shows
        // in the member's slot (`held`), so it is skipped by the earliest slot.
        let paused: HashSet<Uuid> = self.pauses.paused().into_iter().map(|(id, _)| id).collect();
        let members: Vec<&Sender> = pool
            .members
            .iter()
            .filter(|m| !paused.contains(&SenderRef::of(m).id()))
            .collect();
        if members.is_empty() {
            return Ok(Placement::Kept);
        }
        let owned: Vec<Sender> = members.iter().map(|m| (*m).clone()).collect();
        let rooms = self.mailers.member_rooms(&owned).await;
        let recipients = message
            .content
            .as_ref()
            .map_or(1, |c| i64::from(c.recipient_count()));
        let start = (message.id.as_u128() % owned.len() as u128) as usize;
        let (chosen, reason) = match earliest(&rooms, recipients, start) {
            Ok(i) => (owned[i].clone(), None),
            Err(fallback) => match overflow_for(&pool, message) {
                Some(sender) => (sender, Some(OverflowWhen::BudgetsSpent)),
                None => match fallback {
                    Some(i) => (owned[i].clone(), None),
                    None => return Ok(Placement::Kept),
                },
            },
        };
        let mut tx = self.pool.begin().await?;
        if !pools::place(&mut *tx, message.fence, SenderRef::of(&chosen), reason).await? {
            return Ok(Placement::Superseded);
        }
        if let Some(reason) = reason {
            if self.outbox.is_on() {
                events::record_one(&mut *tx, EventKind::Overflowed, message.id).await?;
            }
            tx.commit().await?;
            self.overflowed(message, &pool.name, &chosen, reason);
        } else {
            tx.commit().await?;
        }
        Ok(Placement::On(chosen))
    }

    /// A pooled message on member `on` that the member's limiter refused for its day budget
    /// (another message took the last room between the placement's read and its booking, or
    /// the message waited on the member for its in-flight turn meanwhile): given to the pool's
    /// overflow sender when its rule says so, due now. Never once a Graph request may have
    /// been made for it (the write checks), nor when `on` is the overflow sender itself.
    /// `None` when the pool does not overflow it.
    ///
    /// # Errors
    /// PostgreSQL errors.
    pub(super) async fn overflow_after_day_denial(
        &self,
        message: &StoredMessage,
        pool_id: Uuid,
        on: Uuid,
    ) -> Result<Option<SendOutcome>, StoreError> {
        let Some(pool) = pools::senders_of(&self.pool, pool_id).await? else {
            return Ok(None);
        };
        let Some(sender) = overflow_for(&pool, message) else {
            return Ok(None);
        };
        if SenderRef::of(&sender).id() == on {
            return Ok(None);
        }
        let reason = OverflowWhen::BudgetsSpent;
        let mut tx = self.pool.begin().await?;
        let Some(until) =
            pools::overflow_now(&mut *tx, message.fence, SenderRef::of(&sender), reason).await?
        else {
            return Ok(Some(SendOutcome::Superseded));
        };
        if self.outbox.is_on() {
            events::record_one(&mut *tx, EventKind::Overflowed, message.id).await?;
        }
        tx.commit().await?;
        self.overflowed(message, &pool.name, &sender, reason);
        Ok(Some(SendOutcome::Deferred {
            until,
            reason: format!("overflowed ({})", reason.as_str()),
        }))
    }

    /// Counts and logs one overflowed message.
    fn overflowed(&self, message: &StoredMessage, pool: &str, to: &Sender, reason: OverflowWhen) {
        self.metrics.overflowed(pool, reason.as_str());
        tracing::info!(
            event = log_events::MAIL_POOL_OVERFLOWED,
            message.id = %message.id,
            pool,
            reason = reason.as_str(),
            mailbox = %to.mailbox(),
            "pooled message overflowed: every member's day budget is spent"
        );
    }
}

/// The pool's overflow sender for `message` when its rule is `budgetsSpent` (the rule
/// `forecastMisses` is not built yet: such a pool never overflows) and, with `externalOnly`,
/// the message has a recipient outside the members' accepted domains (none known: internal,
/// so it stays on Exchange).
fn overflow_for(pool: &PoolSenders, message: &StoredMessage) -> Option<Sender> {
    let (sender, when, external_only) = pool.overflow.as_ref()?;
    if *when != OverflowWhen::BudgetsSpent {
        return None;
    }
    if *external_only {
        let content = message.content.as_ref().ok()?;
        let addresses: Vec<&str> = content
            .to
            .iter()
            .chain(&content.cc)
            .chain(&content.bcc)
            .map(|r| r.address.as_str())
            .collect();
        let external = pool.members.iter().any(|m| {
            m.graph()
                .and_then(|g| g.tenant_budget.as_ref())
                .is_some_and(|b| b.external_count(addresses.iter().copied()) > 0)
        });
        if !external {
            return None;
        }
    }
    Some(sender.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn room(free_at_ms: i64, day_left: i64) -> Option<MemberRoom> {
        Some(MemberRoom {
            free_at_ms,
            day_left,
        })
    }

    #[test]
    fn the_earliest_free_slot_with_day_room_wins() {
        let rooms = [room(3_000, 10), room(1_000, 10), room(2_000, 10)];
        assert_eq!(earliest(&rooms, 1, 0), Ok(1));
        // The earliest has no day room left: the next one.
        let rooms = [room(3_000, 10), room(1_000, 0), room(2_000, 10)];
        assert_eq!(earliest(&rooms, 1, 0), Ok(2));
        // None has room: the earliest regardless, as the fallback.
        assert_eq!(
            earliest(&[room(3_000, 0), room(1_000, 0)], 1, 0),
            Err(Some(1))
        );
        assert_eq!(earliest(&[], 1, 0), Err(None));
        // Within the same second: a tie, gone round by the message.
        assert_eq!(earliest(&[room(1_100, 10), room(1_900, 10)], 1, 1), Ok(1));
    }

    #[test]
    fn ties_go_round_by_the_message() {
        let free = [room(0, 10), room(0, 10), room(0, 10)];
        let picks: Vec<_> = (0..3).map(|s| earliest(&free, 1, s)).collect();
        assert_eq!(picks, vec![Ok(0), Ok(1), Ok(2)]);
        // Unknown rooms (fixed-window) count as free now.
        assert_eq!(earliest(&[None, None], 1, 1), Ok(1));
    }
}
