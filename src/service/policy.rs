//! The retry policy's arithmetic: the per-message spread of a deferral, the backoff of a
//! transient failure or a throttle without `Retry-After`, and how a wait reads in `last_error`.

use std::{hash::Hasher, time::Duration};

use uuid::Uuid;

/// The per-message spread in ms: FNV-1a 64-bit over the UTF-8 bytes of the id's canonical
/// lower-case hyphenated form (no terminator byte), modulo `max_ms`. Deterministic, so the
/// same message always gets the same extra delay and 200 messages denied in the same second
/// resume spread over `max_ms` instead of all at once. `max_ms = 0` gives 0.
pub fn spread_ms(id: Uuid, max_ms: u64) -> u64 {
    if max_ms == 0 {
        return 0;
    }
    let mut hasher = fnv::FnvHasher::default();
    // `Hasher::write` hashes exactly these bytes (`Hash for str` would add a 0xff terminator).
    hasher.write(id.hyphenated().to_string().as_bytes());
    hasher.finish() % max_ms
}

/// The first wait of [`backoff`]: 5 s.
const BACKOFF_BASE: Duration = Duration::from_secs(5);
/// The longest wait of [`backoff`]: 15 min.
const BACKOFF_CAP: Duration = Duration::from_secs(15 * 60);

/// Exponential backoff with jitter for transient failures and throttling without
/// `Retry-After`: 5 s × 2^(n−1), capped at 15 min, then a uniformly random 50–100 % of that
/// ([`crate::backoff::jittered`]).
pub(super) fn backoff(n: u32) -> Duration {
    crate::backoff::jittered(n, BACKOFF_BASE, BACKOFF_CAP)
}

/// `3h 20m`, `4m 10s`, `12s`.
pub(super) fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        _ => format!("{}h {}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_matches_the_documented_test_vectors() {
        let zero = Uuid::parse_str("00000000-0000-0000-0000-000000000000").unwrap();
        let other = Uuid::parse_str("6f1c2a9e-3b4d-4e5f-8a7b-9c0d1e2f3a4b").unwrap();
        assert_eq!(spread_ms(zero, 30_000), 19_089);
        assert_eq!(spread_ms(other, 30_000), 12_407);
        assert_eq!(spread_ms(other, 0), 0);
    }

    #[test]
    fn backoff_starts_at_five_seconds_and_is_capped_at_fifteen_minutes() {
        let within = |n, low, high| {
            let d = backoff(n);
            assert!(
                d >= low && d <= high,
                "n={n}: {d:?} not in [{low:?}, {high:?}]"
            );
        };
        within(1, Duration::from_millis(2_500), Duration::from_secs(5));
        within(3, Duration::from_secs(10), Duration::from_secs(20));
        within(30, Duration::from_secs(450), Duration::from_secs(900));
    }
}
