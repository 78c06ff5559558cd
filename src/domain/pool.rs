//! Sender pools: a named set of Graph senders a campaign line may name instead of one sender
//! (`senderPool`), and the pool's optional overflow (docs/decisions/0046-sender-pools.md).

/// When a pool's overflow sender takes a message (`overflow.when` of the senders file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OverflowWhen {
    /// Every member that is not paused has its rolling 24 h recipient budget spent (sent and
    /// booked recipients plus this message's over its day budget).
    BudgetsSpent,
    /// The message has a `by` time (the campaign line's) and the earliest free slot among
    /// the unpaused members with day room is after it, or none has day room and `by` is within
    /// a day. A message without `by` never overflows by this rule.
    ForecastMisses,
}

/// Where a pool's members stand for one message: the earliest free slot among the unpaused
/// members with day room for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MembersFree {
    /// At this time (ms since the epoch).
    At(i64),
    /// A member has room but its slot is not known (`fixed-window` books no slots).
    Unknown,
    /// No member has day room left.
    NoRoom,
}

/// A rolling day, in ms.
const DAY_MS: i64 = 24 * 3_600 * 1_000;

impl OverflowWhen {
    /// Whether a message with `by` (ms since the epoch) goes to the pool's overflow sender at
    /// `now` (ms) when its members stand at `free`: `budgetsSpent` when no member has day
    /// room; `forecastMisses` when the message has a `by` and the earliest slot is after it, or
    /// no member has day room and `by` is within a day of `now` (a spent rolling 24 h frees
    /// room only as its sends age out; the safe reading: a spent day misses a `by` within the
    /// day). The one rule of the placement (`service::pool`) and the forecast
    /// (`forecast::spread`).
    pub fn overflows(self, free: MembersFree, by: Option<i64>, now: i64) -> bool {
        match (self, free, by) {
            (Self::BudgetsSpent, free, _) => free == MembersFree::NoRoom,
            (Self::ForecastMisses, _, None) | (Self::ForecastMisses, MembersFree::Unknown, _) => {
                false
            }
            (Self::ForecastMisses, MembersFree::At(slot), Some(by)) => slot > by,
            (Self::ForecastMisses, MembersFree::NoRoom, Some(by)) => by < now + DAY_MS,
        }
    }
}

super::keyword::keywords!(OverflowWhen {
    BudgetsSpent => "budgetsSpent",
    ForecastMisses => "forecastMisses",
});

/// A pool's overflow: the sender that takes what its members cannot, and when.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PoolOverflow {
    /// The overflow sender's address (a SendGrid tenant's or another Graph sender's).
    pub sender: super::MailboxAddress,
    /// When it is used.
    pub when: OverflowWhen,
    /// Only for messages with a recipient outside every member's accepted domains (internal
    /// mail stays on Exchange).
    pub external_only: bool,
}

#[cfg(test)]
mod tests {
    use super::{MembersFree::*, OverflowWhen::*};

    #[test]
    fn the_rules_read_the_members_slot_the_by_and_the_day() {
        let (by, now) = (Some(60_000), 0);
        assert!(ForecastMisses.overflows(At(60_001), by, now));
        assert!(!ForecastMisses.overflows(At(60_000), by, now));
        assert!(!ForecastMisses.overflows(At(60_001), None, now));
        assert!(!ForecastMisses.overflows(Unknown, by, now));
        assert!(ForecastMisses.overflows(NoRoom, by, now));
        assert!(!ForecastMisses.overflows(NoRoom, Some(super::DAY_MS), now));
        assert!(!ForecastMisses.overflows(NoRoom, None, now));
        for free in [At(60_001), Unknown] {
            assert!(!BudgetsSpent.overflows(free, by, now));
        }
        assert!(BudgetsSpent.overflows(NoRoom, None, now));
    }
}
