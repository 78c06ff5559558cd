//! An operator's change reaches the limiter's bookings (`paced`): a cancelled or retried
//! message's booking goes at once (its recipients given back; a retry takes a fresh decision),
//! and after `mailbox set-limits` (a raise or `--clear`) every booking of the mailbox goes and
//! the rows booked later are due now, so they go as soon as the new limits allow.
//!
//! Redis failing is not an operator's error: the change in PostgreSQL stands, the bookings then
//! expire by themselves after the grace (15 min), and the line written says so.

use std::time::Duration;

use chrono::Utc;
use sqlx::PgPool;
use uuid::Uuid;

use crate::{
    config::Config,
    domain::MailboxAddress,
    import::senders::{ImportError, ImportReport, SendersFile},
    rate_limit::MailRateLimiter,
    store::{StoreError, bookings},
};

/// The limiter's calls here wait this long at least (an operator waits, not a send): 2 s.
const DEADLINE: Duration = Duration::from_secs(2);

/// A limiter on `config`'s Redis with the operator's deadline; `None` (logged) when the URL
/// cannot be used.
fn limiter(config: &Config) -> Option<MailRateLimiter> {
    let mut settings = config.rate_limit.clone();
    settings.redis_timeout = settings.redis_timeout.max(DEADLINE);
    MailRateLimiter::new(&settings)
        .inspect_err(|error| tracing::warn!(%error, "bookings left to expire: no limiter"))
        .ok()
}

/// Drops the bookings of the messages `ids` (cancelled or retried); returns how many went.
///
/// # Errors
/// Database errors.
pub(crate) async fn unbook_messages(
    config: &Config,
    pool: &PgPool,
    ids: &[Uuid],
) -> Result<u64, StoreError> {
    if ids.is_empty() {
        return Ok(0);
    }
    let Some(limiter) = limiter(config) else {
        return Ok(0);
    };
    let mut dropped = 0;
    for (tenant, mailbox, ids) in bookings::senders_of(pool, ids).await? {
        let Ok(address) = MailboxAddress::parse(&mailbox) else {
            continue;
        };
        match limiter.unbook(&tenant, &address, &ids, Utc::now()).await {
            Ok(n) => dropped += n,
            Err(error) => left_to_expire(&address, &error),
        }
    }
    Ok(dropped)
}

/// `senders import` and `SENDERS_FILE`: `file` imported (nothing written when an entry is
/// bad), then, as after `mailbox set-limits`, the bookings each changed sender's old limits
/// made dropped. Returns the report and (bookings dropped, rows made due).
///
/// # Errors
/// [`ImportError`]: bad entries, or the database.
pub(crate) async fn import_senders(
    config: &Config,
    pool: &PgPool,
    file: &SendersFile,
) -> Result<(ImportReport, u64, u64), ImportError> {
    let report = crate::import::senders::import(pool, file).await?;
    let (mut dropped, mut due) = (0, 0);
    for address in &report.limits_changed {
        let (unbooked, made_due) = after_limit_change(config, pool, address).await?;
        (dropped, due) = (dropped + unbooked, due + made_due);
    }
    Ok((report, dropped, due))
}

/// After `mailbox`'s limits changed: every booking of it dropped, then its rows booked later
/// due now. Returns (bookings dropped, rows made due).
///
/// # Errors
/// Database errors.
pub(crate) async fn after_limit_change(
    config: &Config,
    pool: &PgPool,
    mailbox: &MailboxAddress,
) -> Result<(u64, u64), StoreError> {
    let tenant = bookings::tenant_of(pool, mailbox.as_str()).await?;
    let dropped = match limiter(config) {
        Some(limiter) => match limiter.unbook(&tenant, mailbox, &[], Utc::now()).await {
            Ok(n) => n,
            Err(error) => {
                left_to_expire(mailbox, &error);
                0
            }
        },
        None => 0,
    };
    let due = bookings::due_now_after_limit_change(pool, mailbox.as_str()).await?;
    Ok((dropped, due))
}

fn left_to_expire(mailbox: &MailboxAddress, error: &dyn std::error::Error) {
    tracing::warn!(
        mailbox = %mailbox,
        error.message = %error,
        "the limiter's bookings could not be dropped: they expire by themselves 15 min after their slots"
    );
}
