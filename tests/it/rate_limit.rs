//! The distributed rate limiter against the real Redis: atomicity (and a GET-then-INCR contrast
//! that must overshoot), minute and day budgets and their `retry_after`, TTLs, release, and
//! fail-open against a closed port, a frozen listener and a silently dead connection.

use std::{
    future::Future,
    num::NonZeroU32,
    sync::Arc,
    time::{Duration, Instant},
};

use chrono::{DateTime, TimeZone, Utc};
use mail_worker::{
    config::RateLimitConfig,
    domain::MailboxAddress,
    log_events,
    rate_limit::{
        Algorithm, Counted, Decision, DenyReason, MailRateLimiter, RateLimitError, RateLimiter,
        RateLimits, RequestEnd, Reservation, fixed_window::keys,
    },
};
use redis::AsyncCommands;
use tokio::sync::Barrier;
use url::Url;

use crate::support::{
    LimiterExt, TestKeys, logs::Capture, proxy::Gate, redis_conn, redis_url, unique,
};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn config(url: &Url, prefix: &str, timeout: Duration) -> RateLimitConfig {
    RateLimitConfig {
        algorithm: Algorithm::FixedWindow,
        redis_url: url.clone().into(),
        defaults: limits(25, 9_000),
        redis_timeout: timeout,
        key_prefix: prefix.to_owned(),
        max_in_flight: NonZeroU32::new(3).unwrap(),
        lease: Duration::from_secs(40),
        fail_open_replicas: NonZeroU32::new(1).unwrap(),
        unreachable_not_ready_after: Duration::from_secs(60),
        // Virtual time: the scripts decide by the `now` the test passes.
        caller_clock: true,
    }
}

fn limits(per_minute: u32, recipients_per_day: u32) -> RateLimits {
    RateLimits {
        per_minute: NonZeroU32::new(per_minute).unwrap(),
        recipients_per_day: NonZeroU32::new(recipients_per_day).unwrap(),
        reserved_percent: 0,
    }
}

fn mailbox() -> MailboxAddress {
    MailboxAddress::parse("Events@Contoso.Example").unwrap()
}

/// 2031-01-01 at the given UTC time: far from the real clock, so a test never straddles a
/// bucket edge by accident (the keys still expire: TTLs count from the real time).
fn at(h: u32, m: u32, s: u32, ms: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2031, 1, 1, h, m, s).unwrap()
        + chrono::Duration::milliseconds(i64::from(ms))
}

/// A limiter on the real Redis with a generous deadline, so load on the build machine never
/// turns a real answer into fail-open.
fn real_limiter(prefix: &str) -> MailRateLimiter {
    MailRateLimiter::new(&config(&redis_url(), prefix, Duration::from_secs(2))).unwrap()
}

/// How many one-recipient calls it takes until `limiter` counts in Redis again (at most 20).
async fn calls_until_counted(
    limiter: &MailRateLimiter,
    limits: RateLimits,
    now: DateTime<Utc>,
) -> u32 {
    let mut calls = 0;
    loop {
        calls += 1;
        assert!(calls <= 20, "never counted again after 20 calls");
        let decision = decide(limiter, 1, limits, now).await;
        if matches!(&decision, Decision::Allowed(r) if r.is_counted()) {
            return calls;
        }
    }
}

/// Asserts the minute key of [`mailbox`] at `now` under `prefix` holds `count`.
async fn assert_minute_count(prefix: &str, now: DateTime<Utc>, count: i64) {
    let minute = keys::minute_key(prefix, &mailbox(), now);
    assert_counts(&mut redis_conn().await, &[(minute, Some(count))]).await;
}

/// A `Minute` denial (unbooked) with this `Retry-After`.
fn minute_denial(retry_after_ms: u64) -> Decision {
    Decision::Denied {
        reason: DenyReason::Minute,
        retry_after: Duration::from_millis(retry_after_ms),
        booked: false,
    }
}

