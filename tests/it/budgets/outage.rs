//! A campaign through a limiter outage: a freeze or a slow reply never takes a mailbox past its rolling or day budget.

#[allow(unused_imports)]
use super::*;

/// How the private Redis goes away in [`campaign_through_an_outage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outage {
    /// Frozen (`SIGSTOP`), then thawed (`SIGCONT`) with its state.
    Freeze,
    /// Killed, then restarted empty (no persistence).
    RestartEmpty,
}

/// A campaign through 2 replicas on a private Redis that goes away (`outage`) from
/// `window.0` to `window.1` (virtual ms): message `i` is first due at `arrivals[i]`, and a
/// denied message comes back when told (with the spread when it holds no booking), as the
/// service does. Returns the sends (virtual ms, sorted), the most in any rolling 60 s and how
/// many went out during the outage.
pub(crate) async fn campaign_through_an_outage(
    outage: Outage,
    limits: RateLimits,
    arrivals: &[i64],
    window: (i64, i64),
    end: i64,
) -> (Vec<i64>, usize, usize) {
    let mut redis = PrivateRedis::start(&[]);
    let ledger = Arc::new(Ledger::default());
    let replicas: Vec<Arc<MailRateLimiter>> = (0..2)
        .map(|_| {
            let mut c = config(&redis.url(), "rl", Algorithm::Paced, 2);
            c.redis_timeout = Duration::from_millis(match outage {
                Outage::Freeze => 50,
                Outage::RestartEmpty => 200,
            });
            Arc::new(
                MailRateLimiter::new(&c)
                    .unwrap()
                    .with_history(ledger.clone() as Arc<dyn SendHistory>),
            )
        })
        .collect();
    let events = mailbox("events");
    let t0 = at(12, 0, 0);
    let all = messages(&events, arrivals.len(), 1);
    let mut due: BinaryHeap<Reverse<(i64, usize)>> = arrivals
        .iter()
        .enumerate()
        .map(|(i, at)| Reverse((*at, i)))
        .collect();
    let (mut gone, mut back) = (false, false);
    let mut sends = Vec::new();
    let mut turn: u64 = 0;
    while let Some(Reverse((offset, i))) = due.pop() {
        if offset >= end {
            break;
        }
        if offset >= window.0 && !gone {
            match outage {
                Outage::Freeze => redis.signal("-STOP"),
                Outage::RestartEmpty => redis.kill(),
            }
            gone = true;
        }
        if offset >= window.1 && !back {
            match outage {
                Outage::Freeze => redis.signal("-CONT"),
                Outage::RestartEmpty => redis.spawn(),
            }
            back = true;
        }
        let now = t0 + chrono::Duration::milliseconds(offset);
        // Which replica claims a message: in turn (the restart), or at random as real claims
        // are (the freeze: uneven shares, so some of the held messages are late when it thaws).
        turn = match outage {
            Outage::RestartEmpty => turn + 1,
            Outage::Freeze => turn
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407),
        };
        let limiter = &replicas[match outage {
            Outage::RestartEmpty => (turn - 1) % 2,
            Outage::Freeze => (turn >> 33) % 2,
        } as usize];
        match limiter
            .check_and_reserve(&ask(&events, all[i].id, limits), now)
            .await
            .unwrap()
        {
            Decision::Allowed(r) => {
                sends.push(offset);
                ledger.0.lock().unwrap().push((events.clone(), now, 1));
                limiter.release(&r, RequestEnd::Done).await;
            }
            Decision::Denied {
                retry_after,
                booked,
                ..
            } => {
                let spread = if booked {
                    0
                } else {
                    spread_ms(all[i].id, 30_000) as i64
                };
                due.push(Reverse((
                    offset + retry_after.as_millis() as i64 + spread.max(1),
                    i,
                )));
            }
        }
    }
    sends.sort_unstable();
    let most = max_in_60_s(sends.clone());
    let during = sends
        .iter()
        .filter(|t| (window.0..window.1).contains(*t))
        .count();
    (sends, most, during)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_30_s_freeze_the_fail_open_sends_count_in_every_rolling_60_s() {
    // 400 messages due at once, L = 60; Redis frozen from 60 s to 90 s.
    let (sends, most, during) = campaign_through_an_outage(
        Outage::Freeze,
        limits(60, 1_000),
        &[0; 400],
        (60_000, 90_000),
        200_000,
    )
    .await;
    println!(
        "{} sends in 200 s, {during} while frozen, at most {most} in a rolling 60 s (L = 60)",
        sends.len()
    );
    assert!(most <= 60, "{most} sends in one rolling 60 s");
    // Each replica's share of the minute (30) still holds its sends of the minute before.
    assert!(
        during >= 15,
        "mail kept flowing while Redis was frozen: {during} in 30 s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_30_s_freeze_never_takes_a_mailbox_past_its_day_budget() {
    // D = 40 recipients; a message a second arrives for 60 s; Redis frozen from 20 s to 50 s.
    let arrivals: Vec<i64> = (0..60).map(|i| i * 1_000).collect();
    let (sends, most, during) = campaign_through_an_outage(
        Outage::Freeze,
        limits(60, 40),
        &arrivals,
        (20_000, 50_000),
        120_000,
    )
    .await;
    println!(
        "{} recipients in 120 s, {during} while frozen, at most {most} in a rolling 60 s (D = 40)",
        sends.len()
    );
    assert!(
        sends.len() <= 40,
        "{} recipients in 24 h against a budget of 40",
        sends.len()
    );
    assert!(
        during >= 5,
        "mail kept flowing while Redis was frozen: {during}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_slower_than_the_deadline_never_takes_a_mailbox_past_its_day_budget() {
    // D = 10; replica A sends 8 (its last answer: 8 in the 24 h), replica B the last 2. Then
    // Redis is paused just past the 50 ms deadline: A's next call fails open, Redis itself
    // denies it (day) a moment later. A's stale 8 gave it a fail-open share of (10 − 8) / 2 = 1,
    // the 11th recipient; what PostgreSQL knows was sent (10) leaves it none.
    let redis = PrivateRedis::start(&[]);
    let ledger = Arc::new(Ledger::default());
    let [a, b] = [0, 1].map(|_| {
        let mut c = config(&redis.url(), "rl", Algorithm::Paced, 2);
        c.redis_timeout = Duration::from_millis(50);
        MailRateLimiter::new(&c)
            .unwrap()
            .with_history(ledger.clone() as Arc<dyn SendHistory>)
    });
    let events = mailbox("events");
    let day = limits(60, 10);
    let t0 = at(12, 0, 0);
    let mut sent = 0;
    for (i, limiter) in [&a; 8].into_iter().chain([&b; 2]).enumerate() {
        let now = t0 + chrono::Duration::seconds(3 * i as i64);
        let Decision::Allowed(r) = limiter
            .check_and_reserve(&ask(&events, Uuid::new_v4(), day), now)
            .await
            .unwrap()
        else {
            panic!("message {i} fits the day");
        };
        ledger.0.lock().unwrap().push((events.clone(), now, 1));
        limiter.release(&r, RequestEnd::Done).await;
        sent += 1;
    }
    let mut pauser = redis::Client::open(redis.url().as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(300)
        .arg("ALL")
        .query_async(&mut pauser)
        .await
        .unwrap();
    let now = t0 + chrono::Duration::seconds(40);
    let decision = a
        .check_and_reserve(&ask(&events, Uuid::new_v4(), day), now)
        .await
        .unwrap();
    if matches!(decision, Decision::Allowed(_)) {
        sent += 1;
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    let Decision::Denied { booked: true, .. } = b
        .check_and_reserve(&ask(&events, Uuid::new_v4(), day), now)
        .await
        .unwrap()
    else {
        panic!("Redis answers again: the day is full, the message booked a day on");
    };
    assert!(
        matches!(
            decision,
            Decision::Denied {
                reason: DenyReason::Day,
                booked: false,
                ..
            }
        ),
        "{decision:?}"
    );
    assert_eq!(sent, 10, "recipients sent in the 24 h against D = 10");
}
