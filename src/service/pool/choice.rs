//! The placement's decisions, pure (docs/decisions/0046-sender-pools.md): which member a
//! pooled message goes to from the members' rooms, when it goes to the pool's overflow sender
//! instead, and when a member's denial sends it there.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::{
    domain::{MembersFree, OverflowWhen},
    mailer::MemberRoom,
    rate_limit::DenyReason,
};

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

/// What the placement does with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Choice {
    /// The member at this index of the rooms.
    Member(usize),
    /// The pool's overflow sender, for this reason.
    Overflow(OverflowWhen),
    /// No member to place it on.
    Nowhere,
}

/// The placement's choice from the members' `rooms` ([`earliest`] for `recipients` and
/// `start`), when the message may overflow under `rule` (the pool's rule, its `externalOnly`
/// filter passed; `None`: it may not), by [`OverflowWhen::overflows`] of the exact earliest
/// slot among the members with day room (not the second's tie); a `by` more than a day ahead
/// with every day budget spent is placed and judged by the member's booking
/// ([`Denial::overflows`]). A member whose slot ties to the second but is after `by` gives
/// way to the one before it. Times in ms since the epoch.
pub(crate) fn choose(
    (rooms, recipients, start): (&[Option<MemberRoom>], i64, usize),
    rule: Option<OverflowWhen>,
    by_ms: Option<i64>,
    now_ms: i64,
) -> Choice {
    let placed = earliest(rooms, recipients, start);
    let with_room: Vec<usize> = (0..rooms.len())
        .filter(|&i| rooms[i].is_none_or(|r| r.day_left >= recipients))
        .collect();
    // (its free slot, its index) of the exact earliest; `None` when a slot is unknown.
    let soonest = with_room
        .iter()
        .map(|&i| rooms[i].map(|r| (r.free_at_ms, i)))
        .collect::<Option<Vec<_>>>()
        .and_then(|slots| slots.into_iter().min());
    let free = match (placed, soonest) {
        (Err(_), _) => MembersFree::NoRoom,
        (Ok(_), Some((at, _))) => MembersFree::At(at),
        (Ok(_), None) => MembersFree::Unknown,
    };
    let late = |i: usize| by_ms.is_some_and(|by| rooms[i].is_some_and(|r| r.free_at_ms > by));
    match (rule, placed, soonest) {
        (Some(rule), _, _) if rule.overflows(free, by_ms, now_ms) => Choice::Overflow(rule),
        (_, Ok(i), Some((_, first))) if late(i) => Choice::Member(first),
        (_, Ok(i) | Err(Some(i)), _) => Choice::Member(i),
        (_, Err(None), _) => Choice::Nowhere,
    }
}

/// A rate-limit denial of a pooled message on its member, as the overflow judges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Denial {
    /// The budget that refused.
    pub reason: DenyReason,
    /// Until the message may go.
    pub retry_after: Duration,
    /// Whether a slot at `now + retry_after` is booked for it.
    pub booked: bool,
}

impl Denial {
    /// Whether this denial, at `now`, gives a message with `by` to an overflow sender under
    /// `rule` ([`OverflowWhen::overflows`]): the member has no day room when the denial says
    /// its day budget is spent (its reason is the day budget, or its booked slot is
    /// [`DAY_SPENT_AHEAD`] or more ahead: `paced` names the minute budget when it books a
    /// day-spent message into the next day's first free slot); a booked slot is the member's
    /// free slot for it. An unbooked minute or in-flight denial comes back for a decision.
    pub(crate) fn overflows(
        self,
        rule: OverflowWhen,
        now: DateTime<Utc>,
        by: Option<DateTime<Utc>>,
    ) -> bool {
        let now_ms = now.timestamp_millis();
        let retry_ms = i64::try_from(self.retry_after.as_millis()).unwrap_or(i64::MAX);
        let day_spent = self.reason == DenyReason::Day || self.retry_after >= DAY_SPENT_AHEAD;
        [
            day_spent.then_some(MembersFree::NoRoom),
            self.booked
                .then_some(MembersFree::At(now_ms.saturating_add(retry_ms))),
        ]
        .into_iter()
        .flatten()
        .any(|free| rule.overflows(free, by.map(|t| t.timestamp_millis()), now_ms))
    }

    /// Whether it may overflow under either rule (the pool is read only then).
    pub(crate) fn may_overflow(self, now: DateTime<Utc>, by: Option<DateTime<Utc>>) -> bool {
        [OverflowWhen::BudgetsSpent, OverflowWhen::ForecastMisses]
            .into_iter()
            .any(|rule| self.overflows(rule, now, by))
    }
}

/// 23 h: a minute-budget backlog books at most D messages ahead (D ≤ 10,000 recipients a
/// day, each message one at least), D ÷ L minutes: under 23 h for any L of 8 a minute or more,
/// so a booking this far ahead is the rolling 24 h's.
const DAY_SPENT_AHEAD: Duration = Duration::from_secs(23 * 3_600);

