//! A daemon's `/metrics` histogram as the benchmarks read it: the cumulative buckets of one
//! histogram scraped from Prometheus text, the difference of two scrapes (a window), the sum
//! over replicas, and quantiles interpolated linearly inside a bucket as Prometheus's
//! `histogram_quantile` does.

use serde::Serialize;

/// One histogram's cumulative buckets: `(le, count)` in `le` order, `+Inf` last.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Buckets(pub Vec<(f64, u64)>);

impl Buckets {
    /// The buckets of histogram `name` (no labels) in Prometheus text `text`.
    pub fn parse(text: &str, name: &str) -> Self {
        let prefix = format!("{name}_bucket{{le=\"");
        Self(
            text.lines()
                .filter_map(|l| l.strip_prefix(&prefix))
                .filter_map(|l| {
                    let (le, n) = l.split_once("\"} ")?;
                    Some((le.parse().ok()?, n.trim().parse().ok()?))
                })
                .collect(),
        )
    }

    /// What `self` counted since `before` (the same buckets, scraped earlier); an empty
    /// `before` is all zeros.
    pub fn since(&self, before: &Self) -> Self {
        Self(
            self.0
                .iter()
                .enumerate()
                .map(|(i, &(le, n))| {
                    let b = before.0.get(i).filter(|(l, _)| *l == le).map_or(0, |b| b.1);
                    (le, n.saturating_sub(b))
                })
                .collect(),
        )
    }

    /// `self` and `other` together (the same buckets; an empty side adds nothing).
    pub fn add(&self, other: &Self) -> Self {
        if self.0.is_empty() {
            return other.clone();
        }
        Self(
            self.0
                .iter()
                .enumerate()
                .map(|(i, &(le, n))| (le, n + other.0.get(i).map_or(0, |o| o.1)))
                .collect(),
        )
    }

    /// Observations counted (the `+Inf` bucket).
    pub fn count(&self) -> u64 {
        self.0.last().map_or(0, |b| b.1)
    }

    /// The `q` quantile (0–1), linear inside its bucket from the bucket below's bound (0 for
    /// the first); `None` without observations. One past the last finite bound is that bound.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = q * total as f64;
        let (mut lower, mut below) = (0.0, 0u64);
        for &(le, n) in &self.0 {
            if n as f64 >= rank && n > below {
                if le.is_infinite() {
                    return Some(lower);
                }
                let inside = (rank - below as f64) / (n - below) as f64;
                return Some(lower + (le - lower) * inside);
            }
            (lower, below) = (le, n);
        }
        Some(lower)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP h_seconds x\n\
        h_seconds_bucket{le=\"0.001\"} 2\n\
        h_seconds_bucket{le=\"0.002\"} 6\n\
        h_seconds_bucket{le=\"0.004\"} 10\n\
        h_seconds_bucket{le=\"+Inf\"} 10\n\
        h_seconds_sum 0.02\n\
        other_bucket{le=\"0.001\"} 99\n";

    #[test]
    fn parses_one_histogram_and_interpolates_like_histogram_quantile() {
        let b = Buckets::parse(TEXT, "h_seconds");
        assert_eq!(b.0.len(), 4);
        assert_eq!(b.count(), 10);
        // Rank 5 of 10: 3 of the 4 in (1, 2] ms.
        assert!((b.quantile(0.5).unwrap() - 0.00175).abs() < 1e-12);
        // Rank 9.9: 3.9 of the 4 in (2, 4] ms.
        assert!((b.quantile(0.99).unwrap() - 0.00395).abs() < 1e-12);
        // Rank 1 of 10: half of the first bucket, from 0.
        assert!((b.quantile(0.1).unwrap() - 0.0005).abs() < 1e-12);
        assert_eq!(Buckets::default().quantile(0.5), None);
    }

    #[test]
    fn a_window_is_the_difference_and_replicas_add_up() {
        let after = Buckets::parse(TEXT, "h_seconds");
        let before = Buckets(vec![(0.001, 1), (0.002, 1), (0.004, 1), (f64::INFINITY, 1)]);
        let window = after.since(&before);
        assert_eq!(
            window.0.iter().map(|b| b.1).collect::<Vec<_>>(),
            [1, 5, 9, 9]
        );
        assert_eq!(after.since(&Buckets::default()), after);
        let both = window.add(&window);
        assert_eq!(both.count(), 18);
        assert_eq!(Buckets::default().add(&window), window);
        // Everything past the last finite bound: that bound.
        let tail = Buckets(vec![(0.001, 0), (f64::INFINITY, 3)]);
        assert_eq!(tail.quantile(0.5), Some(0.001));
    }
}
