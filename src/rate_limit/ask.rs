//! What one send asks of the limiter, and the asks no budget can ever hold.

use std::num::NonZeroU32;

use uuid::Uuid;

use super::RateLimits;
use crate::domain::{MailboxAddress, Priority};

/// What one send asks of the limiter.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// `messages.id`: a booked slot belongs to it.
    pub message_id: Uuid,
    /// The sending mailbox.
    pub mailbox: &'a MailboxAddress,
    /// The Graph tenant the mailbox belongs to (`paced` keys share it as their hash tag, so
    /// the tenant budget is decided in the same atomic call).
    pub tenant: &'a str,
    /// To + Cc + Bcc.
    pub recipients: u32,
    /// The mailbox's budget.
    pub limits: RateLimits,
    /// The tenant's external budget and how many of the recipients count against it.
    pub tenant_budget: Option<(u32, NonZeroU32)>,
    /// The message's priority: with `paced` and a reserved share
    /// ([`RateLimits::reserved_percent`]), `high` may use the whole budget, ahead of bookings;
    /// `normal` and `bulk` only the rest. `fixed-window` ignores it.
    pub priority: Priority,
}

/// Failures a caller must act on. Redis trouble is *not* here: the limiter fails open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RateLimitError {
    /// The message alone has more recipients than the mailbox may send in a whole day: it can
    /// never fit and must fail permanently instead of being deferred day after day.
    #[error(
        "message has {recipients} recipients but mailbox {mailbox} may send to at most {recipients_per_day} recipients per day"
    )]
    RecipientsExceedDayLimit {
        /// The mailbox.
        mailbox: MailboxAddress,
        /// To + Cc + Bcc of the message.
        recipients: u32,
        /// The mailbox's day limit.
        recipients_per_day: u32,
    },
    /// The message alone has more external recipients than its tenant may send in a day.
    #[error(
        "message has {external} external recipients but its tenant may send to at most {per_day} external recipients per day"
    )]
    ExternalRecipientsExceedTenantLimit {
        /// External recipients of the message.
        external: u32,
        /// The tenant's day limit.
        per_day: u32,
    },
    /// The message has no recipients at all (To + Cc + Bcc = 0). Graph refuses such a message
    /// and there is nothing to count, so it fails permanently, without touching Redis.
    #[error("message from mailbox {mailbox} has no recipients (To + Cc + Bcc is 0)")]
    NoRecipients {
        /// The mailbox.
        mailbox: MailboxAddress,
    },
}

/// Validates what no budget can ever hold; shared by every algorithm.
pub(crate) fn never_fits(ask: &Ask<'_>) -> Result<(), RateLimitError> {
    if ask.recipients == 0 {
        return Err(RateLimitError::NoRecipients {
            mailbox: ask.mailbox.clone(),
        });
    }
    if ask.recipients > ask.limits.recipients_per_day.get() {
        return Err(RateLimitError::RecipientsExceedDayLimit {
            mailbox: ask.mailbox.clone(),
            recipients: ask.recipients,
            recipients_per_day: ask.limits.recipients_per_day.get(),
        });
    }
    if let Some((external, per_day)) = ask.tenant_budget
        && external > per_day.get()
    {
        return Err(RateLimitError::ExternalRecipientsExceedTenantLimit {
            external,
            per_day: per_day.get(),
        });
    }
    Ok(())
}
