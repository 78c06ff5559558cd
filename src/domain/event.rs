//! What an outbox event says happened to a message ([`EventKind`], `events.kind`,
//! docs/events.md).

use super::keyword::keywords;

/// The kind of an event: one status change a campaign system cares about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// Stored by `enqueue` or the intake queue.
    Accepted,
    /// The provider accepted it (`SENT`).
    Sent,
    /// Rescheduled, with the reason and the next slot (once per message and reason).
    Deferred,
    /// It ended `ERROR`, with the reason.
    Failed,
    /// A non-delivery report came back after it was sent.
    Bounced,
    /// An operator cancelled it (`messages cancel`, the admin UI).
    Cancelled,
    /// The message trace says one recipient received it (once per recipient).
    Delivered,
    /// The message trace says one recipient's copy was filtered as spam or quarantined (once
    /// per recipient).
    Filtered,
    /// A pooled message was given to its pool's overflow sender, with the reason
    /// (`budgetsSpent`).
    Overflowed,
}

keywords!(EventKind {
    Accepted => "accepted",
    Sent => "sent",
    Deferred => "deferred",
    Failed => "failed",
    Bounced => "bounced",
    Cancelled => "cancelled",
    Delivered => "delivered",
    Filtered => "filtered",
    Overflowed => "overflowed",
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_match_the_migrations_check() {
        let sql = concat!(
            include_str!("../../migrations/20261202144306_events.sql"),
            include_str!("../../migrations/20261206051500_delivery_trace.sql"),
            include_str!("../../migrations/20261206211854_sender_pools.sql")
        );
        for kind in EventKind::ALL {
            assert!(
                sql.contains(&format!("'{kind}'")),
                "{kind} not in events.kind's CHECK"
            );
        }
    }
}
