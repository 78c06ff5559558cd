//! `paced` (the default): per mailbox, rolling windows — at most L messages in any 60 s and at
//! most D recipients in any 24 h — with the minute's sends paced evenly (GCRA's virtual
//! scheduling), a booked slot for every message that does not fit now, in-flight leases, and a
//! cooldown shared by every replica. Scripts in `lua/paced/`, keys in [`keys`].
//!
//! A message that does not fit is told the earliest time at which every budget has room after
//! every message already waiting, and that slot is kept for it: when it returns it is allowed
//! without a second check of the budgets. So a backlog of B messages costs about 2B decisions
//! (booking, then the send) instead of one per message per minute. A booking never used (the
//! message failed, was cancelled or got stuck) is dropped [`BOOKING_GRACE`] after its slot and
//! its recipients are given back.

mod check;
pub mod keys;
mod seed;
mod unbook;

use std::time::Duration;

use chrono::{DateTime, Utc};
use redis::{Script, Value};

use self::keys::PacedKeys;
pub use self::seed::BookedRow;
pub(crate) use self::{
    check::{Checked, Seen},
    seed::FailOpenSend,
};
use super::{
    connection::{RedisCallError, RedisConn, replies},
    epoch_ms,
};

/// `lua/paced/check_and_reserve.lua` (contract in its header).
pub const CHECK_AND_RESERVE_LUA: &str = include_str!("../../../lua/paced/check_and_reserve.lua");
/// `lua/paced/release.lua`.
pub(crate) const RELEASE_LUA: &str = include_str!("../../../lua/paced/release.lua");
/// `lua/paced/cooldown.lua`.
pub(crate) const COOLDOWN_LUA: &str = include_str!("../../../lua/paced/cooldown.lua");
/// `lua/paced/seed.lua`.
pub(crate) const SEED_LUA: &str = include_str!("../../../lua/paced/seed.lua");
/// `lua/paced/seed_tenant.lua`.
pub(crate) const SEED_TENANT_LUA: &str = include_str!("../../../lua/paced/seed_tenant.lua");
/// `lua/paced/renew.lua`.
pub(crate) const RENEW_LUA: &str = include_str!("../../../lua/paced/renew.lua");
/// `lua/paced/read_lease.lua`.
pub(crate) const READ_LEASE_LUA: &str = include_str!("../../../lua/paced/read_lease.lua");
/// `lua/paced/unbook.lua`.
pub(crate) const UNBOOK_LUA: &str = include_str!("../../../lua/paced/unbook.lua");
/// `lua/paced/tenant_used_up.lua`.
pub(crate) const TENANT_USED_UP_LUA: &str = include_str!("../../../lua/paced/tenant_used_up.lua");
/// `lua/paced/mailbox_used_up.lua`.
pub(crate) const MAILBOX_USED_UP_LUA: &str = include_str!("../../../lua/paced/mailbox_used_up.lua");
/// `lua/paced/record_fail_open.lua`.
pub(crate) const RECORD_FAIL_OPEN_LUA: &str =
    include_str!("../../../lua/paced/record_fail_open.lua");

/// How late a send may run after its slot (the claim's wait, `SCHEDULER_INTERVAL`, and the
/// wait for a worker slot) without the rolling 60 s window ever holding more than L sends:
/// slots are spaced (60 s + this) / L apart. 2 s: that lateness with margin, at a cost of 1/31
/// of the minute budget (25 → 24.2).
pub const PACING_ALLOWANCE: Duration = Duration::from_secs(2);

/// A booking not used this long after its slot is dropped and its recipients given back:
/// 15 min (longer than a claim's wait and a worker's retries of a slow Redis).
pub const BOOKING_GRACE: Duration = Duration::from_secs(15 * 60);

/// The slot spacing for `per_minute`, as the script computes it.
pub(crate) fn spacing_ms(per_minute: u32) -> u64 {
    (60_000 + PACING_ALLOWANCE.as_millis() as u64).div_ceil(u64::from(per_minute.max(1)))
}

/// The fill mode of `tenant_used_up.lua` and `mailbox_used_up.lua`.
fn fill(whole_day: bool) -> String {
    if whole_day { "whole" } else { "window" }.to_owned()
}

