//! A message's lifecycle status, stored as text in `messages.status`.

use std::{fmt, str::FromStr};

/// `SCHEDULED → QUEUED → SENDING → SENT | ERROR`, and back to `SCHEDULED` on a deferral,
/// a transient failure or an expired lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageStatus {
    /// Waiting for `scheduled_on`.
    Scheduled,
    /// Claimed by send-scheduled-messages; a job is on the Redis queue.
    Queued,
    /// A worker is sending it.
    Sending,
    /// The provider accepted it (terminal).
    Sent,
    /// It cannot be sent; `last_error` says why (terminal).
    Error,
}

/// A status string that is not one of the five.
#[derive(Debug, thiserror::Error)]
#[error("unknown message status {0:?}")]
pub struct UnknownStatus(pub String);

impl MessageStatus {
    /// The column value: `SCHEDULED`, `QUEUED`, `SENDING`, `SENT` or `ERROR`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scheduled => "SCHEDULED",
            Self::Queued => "QUEUED",
            Self::Sending => "SENDING",
            Self::Sent => "SENT",
            Self::Error => "ERROR",
        }
    }

    /// All five, in lifecycle order.
    pub const ALL: [MessageStatus; 5] = [
        Self::Scheduled,
        Self::Queued,
        Self::Sending,
        Self::Sent,
        Self::Error,
    ];
}

impl FromStr for MessageStatus {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

impl fmt::Display for MessageStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
