//! A message's lifecycle status, stored as text in `messages.status`.

use std::{fmt, str::FromStr};

/// `SCHEDULED → SENDING → SENT | ERROR`, and back to `SCHEDULED` on a deferral,
/// a transient failure or an expired lease; `SENT → BOUNCED` when the mailbox received a
/// non-delivery report for it (`crate::bounces`) or the message trace says a recipient failed;
/// `SENT → DELIVERED` when the message trace says every recipient was delivered
/// (`crate::delivery`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum MessageStatus {
    /// Waiting for `scheduled_on`.
    Scheduled,
    /// A worker is sending it.
    Sending,
    /// The provider accepted it (terminal).
    Sent,
    /// It cannot be sent; `last_error` says why (terminal).
    Error,
    /// Sent, then reported undeliverable by the mailbox's NDR; `bounce_code` and `bounce_text`
    /// say why (terminal).
    Bounced,
    /// Sent, and the message trace says every recipient was delivered (terminal).
    Delivered,
}

/// A [`MessageStatus`] as an SQL literal (`'SCHEDULED'`), for `concat!` into a query: queries
/// name a status through the enum's variant, and still as a constant in the SQL text, so
/// PostgreSQL matches the partial indexes whose predicate names it (a bound parameter would
/// not). `sql_status!(Scheduled)` is `"'SCHEDULED'"`; a unit test keeps it equal to
/// [`MessageStatus::as_str`].
macro_rules! sql_status {
    (Scheduled) => {
        "'SCHEDULED'"
    };
    (Sending) => {
        "'SENDING'"
    };
    (Sent) => {
        "'SENT'"
    };
    (Error) => {
        "'ERROR'"
    };
    (Bounced) => {
        "'BOUNCED'"
    };
    (Delivered) => {
        "'DELIVERED'"
    };
}
pub(crate) use sql_status;

/// The terminal statuses (`SENT`, `ERROR`, `BOUNCED`, `DELIVERED`) as an SQL list, for
/// `concat!` into `status IN (…)`: `'SENT', 'ERROR', 'BOUNCED', 'DELIVERED'`.
macro_rules! sql_finished {
    () => {
        concat!(
            $crate::domain::sql_status!(Sent),
            ", ",
            $crate::domain::sql_status!(Error),
            ", ",
            $crate::domain::sql_status!(Bounced),
            ", ",
            $crate::domain::sql_status!(Delivered)
        )
    };
}
pub(crate) use sql_finished;

/// A status string that is not one of the five.
#[derive(Debug, thiserror::Error)]
#[error("unknown message status {0:?}")]
pub(crate) struct UnknownStatus(pub String);

impl MessageStatus {
    /// The column value: `SCHEDULED`, `SENDING`, `SENT`, `ERROR` or `BOUNCED`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Scheduled => "SCHEDULED",
            Self::Sending => "SENDING",
            Self::Sent => "SENT",
            Self::Error => "ERROR",
            Self::Bounced => "BOUNCED",
            Self::Delivered => "DELIVERED",
        }
    }

    /// The five names, for a message that lists them.
    pub(crate) const NAMES: &'static str = "SCHEDULED, SENDING, SENT, ERROR, BOUNCED, DELIVERED";

    /// All five, in lifecycle order.
    pub(crate) const ALL: [MessageStatus; 6] = [
        Self::Scheduled,
        Self::Sending,
        Self::Sent,
        Self::Error,
        Self::Bounced,
        Self::Delivered,
    ];

    /// [`Self::ALL`]'s names, for lists (the admin UI's filter, the gauge, `messages list`).
    pub(crate) const ALL_NAMES: [&'static str; 6] = [
        "SCHEDULED",
        "SENDING",
        "SENT",
        "ERROR",
        "BOUNCED",
        "DELIVERED",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_literals_spell_the_statuses() {
        for (literal, status) in [
            (sql_status!(Scheduled), MessageStatus::Scheduled),
            (sql_status!(Sending), MessageStatus::Sending),
            (sql_status!(Sent), MessageStatus::Sent),
            (sql_status!(Error), MessageStatus::Error),
            (sql_status!(Bounced), MessageStatus::Bounced),
            (sql_status!(Delivered), MessageStatus::Delivered),
        ] {
            assert_eq!(literal, format!("'{status}'"));
        }
        let names: Vec<&str> = MessageStatus::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(MessageStatus::NAMES, names.join(", "));
        assert_eq!(MessageStatus::ALL_NAMES.as_slice(), names.as_slice());
        assert_eq!(sql_finished!(), "'SENT', 'ERROR', 'BOUNCED', 'DELIVERED'");
    }
}
