//! Rolling windows: any 60 s and any 24 h hold at most the limit across edges, with two processes; a backlog costs two decisions a message.

#[allow(unused_imports)]
use super::*;

/// The same drain on both algorithms (`processes` limiters each, fresh keys): one mailbox's
/// `n` messages of `recipients` each, all due at `start`, until `until`.
pub(crate) async fn drain_both(
    processes: usize,
    limits: RateLimits,
    (n, recipients): (usize, u32),
    start: DateTime<Utc>,
    until: DateTime<Utc>,
) -> HashMap<Algorithm, Drained> {
    let events = mailbox("events");
    let mut drained = HashMap::new();
    for algorithm in [Algorithm::Paced, Algorithm::FixedWindow] {
        let keys = TestKeys::new();
        let prefix = keys.sub("rl");
        let limiters = (0..processes)
            .map(|_| limiter(&prefix, algorithm))
            .collect();
        let run = drain(limiters, limits, until)
            .run(messages(&events, n, recipients), start)
            .await;
        drained.insert(algorithm, run);
    }
    drained
}

/// Paced never had more than `most` in a window; both sent all `sent`, fixed-window with
/// `fixed_most` in its busiest window.
pub(crate) fn assert_windows(
    maxima: &HashMap<Algorithm, (usize, u64)>,
    most: u64,
    (sent, fixed_most): (usize, u64),
    why: &str,
) {
    assert!(maxima[&Algorithm::Paced].1 <= most, "{maxima:?}");
    assert_eq!(
        (maxima[&Algorithm::Paced].0, maxima[&Algorithm::FixedWindow]),
        (sent, (sent, fixed_most)),
        "{why}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn any_60_s_holds_at_most_the_limit_across_a_minute_edge_with_2_processes_x_16_tasks() {
    let events = mailbox("events");
    let runs = drain_both(2, limits(25, 9_000), (100, 1), at(12, 0, 50), at(13, 0, 0)).await;
    let maxima = sent_and_most_in_window(&runs, &events, 60_000, count);
    let paced = &runs[&Algorithm::Paced];
    paced.assert_denied_at_most_once();
    assert_eq!(paced.calls, 100 + 99, "one booking + one send each");
    // Evenly paced: (60 s + 2 s) / 25 = 2.48 s apart.
    let mut times: Vec<i64> = paced.sends.iter().map(|s| s.0).collect();
    times.sort_unstable();
    assert!(times.windows(2).all(|w| w[1] - w[0] >= 2_480), "{times:?}");
    assert_windows(
        &maxima,
        25,
        (100, 50),
        "all sent; fixed UTC minutes burst to 2 × L across the edge",
    );
}

#[tokio::test]
async fn any_24_h_holds_at_most_the_day_budget_across_midnight() {
    let events = mailbox("events");
    let start = at(23, 59, 0);
    let runs = drain_both(
        1,
        limits(1_000, 100),
        (30, 10),
        start,
        start + chrono::Duration::days(3),
    )
    .await;
    let maxima = sent_and_most_in_window(&runs, &events, 86_400_000, recipients);
    let paced = &runs[&Algorithm::Paced];
    paced.assert_denied_at_most_once();
    assert!(
        paced.reasons.contains_key(&DenyReason::Day),
        "{:?}",
        paced.reasons
    );
    // The second ten wait for the first ten's bucket to leave the window.
    let last = paced.last_send(&events).unwrap();
    assert!(last >= ms(start - at(0, 0, 0)) + 2 * 86_400_000 - 60_000);
    assert_windows(
        &maxima,
        100,
        (30, 200),
        "all sent; UTC days hand out a fresh budget at midnight",
    );
}

#[tokio::test]
async fn a_backlog_of_1000_costs_two_decisions_a_message_not_one_per_minute() {
    let events = mailbox("events");
    let runs = drain_both(1, limits(10, 9_000), (1_000, 1), at(12, 0, 0), at(12, 5, 0)).await;
    for (algorithm, run) in &runs {
        let sent = run.sent(&events);
        assert!(sent >= 48, "{algorithm}: {sent} sent in 5 min at 10/min");
        assert!(run.max_in_window(&events, 60_000, count) <= 10);
    }
    let paced = &runs[&Algorithm::Paced];
    paced.assert_denied_at_most_once();
    assert_eq!(paced.calls, 1_000 + paced.sent(&events) as u64 - 1);
    let fixed = runs[&Algorithm::FixedWindow].calls;
    assert!(
        fixed > 3 * paced.calls,
        "fixed-window re-checks the backlog every minute: {fixed} calls against {}",
        paced.calls
    );
}