/// The `paced` scripts and settings.
pub(crate) struct Paced {
    check: Script,
    release: Script,
    cooldown: Script,
    seed: Script,
    seed_tenant: Script,
    renew: Script,
    record_fail_open: Script,
    read_lease: Script,
    tenant_used_up: Script,
    mailbox_used_up: Script,
    unbook: Script,
    max_in_flight: u32,
    lease: Duration,
    caller_clock: bool,
}

impl Paced {
    /// The scripts; `caller_clock` (tests only) passes each caller's `now` instead of `TIME`.
    pub(crate) fn new(max_in_flight: u32, lease: Duration, caller_clock: bool) -> Self {
        Self {
            check: Script::new(CHECK_AND_RESERVE_LUA),
            release: Script::new(RELEASE_LUA),
            cooldown: Script::new(COOLDOWN_LUA),
            seed: Script::new(SEED_LUA),
            seed_tenant: Script::new(SEED_TENANT_LUA),
            renew: Script::new(RENEW_LUA),
            record_fail_open: Script::new(RECORD_FAIL_OPEN_LUA),
            read_lease: Script::new(READ_LEASE_LUA),
            tenant_used_up: Script::new(TENANT_USED_UP_LUA),
            mailbox_used_up: Script::new(MAILBOX_USED_UP_LUA),
            unbook: Script::new(UNBOOK_LUA),
            max_in_flight,
            lease,
            caller_clock,
        }
    }

    /// The in-flight lease.
    pub(crate) fn lease(&self) -> Duration {
        self.lease
    }

    /// `ARGV[1]` of every script but release: `TIME` (Redis's clock), or `now` in ms with the
    /// test-only caller clock.
    pub(crate) fn now_arg(&self, now: DateTime<Utc>) -> String {
        if self.caller_clock {
            epoch_ms(now).to_string()
        } else {
            "TIME".to_owned()
        }
    }

    /// Ends a request; returns (leases freed, 0 or 1; recipients given back to the mailbox).
    pub(crate) async fn release(
        &self,
        redis: &RedisConn,
        (keys, message_id, at_ms, external): (&PacedKeys, uuid::Uuid, i64, u32),
        recipients: u32,
        (unsent, took): (bool, Option<Duration>),
    ) -> Result<(i64, i64), RedisCallError> {
        let args = [
            message_id.to_string(),
            if unsent { "unsent" } else { "done" }.to_owned(),
            at_ms.to_string(),
            recipients.to_string(),
            external.to_string(),
            // How long the request ran (0: not measured): the mailbox's mean request duration,
            // which spaces the in-flight queue's turns.
            took.map_or(0, |d| (d.as_millis() as u64).max(1))
                .to_string(),
        ];
        let reply = redis.eval(&self.release, &keys.all(), &args).await?;
        replies::int_pair(&reply, "paced/release.lua")
    }

    /// Takes one in-flight lease `id` for a request that sends nothing (an Inbox read): `Ok(Ok(at
    /// ms))` when taken, `Ok(Err(retry ms))` when the mailbox is cooling down or full.
    pub(crate) async fn read_lease(
        &self,
        redis: &RedisConn,
        keys: &PacedKeys,
        id: uuid::Uuid,
        now: DateTime<Utc>,
    ) -> Result<Result<i64, i64>, RedisCallError> {
        let args = [
            self.now_arg(now),
            id.to_string(),
            self.max_in_flight.to_string(),
            (self.lease.as_millis() as u64).to_string(),
        ];
        let reply = redis.eval(&self.read_lease, &keys.all(), &args).await?;
        if let Value::Array(items) = &reply {
            match items.as_slice() {
                [Value::Int(1), Value::Int(at)] => return Ok(Ok(*at)),
                [Value::Int(0), Value::Int(wait)] => return Ok(Err(*wait)),
                _ => {}
            }
        }
        Err(RedisCallError::unexpected("paced/read_lease.lua", &reply))
    }

    /// Fills the tenant's external window up to `per_day` now (`whole_day`: adds the whole
    /// `per_day` now); returns (recipients added, when the first external recipient fits
    /// again, ms).
    pub(crate) async fn tenant_used_up(
        &self,
        redis: &RedisConn,
        keys: &PacedKeys,
        (per_day, whole_day): (u32, bool),
        now: DateTime<Utc>,
    ) -> Result<(i64, i64), RedisCallError> {
        let args = [self.now_arg(now), per_day.to_string(), fill(whole_day)];
        let reply = redis.eval(&self.tenant_used_up, &keys.all(), &args).await?;
        replies::int_pair(&reply, "paced/tenant_used_up.lua")
    }