/// Asserts the counts of [`mailbox`]'s two minute keys and its day key (each at a time).
async fn assert_window_counts(
    conn: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
    minutes: [(DateTime<Utc>, i64); 2],
    (day_at, day): (DateTime<Utc>, i64),
) {
    let mut expected: Vec<(String, Option<i64>)> = minutes
        .iter()
        .map(|(at, count)| (keys::minute_key(prefix, &mailbox(), *at), Some(*count)))
        .collect();
    expected.push((keys::day_key(prefix, &mailbox(), day_at), Some(day)));
    assert_counts(conn, &expected).await;
}

/// Fresh keys, their prefix and a [`gated_limiter`] behind `gate` with 200 ms per command.
fn behind(gate: &Gate) -> (TestKeys, String, MailRateLimiter) {
    let (keys, prefix) = fresh_keys();
    let limiter = gated_limiter(gate, &prefix, Duration::from_millis(200));
    (keys, prefix, limiter)
}

/// A limiter that reaches Redis through `gate`, with `timeout` per command.
fn gated_limiter(gate: &Gate, prefix: &str, timeout: Duration) -> MailRateLimiter {
    MailRateLimiter::new(&config(&gate.url(), prefix, timeout)).unwrap()
}

/// A [`real_limiter`] on fresh keys (deleted when the first item is dropped) and their prefix.
fn fresh_limiter() -> (TestKeys, String, MailRateLimiter) {
    let (keys, prefix) = fresh_keys();
    let limiter = real_limiter(&prefix);
    (keys, prefix, limiter)
}

/// Fresh keys (deleted when the first item is dropped) and their prefix.
fn fresh_keys() -> (TestKeys, String) {
    let keys = TestKeys::new();
    let prefix = keys.prefix.clone();
    (keys, prefix)
}

async fn counter(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Option<i64> {
    conn.get(key).await.unwrap()
}

/// Asserts each counter: `(key, value)`, `None` = the key does not exist.
async fn assert_counts(
    conn: &mut redis::aio::MultiplexedConnection,
    expected: &[(String, Option<i64>)],
) {
    for (key, want) in expected {
        assert_eq!(counter(conn, key).await, *want, "{key}");
    }
}

async fn pttl(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query_async(conn).await.unwrap()
}

/// The limiter's decision for `recipients` of [`mailbox`] at `now` (a Redis error fails the test).
async fn decide(
    limiter: &MailRateLimiter,
    recipients: u32,
    limits: RateLimits,
    now: DateTime<Utc>,
) -> Decision {
    limiter
        .check(&mailbox(), recipients, limits, now)
        .await
        .unwrap()
}

fn counted(decision: &Decision) -> Reservation {
    match decision {
        Decision::Allowed(r) if r.is_counted() => r.clone(),
        other => panic!("expected a counted reservation, got {other:?}"),
    }
}

fn assert_uncounted(decision: &Decision) {
    match decision {
        Decision::Allowed(r) => assert!(!r.is_counted(), "expected fail-open, got {r:?}"),
        other => panic!("expected fail-open (allowed, uncounted), got {other:?}"),
    }
}

/// Dials the limiter's connection before a test relies on it, so set-up time under load is
/// never mistaken for an answer.
async fn warm(limiter: &MailRateLimiter) {
    for _ in 0..50 {
        if limiter.ping().await.is_ok() {
            return;
        }
    }
    panic!("the limiter could not reach Redis at {}", redis_url());
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

// ------------------------------------ the race harness ---------------------------------------

#[derive(Debug, Default, PartialEq, Eq)]
struct Tally {
    counted: usize,
    uncounted: usize,
    denied_minute: usize,
    denied_day: usize,
}

/// Runs one attempt per context, all released at once by a barrier, each task on its own
/// connection (inside its context), and tallies the verdicts.
async fn race<C, F, Fut>(contexts: Vec<C>, attempt: F) -> Tally
where
    C: Send + 'static,
    F: Fn(C) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Decision> + Send,
{
    let barrier = Arc::new(Barrier::new(contexts.len()));
    let tasks: Vec<_> = contexts
        .into_iter()
        .map(|context| {
            let barrier = barrier.clone();
            let attempt = attempt.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                attempt(context).await
            })
        })
        .collect();
    let mut tally = Tally::default();
    for task in tasks {
        match task.await.unwrap() {
            Decision::Allowed(r) if r.is_counted() => tally.counted += 1,
            Decision::Allowed(_) => tally.uncounted += 1,
            Decision::Denied {
                reason: DenyReason::Minute,
                ..
            } => tally.denied_minute += 1,
            Decision::Denied {
                reason: DenyReason::Day,
                ..
            } => tally.denied_day += 1,
            other @ Decision::Denied { .. } => panic!("fixed-window never says {other:?}"),
        }
    }
    tally
}

