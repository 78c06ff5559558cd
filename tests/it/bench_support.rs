//! The benchmark harness (`benches/support`): its percentiles, medians, number formatting,
//! scaled clock and Redis clean-up, tested here because the benchmark targets run without
//! libtest.

#[path = "../../benches/support/mod.rs"]
mod support;

use chrono::{TimeDelta, TimeZone, Utc};
use mail_worker::clock::Clock;
use redis::AsyncCommands;

use crate::helpers::{redis_prefix, redis_url};

#[test]
fn percentiles_are_the_sample_at_the_nearest_rank() {
    let samples: Vec<u64> = (1..=100).collect();
    assert_eq!(support::percentile(&samples, 50.0), Some(50));
    assert_eq!(support::percentile(&samples, 99.0), Some(99));
    assert_eq!(support::percentile(&samples, 100.0), Some(100));
    let ten: Vec<u64> = (1..=10).map(|i| i * 10).collect();
    // ceil(0.99 × 10) = 10th sample; ceil(0.5 × 10) = 5th.
    assert_eq!(support::percentile(&ten, 99.0), Some(100));
    assert_eq!(support::percentile(&ten, 50.0), Some(50));
    assert_eq!(support::percentile(&[7], 99.0), Some(7));
    assert_eq!(support::percentile(&[], 50.0), None);
}

#[test]
fn medians_take_the_middle_or_the_mean_of_the_two_middles() {
    assert_eq!(support::median(&[3.0, 1.0, 2.0]), Some(2.0));
    assert_eq!(support::median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    assert_eq!(support::median(&[5.0]), Some(5.0));
    assert_eq!(support::median(&[]), None);
}

#[test]
fn figures_print_as_whole_numbers_with_thousands_separators() {
    assert_eq!(support::thousands(1_234_567.8), "1,234,568");
    assert_eq!(support::thousands(999.4), "999");
    assert_eq!(support::thousands(-1_000.0), "-1,000");
    assert_eq!(support::us(1_500), 1.5);
}

#[test]
fn a_scaled_clock_runs_speedup_times_faster_from_its_origins() {
    let virtual_origin = Utc.with_ymd_and_hms(2030, 1, 1, 12, 0, 0).unwrap();
    let clock = support::ScaledClock {
        real_origin: Utc::now() - TimeDelta::seconds(2),
        virtual_origin,
        speedup: 60,
    };
    // 2 real seconds (and a little more) at 60× is 120 virtual seconds (and 60× a little more).
    let shown = clock.now() - virtual_origin;
    assert!(shown >= TimeDelta::seconds(120), "{shown}");
    assert!(shown < TimeDelta::seconds(180), "{shown}");
    assert_eq!(
        clock.real_time_of(virtual_origin + TimeDelta::minutes(3)),
        clock.real_origin + TimeDelta::seconds(3)
    );
    assert_eq!(
        clock.real_wait_until(virtual_origin),
        std::time::Duration::ZERO
    );
}

#[tokio::test]
async fn unlink_prefix_deletes_its_prefix_and_nothing_else() {
    let prefix = redis_prefix();
    let neighbour = format!("{prefix}x");
    let mut conn = support::redis_connection(&redis_url()).await;
    for i in 0..1_500 {
        let _: () = conn.set(format!("{prefix}:k{i}"), i).await.unwrap();
    }
    let _: () = conn.set(format!("{neighbour}:k"), 1).await.unwrap();
    let deleted = support::unlink_prefix(&mut conn, &prefix).await.unwrap();
    assert_eq!(deleted, 1_500);
    let left: Option<u32> = conn.get(format!("{prefix}:k7")).await.unwrap();
    assert_eq!(left, None);
    let kept: Option<u32> = conn.get(format!("{neighbour}:k")).await.unwrap();
    assert_eq!(kept, Some(1));
    assert_eq!(
        support::unlink_prefix(&mut conn, &neighbour).await.unwrap(),
        1
    );
}
