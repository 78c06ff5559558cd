//! Why a `SCHEDULED` message waits, and until when, in words (`mail-worker messages list|show`,
//! the admin UI) and as counts (`mail_worker_messages_waiting{reason}`).
//!
//! The reason is what the last attempt wrote into `messages.wait_reason` (a limiter's deny
//! reason, the provider's cooldown, a retry's backoff, a paused sender, an unconfirmed send);
//! a row no attempt has touched waits for the `scheduledOn` its producer gave, or is due.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::{StoreError, messages::wait_reason};
use crate::domain::{keyword::keywords, sql_status};

/// Why a `SCHEDULED` row waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitReason {
    /// The mailbox's per-minute message budget (its next pacing slot).
    Minute,
    /// The mailbox's 24 h recipient budget.
    Day,
    /// The Graph tenant's 24 h external-recipient budget.
    Tenant,
    /// The provider's `Retry-After` for the mailbox.
    Cooldown,
    /// The mailbox's cap of requests in flight.
    InFlight,
    /// An adaptive rule or an operator suspended its mailbox, tenant or campaign.
    Suspended,
    /// Its sender is paused (credentials missing or refused).
    Paused,
    /// A transient failure's backoff.
    Retry,
    /// An earlier attempt's outcome is not confirmed yet.
    Unconfirmed,
    /// The producer's `scheduledOn`.
    Scheduled,
    /// Nothing: it is due and waits for a worker's claim.
    Due,
}

keywords!(WaitReason {
    Minute => "minute",
    Day => "day",
    Tenant => "tenant",
    Cooldown => "cooldown",
    InFlight => "in_flight",
    Suspended => "suspended",
    Paused => "paused",
    Retry => "retry",
    Unconfirmed => "unconfirmed",
    Scheduled => "scheduled",
    Due => "due",
});

/// The SQL that names a `SCHEDULED` row's [`WaitReason`] (columns of `messages m`).
macro_rules! wait_reason_sql {
    () => {
        "CASE WHEN m.wait_reason IS NOT NULL THEN m.wait_reason \
              WHEN m.scheduled_on > now() THEN 'scheduled' ELSE 'due' END"
    };
}
pub(crate) use wait_reason_sql;

impl WaitReason {
    /// The reason of a row whose `wait_reason` column holds `column` (what
    /// [`wait_reason_sql`] selected); an unknown value (a newer replica's) reads as a retry.
    pub(crate) fn of(column: &str) -> Self {
        match column {
            wait_reason::PAUSED => Self::Paused,
            other => other.parse().unwrap_or(Self::Retry),
        }
    }

    /// In words, for a message from `mailbox` due at `until`, read at `now`: "waiting for
    /// hr@contoso.example's 24 h recipient budget; booked 09:12:30 UTC".
    pub fn describe(self, mailbox: &str, until: DateTime<Utc>, now: DateTime<Utc>) -> String {
        let at = when(until, now);
        match self {
            Self::Minute => {
                format!("waiting for {mailbox}'s per-minute message budget; booked {at}")
            }
            Self::Day => format!("waiting for {mailbox}'s 24 h recipient budget; booked {at}"),
            Self::Tenant => format!(
                "waiting for the Graph tenant's 24 h external-recipient budget ({mailbox}); booked {at}"
            ),
            Self::Cooldown => {
                format!("waiting for {mailbox}'s cooldown (the provider's Retry-After) until {at}")
            }
            Self::InFlight => format!(
                "waiting for one of {mailbox}'s requests in flight to finish; next try {at}"
            ),
            Self::Suspended => format!(
                "suspended (an adaptive rule or an operator: mailbox usage shows which) for {mailbox}; next try {at}"
            ),
            Self::Paused => format!(
                "waiting for its sender {mailbox} to resume (paused: credentials missing or refused); next probe {at}"
            ),
            Self::Retry => format!("waiting to retry after a transient failure; next try {at}"),
            Self::Unconfirmed => {
                format!("waiting to confirm an earlier attempt's outcome; next look {at}")
            }
            Self::Scheduled => format!("scheduled by its producer for {at}"),
            Self::Due => format!("due since {at}; waiting for a worker"),
        }
    }
}

/// `09:12:30 UTC` on `now`'s UTC day, else `2026-12-03 09:12:30 UTC`.
fn when(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    if at.date_naive() == now.date_naive() {
        at.format("%H:%M:%S UTC").to_string()
    } else {
        at.format("%Y-%m-%d %H:%M:%S UTC").to_string()
    }
}

/// `SCHEDULED` rows by [`WaitReason`], every reason present (0 when none).
///
/// # Errors
/// Database errors.
pub async fn count_waiting(pool: &PgPool) -> Result<Vec<(WaitReason, i64)>, StoreError> {
    let rows: Vec<(String, i64)> = sqlx::query_as(concat!(
        "SELECT ",
        wait_reason_sql!(),
        ", count(*) FROM messages m WHERE m.status = ",
        sql_status!(Scheduled),
        " GROUP BY 1"
    ))
    .fetch_all(pool)
    .await?;
    Ok(WaitReason::ALL
        .iter()
        .map(|&reason| {
            let n = rows
                .iter()
                .filter(|(column, _)| WaitReason::of(column) == reason)
                .map(|(_, n)| n)
                .sum();
            (reason, n)
        })
        .collect())
}

/// How long the oldest due `SCHEDULED` row has been due, seconds (0 when none is): a backlog
/// nothing claims grows this.
///
/// # Errors
/// Database errors.
pub async fn oldest_due_seconds(pool: &PgPool) -> Result<f64, StoreError> {
    Ok(sqlx::query_scalar(concat!(
        "SELECT coalesce(extract(epoch FROM now() - min(scheduled_on)), 0)::float8 \
         FROM messages WHERE status = ",
        sql_status!(Scheduled),
        " AND scheduled_on <= now()"
    ))
    .fetch_one(pool)
    .await?)
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn every_reason_reads_back_from_its_column_and_is_said_in_words() {
        let now = Utc.with_ymd_and_hms(2026, 12, 2, 9, 0, 0).unwrap();
        let until = now + chrono::Duration::seconds(750);
        for &reason in WaitReason::ALL {
            assert_eq!(WaitReason::of(reason.as_str()), reason);
            let words = reason.describe("hr@contoso.example", until, now);
            assert!(words.contains("09:12:30 UTC"), "{reason}: {words}");
        }
        assert_eq!(
            WaitReason::Day.describe("hr@contoso.example", until, now),
            "waiting for hr@contoso.example's 24 h recipient budget; booked 09:12:30 UTC"
        );
        assert_eq!(
            WaitReason::Scheduled.describe("x@y.example", until + chrono::Duration::days(1), now),
            "scheduled by its producer for 2026-12-03 09:12:30 UTC"
        );
        assert_eq!(WaitReason::of("something-new"), WaitReason::Retry);
    }
}
