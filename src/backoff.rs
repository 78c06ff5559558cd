//! Jittered exponential backoff, the one formula behind every "wait longer after each failure"
//! in the crate: the retry policy's ([`crate::service`]) and the Graph token source's.

use std::time::Duration;

use rand::Rng as _;

/// The wait after the `n`th failure in a row (`n` ≥ 1; 0 counts as 1): `base` × 2^(n−1),
/// capped at `cap`, then a uniformly random 50–100 % of that, so callers that failed together
/// do not retry together.
pub(crate) fn jittered(n: u32, base: Duration, cap: Duration) -> Duration {
    let base_ms = u64::try_from(base.as_millis()).unwrap_or(u64::MAX);
    let cap_ms = u64::try_from(cap.as_millis()).unwrap_or(u64::MAX);
    let full = base_ms
        .saturating_mul(1u64 << n.saturating_sub(1).min(63))
        .min(cap_ms);
    Duration::from_millis(rand::rng().random_range(full / 2..=full))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_doubles_with_jitter_and_is_capped() {
        for (base, cap) in [(5_000u64, 900_000u64), (2_000, 60_000), (1, u64::MAX)] {
            for n in 0..=70 {
                let d = jittered(n, Duration::from_millis(base), Duration::from_millis(cap));
                let d = d.as_millis() as u64;
                let full = base
                    .saturating_mul(1u64 << n.saturating_sub(1).min(63))
                    .min(cap);
                assert!(
                    d >= full / 2 && d <= full,
                    "base {base} ms, n={n}: {d} not in [{}, {full}]",
                    full / 2
                );
            }
        }
    }
}
