//! Parses a `Retry-After` header value (RFC 9110 §10.2.3) into a delay, relative to an
//! injected `now` so HTTP-dates are testable.

use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};

/// The delay a `Retry-After` value asks for:
/// - whole seconds (`120`) → 120 s;
/// - decimal seconds (`2.128`, which Graph sometimes sends) → rounded **up** to whole seconds (3 s);
/// - an HTTP-date (`Wed, 21 Oct 2015 07:28:00 GMT`, also the obsolete RFC 850 and asctime
///   forms) → the time from `now` to that date, [`Duration::ZERO`] when it is past;
/// - missing, empty, negative or garbage → `None` (the caller backs off exponentially).
pub fn parse_retry_after(value: Option<&str>, now: DateTime<Utc>) -> Option<Duration> {
    let value = value?.trim();
    if value.is_empty() || value.starts_with('-') {
        return None;
    }
    if let Some(seconds) = parse_seconds(value) {
        return Some(Duration::from_secs(seconds));
    }
    let at = parse_http_date(value)?;
    Some((at - now).to_std().unwrap_or(Duration::ZERO))
}

/// `120` → 120, `2.128` → 3, `2.000` → 2; anything else (signs, exponents, `1.`) → `None`.
fn parse_seconds(value: &str) -> Option<u64> {
    let (whole, fraction) = match value.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (value, None),
    };
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let whole: u64 = whole.parse().ok()?;
    match fraction {
        None => Some(whole),
        Some(f) if f.is_empty() || !f.bytes().all(|b| b.is_ascii_digit()) => None,
        Some(f) if f.bytes().any(|b| b != b'0') => whole.checked_add(1),
        Some(_) => Some(whole),
    }
}

/// IMF-fixdate (via RFC 2822), RFC 850 and asctime forms, all in GMT.
fn parse_http_date(value: &str) -> Option<DateTime<Utc>> {
    if let Ok(at) = DateTime::parse_from_rfc2822(value) {
        return Some(at.with_timezone(&Utc));
    }
    for format in ["%A, %d-%b-%y %H:%M:%S GMT", "%a %b %e %H:%M:%S %Y"] {
        if let Ok(naive) = NaiveDateTime::parse_from_str(value, format) {
            return Some(naive.and_utc());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2015, 10, 21, 7, 28, 0).unwrap()
    }

    #[test]
    fn the_retry_after_table_parses_with_a_fixed_clock() {
        let table: [(Option<&str>, Option<Duration>); 18] = [
            (Some("120"), Some(Duration::from_secs(120))),
            (Some(" 7 "), Some(Duration::from_secs(7))),
            (Some("0"), Some(Duration::ZERO)),
            (Some("2.128"), Some(Duration::from_secs(3))),
            (Some("0.001"), Some(Duration::from_secs(1))),
            (Some("2.000"), Some(Duration::from_secs(2))),
            (
                Some("Wed, 21 Oct 2015 07:30:00 GMT"),
                Some(Duration::from_secs(120)),
            ),
            (
                Some("Wednesday, 21-Oct-15 07:28:30 GMT"),
                Some(Duration::from_secs(30)),
            ),
            (
                Some("Wed Oct 21 07:29:00 2015"),
                Some(Duration::from_secs(60)),
            ),
            (Some("Wed, 21 Oct 2015 07:27:59 GMT"), Some(Duration::ZERO)),
            (Some("Thu, 01 Jan 1970 00:00:00 GMT"), Some(Duration::ZERO)),
            (Some("-5"), None),
            (Some("-2.5"), None),
            (Some("soon"), None),
            (Some("1e3"), None),
            (Some("1."), None),
            (Some(""), None),
            (None, None),
        ];
        for (value, expected) in table {
            assert_eq!(parse_retry_after(value, now()), expected, "{value:?}");
        }
    }

    #[test]
    fn an_http_date_counts_from_the_injected_now_to_the_millisecond() {
        let now = now() + chrono::Duration::milliseconds(250);
        assert_eq!(
            parse_retry_after(Some("Wed, 21 Oct 2015 07:28:10 GMT"), now),
            Some(Duration::from_millis(9_750))
        );
    }

    proptest::proptest! {
        /// parse ∘ render = id: whole seconds and an IMF-fixdate (RFC 9110 §5.6.7) rendered
        /// from a delay parse back to that delay.
        #[test]
        fn a_rendered_retry_after_parses_back_to_its_delay(seconds in 0u64..10_000_000) {
            let expected = Some(Duration::from_secs(seconds));
            proptest::prop_assert_eq!(parse_retry_after(Some(&seconds.to_string()), now()), expected);
            let at = now() + chrono::Duration::seconds(seconds as i64);
            let date = at.format("%a, %d %b %Y %H:%M:%S GMT").to_string();
            proptest::prop_assert_eq!(parse_retry_after(Some(&date), now()), expected);
        }

        /// Arbitrary text never panics, and a parsed delay is never negative.
        #[test]
        fn arbitrary_text_never_panics(text in "\\PC{0,40}") {
            let _ = parse_retry_after(Some(&text), now());
        }
    }
}
