//! The `paced` decision: `lua/paced/check_and_reserve.lua`'s arguments and its reply.

use std::time::Duration;

use chrono::{DateTime, Utc};
use redis::Value;

use super::{BOOKING_GRACE, PACING_ALLOWANCE, Paced, keys::PacedKeys};
use crate::rate_limit::{
    Ask, Counted, Decision, DenyReason, Reservation,
    connection::{RedisCallError, RedisConn},
    text,
};

/// What the check script said.
pub(crate) enum Checked {
    /// The decision, the time Redis decided at (ms) and the mailbox's recipients in its 24 h
    /// window (bookings included) after it.
    Decided(Decision, Seen),
    /// The mailbox has no state: seed it, then ask again.
    NeedsSeed,
    /// The message counts against a tenant budget that has no state: seed the tenant, then
    /// ask again.
    NeedsTenantSeed,
}

/// What a script reported of the mailbox: the time it decided at (ms, the limiter's clock) and
/// the recipients in its 24 h window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    pub now_ms: i64,
    pub total: i64,
}

impl Paced {
    /// Decides `ask` on the mailbox's `keys`, or says which state must be seeded first.
    pub(crate) async fn check(
        &self,
        redis: &RedisConn,
        keys: &PacedKeys,
        ask: &Ask<'_>,
        now: DateTime<Utc>,
    ) -> Result<Checked, RedisCallError> {
        let (external, tenant_per_day) = ask
            .tenant_budget
            .map_or((0, 0), |(external, per_day)| (external, per_day.get()));
        let args = [
            self.now_arg(now),
            ask.message_id.to_string(),
            ask.limits.per_minute.to_string(),
            ask.limits.recipients_per_day.to_string(),
            ask.recipients.to_string(),
            external.min(ask.recipients).to_string(),
            tenant_per_day.to_string(),
            self.max_in_flight.to_string(),
            (self.lease.as_millis() as u64).to_string(),
            (PACING_ALLOWANCE.as_millis() as u64).to_string(),
            (BOOKING_GRACE.as_millis() as u64).to_string(),
            ask.priority.as_str().to_owned(),
            ask.limits.reserved_percent.to_string(),
        ];
        let reply = redis.eval(&self.check, &keys.all(), &args).await?;
        let unexpected = || RedisCallError::unexpected("paced/check_and_reserve.lua", &reply);
        let Value::Array(items) = &reply else {
            return Err(unexpected());
        };
        Ok(match items.as_slice() {
            [
                Value::Int(1),
                Value::Int(_),
                reason,
                Value::Int(now_ms),
                Value::Int(total),
            ] if text(reason) == Some("ok") => Checked::Decided(
                Decision::Allowed(Reservation {
                    mailbox: ask.mailbox.clone(),
                    recipients: ask.recipients,
                    counted: Counted::Paced {
                        keys: Box::new(keys.clone()),
                        message_id: ask.message_id,
                        at_ms: *now_ms,
                        external: if tenant_per_day > 0 { external } else { 0 },
                    },
                }),
                Seen {
                    now_ms: *now_ms,
                    total: *total,
                },
            ),
            [
                Value::Int(0),
                Value::Int(ms),
                reason,
                Value::Int(now_ms),
                Value::Int(total),
            ] => {
                let reason = text(reason)
                    .and_then(DenyReason::parse)
                    .ok_or_else(unexpected)?;
                let ms = u64::try_from(*ms).map_err(|_| unexpected())?;
                Checked::Decided(
                    Decision::Denied {
                        reason,
                        retry_after: Duration::from_millis(ms),
                        booked: reason != DenyReason::InFlight,
                    },
                    Seen {
                        now_ms: *now_ms,
                        total: *total,
                    },
                )
            }
            [Value::Int(-1), Value::Int(0), reason] => match text(reason) {
                Some("seed") => Checked::NeedsSeed,
                Some("seed-tenant") => Checked::NeedsTenantSeed,
                _ => return Err(unexpected()),
            },
            _ => return Err(unexpected()),
        })
    }
}
