//! Bookings dropped before their slot (`lua/paced/unbook.lua`): a cancelled or retried message's,
//! or every booking of a mailbox whose limits changed.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{Paced, keys::PacedKeys};
use crate::rate_limit::connection::{RedisCallError, RedisConn, replies};

impl Paced {
    /// Drops the bookings of `ids` (none: every booking of the mailbox, and its next free slot
    /// back to now); returns (bookings dropped, recipients given back).
    pub(crate) async fn unbook(
        &self,
        redis: &RedisConn,
        keys: &PacedKeys,
        ids: &[Uuid],
        now: DateTime<Utc>,
    ) -> Result<(i64, i64), RedisCallError> {
        let args: Vec<String> = std::iter::once(self.now_arg(now))
            .chain(ids.iter().map(Uuid::to_string))
            .collect();
        let reply = redis.eval(&self.unbook, &keys.all(), &args).await?;
        replies::int_pair(&reply, "paced/unbook.lua")
    }
}
