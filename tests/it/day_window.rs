//! The `paced` day window behind a backlog past the day budget (issue 23), on a private Redis
//! with the virtual clock of `budgets.rs`: a new message's decision costs the same Redis
//! commands with 10,000 messages booked as with 1,000 (the slot is found from hour sums, not by
//! walking every minute bucket), the bookings fill each rolling 24 h exactly to the budget, and
//! a state kept before the hour sums existed gets them rebuilt and books the same slot.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use mail_worker::{
    domain::{MailboxAddress, Priority},
    rate_limit::{Algorithm, Ask, Decision, MailRateLimiter, RateLimiter, paced::keys::PacedKeys},
};
use uuid::Uuid;

use crate::{
    budgets::{TENANT, at, config, limits, mailbox},
    support::private_redis::PrivateRedis,
};

const DAY_MS: i64 = 86_400_000;
/// A small day budget, so that 10,000 bookings reach 20 days ahead.
const PER_DAY: u32 = 500;

/// `n` new one-recipient messages of `m`, all at `now`; the last decision.
async fn book(
    limiter: &MailRateLimiter,
    m: &MailboxAddress,
    n: usize,
    now: DateTime<Utc>,
) -> Decision {
    let mut last = None;
    for _ in 0..n {
        let ask = Ask {
            message_id: Uuid::new_v4(),
            mailbox: m,
            tenant: TENANT,
            recipients: 1,
            limits: limits(25, PER_DAY),
            tenant_budget: None,
            priority: Priority::Normal,
        };
        last = Some(limiter.check_and_reserve(&ask, now).await.unwrap());
    }
    last.unwrap()
}

async fn reset(redis: &mut redis::aio::MultiplexedConnection) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(redis)
        .await
        .unwrap();
}

async fn private() -> (
    PrivateRedis,
    Arc<MailRateLimiter>,
    redis::aio::MultiplexedConnection,
) {
    let server = PrivateRedis::start(&[]);
    let limiter = Arc::new(
        MailRateLimiter::new(&config(&server.url(), "mw:rl", Algorithm::Paced, 1)).unwrap(),
    );
    let redis = redis::Client::open(server.url().as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    (server, limiter, redis)
}

#[tokio::test]
async fn a_backlog_past_the_day_budget_costs_the_same_commands_at_10_000_booked_as_at_1_000() {
    let (_server, limiter, mut redis) = private().await;
    let events = mailbox("events");
    let now = at(12, 0, 0);
    let mut per_decision = Vec::new();
    for backlog in [1_000, 10_000] {
        let booked: i64 = redis::cmd("ZCARD")
            .arg(PacedKeys::new("mw:rl", TENANT, &events).booked())
            .query_async(&mut redis)
            .await
            .unwrap();
        book(
            &limiter,
            &events,
            backlog - usize::try_from(booked).unwrap(),
            now,
        )
        .await;
        reset(&mut redis).await;
        let last = book(&limiter, &events, 200, now).await;
        let (commands, evals) = crate::headroom::commands_run(&mut redis).await;
        assert_eq!(evals, 200);
        let Decision::Denied {
            booked: true,
            retry_after,
            ..
        } = last
        else {
            panic!("{last:?}")
        };
        assert!(
            retry_after.as_millis() > u128::try_from(DAY_MS).unwrap() * (backlog as u128 / 500 - 1),
            "{backlog} booked at {PER_DAY} a day: {retry_after:?} ahead"
        );
        per_decision.push(commands as f64 / 200.0);
    }
    println!("Redis commands per booking: {per_decision:?} at 1,000 and 10,000 booked");
    assert!(per_decision.iter().all(|c| *c <= 30.0), "{per_decision:?}");
    assert!(per_decision[1] <= per_decision[0] + 0.5, "{per_decision:?}");

    // Every rolling 24 h holds at most the day budget, and the backlog fills it (the first
    // message went at once, at `now`).
    let keys = PacedKeys::new("mw:rl", TENANT, &events);
    let slots: Vec<(String, i64)> = redis::cmd("ZRANGE")
        .arg(keys.booked())
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut redis)
        .await
        .unwrap();
    let mut times: Vec<i64> = slots.iter().map(|(_, s)| *s).collect();
    times.push(now.timestamp_millis());
    times.sort_unstable();
    let (mut first, mut most) = (0, 0);
    for (last, t) in times.iter().enumerate() {
        while times[first] <= t - DAY_MS {
            first += 1;
        }
        most = most.max(last - first + 1);
    }
    assert_eq!(times.len(), 10_201);
    assert_eq!(most, PER_DAY as usize, "the most in any rolling 24 h");
}

#[tokio::test]
async fn a_state_from_before_the_hour_sums_gets_them_and_books_the_same_slot() {
    let (_server, limiter, mut redis) = private().await;
    let now = at(12, 0, 0);
    let (kept, legacy) = (mailbox("kept"), mailbox("legacy"));
    book(&limiter, &kept, 2_000, now).await;
    book(&limiter, &legacy, 2_000, now).await;
    // `legacy` as the script before issue 23 left it: minute buckets only.
    let state = PacedKeys::new("mw:rl", TENANT, &legacy).state().to_owned();
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(&state)
        .query_async(&mut redis)
        .await
        .unwrap();
    let hours: Vec<&String> = fields
        .iter()
        .filter(|f| f.starts_with("H:") || *f == "hs")
        .collect();
    assert!(hours.len() > 4, "{} hour fields", hours.len());
    let _: () = redis::cmd("HDEL")
        .arg(&state)
        .arg(&hours)
        .query_async(&mut redis)
        .await
        .unwrap();
    for _ in 0..3 {
        let (a, b) = (
            book(&limiter, &kept, 1, now).await,
            book(&limiter, &legacy, 1, now).await,
        );
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
    }
    assert_eq!(
        hour_fields(&mut redis, &legacy).await,
        hour_fields(&mut redis, &kept).await,
        "the hour sums rebuilt"
    );
}

/// The hour sums of `m`'s state hash (`H:<hour>` and `hs`), sorted.
async fn hour_fields(
    redis: &mut redis::aio::MultiplexedConnection,
    m: &MailboxAddress,
) -> Vec<(String, String)> {
    let state = PacedKeys::new("mw:rl", TENANT, m).state().to_owned();
    let all: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(&state)
        .query_async(redis)
        .await
        .unwrap();
    let mut hours: Vec<(String, String)> = all
        .into_iter()
        .filter(|(f, _)| f.starts_with("H:") || f == "hs")
        .collect();
    hours.sort();
    hours
}