    /// Fills the mailbox's day window up to `per_day` now (`whole_day`: adds the whole
    /// `per_day` now) and cools it down until the window frees; returns (recipients added,
    /// when it may send again, ms), or `None` when the mailbox has no state (its seed
    /// re-applies the pause).
    pub(crate) async fn mailbox_used_up(
        &self,
        redis: &RedisConn,
        keys: &PacedKeys,
        (per_day, whole_day): (u32, bool),
        now: DateTime<Utc>,
    ) -> Result<Option<(i64, i64)>, RedisCallError> {
        let args = [self.now_arg(now), per_day.to_string(), fill(whole_day)];
        let reply = redis
            .eval(&self.mailbox_used_up, &keys.all(), &args)
            .await?;
        let (added, free_at) = replies::int_pair(&reply, "paced/mailbox_used_up.lua")?;
        Ok((added >= 0).then_some((added, free_at)))
    }

    /// Extends a running attempt's lease by a full lease from now; returns whether the lease
    /// was still held (false: released, or expired and pruned).
    pub(crate) async fn renew(
        &self,
        redis: &RedisConn,
        keys: &PacedKeys,
        message_id: uuid::Uuid,
        now: DateTime<Utc>,
    ) -> Result<bool, RedisCallError> {
        let args = [
            self.now_arg(now),
            message_id.to_string(),
            (self.lease.as_millis() as u64).to_string(),
        ];
        let reply = redis.eval(&self.renew, &keys.all(), &args).await?;
        Ok(replies::int(&reply, "paced/renew.lua")? == 1)
    }

    /// Sets the lease of a send cut off mid-request to expire at `until_ms` (the limiter's
    /// clock: its latest request's start + `HTTP_TIMEOUT`), sooner or later than now;
    /// returns whether the lease was still held.
    pub(crate) async fn hold(
        &self,
        redis: &RedisConn,
        keys: &PacedKeys,
        message_id: uuid::Uuid,
        until_ms: i64,
    ) -> Result<bool, RedisCallError> {
        let args = [
            "0".to_owned(),
            message_id.to_string(),
            "0".to_owned(),
            until_ms.to_string(),
        ];
        let reply = redis.eval(&self.renew, &keys.all(), &args).await?;
        Ok(replies::int(&reply, "paced/renew.lua")? == 1)
    }

    /// Sets the mailbox's cooldown `until - now` from Redis's now; returns the cooldown in
    /// force (ms), 0 when not seeded.
    pub(crate) async fn cooldown(
        &self,
        redis: &RedisConn,
        keys: &PacedKeys,
        until: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<i64, RedisCallError> {
        let wait = (epoch_ms(until) - epoch_ms(now)).max(0);
        let args = [self.now_arg(now), wait.to_string()];
        let reply = redis.eval(&self.cooldown, &keys.all(), &args).await?;
        replies::int(&reply, "paced/cooldown.lua")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_leave_room_for_a_late_send() {
        assert_eq!(spacing_ms(25), 2_480);
        assert_eq!(spacing_ms(10), 6_200);
        assert_eq!(spacing_ms(30), 2_067);
        // L slots spaced this far apart span more than 60 s + the allowance.
        for l in [1u32, 7, 25, 30, 1_000] {
            assert!(u64::from(l) * spacing_ms(l) >= 62_000, "{l}");
        }
    }

    #[test]
    fn every_script_opens_with_its_contract() {
        for lua in [
            CHECK_AND_RESERVE_LUA,
            RELEASE_LUA,
            COOLDOWN_LUA,
            SEED_LUA,
            SEED_TENANT_LUA,
            RENEW_LUA,
            RECORD_FAIL_OPEN_LUA,
            READ_LEASE_LUA,
            TENANT_USED_UP_LUA,
            MAILBOX_USED_UP_LUA,
            UNBOOK_LUA,
        ] {
            assert!(lua.starts_with("-- KEYS[1]"), "{lua}");
            assert!(lua.lines().take(16).any(|l| l.starts_with("-- ARGV[1]")));
            assert!(lua.lines().take(16).any(|l| l.contains("Returns")));
        }
    }
}
