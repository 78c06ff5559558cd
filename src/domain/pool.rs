//! Sender pools: a named set of Graph senders a campaign line may name instead of one sender
//! (`senderPool`), and the pool's optional overflow (docs/decisions/0046-sender-pools.md).

/// When a pool's overflow sender takes a message (`overflow.when` of the senders file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OverflowWhen {
    /// Every member that is not paused has its rolling 24 h recipient budget spent (sent and
    /// booked recipients plus this message's over its day budget).
    BudgetsSpent,
    /// The campaign's forecast end is later than its `by` time. Accepted in the file; the
    /// forecast gate is not built yet, so it never overflows (the safe reading: mail stays on
    /// Graph).
    ForecastMisses,
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
