//! Bookings an operator's change made stale: a lowered day budget, cancelled last bookings.

#[allow(unused_imports)]
use super::*;

#[tokio::test]
async fn bookings_a_lowered_day_budget_made_go_with_unbook_and_the_raised_one_sends_them_now() {
    let (_test_keys, limiter, events, keys, mut conn) = paced_events().await;
    let low = limits(60, 3);
    let t0 = at(12, 0, 0);
    let asks: Vec<Uuid> = (0..5).map(|_| Uuid::new_v4()).collect();
    for (i, id) in asks.iter().enumerate() {
        let decision = limiter
            .check_and_reserve(
                &ask(&events, *id, low),
                t0 + chrono::Duration::seconds(i as i64 * 2),
            )
            .await
            .unwrap();
        match (i, decision) {
            (0..3, Decision::Allowed(r)) => limiter.release(&r, RequestEnd::Done).await,
            (
                3 | 4,
                Decision::Denied {
                    booked: true,
                    retry_after,
                    ..
                },
            ) => assert!(
                retry_after > Duration::from_secs(23 * 3_600),
                "a day out (the 5th behind the 4th)"
            ),
            (i, other) => panic!("{i}: {other:?}"),
        }
    }
    let total: i64 = conn.hget(keys.state(), "total").await.unwrap();
    assert_eq!(total, 5, "3 sent, 2 booked a day out");
    // One cancelled: only its booking goes.
    assert_eq!(
        limiter
            .unbook(TENANT, &events, &asks[4..], t0)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        limiter
            .unbook(TENANT, &events, &asks[4..], t0)
            .await
            .unwrap(),
        0
    );
    // The budget raised to 10: every booking goes and the booked message is allowed now.
    let now = t0 + chrono::Duration::seconds(20);
    assert_eq!(limiter.unbook(TENANT, &events, &[], now).await.unwrap(), 1);
    let total: i64 = conn.hget(keys.state(), "total").await.unwrap();
    assert_eq!(total, 3, "the bookings' recipients given back");
    let bookings: i64 = conn.zcard(keys.booked()).await.unwrap();
    assert_eq!(bookings, 0);
    let Decision::Allowed(r) = limiter
        .check_and_reserve(&ask(&events, asks[3], limits(60, 10)), now)
        .await
        .unwrap()
    else {
        panic!("the raised budget has room now");
    };
    limiter.release(&r, RequestEnd::Done).await;
    let total: i64 = conn.hget(keys.state(), "total").await.unwrap();
    assert_eq!(total, 4);
}

#[tokio::test]
async fn cancelling_the_last_bookings_gives_their_slots_to_the_next_message() {
    let (_test_keys, limiter, events, _keys, _conn) = paced_events().await;
    let one = limits(1, 1_000);
    let t0 = at(12, 0, 0);
    let decide = |id: Uuid| {
        let (limiter, events) = (limiter.clone(), events.clone());
        async move {
            match limiter.check_and_reserve(&ask(&events, id, one), t0).await {
                Ok(Decision::Denied {
                    booked: true,
                    retry_after,
                    ..
                }) => retry_after,
                other => panic!("booked: {other:?}"),
            }
        }
    };
    let Decision::Allowed(r) = limiter
        .check_and_reserve(&ask(&events, Uuid::new_v4(), one), t0)
        .await
        .unwrap()
    else {
        panic!("the first of the minute goes");
    };
    limiter.release(&r, RequestEnd::Done).await;
    let ids: Vec<Uuid> = (0..4).map(|_| Uuid::new_v4()).collect();
    let mut slots = Vec::new();
    for id in &ids {
        slots.push(decide(*id).await);
    }
    let spacing = slots[1] - slots[0];
    assert!(spacing >= Duration::from_secs(60), "{slots:?}");
    assert_eq!(slots[3], slots[0] + spacing * 3, "paced one spacing apart");
    // The last two cancelled: the next message takes the first freed slot, not one behind them.
    assert_eq!(
        limiter
            .unbook(TENANT, &events, &ids[2..], t0)
            .await
            .unwrap(),
        2
    );
    assert_eq!(decide(Uuid::new_v4()).await, slots[2]);
    // One in the middle cancelled: the line's end stays, the next goes after it.
    assert_eq!(
        limiter
            .unbook(TENANT, &events, &ids[..1], t0)
            .await
            .unwrap(),
        1
    );
    assert_eq!(decide(Uuid::new_v4()).await, slots[3]);
}