/// Free slots within the same second tie.
const TIE_MS: i64 = 1_000;

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

    const BY: i64 = 60_000;

    fn decide(rooms: &[Option<MemberRoom>], rule: Option<OverflowWhen>, by: Option<i64>) -> Choice {
        choose((rooms, 1, 0), rule, by, 0)
    }

    #[test]
    fn forecast_misses_overflows_when_the_earliest_slot_with_room_is_after_by() {
        let misses = Some(OverflowWhen::ForecastMisses);
        // One member free before `by` (another after it): placed on it.
        let rooms = [room(BY + 1, 10), room(BY - 1, 10)];
        assert_eq!(decide(&rooms, misses, Some(BY)), Choice::Member(1));
        // A slot exactly at `by` meets it.
        assert_eq!(decide(&[room(BY, 10)], misses, Some(BY)), Choice::Member(0));
        // Every member with day room is free only after `by`: overflowed; the one free before
        // it has no day room (so it is no way to meet `by` either).
        let rooms = [room(BY + 1, 10), room(0, 0)];
        assert_eq!(
            decide(&rooms, misses, Some(BY)),
            Choice::Overflow(OverflowWhen::ForecastMisses)
        );
        // No `by`, or a pool without the rule, or an unknown slot (fixed-window): placed.
        assert_eq!(decide(&rooms, misses, None), Choice::Member(0));
        assert_eq!(decide(&rooms, None, Some(BY)), Choice::Member(0));
        assert_eq!(
            decide(
                &[room(BY + 1, 10)],
                Some(OverflowWhen::BudgetsSpent),
                Some(BY)
            ),
            Choice::Member(0)
        );
        assert_eq!(decide(&[None], misses, Some(BY)), Choice::Member(0));
        // Within one second's tie, the member before `by` is taken, not the tie's turn.
        let (by, rooms) = (60_500, [room(60_900, 10), room(60_100, 10)]);
        assert_eq!(decide(&rooms, misses, Some(by)), Choice::Member(1));
        assert_eq!(
            choose((&rooms, 1, 0), None, Some(by), 0),
            Choice::Member(1),
            "a pool without the rule too: the slot before `by`"
        );
        assert_eq!(choose((&rooms, 1, 0), None, None, 0), Choice::Member(0));
    }

    #[test]
    fn spent_budgets_overflow_a_by_within_the_day_and_budgets_spent_as_before() {
        let spent = [room(0, 0), room(5_000, 0)];
        let misses = Some(OverflowWhen::ForecastMisses);
        assert_eq!(
            decide(&spent, misses, Some(BY)),
            Choice::Overflow(OverflowWhen::ForecastMisses)
        );
        // A `by` more than a day ahead: placed on the earliest (its booking says the rest).
        assert_eq!(
            decide(&spent, misses, Some(24 * 3_600_000 + 1)),
            Choice::Member(0)
        );
        assert_eq!(decide(&spent, misses, None), Choice::Member(0));
        // budgetsSpent ignores `by`.
        for by in [None, Some(BY), Some(240 * 3_600_000)] {
            assert_eq!(
                decide(&spent, Some(OverflowWhen::BudgetsSpent), by),
                Choice::Overflow(OverflowWhen::BudgetsSpent)
            );
        }
        assert_eq!(decide(&spent, None, Some(BY)), Choice::Member(0));
        assert_eq!(decide(&[], None, Some(BY)), Choice::Nowhere);
    }

    #[test]
    fn a_booked_denial_after_by_overflows_a_forecast_misses_pool() {
        let now = chrono::Utc::now();
        let by = Some(now + chrono::Duration::seconds(60));
        let denial = |reason, secs, booked| Denial {
            reason,
            retry_after: Duration::from_secs(secs),
            booked,
        };
        let misses = OverflowWhen::ForecastMisses;
        let spent = OverflowWhen::BudgetsSpent;
        let booked_late = denial(DenyReason::Minute, 61, true);
        assert!(booked_late.overflows(misses, now, by));
        assert!(!booked_late.overflows(spent, now, by));
        assert!(!booked_late.overflows(misses, now, None));
        // Booked in time, or not booked (it comes back for a decision): stays.
        assert!(!denial(DenyReason::Minute, 60, true).overflows(misses, now, by));
        assert!(!denial(DenyReason::Minute, 61, false).overflows(misses, now, by));
        assert!(!denial(DenyReason::Minute, 61, false).may_overflow(now, by));
        // Day spent: both rules (forecastMisses with a `by` within the day).
        let day = denial(DenyReason::Day, 30, false);
        assert!(day.overflows(spent, now, None));
        assert!(day.overflows(misses, now, by));
        assert!(!day.overflows(misses, now, Some(now + chrono::Duration::days(2))));
        let next_day = denial(DenyReason::Minute, 23 * 3_600, true);
        assert!(next_day.overflows(spent, now, None) && next_day.may_overflow(now, None));
    }
}
