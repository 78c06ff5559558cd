//! In flight, cooldown, booking expiry, outcome unknown: the in-flight cap and its leases, a `Retry-After` on every replica, bookings never used, late bookings, key TTLs.

#[allow(unused_imports)]
use super::*;

pub(crate) fn ask<'a>(m: &'a MailboxAddress, id: Uuid, limits: RateLimits) -> Ask<'a> {
    ask_in(TENANT, m, id, limits)
}

/// One message of one recipient from `m` of Graph tenant `tenant`.
pub(crate) fn ask_in<'a>(
    tenant: &'a str,
    m: &'a MailboxAddress,
    id: Uuid,
    limits: RateLimits,
) -> Ask<'a> {
    Ask {
        message_id: id,
        mailbox: m,
        tenant,
        recipients: 1,
        limits,
        tenant_budget: None,
        priority: Priority::Normal,
    }
}

#[tokio::test]
async fn at_most_3_requests_in_flight_and_a_killed_workers_lease_frees_itself() {
    let keys = TestKeys::new();
    let prefix = keys.sub("rl");
    let (one, two) = (
        limiter(&prefix, Algorithm::Paced),
        limiter(&prefix, Algorithm::Paced),
    );
    let events = mailbox("events");
    let high = limits(60_000, 9_000);
    let mut now = at(12, 0, 0);
    let mut held = Vec::new();
    let mut in_flight_waits = Vec::new();
    for i in 0..10 {
        now += chrono::Duration::milliseconds(5);
        let limiter = if i % 2 == 0 { &one } else { &two };
        match limiter
            .check_and_reserve(&ask(&events, Uuid::new_v4(), high), now)
            .await
            .unwrap()
        {
            Decision::Allowed(r) => held.push(r),
            Decision::Denied {
                reason: DenyReason::InFlight,
                retry_after,
                booked: false,
            } => in_flight_waits.push((i, retry_after)),
            other => panic!("{other:?}"),
        }
    }
    // Each denied message gets the next turn of the mailbox's in-flight queue: the three
    // lanes free when their leases (taken at 5, 10, 15 ms) are expected to end, a request's
    // mean duration later (1 s, none measured yet), each message back a tenth of that after
    // its lane's end and its own request a duration after that (asked at 20 ms to 50 ms).
    let turns: Vec<(usize, Duration)> = [1_085, 1_085, 1_085, 2_170, 2_170, 2_170, 3_255]
        .into_iter()
        .enumerate()
        .map(|(k, ms)| (k + 3, Duration::from_millis(ms)))
        .collect();
    assert_eq!((held.len(), in_flight_waits), (3, turns));
    // Two seconds on (slow or stuck requests: held past twice their mean): come back when the
    // earliest lease (taken at 5 ms, 40 s) could expire, and a tenth of a request (100 ms).
    let later = now + chrono::Duration::seconds(2);
    let Decision::Denied { retry_after, .. } = one
        .check_and_reserve(&ask(&events, Uuid::new_v4(), high), later)
        .await
        .unwrap()
    else {
        panic!("the cap is still full");
    };
    let earliest = at(12, 0, 0) + chrono::Duration::milliseconds(5 + 40_000);
    assert_eq!(
        retry_after,
        (earliest - later).to_std().unwrap() + Duration::from_millis(100)
    );
    // One request ends: one more may start.
    one.release(&held.pop().unwrap(), RequestEnd::Done).await;
    now += chrono::Duration::milliseconds(5);
    assert!(matches!(
        two.check_and_reserve(&ask(&events, Uuid::new_v4(), high), now)
            .await
            .unwrap(),
        Decision::Allowed(_)
    ));
    // The workers holding the other three die: their leases (40 s) expire by themselves.
    now += chrono::Duration::seconds(41);
    let mut allowed = 0;
    for _ in 0..3 {
        now += chrono::Duration::milliseconds(5);
        if let Decision::Allowed(_) = one
            .check_and_reserve(&ask(&events, Uuid::new_v4(), high), now)
            .await
            .unwrap()
        {
            allowed += 1;
        }
    }
    assert_eq!(allowed, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_holds_the_whole_mailbox_on_every_replica_and_others_keep_flowing() {
    let keys = TestKeys::new();
    let prefix = keys.sub("rl");
    let limiters = vec![
        limiter(&prefix, Algorithm::Paced),
        limiter(&prefix, Algorithm::Paced),
    ];
    let (a, b) = (mailbox("a"), mailbox("b"));
    let start = at(12, 0, 0);
    // A's first send meets a 429 with Retry-After: 315 on replica 0.
    let first = Uuid::new_v4();
    let Decision::Allowed(r) = limiters[0]
        .check_and_reserve(&ask(&a, first, limits(25, 9_000)), start)
        .await
        .unwrap()
    else {
        panic!()
    };
    limiters[0].release(&r, RequestEnd::Done).await;
    limiters[0]
        .cooldown(
            &ask(&a, first, limits(25, 9_000)),
            start + chrono::Duration::seconds(315),
            start,
        )
        .await;
    let b_messages = messages(&b, 20, 1);
    let mut all = messages(&a, 20, 1);
    all.extend(b_messages.clone());
    let drained = drain(
        limiters,
        limits(25, 9_000),
        start + chrono::Duration::minutes(20),
    )
    .run(all, start + chrono::Duration::milliseconds(10))
    .await;
    assert_eq!((drained.sent(&a), drained.sent(&b)), (20, 20));
    let a_first = drained.first_send(&a).unwrap();
    assert!(
        a_first >= (start + chrono::Duration::seconds(315)).timestamp_millis(),
        "no request to A before +315 s: first at +{} ms",
        a_first - start.timestamp_millis()
    );
    assert!(
        drained.max_in_window(&a, 60_000, count) <= 25,
        "no herd after the cooldown"
    );
    let b_last = drained.last_send(&b).unwrap() - start.timestamp_millis();
    assert!(b_last < 50_000, "B kept flowing: last at +{b_last} ms");
    let b_ids: Vec<Uuid> = b_messages.iter().map(|m| m.id).collect();
    let b_denials: u32 = b_ids
        .iter()
        .map(|id| drained.denials.get(id).copied().unwrap_or(0))
        .sum();
    assert_eq!(b_denials, 19, "B: one sent at once, 19 booked once each");
}

#[tokio::test]
async fn a_booking_never_used_gives_its_recipients_back_after_the_grace() {
    let (_test_keys, limiter, events, keys, mut conn) = paced_events().await;
    let one = limits(1, 9_000);
    let t0 = at(12, 0, 0);
    let mut big = ask(&events, Uuid::new_v4(), one);
    big.recipients = 7;
    assert!(matches!(
        limiter.check_and_reserve(&big, t0).await.unwrap(),
        Decision::Allowed(_)
    ));
    let mut booked = ask(&events, Uuid::new_v4(), one);
    booked.recipients = 5;
    let Decision::Denied {
        booked: true,
        retry_after,
        ..
    } = limiter.check_and_reserve(&booked, t0).await.unwrap()
    else {
        panic!()
    };
    assert_eq!(retry_after, Duration::from_millis(62_000), "one slot later");
    let total: i64 = conn.hget(keys.state(), "total").await.unwrap();
    assert_eq!(total, 12, "the booking holds its recipients");
    // The booked message never comes back (cancelled). 15 min after its slot it is dropped.
    let later = t0 + chrono::Duration::seconds(62 + 15 * 60 + 1);
    assert!(matches!(
        limiter
            .check_and_reserve(&ask(&events, Uuid::new_v4(), one), later)
            .await
            .unwrap(),
        Decision::Allowed(_)
    ));
    let total: i64 = conn.hget(keys.state(), "total").await.unwrap();
    assert_eq!(total, 8, "7 + 1 sent; the unused booking's 5 given back");
    let bookings: i64 = conn.zcard(keys.booked()).await.unwrap();
    assert_eq!(bookings, 0);
}

/// Each of `ids` asked for at `now` and after, 10 ms after the one before it was allowed; a
/// denied one asks again when it is told to. Returns when each was allowed.
pub(crate) async fn sent_as_told(
    limiter: &MailRateLimiter,
    ids: &[Ask<'_>],
    mut now: DateTime<Utc>,
) -> Vec<DateTime<Utc>> {
    let mut reserved = Vec::new();
    for ask in ids {
        loop {
            match limiter.check_and_reserve(ask, now).await.unwrap() {
                Decision::Allowed(r) => {
                    limiter.release(&r, RequestEnd::Done).await;
                    reserved.push(now);
                    now += chrono::Duration::milliseconds(10);
                    break;
                }
                Decision::Denied {
                    retry_after,
                    reason,
                    ..
                } => {
                    assert_eq!(reason, DenyReason::Minute, "{}", ask.message_id);
                    now += chrono::Duration::from_std(retry_after).unwrap();
                }
            }
        }
    }
    reserved
}

/// The narrowest span of L + 1 = 11 consecutive times, ms.
pub(crate) fn narrowest_eleven(at: &[DateTime<Utc>]) -> i64 {
    at.windows(11).map(|w| ms(w[10] - w[0])).min().unwrap()
}

/// After every replica stood still past their slots, the late bookings catch up as fast as
/// claims bring them back: the direct check is then their only brake, and it must leave them
/// the pacing's allowance (a send reaches Graph up to 2 s after its reservation, more on a
/// loaded replica), not 60 s to the millisecond: any L + 1 of them span 60 s + allowance.
#[tokio::test]
async fn late_bookings_catch_up_with_the_pacings_allowance_between_any_l_of_them() {
    let (_test_keys, limiter, events, _keys, _conn) = paced_events().await;
    let ten = limits(10, 9_000);
    let t0 = at(12, 0, 0);
    let asks: Vec<Ask> = (0..31).map(|_| ask(&events, Uuid::new_v4(), ten)).collect();
    for ask in &asks {
        if let Decision::Allowed(r) = limiter.check_and_reserve(ask, t0).await.unwrap() {
            limiter.release(&r, RequestEnd::Done).await;
        }
    }
    // Nothing came back for 10 min; then the claims bring the bookings back.
    let reserved = sent_as_told(&limiter, &asks[1..], t0 + chrono::Duration::minutes(10)).await;
    assert_eq!(reserved.len(), 30);
    let narrowest = narrowest_eleven(&reserved);
    assert!(
        narrowest >= 62_000,
        "11 reservations within {narrowest} ms: Graph may count 11 in a rolling minute"
    );
}

/// `high` mail is not paced (it may use the whole L at once): a burst of it gets the same
/// allowance from the direct check.
#[tokio::test]
async fn a_burst_of_high_mail_leaves_the_allowance_between_any_l_of_it() {
    let (_test_keys, limiter, events, _keys, _conn) = paced_events().await;
    let mut ten = limits(10, 9_000);
    ten.reserved_percent = 20;
    let asks: Vec<Ask> = (0..25)
        .map(|_| Ask {
            priority: Priority::High,
            ..ask(&events, Uuid::new_v4(), ten)
        })
        .collect();
    let reserved = sent_as_told(&limiter, &asks, at(12, 0, 0)).await;
    assert_eq!(ms(reserved[9] - reserved[0]), 90, "the first L at once");
    let narrowest = narrowest_eleven(&reserved);
    assert!(
        narrowest >= 62_000,
        "11 high reservations within {narrowest} ms"
    );
}

/// The script sets a key's TTL when a write creates it and refreshes the long-lived ones every
/// 30 min instead of on every call: whatever a booking, a send and a release leave behind has a
/// TTL of more than 24 h — no key lives forever.
#[tokio::test]
async fn every_paced_key_has_a_ttl_of_more_than_a_day() {
    let (_test_keys, limiter, events, paced, mut conn) = paced_events().await;
    let mut now = at(12, 0, 0);
    for step in 0..4 {
        let mut a = ask(&events, Uuid::new_v4(), limits(25, 9_000));
        a.tenant_budget = Some((1, NonZeroU32::new(100).unwrap()));
        // One allowed (then released), one booked behind it, at each step.
        let Decision::Allowed(r) = limiter.check_and_reserve(&a, now).await.unwrap() else {
            panic!("step {step}: the first is allowed")
        };
        let b = ask(&events, Uuid::new_v4(), limits(25, 9_000));
        assert!(matches!(
            limiter.check_and_reserve(&b, now).await.unwrap(),
            Decision::Denied { booked: true, .. }
        ));
        limiter.release(&r, RequestEnd::Done).await;
        now += chrono::Duration::minutes(20);
    }
    let mut seen = 0;
    for key in paced.all() {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(key)
            .query_async(&mut conn)
            .await
            .unwrap();
        if ttl == -2 {
            continue; // not there (an empty set)
        }
        seen += 1;
        assert!(
            ttl > 86_400_000 && ttl <= 90_000_000,
            "{key}: PTTL {ttl} ms"
        );
    }
    assert!(seen >= 6, "{seen} keys");
    // Refreshed at the first call and again 40 min later (virtual time), not on every call.
    let refreshed: i64 = conn.hget(paced.state(), "ttl").await.unwrap();
    assert_eq!(refreshed, at(12, 40, 0).timestamp_millis());
}

#[tokio::test]
async fn an_unknown_outcome_keeps_the_budget_and_a_sure_failure_gives_it_back() {
    let (_test_keys, limiter, events, keys, mut conn) = paced_events().await;
    let mut now = at(12, 0, 0);
    for (outcome, total_after, sent_after) in [(RequestEnd::Done, 3, 1), (RequestEnd::Unsent, 3, 1)]
    {
        let mut a = ask(&events, Uuid::new_v4(), limits(25, 9_000));
        a.recipients = 3;
        let Decision::Allowed(r) = limiter.check_and_reserve(&a, now).await.unwrap() else {
            panic!()
        };
        limiter.release(&r, outcome).await;
        let total: i64 = conn.hget(keys.state(), "total").await.unwrap();
        let sent: i64 = conn.zcard(keys.sent()).await.unwrap();
        let in_flight: i64 = conn.zcard(keys.in_flight()).await.unwrap();
        assert_eq!(
            (total, sent, in_flight),
            (total_after, sent_after, 0),
            "{outcome:?}"
        );
        now += chrono::Duration::seconds(3);
    }
}

#[tokio::test]
async fn a_message_that_can_never_fit_fails_without_a_redis_call() {
    let limiter = limiter(&TestKeys::new().sub("rl"), Algorithm::Paced);
    let events = mailbox("events");
    let mut a = ask(&events, Uuid::new_v4(), limits(25, 100));
    a.recipients = 101;
    assert!(matches!(
        limiter.check_and_reserve(&a, at(12, 0, 0)).await,
        Err(RateLimitError::RecipientsExceedDayLimit {
            recipients: 101,
            ..
        })
    ));
    a.recipients = 20;
    a.tenant_budget = Some((20, NonZeroU32::new(10).unwrap()));
    assert_eq!(
        limiter.check_and_reserve(&a, at(12, 0, 0)).await,
        Err(RateLimitError::ExternalRecipientsExceedTenantLimit {
            external: 20,
            per_day: 10
        })
    );
}
