//! The `fixed-window` keys and UTC bucket arithmetic (a contract: benchmarks, tests and
//! operators read counters through these builders).
//!
//! ```text
//! <prefix>:{<mailbox>}:m:<YYYYMMDDHHMM>   messages reserved in that UTC minute   TTL 120 s
//! <prefix>:{<mailbox>}:d:<YYYYMMDD>       recipients reserved in that UTC day     TTL 26 h
//! ```
//!
//! The braces are a Redis Cluster hash tag: both keys of one mailbox hash to one slot, so the
//! two-key scripts never fail with `CROSSSLOT`. (Redis hashes the text between the first `{`
//! and the next `}`; both keys share everything up to `:m:`/`:d:`, so they share the tag as long
//! as the prefix holds no empty `{}` and the address does not start with `}`.)

use chrono::{DateTime, Utc};

use crate::domain::MailboxAddress;

/// Seconds a minute key lives after its last reservation: 120 s, so a bucket outlives its
/// minute by one more minute and then disappears by itself. Mirrors `lua/fixed_window/check_and_reserve.lua`.
pub const MINUTE_KEY_TTL_SECS: u64 = 120;

/// Seconds a day key lives after its last reservation: 26 h (93,600 s), a UTC day plus two hours
/// of slack. Mirrors `lua/fixed_window/check_and_reserve.lua`.
pub const DAY_KEY_TTL_SECS: u64 = 26 * 60 * 60;

const MS_PER_MINUTE: i64 = 60_000;
const MS_PER_DAY: i64 = 86_400_000;

/// The minute counter's key for `mailbox` in the UTC minute of `now`:
/// `<prefix>:{<mailbox>}:m:<YYYYMMDDHHMM>`, e.g. `mail:rl:{events@contoso.example}:m:202506011200`.
pub fn minute_key(prefix: &str, mailbox: &MailboxAddress, now: DateTime<Utc>) -> String {
    format!("{prefix}:{{{mailbox}}}:m:{}", now.format("%Y%m%d%H%M"))
}

/// The day counter's key for `mailbox` in the UTC day of `now`:
/// `<prefix>:{<mailbox>}:d:<YYYYMMDD>`, e.g. `mail:rl:{events@contoso.example}:d:20250601`.
pub fn day_key(prefix: &str, mailbox: &MailboxAddress, now: DateTime<Utc>) -> String {
    format!("{prefix}:{{{mailbox}}}:d:{}", now.format("%Y%m%d"))
}

/// Milliseconds from `now` to the start of the next UTC minute, in `1..=60_000`
/// (12:00:59.999 → 1, 12:01:00.000 → 60,000). This is a minute denial's `retry_after`.
pub fn ms_left_in_minute(now: DateTime<Utc>) -> u64 {
    ms_left(now, MS_PER_MINUTE)
}

/// Milliseconds from `now` to the next UTC midnight, in `1..=86_400_000`. This is a day
/// denial's `retry_after`. UTC has no daylight-saving shifts, so every day is 86,400,000 ms.
pub fn ms_left_in_day(now: DateTime<Utc>) -> u64 {
    ms_left(now, MS_PER_DAY)
}

fn ms_left(now: DateTime<Utc>, period_ms: i64) -> u64 {
    // chrono shows a leap second as a sub-second part of 1,000–1,999 ms; count it as the last
    // millisecond of its second so it never spills into the next bucket.
    let millis = now.timestamp() * 1000 + i64::from(now.timestamp_subsec_millis().min(999));
    let left = period_ms - millis.rem_euclid(period_ms);
    // `left` is in 1..=period_ms, so it is positive and fits.
    u64::try_from(left).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Timelike};

    use super::*;

    fn at(h: u32, m: u32, s: u32, ms: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2025, 6, 1, h, m, s).unwrap()
            + chrono::Duration::milliseconds(i64::from(ms))
    }

    fn mailbox() -> MailboxAddress {
        MailboxAddress::parse("Events@Contoso.Example").unwrap()
    }

    #[test]
    fn keys_follow_the_contract_with_a_hash_tag_on_the_lower_cased_mailbox() {
        let now = at(12, 0, 59, 999);
        assert_eq!(
            minute_key("mail:rl", &mailbox(), now),
            "mail:rl:{events@contoso.example}:m:202506011200"
        );
        assert_eq!(
            day_key("mail:rl", &mailbox(), now),
            "mail:rl:{events@contoso.example}:d:20250601"
        );
        assert_eq!(
            minute_key("mail:rl", &mailbox(), at(12, 1, 0, 0)),
            "mail:rl:{events@contoso.example}:m:202506011201"
        );
        assert_eq!(
            day_key("mail:rl", &mailbox(), at(23, 59, 59, 999)),
            "mail:rl:{events@contoso.example}:d:20250601"
        );
    }

    #[test]
    fn ms_left_in_minute_counts_to_the_next_utc_minute() {
        assert_eq!(ms_left_in_minute(at(12, 0, 59, 999)), 1);
        assert_eq!(ms_left_in_minute(at(12, 1, 0, 0)), 60_000);
        assert_eq!(ms_left_in_minute(at(12, 0, 30, 250)), 29_750);
    }

    #[test]
    fn ms_left_in_day_counts_to_the_next_utc_midnight() {
        assert_eq!(ms_left_in_day(at(23, 59, 59, 999)), 1);
        assert_eq!(ms_left_in_day(at(0, 0, 0, 0)), 86_400_000);
        assert_eq!(ms_left_in_day(at(12, 0, 0, 0)), 43_200_000);
    }

    #[test]
    fn a_leap_second_counts_as_the_last_millisecond_of_its_second() {
        let leap = Utc
            .with_ymd_and_hms(2016, 12, 31, 23, 59, 59)
            .unwrap()
            .with_nanosecond(1_500_000_000)
            .unwrap();
        assert_eq!(ms_left_in_day(leap), 1);
        assert_eq!(ms_left_in_minute(leap), 1);
    }

    #[test]
    fn ttls_match_the_lua_script() {
        let lua = include_str!("../../../lua/fixed_window/check_and_reserve.lua");
        assert_eq!(MINUTE_KEY_TTL_SECS, 120);
        assert_eq!(DAY_KEY_TTL_SECS, 93_600);
        assert!(lua.contains("local MINUTE_TTL_S = 120\n"), "{lua}");
        assert!(lua.contains("local DAY_TTL_S = 93600\n"), "{lua}");
    }
}
