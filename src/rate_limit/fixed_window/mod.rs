//! `fixed-window`: the design note's algorithm, byte for byte — per mailbox one counter per UTC
//! minute (messages) and one per UTC day (recipients), checked and incremented by
//! `lua/fixed_window/check_and_reserve.lua`, given back by `lua/fixed_window/release.lua`. Kept
//! as the baseline: it lets a mailbox send 2 × its minute limit across a minute edge and 2 × its
//! day limit across midnight, has no in-flight cap and no cooldown.

pub mod keys;

use std::time::Duration;

use chrono::{DateTime, Utc};
use redis::{Script, Value};

use super::{
    Ask, Counted, Decision, DenyReason, Reservation,
    connection::{RedisCallError, RedisConn, replies},
};

/// `lua/fixed_window/check_and_reserve.lua`: the atomic check-and-reserve (contract in its header).
pub const CHECK_AND_RESERVE_LUA: &str =
    include_str!("../../../lua/fixed_window/check_and_reserve.lua");
/// `lua/fixed_window/release.lua`: gives one reservation back (contract in its header).
pub(crate) const RELEASE_LUA: &str = include_str!("../../../lua/fixed_window/release.lua");

/// The `fixed-window` scripts.
pub(crate) struct FixedWindow {
    check: Script,
    release: Script,
}

impl FixedWindow {
    pub(crate) fn new() -> Self {
        Self {
            check: Script::new(CHECK_AND_RESERVE_LUA),
            release: Script::new(RELEASE_LUA),
        }
    }

    /// Checks and reserves `ask` in the counters of `now`'s UTC minute and day.
    pub(crate) async fn check_and_reserve(
        &self,
        redis: &RedisConn,
        prefix: &str,
        ask: &Ask<'_>,
        now: DateTime<Utc>,
    ) -> Result<Decision, RedisCallError> {
        let minute_key = keys::minute_key(prefix, ask.mailbox, now);
        let day_key = keys::day_key(prefix, ask.mailbox, now);
        let args = [
            u64::from(ask.limits.per_minute.get()),
            u64::from(ask.limits.recipients_per_day.get()),
            u64::from(ask.recipients),
            keys::ms_left_in_minute(now),
            keys::ms_left_in_day(now),
        ]
        .map(|n| n.to_string());
        let reply = redis
            .eval(&self.check, &[&minute_key, &day_key], &args)
            .await?;
        Ok(match decode_check_reply(&reply)? {
            None => Decision::Allowed(Reservation {
                mailbox: ask.mailbox.clone(),
                recipients: ask.recipients,
                counted: Counted::FixedWindow(minute_key, day_key),
            }),
            Some((reason, retry_after)) => Decision::Denied {
                reason,
                retry_after,
                booked: false,
            },
        })
    }

    /// Gives back both counters; returns them after the release.
    pub(crate) async fn release(
        &self,
        redis: &RedisConn,
        (minute_key, day_key): (&str, &str),
        recipients: u32,
    ) -> Result<(i64, i64), RedisCallError> {
        let reply = redis
            .eval(
                &self.release,
                &[minute_key, day_key],
                &[recipients.to_string()],
            )
            .await?;
        decode_release_reply(&reply)
    }
}

/// `{1, 0, "ok"}` → `None` (reserved); `{0, ms, "minute" | "day"}` → the denial.
fn decode_check_reply(value: &Value) -> Result<Option<(DenyReason, Duration)>, RedisCallError> {
    let unexpected = || RedisCallError::unexpected("fixed_window/check_and_reserve.lua", value);
    let Value::Array(items) = value else {
        return Err(unexpected());
    };
    match items.as_slice() {
        [Value::Int(1), Value::Int(0), reason] if super::text(reason) == Some("ok") => Ok(None),
        [Value::Int(0), Value::Int(ms), reason] => {
            let reason = match super::text(reason) {
                Some("minute") => DenyReason::Minute,
                Some("day") => DenyReason::Day,
                _ => return Err(unexpected()),
            };
            let ms = u64::try_from(*ms).map_err(|_| unexpected())?;
            Ok(Some((reason, Duration::from_millis(ms))))
        }
        _ => Err(unexpected()),
    }
}

/// `{minute counter, day counter}` after the release.
fn decode_release_reply(value: &Value) -> Result<(i64, i64), RedisCallError> {
    replies::int_pair(value, "fixed_window/release.lua")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn check_replies_decode_per_the_contract() {
        let ok = Value::Array(vec![Value::Int(1), Value::Int(0), bulk("ok")]);
        assert_eq!(decode_check_reply(&ok).unwrap(), None);
        let minute = Value::Array(vec![Value::Int(0), Value::Int(1), bulk("minute")]);
        assert_eq!(
            decode_check_reply(&minute).unwrap(),
            Some((DenyReason::Minute, Duration::from_millis(1)))
        );
        let day = Value::Array(vec![Value::Int(0), Value::Int(86_400_000), bulk("day")]);
        assert_eq!(
            decode_check_reply(&day).unwrap(),
            Some((DenyReason::Day, Duration::from_secs(86_400)))
        );
    }

    #[test]
    fn replies_outside_the_contract_are_script_errors() {
        for bad in [
            Value::Nil,
            Value::Array(vec![Value::Int(1), Value::Int(0)]),
            Value::Array(vec![Value::Int(0), Value::Int(5), bulk("hour")]),
            Value::Array(vec![Value::Int(0), Value::Int(-5), bulk("minute")]),
            Value::Array(vec![Value::Int(2), Value::Int(0), bulk("ok")]),
        ] {
            let err = decode_check_reply(&bad).unwrap_err();
            assert!(!err.is_connectivity(), "{err}");
            assert_eq!(err.kind(), "reply");
        }
        assert!(decode_release_reply(&Value::Int(3)).is_err());
        assert_eq!(
            decode_release_reply(&Value::Array(vec![Value::Int(2), Value::Int(40)])).unwrap(),
            (2, 40)
        );
    }

    #[test]
    fn lua_files_open_with_the_contract_header() {
        for lua in [CHECK_AND_RESERVE_LUA, RELEASE_LUA] {
            let mut lines = lua.lines();
            assert_eq!(
                lines.next(),
                Some("-- KEYS[1]  minute counter key      KEYS[2]  day counter key")
            );
            assert!(lines.next().unwrap().starts_with("-- ARGV[1]"));
            assert!(lua.lines().take(8).any(|l| l.starts_with("-- Returns")));
        }
    }
}