/// The non-atomic alternative the Lua script replaces: GET both counters, decide in the
/// application, then INCR. Kept here only, to prove the race harness can fail.
async fn get_then_incr(
    mut conn: redis::aio::MultiplexedConnection,
    prefix: String,
    per_minute: i64,
    now: DateTime<Utc>,
) -> Decision {
    let minute_key = keys::minute_key(&prefix, &mailbox(), now);
    let day_key = keys::day_key(&prefix, &mailbox(), now);
    let minute: Option<i64> = conn.get(&minute_key).await.unwrap();
    if minute.unwrap_or(0) + 1 > per_minute {
        return Decision::Denied {
            reason: DenyReason::Minute,
            retry_after: Duration::from_millis(keys::ms_left_in_minute(now)),
            booked: false,
        };
    }
    let _: i64 = conn.incr(&minute_key, 1).await.unwrap();
    let _: bool = conn.expire(&minute_key, 120).await.unwrap();
    let _: i64 = conn.incr(&day_key, 1).await.unwrap();
    let _: bool = conn.expire(&day_key, 93_600).await.unwrap();
    Decision::Allowed(Reservation {
        mailbox: mailbox(),
        recipients: 1,
        counted: Counted::FixedWindow(minute_key, day_key),
    })
}

// ---------------------------------------------------------------------------------------------
// Atomicity
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_reservations_allow_exactly_the_minute_limit_of_30() {
    let (_keys, prefix) = fresh_keys();
    let now = at(12, 0, 30, 0);
    let mut limiters = Vec::new();
    for _ in 0..200 {
        let limiter = real_limiter(&prefix);
        warm(&limiter).await;
        limiters.push(limiter);
    }
    let tally = race(limiters, move |limiter: MailRateLimiter| async move {
        decide(&limiter, 1, limits(30, 10_000), now).await
    })
    .await;
    assert_eq!(
        tally,
        Tally {
            counted: 30,
            uncounted: 0,
            denied_minute: 170,
            denied_day: 0
        }
    );
    let mut conn = redis_conn().await;
    let minute_key = keys::minute_key(&prefix, &mailbox(), now);
    let day_key = keys::day_key(&prefix, &mailbox(), now);
    assert_counts(
        &mut conn,
        &[(minute_key.clone(), Some(30)), (day_key.clone(), Some(30))],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_race_against_get_then_incr_overshoots_the_limit() {
    let (_keys, prefix) = fresh_keys();
    let now = at(12, 0, 30, 0);
    let client = redis::Client::open(redis_url().as_str()).unwrap();
    let mut connections = Vec::new();
    for _ in 0..200 {
        connections.push(client.get_multiplexed_async_connection().await.unwrap());
    }
    let race_prefix = prefix.clone();
    let tally = race(connections, move |conn| {
        get_then_incr(conn, race_prefix.clone(), 30, now)
    })
    .await;
    let mut conn = redis_conn().await;
    let minute = counter(&mut conn, &keys::minute_key(&prefix, &mailbox(), now))
        .await
        .unwrap();
    println!("GET-then-INCR: {tally:?}, minute counter {minute} (limit 30)");
    assert!(
        tally.counted > 30,
        "GET-then-INCR should have overshot the limit of 30: {tally:?}"
    );
    assert_eq!(minute, i64::try_from(tally.counted).unwrap());
}

// ---------------------------------------------------------------------------------------------
// Budgets, retry_after, TTLs
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_message_that_does_not_fit_the_day_budget_waits_until_the_next_utc_midnight() {
    let (_keys, prefix, limiter) = fresh_limiter();
    let now = at(18, 30, 15, 250);
    let day = limits(25, 100);
    counted(&decide(&limiter, 60, day, now).await);
    let denied = decide(&limiter, 50, day, now).await;
    let to_midnight = Duration::from_millis(((5 * 60 + 29) * 60 + 44) * 1000 + 750);
    assert_eq!(
        denied,
        Decision::Denied {
            reason: DenyReason::Day,
            retry_after: to_midnight,
            booked: false,
        }
    );
    // 60 + 40 fills the day exactly: allowed.
    counted(&decide(&limiter, 40, day, now).await);
    let mut conn = redis_conn().await;
    let day_key = keys::day_key(&prefix, &mailbox(), now);
    let minute_key = keys::minute_key(&prefix, &mailbox(), now);
    assert_eq!(counter(&mut conn, &day_key).await, Some(100));
    // The denial took nothing: two messages in the minute bucket.
    assert_eq!(counter(&mut conn, &minute_key).await, Some(2));
}

#[tokio::test]
async fn a_minute_denial_waits_until_the_next_utc_minute_on_both_sides_of_the_edge() {
    let (_keys, prefix, limiter) = fresh_limiter();
    let one = limits(1, 9_000);
    let before = at(12, 0, 59, 999);
    let after = at(12, 1, 0, 0);
    counted(&decide(&limiter, 1, one, before).await);
    assert_eq!(decide(&limiter, 1, one, before).await, minute_denial(1));
    // 12:01:00.000 is a new bucket: allowed, then denied for a whole minute.
    counted(&decide(&limiter, 1, one, after).await);
    assert_eq!(decide(&limiter, 1, one, after).await, minute_denial(60_000));
    let mut conn = redis_conn().await;
    assert_window_counts(&mut conn, &prefix, [(before, 1), (after, 1)], (after, 2)).await;
}

#[tokio::test]
async fn the_minute_budget_is_checked_before_the_day_budget() {
    let (_keys, _, limiter) = fresh_limiter();
    let now = at(9, 15, 0, 0);
    counted(&decide(&limiter, 10, limits(1, 10), now).await);
    // Both budgets are spent; the minute one is reported.
    let denied = decide(&limiter, 10, limits(1, 10), now).await;
    assert!(
        matches!(
            denied,
            Decision::Denied {
                reason: DenyReason::Minute,
                ..
            }
        ),
        "{denied:?}"
    );
}

#[tokio::test]
async fn changed_limits_apply_on_the_very_next_call() {
    let (_keys, _, limiter) = fresh_limiter();
    let now = at(8, 0, 0, 0);
    for _ in 0..2 {
        counted(&decide(&limiter, 1, limits(2, 9_000), now).await);
    }
    let denied = decide(&limiter, 1, limits(2, 9_000), now).await;
    assert!(matches!(denied, Decision::Denied { .. }), "{denied:?}");
    counted(&decide(&limiter, 1, limits(3, 9_000), now).await);
}

#[tokio::test]
async fn a_reservation_gives_the_minute_key_120_s_and_the_day_key_26_h_to_live() {
    let (_keys, prefix, limiter) = fresh_limiter();
    let now = at(12, 0, 0, 0);
    counted(&decide(&limiter, 3, limits(25, 9_000), now).await);
    let mut conn = redis_conn().await;
    let minute_ttl = pttl(&mut conn, &keys::minute_key(&prefix, &mailbox(), now)).await;
    let day_ttl = pttl(&mut conn, &keys::day_key(&prefix, &mailbox(), now)).await;
    assert!(
        minute_ttl > 110_000 && minute_ttl <= 120_000,
        "minute key PTTL {minute_ttl} ms"
    );
    assert!(
        day_ttl > 93_600_000 - 10_000 && day_ttl <= 93_600_000,
        "day key PTTL {day_ttl} ms"
    );
}

// ---------------------------------------------------------------------------------------------
// Release
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn release_restores_both_counters_and_a_second_release_never_goes_below_zero() {
    let (_keys, prefix, limiter) = fresh_limiter();
    let now = at(12, 0, 10, 0);
    let minute_key = keys::minute_key(&prefix, &mailbox(), now);
    let day_key = keys::day_key(&prefix, &mailbox(), now);
    let mut conn = redis_conn().await;
    let first = counted(&decide(&limiter, 3, limits(25, 100), now).await);
    let second = counted(&decide(&limiter, 4, limits(25, 100), now).await);
    assert_counts(
        &mut conn,
        &[(minute_key.clone(), Some(2)), (day_key.clone(), Some(7))],
    )
    .await;

    limiter.release(&second, RequestEnd::Unsent).await;
    assert_counts(
        &mut conn,
        &[(minute_key.clone(), Some(1)), (day_key.clone(), Some(3))],
    )
    .await;

    limiter.release(&first, RequestEnd::Unsent).await;
    assert_counts(
        &mut conn,
        &[(minute_key.clone(), Some(0)), (day_key.clone(), Some(0))],
    )
    .await;

    limiter.release(&first, RequestEnd::Unsent).await;
    limiter.release(&second, RequestEnd::Unsent).await;
    assert_counts(
        &mut conn,
        &[(minute_key.clone(), Some(0)), (day_key.clone(), Some(0))],
    )
    .await;
    // The TTLs survive the releases.
    assert!(pttl(&mut conn, &minute_key).await > 110_000);
    assert!(pttl(&mut conn, &day_key).await > 93_590_000);

    // An expired bucket is not re-created by a late release.
    let _: () = conn.del(&[&minute_key, &day_key]).await.unwrap();
    limiter.release(&first, RequestEnd::Unsent).await;
    let exists: i64 = conn.exists(&[&minute_key, &day_key]).await.unwrap();
    assert_eq!(exists, 0);
}

#[tokio::test]
async fn a_release_after_the_minute_rolled_over_touches_the_old_bucket_only() {
    let (_keys, prefix, limiter) = fresh_limiter();
    let reserved_at = at(12, 0, 59, 0);
    let later = at(12, 1, 2, 0);
    let mut conn = redis_conn().await;
    let old = counted(&decide(&limiter, 2, limits(25, 9_000), reserved_at).await);
    counted(&decide(&limiter, 5, limits(25, 9_000), later).await);
    limiter.release(&old, RequestEnd::Unsent).await;
    assert_window_counts(
        &mut conn,
        &prefix,
        [(reserved_at, 0), (later, 1)],
        (later, 5),
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// Permanent outcomes
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn recipients_over_the_day_limit_fail_permanently_without_a_redis_call() {
    let (capture, _guard) = Capture::install();
    let gate = Gate::frozen().await;
    let limiter = gated_limiter(&gate, &unique("test:"), Duration::from_millis(200));
    let err = limiter
        .check(&mailbox(), 101, limits(25, 100), at(12, 0, 0, 0))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        RateLimitError::RecipientsExceedDayLimit {
            mailbox: mailbox(),
            recipients: 101,
            recipients_per_day: 100
        }
    );
    let text = err.to_string();
    assert!(text.contains("101") && text.contains("100"), "{text}");
    let none = limiter
        .check(&mailbox(), 0, limits(25, 100), at(12, 0, 0, 0))
        .await
        .unwrap_err();
    assert_eq!(none, RateLimitError::NoRecipients { mailbox: mailbox() });
    // Refused before any Redis call: a frozen listener would have accepted the dial.
    assert_eq!(gate.accepted(), 0, "no connection may be made");
    assert!(capture.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Fail-open
// ---------------------------------------------------------------------------------------------

/// The limiter's Redis deadline in the fail-open tests.
const FAIL_OPEN_DEADLINE: Duration = Duration::from_millis(200);

/// What a fail-open decision must stay under in these tests: 2 s, ten deadlines (see
/// [`fail_open_times`]).
const FAIL_OPEN_BOUND: Duration = Duration::from_secs(2);

/// How long each of `calls` decisions took that failed open, each in less than `most`.
///
/// `most` is a regression bound, never sub-second (a loaded 2-core machine stretches
/// milliseconds): without the deadlines a dead Redis cost a send 9.5 s (decision 0009). The
/// sub-second figures are printed (`--nocapture`), not asserted.
async fn fail_open_times(limiter: &MailRateLimiter, calls: usize, most: Duration) -> Vec<Duration> {
    let mut times = Vec::new();
    for _ in 0..calls {
        let started = Instant::now();
        let decision = decide(limiter, 1, limits(25, 9_000), at(12, 0, 0, 0)).await;
        let took = started.elapsed();
        assert_uncounted(&decision);
        assert!(took < most, "fail-open took {took:?}");
        times.push(took);
        if let Decision::Allowed(reservation) = decision {
            limiter.release(&reservation, RequestEnd::Unsent).await; // a no-op
        }
    }
    times
}

/// Prints the median and the longest of `times` (fail-open decisions against `what`).
fn print_times(what: &str, mut times: Vec<Duration>) {
    let max = *times.iter().max().unwrap();
    println!(
        "fail-open decision time, {what}: median {:?}, max {max:?} over {} calls",
        median(&mut times),
        times.len()
    );
}

#[tokio::test]
async fn a_closed_port_fails_open_within_the_deadline_with_a_warn_event() {
    let (capture, _guard) = Capture::install();
    let gate = Gate::closed().await;
    let limiter = gated_limiter(&gate, &unique("test:"), FAIL_OPEN_DEADLINE);
    let times = fail_open_times(&limiter, 20, FAIL_OPEN_BOUND).await;
    let warns = capture.with_event(log_events::MAIL_RATE_LIMIT_REDIS_ERROR);
    assert_eq!(warns.len(), 1, "one line per second: {warns:?}");
    assert_eq!(warns[0].level, tracing::Level::WARN);
    assert_eq!(warns[0].field("error.kind"), "refused");
    assert_eq!(warns[0].field("operation"), "check_and_reserve");
    assert_eq!(warns[0].field("mailbox"), "events@contoso.example");
    print_times("closed port", times);
}

#[tokio::test]
async fn a_frozen_listener_fails_open_at_the_deadline() {
    let (capture, _guard) = Capture::install();
    let gate = Gate::frozen().await;
    let limiter = gated_limiter(&gate, &unique("test:"), FAIL_OPEN_DEADLINE);
    let times = fail_open_times(&limiter, 8, FAIL_OPEN_BOUND).await;
    assert!(gate.accepted() >= 1, "the listener saw the limiter dial");
    let warns = capture.with_event(log_events::MAIL_RATE_LIMIT_REDIS_ERROR);
    assert_eq!(warns.len(), 1, "{warns:?}");
    assert!(
        ["deadline", "timeout"].contains(&warns[0].field("error.kind")),
        "{warns:?}"
    );
    print_times(
        &format!("frozen listener (deadline {FAIL_OPEN_DEADLINE:?})"),
        times,
    );
}

#[tokio::test]
async fn a_burst_of_1000_sends_during_an_outage_writes_one_warn_line() {
    let (capture, _guard) = Capture::install();
    let gate = Gate::closed().await;
    let limiter = gated_limiter(&gate, &unique("test:"), Duration::from_millis(200));
    let now = at(12, 0, 0, 0);
    let sender = mailbox();
    let started = Instant::now();
    let decisions = futures::future::join_all(
        (0..1000).map(|_| limiter.check(&sender, 1, limits(25, 9_000), now)),
    )
    .await;
    let took = started.elapsed();
    for decision in &decisions {
        assert_uncounted(decision.as_ref().unwrap());
    }
    assert!(took < Duration::from_secs(1), "the burst took {took:?}");
    let warns = capture.with_event(log_events::MAIL_RATE_LIMIT_REDIS_ERROR);
    assert_eq!(warns.len(), 1, "{} warn lines", warns.len());
    assert_eq!(warns[0].field("suppressed"), "0");
}

#[tokio::test]
async fn reservations_are_counted_again_when_redis_comes_back_without_a_restart() {
    let (_keys, prefix) = fresh_keys();
    let gate = Gate::closed().await;
    // Built while "Redis" is down: must not fail (nor dial: the constructor is not async).
    let limiter = gated_limiter(&gate, &prefix, Duration::from_millis(500));
    assert_eq!(gate.accepted(), 0, "no connection at construction");
    let now = at(12, 0, 0, 0);
    let big = limits(1_000, 1_000_000);
    assert_uncounted(&decide(&limiter, 1, big, now).await);

    gate.open(true);
    // The first call after the port opens may still be waiting on a dial that was refused.
    let calls_until_counted = calls_until_counted(&limiter, big, now).await;
    for _ in 0..5 {
        counted(&decide(&limiter, 1, big, now).await);
    }
    assert_minute_count(&prefix, now, 6).await;
    println!("closed port → open: counted again on call {calls_until_counted}");
}

#[tokio::test]
async fn a_frozen_redis_that_thaws_is_used_again_without_a_restart() {
    let gate = Gate::frozen().await;
    let (_keys, prefix, limiter) = behind(&gate);
    let now = at(12, 0, 0, 0);
    let big = limits(1_000, 1_000_000);
    assert_uncounted(&decide(&limiter, 1, big, now).await);
    gate.set_relay(true);
    let calls = calls_until_counted(&limiter, big, now).await;
    assert_minute_count(&prefix, now, 1).await;
    println!("frozen → thawed: counted again on call {calls}");
}

#[tokio::test]
async fn a_silently_dead_connection_is_replaced_after_three_timeouts() {
    let gate = Gate::closed().await;
    gate.open(true);
    let (_keys, _, limiter) = behind(&gate);
    let now = at(12, 0, 0, 0);
    let big = limits(1_000, 1_000_000);
    counted(&decide(&limiter, 1, big, now).await);
    let dialled = gate.accepted();

    // The relayed connection goes silent (no FIN, no RST); new connections still work.
    gate.blackhole_existing();
    for _ in 0..3 {
        assert_uncounted(&decide(&limiter, 1, big, now).await);
    }
    counted(&decide(&limiter, 1, big, now).await);
    // One fresh connection (two if the machine was too busy to finish the first dial within
    // the 100 ms connect timeout): no reconnect storm.
    let fresh = gate.accepted() - dialled;
    assert!((1..=2).contains(&fresh), "{fresh} fresh connections");
}

#[tokio::test]
async fn a_wrong_type_key_is_a_script_error_that_fails_open() {
    let (capture, _guard) = Capture::install();
    let (_keys, prefix, limiter) = fresh_limiter();
    let now = at(12, 0, 0, 0);
    let minute_key = keys::minute_key(&prefix, &mailbox(), now);
    let mut conn = redis_conn().await;
    let _: () = conn.hset(&minute_key, "not", "a counter").await.unwrap();
    let _: bool = conn.expire(&minute_key, 120).await.unwrap();

    assert_uncounted(&decide(&limiter, 1, limits(25, 9_000), now).await);
    let errors = capture.with_event(log_events::MAIL_RATE_LIMIT_SCRIPT_ERROR);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].level, tracing::Level::ERROR);
    assert_eq!(errors[0].field("error.kind"), "WRONGTYPE");
    assert!(
        capture
            .with_event(log_events::MAIL_RATE_LIMIT_REDIS_ERROR)
            .is_empty()
    );
    // Nothing was written to the day bucket.
    assert_counts(
        &mut conn,
        &[(keys::day_key(&prefix, &mailbox(), now), None)],
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// Measurement
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_reservation_round_trip_is_measured_over_1000_sequential_calls() {
    let (_keys, prefix, limiter) = fresh_limiter();
    warm(&limiter).await;
    let now = at(12, 0, 0, 0);
    let big = limits(1_000_000, 1_000_000_000);
    let mut times = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let started = Instant::now();
        counted(&decide(&limiter, 1, big, now).await);
        times.push(started.elapsed());
    }
    assert_minute_count(&prefix, now, 1000).await;
    times.sort();
    println!(
        "check_and_reserve round trip over 1000 sequential calls: median {:?}, p90 {:?}, p99 {:?}, max {:?}",
        times[500], times[900], times[990], times[999]
    );
}
