//! A pooled campaign's messages spread over its members as the placement gives them
//! (docs/decisions/0046-sender-pools.md): each message, in `scheduledOn` order, to the member
//! whose next slot is the earliest among those with day room left (none has room: the earliest
//! of all, where it spills), so the pool's throughput is its unpaused members' sum, less what
//! each already has booked and waiting; or to the pool's overflow sender when its rule says so
//! ([`OverflowWhen::overflows`], the placement's own rule).

use chrono::{DateTime, Duration, Utc};

use super::{NewSend, SenderState, spacing, usable_budget};
use crate::domain::{MembersFree, OverflowWhen, Priority};

/// One unpaused member as the spread sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberSlot {
    /// Its next free slot once what already waits for it (booked or not) has gone.
    pub free: DateTime<Utc>,
    /// The time between two of its slots.
    pub spacing: Duration,
    /// Recipients its rolling 24 h still has room for.
    pub day_room: u64,
}

impl MemberSlot {
    /// A member with `state` (the limiter's reading and its backlog): free after its cooldown,
    /// its bookings and its unbooked backlog at its `normal` rate.
    pub fn of(state: &SenderState) -> Self {
        let usable = usable_budget(state.limits, Priority::Normal);
        let spacing = spacing(state.algorithm, usable.per_minute);
        let open = state.cooldown_until.map_or(state.now, |c| c.max(state.now));
        let next = state.next_free_slot.map_or(open, |t| t.max(open));
        let backlog = i32::try_from(state.backlog.messages).unwrap_or(i32::MAX);
        Self {
            free: next + spacing * backlog,
            spacing,
            day_room: u64::from(usable.recipients_per_day)
                .saturating_sub(state.recipients_last_day + state.backlog.recipients),
        }
    }
}

/// The member (an index into `members`) each of `sends` goes to, in `sends`' order, `None`
/// for one its rule (`Some`: the pool's overflow rule, when the send may overflow) gives to
/// the overflow sender at `now`; empty when `members` is.
pub fn spread(
    members: &[MemberSlot],
    sends: &[(NewSend, Option<OverflowWhen>)],
    now: DateTime<Utc>,
) -> Vec<Option<usize>> {
    if members.is_empty() {
        return Vec::new();
    }
    let mut members = members.to_vec();
    let mut order: Vec<usize> = (0..sends.len()).collect();
    order.sort_by_key(|&i| sends[i].0.not_before);
    let mut to = vec![None; sends.len()];
    for i in order {
        let (send, rule) = sends[i];
        let slot = |m: &MemberSlot| send.not_before.map_or(m.free, |t| t.max(m.free));
        let need = u64::from(send.recipients);
        let with_room = (0..members.len())
            .filter(|&k| members[k].day_room >= need)
            .min_by_key(|&k| (slot(&members[k]), k));
        let free = with_room.map_or(MembersFree::NoRoom, |k| {
            MembersFree::At(slot(&members[k]).timestamp_millis())
        });
        let by = send.by.map(|t| t.timestamp_millis());
        if rule.is_some_and(|r| r.overflows(free, by, now.timestamp_millis())) {
            continue;
        }
        let k = with_room
            .or_else(|| (0..members.len()).min_by_key(|&k| (slot(&members[k]), k)))
            .unwrap_or(0);
        let m = &mut members[k];
        m.free = slot(m) + m.spacing;
        m.day_room = m.day_room.saturating_sub(need);
        to[i] = Some(k);
    }
    to
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn member(free_s: i64, per_minute_spacing_ms: i64, day_room: u64) -> MemberSlot {
        MemberSlot {
            free: at() + Duration::seconds(free_s),
            spacing: Duration::milliseconds(per_minute_spacing_ms),
            day_room,
        }
    }

    fn at() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 2, 9, 0, 0).unwrap()
    }

    fn sends(n: usize) -> Vec<(NewSend, Option<OverflowWhen>)> {
        vec![
            (
                NewSend {
                    not_before: None,
                    by: None,
                    recipients: 1,
                    priority: Priority::Normal,
                },
                None
            );
            n
        ]
    }

    fn on(to: &[Option<usize>]) -> Vec<usize> {
        to.iter().map(|k| k.expect("placed on a member")).collect()
    }

    #[test]
    fn equal_idle_members_share_evenly() {
        let to = on(&spread(&[member(0, 2_000, 100); 3], &sends(30), at()));
        let counts: Vec<usize> = (0..3)
            .map(|k| to.iter().filter(|&&t| t == k).count())
            .collect();
        assert_eq!(counts, [10, 10, 10]);
    }

    #[test]
    fn a_member_busy_for_a_minute_gets_fewer_and_a_full_one_none() {
        // Member 0 is free in 60 s (its backlog), 1 is idle, 2 has no day room.
        let to = on(&spread(
            &[
                member(60, 2_000, 100),
                member(0, 2_000, 100),
                member(0, 2_000, 0),
            ],
            &sends(40),
            at(),
        ));
        let counts: Vec<usize> = (0..3)
            .map(|k| to.iter().filter(|&&t| t == k).count())
            .collect();
        // Member 1 alone until 60 s (30 slots), then the two alternate: 5 more each.
        assert_eq!(counts, [5, 35, 0]);
    }

    #[test]
    fn no_member_with_room_spills_onto_the_earliest() {
        let to = spread(
            &[member(10, 2_000, 0), member(0, 2_000, 0)],
            &sends(2),
            at(),
        );
        assert_eq!(to, [Some(1), Some(1)]);
    }

    #[test]
    fn a_forecast_misses_pool_overflows_the_lines_whose_slot_is_after_their_by() {
        // Two members at 2 s: slots at 0, 0, 2, 2, 4, 4, … s. `by` 9 s: 10 lines make it
        // (slots 0 to 8 s), the other 10 overflow; a line without `by` is placed regardless.
        let mut lines = sends(21);
        for (send, rule) in &mut lines[..20] {
            send.by = Some(at() + Duration::seconds(9));
            *rule = Some(OverflowWhen::ForecastMisses);
        }
        let to = spread(&[member(0, 2_000, 100); 2], &lines, at());
        assert_eq!(to[..10].iter().filter(|k| k.is_some()).count(), 10);
        assert_eq!(to[10..20], [None; 10]);
        assert_eq!(to[20], Some(0), "no by: the next slot (10 s)");
        // A budgetsSpent pool overflows what has no day room: 3 placed, 2 overflowed.
        let mut lines = sends(5);
        for (_, rule) in &mut lines {
            *rule = Some(OverflowWhen::BudgetsSpent);
        }
        let to = spread(&[member(0, 2_000, 3)], &lines, at());
        assert_eq!(to, [Some(0), Some(0), Some(0), None, None]);
    }
}
