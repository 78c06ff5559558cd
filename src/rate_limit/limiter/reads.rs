//! What the bounce reader asks of the limiter (`crate::bounces`): an in-flight lease for each
//! Inbox request, in the same set as the sends (Exchange's 4 concurrent requests count every
//! request). The pauses an NDR starts: `pauses.rs`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{Engine, MailRateLimiter};
use crate::{
    domain::MailboxAddress,
    rate_limit::{Counted, RedisCallError, Reservation, paced::keys::PacedKeys},
};

/// The answer to [`MailRateLimiter::read_lease`].
#[derive(Debug)]
pub(crate) enum ReadLease {
    /// Taken: release it as [`crate::rate_limit::RequestEnd::Done`] when the request ends.
    Taken(Reservation),
    /// Not now: the mailbox is cooling down or has every in-flight slot taken; ask again after
    /// this.
    Wait(Duration),
}

impl MailRateLimiter {
    /// One in-flight lease of `mailbox` (Graph tenant `tenant`) for a request that sends
    /// nothing. `fixed-window` keeps no leases: always taken, uncounted.
    ///
    /// # Errors
    /// A Redis failure: the caller skips the read (nothing fails open here).
    pub(crate) async fn read_lease(
        &self,
        tenant: &str,
        mailbox: &MailboxAddress,
        now: DateTime<Utc>,
    ) -> Result<ReadLease, RedisCallError> {
        let Engine::Paced(paced) = &self.engine else {
            return Ok(ReadLease::Taken(Reservation::uncounted(mailbox.clone(), 0)));
        };
        let keys = PacedKeys::new(&self.key_prefix, tenant, mailbox);
        let id = Uuid::new_v4();
        Ok(match paced.read_lease(&self.redis, &keys, id, now).await? {
            Ok(at_ms) => ReadLease::Taken(Reservation {
                mailbox: mailbox.clone(),
                recipients: 0,
                counted: Counted::Paced {
                    keys: Box::new(keys),
                    message_id: id,
                    at_ms,
                    external: 0,
                },
            }),
            Err(wait_ms) => ReadLease::Wait(Duration::from_millis(
                u64::try_from(wait_ms).unwrap_or(1_000),
            )),
        })
    }

    /// Drops the bookings of `ids` from `mailbox` (Graph tenant `tenant`) — none: every
    /// booking of the mailbox, after its limits changed — so their messages take a fresh
    /// decision; returns the bookings dropped. 0 with `fixed-window` (it books nothing).
    ///
    /// # Errors
    /// A Redis failure (the bookings then expire by themselves after the grace).
    pub async fn unbook(
        &self,
        tenant: &str,
        mailbox: &MailboxAddress,
        ids: &[Uuid],
        now: DateTime<Utc>,
    ) -> Result<u64, RedisCallError> {
        let Engine::Paced(paced) = &self.engine else {
            return Ok(0);
        };
        let keys = PacedKeys::new(&self.key_prefix, tenant, mailbox);
        let (dropped, _recipients) = paced.unbook(&self.redis, &keys, ids, now).await?;
        Ok(u64::try_from(dropped).unwrap_or(0))
    }

    /// [`Self::unbook`], a Redis failure logged (the bookings expire after the grace): for
    /// a pooled message that went to another sender before its slot.
    pub(crate) async fn unbook_or_log(
        &self,
        tenant: &str,
        mailbox: &MailboxAddress,
        ids: &[Uuid],
        now: DateTime<Utc>,
    ) {
        if let Err(error) = self.unbook(tenant, mailbox, ids, now).await {
            tracing::warn!(
                event = crate::log_events::MAIL_RATE_LIMIT_REDIS_ERROR,
                %error,
                "a booking could not be dropped: it expires after the booking grace"
            );
        }
    }
}
