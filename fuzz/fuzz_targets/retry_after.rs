//! Fuzzes `Retry-After` parsing: it must never panic; whole seconds parse exactly; a delay is
//! never negative (it is a `Duration`) and an HTTP-date never yields more than the time to it.
#![no_main]

use chrono::TimeZone;
use libfuzzer_sys::fuzz_target;
use mail_worker::mailer::graph::parse_retry_after;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let now = chrono::Utc.with_ymd_and_hms(2025, 3, 1, 12, 0, 0).unwrap();
    let parsed = parse_retry_after(Some(text), now);
    let trimmed = text.trim();
    if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit()) {
        if let Ok(seconds) = trimmed.parse::<u64>() {
            assert_eq!(parsed, Some(std::time::Duration::from_secs(seconds)));
        }
    }
});
