//! A system mailbox's rate-limit overrides (`rate_limit_*` columns of `system_mailboxes`):
//! what `mailbox set-limits` and the admin UI's limits form change.

use std::num::NonZeroU32;

use sqlx::PgPool;

use crate::{
    domain::{MailboxAddress, sql_status},
    store::{Entity, StoreError},
};

/// A change to a system mailbox's rate-limit overrides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitsChange {
    /// Set the given overrides; a `None` leaves that override as it is.
    Set {
        /// Messages per minute (`paced`: any rolling 60 s).
        per_minute: Option<NonZeroU32>,
        /// Recipients per day (`paced`: any rolling 24 h).
        recipients_per_day: Option<NonZeroU32>,
        /// Percent of each budget reserved for `high` (0 to 90).
        reserved_percent: Option<u8>,
    },
    /// Set every override exactly: a `None` removes that override (back to its default) —
    /// what the admin UI's form does.
    Replace {
        /// Messages per minute (`paced`: any rolling 60 s).
        per_minute: Option<NonZeroU32>,
        /// Recipients per day (`paced`: any rolling 24 h).
        recipients_per_day: Option<NonZeroU32>,
        /// Percent of each budget reserved for `high` (0 to 90).
        reserved_percent: Option<u8>,
    },
    /// Remove every override (back to the defaults).
    Clear,
}

/// A system mailbox's rate-limit overrides (`None`: the default applies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Overrides {
    /// `rate_limit_per_minute`.
    pub per_minute: Option<NonZeroU32>,
    /// `rate_limit_recipients_per_day`.
    pub recipients_per_day: Option<NonZeroU32>,
    /// `rate_limit_reserved_percent`.
    pub reserved_percent: Option<u8>,
}

/// Changes a system mailbox's rate-limit overrides — what `mailbox set-limits` and the admin
/// UI do. The next message from that mailbox uses them; no restart. Returns the overrides now
/// in force.
///
/// # Errors
/// [`StoreError::NotFound`] naming the address when no such system mailbox exists; a reserved
/// share over 90 breaks the column's CHECK.
pub async fn set_limits(
    pool: &PgPool,
    address: &MailboxAddress,
    change: LimitsChange,
) -> Result<Overrides, StoreError> {
    // `keep`: a `None` leaves that override as it is (`Set`); otherwise it becomes NULL.
    let (keep, given) = match change {
        LimitsChange::Set {
            per_minute,
            recipients_per_day,
            reserved_percent,
        } => (true, (per_minute, recipients_per_day, reserved_percent)),
        LimitsChange::Replace {
            per_minute,
            recipients_per_day,
            reserved_percent,
        } => (false, (per_minute, recipients_per_day, reserved_percent)),
        LimitsChange::Clear => (false, (None, None, None)),
    };
    let row: Option<(Option<i32>, Option<i32>, Option<i32>)> = sqlx::query_as(
        "UPDATE system_mailboxes SET \
             rate_limit_per_minute = CASE WHEN $4 THEN coalesce($2, rate_limit_per_minute) ELSE $2 END, \
             rate_limit_recipients_per_day = \
                 CASE WHEN $4 THEN coalesce($3, rate_limit_recipients_per_day) ELSE $3 END, \
             rate_limit_reserved_percent = \
                 CASE WHEN $4 THEN coalesce($5, rate_limit_reserved_percent) ELSE $5 END, \
             updated_at = now() \
         WHERE address = $1 \
         RETURNING rate_limit_per_minute, rate_limit_recipients_per_day, rate_limit_reserved_percent",
    )
    .bind(address.as_str())
    .bind(given.0.map(|v| v.get().min(i32::MAX as u32) as i32))
    .bind(given.1.map(|v| v.get().min(i32::MAX as u32) as i32))
    .bind(keep)
    .bind(given.2.map(i32::from))
    .fetch_optional(pool)
    .await?;
    let Some((m, d, r)) = row else {
        return Err(StoreError::NotFound {
            entity: Entity::SystemMailbox,
            key: address.to_string(),
        });
    };
    Ok(Overrides::from_columns(m, d, r))
}

/// The unfinished messages of a system mailbox with more recipients than `per_day`, and the
/// most recipients any of them has: a day budget lowered below them fails each one
/// (`RecipientsExceedDayLimit`), so `mailbox set-limits` warns first.
///
/// # Errors
/// [`StoreError::Db`] when PostgreSQL fails.
pub async fn waiting_above(
    pool: &PgPool,
    address: &MailboxAddress,
    per_day: NonZeroU32,
) -> Result<(u64, u64), StoreError> {
    let (count, most): (i64, i64) = sqlx::query_as(concat!(
        "SELECT count(*), coalesce(max(r.n), 0) FROM messages m \
         JOIN system_mailboxes s ON s.id = m.system_mailbox_id \
         CROSS JOIN LATERAL (SELECT (jsonb_array_length(m.to_recipients) \
             + jsonb_array_length(m.cc_recipients) + jsonb_array_length(m.bcc_recipients))::int8 AS n) r \
         WHERE s.address = $1 AND m.status IN (",
        sql_status!(Scheduled),
        ", ",
        sql_status!(Sending),
        ") AND r.n > $2"
    ))
    .bind(address.as_str())
    .bind(i64::from(per_day.get()))
    .fetch_one(pool)
    .await?;
    Ok((count.unsigned_abs(), most.unsigned_abs()))
}

/// A system mailbox's rate-limit overrides as they are now (`None`: no such mailbox); the
/// senders import compares them with the file's to drop bookings the old ones made.
///
/// # Errors
/// [`StoreError::Db`] when PostgreSQL fails.
pub async fn overrides_of(
    pool: &PgPool,
    address: &MailboxAddress,
) -> Result<Option<Overrides>, StoreError> {
    let row: Option<(Option<i32>, Option<i32>, Option<i32>)> = sqlx::query_as(
        "SELECT rate_limit_per_minute, rate_limit_recipients_per_day, rate_limit_reserved_percent \
         FROM system_mailboxes WHERE address = $1",
    )
    .bind(address.as_str())
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|(m, d, r)| Overrides::from_columns(m, d, r)))
}

impl Overrides {
    /// The three columns as read (a value out of range reads as no override).
    fn from_columns(m: Option<i32>, d: Option<i32>, r: Option<i32>) -> Self {
        let positive = |v: Option<i32>| {
            v.and_then(|v| u32::try_from(v).ok())
                .and_then(NonZeroU32::new)
        };
        Self {
            per_minute: positive(m),
            recipients_per_day: positive(d),
            reserved_percent: r.and_then(|r| u8::try_from(r).ok()),
        }
    }
}
