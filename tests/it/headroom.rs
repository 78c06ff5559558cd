//! Reserved headroom in the `paced` limiter (issue 24), on the real Redis with the virtual clock
//! of `budgets.rs`: `normal` and `bulk` never use the share reserved for `high` (minute, day,
//! tenant); a `high` message behind 1,000 booked bulk messages goes out at once, with every
//! rolling 60 s at most L and no booking denied twice — beside the same drain with headroom off
//! and on `fixed-window`, which show today's wait; `high` traffic over its share waits for its
//! share instead of pushing bookings back.

use std::{num::NonZeroU32, sync::Arc};

use mail_worker::{
    domain::{MailboxAddress, Priority},
    rate_limit::{Algorithm, MailRateLimiter, RateLimits},
    service::spread_ms,
};
use uuid::Uuid;

use crate::{
    budgets::{
        Drained, Msg, at, config, count, drain, limiter, limits, mailbox, messages, recipients,
    },
    support::{TestKeys, private_redis::PrivateRedis},
};

const MINUTE_MS: i64 = 60_000;
const DAY_MS: i64 = 86_400_000;

/// `limits(per_minute, per_day)` with `percent` reserved for `high`.
fn reserving(per_minute: u32, per_day: u32, percent: u8) -> RateLimits {
    RateLimits {
        reserved_percent: percent,
        ..limits(per_minute, per_day)
    }
}

/// `n` messages of `priority`, one recipient each (`external` of them external), due at once.
fn of(priority: Priority, m: &MailboxAddress, n: usize, external: u32) -> Vec<Msg> {
    messages(m, n, 1)
        .into_iter()
        .map(|msg| Msg {
            priority,
            external,
            ..msg
        })
        .collect()
}

/// A `high` message due `due_ms` after the start, with a fresh id of the given FNV spread or
/// more (so `fixed-window`'s spread puts it behind most of a backlog: a fixed, not a lucky, case).
fn high_at(m: &MailboxAddress, due_ms: i64, min_spread_ms: u64) -> Msg {
    let id = std::iter::repeat_with(Uuid::new_v4)
        .find(|id| spread_ms(*id, 30_000) >= min_spread_ms)
        .unwrap();
    Msg {
        id,
        due_ms,
        ..of(Priority::High, m, 1, 0).remove(0)
    }
}

/// Drains `all` from `start` for `minutes` through one fresh `algorithm` limiter with `limits`.
async fn drain_from(
    start: chrono::DateTime<chrono::Utc>,
    algorithm: Algorithm,
    limits: RateLimits,
    minutes: i64,
    all: &[Msg],
) -> Drained {
    let keys = TestKeys::new();
    let until = start + chrono::Duration::minutes(minutes);
    drain(vec![limiter(&keys.sub("rl"), algorithm)], limits, until)
        .run(all.to_vec(), start)
        .await
}

/// The sends of messages of `priority` (by their ids in `all`), and the most in any `window_ms`.
fn most_in_window_of(run: &Drained, all: &[Msg], priority: Priority, window_ms: i64) -> usize {
    let mut times: Vec<i64> = all
        .iter()
        .filter(|m| m.priority == priority)
        .filter_map(|m| run.sent_at.get(&m.id).copied())
        .collect();
    times.sort_unstable();
    let mut most = 0;
    let mut start = 0;
    for end in 0..times.len() {
        while times[end] - times[start] >= window_ms {
            start += 1;
        }
        most = most.max(end - start + 1);
    }
    most
}

fn max_denials(run: &Drained) -> u32 {
    run.denials.values().copied().max().unwrap_or(0)
}

#[tokio::test]
async fn bulk_and_normal_never_use_the_reserved_share_of_the_minute_or_the_day() {
    let events = mailbox("events");
    // 25 a minute, 100 recipients a day, 20 % reserved: the others get 20 a minute and 80 a day.
    let mut all = of(Priority::Bulk, &events, 75, 0);
    all.extend(of(Priority::Normal, &events, 75, 0));
    let late_high = high_at(&events, 20 * MINUTE_MS, 0);
    all.push(late_high.clone());
    let start = at(12, 0, 0);
    let run = drain_from(start, Algorithm::Paced, reserving(25, 100, 20), 30, &all).await;
    let low = |p| most_in_window_of(&run, &all, p, MINUTE_MS);
    let lows_in_60_s = {
        let mut lows = all.clone();
        lows.retain(|m| m.priority != Priority::High);
        let mut times: Vec<i64> = lows
            .iter()
            .filter_map(|m| run.sent_at.get(&m.id).copied())
            .collect();
        times.sort_unstable();
        times
            .windows(21)
            .map(|w| w[20] - w[0])
            .min()
            .unwrap_or(i64::MAX)
    };
    println!(
        "reserved 20 % of 25/min and 100/day: bulk+normal sent {} (most {} bulk, {} normal in a 60 s), high after 20 min waited {} ms",
        run.sent(&events) - 1,
        low(Priority::Bulk),
        low(Priority::Normal),
        run.sent_at[&late_high.id] - 20 * MINUTE_MS - start.timestamp_millis()
    );
    // The day: 80 recipients of bulk and normal, then they wait for the window; the high one
    // finds the 20 left and goes at once.
    assert_eq!(run.sent(&events), 81, "80 % of the day, then the high one");
    assert_eq!(
        run.sent_at[&late_high.id],
        start.timestamp_millis() + 20 * MINUTE_MS
    );
    // The minute: 21 sends of bulk and normal never fall in one 60 s.
    assert!(lows_in_60_s >= MINUTE_MS, "{lows_in_60_s} ms");
    assert!(run.max_in_window(&events, MINUTE_MS, count) <= 20);
    assert_eq!(run.max_in_window(&events, DAY_MS, recipients), 81);
    assert_eq!(max_denials(&run), 1, "booked once, kept");
}

#[tokio::test]
async fn bulk_never_uses_the_reserved_share_of_the_tenant_budget() {
    let keys = TestKeys::new();
    let events = mailbox("events");
    // 50 external recipients a day for the tenant, 20 % reserved: bulk gets 40.
    let mut all = of(Priority::Bulk, &events, 60, 1);
    let high = Msg {
        external: 1,
        ..high_at(&events, 10 * MINUTE_MS, 0)
    };
    all.push(high.clone());
    let start = at(12, 0, 0);
    let mut run = drain(
        vec![limiter(&keys.sub("rl"), Algorithm::Paced)],
        reserving(1_000, 9_000, 20),
        start + chrono::Duration::minutes(30),
    );
    run.tenant_budget = NonZeroU32::new(50);
    let run = run.run(all, start).await;
    assert_eq!(run.sent(&events), 41, "40 bulk, then the high one");
    assert_eq!(
        run.sent_at[&high.id],
        start.timestamp_millis() + 10 * MINUTE_MS,
        "the high one finds the tenant's reserved 10 at once"
    );
}

/// One mailbox: 1,000 bulk messages due at the start (all booked within the first call
/// round), a `high` one due 5 min 20 s later (mid-minute for `fixed-window`), drained for 60 min.
async fn high_behind_1000_bulk(algorithm: Algorithm, percent: u8) -> (Drained, Msg, Vec<Msg>) {
    let events = mailbox("events");
    let mut all = of(Priority::Bulk, &events, 1_000, 0);
    let high = high_at(&events, 5 * MINUTE_MS + 20_000, 20_000);
    all.push(high.clone());
    let run = drain_from(
        at(12, 0, 0),
        algorithm,
        reserving(25, 9_000, percent),
        60,
        &all,
    )
    .await;
    (run, high, all)
}

#[tokio::test]
async fn a_high_message_behind_1000_booked_bulk_goes_out_within_one_pacing_interval() {
    let events = mailbox("events");
    let start = at(12, 0, 0).timestamp_millis();
    let mut waits = Vec::new();
    for (algorithm, percent) in [
        (Algorithm::Paced, 20),
        (Algorithm::Paced, 0),
        (Algorithm::FixedWindow, 20),
    ] {
        let (run, high, all) = high_behind_1000_bulk(algorithm, percent).await;
        let due = start + high.due_ms;
        let wait = run.sent_at.get(&high.id).map(|t| t - due);
        let most = run.max_in_window(&events, MINUTE_MS, count);
        println!(
            "{algorithm} reserved {percent} %: high behind 1,000 booked bulk waited {wait:?} ms; most in a 60 s: {most}; bulk sent {}; most denials of one message: {}",
            run.sent(&events) - usize::from(wait.is_some()),
            max_denials(&run)
        );
        waits.push(wait);
        if (algorithm, percent) == (Algorithm::Paced, 20) {
            // Within one pacing interval (60 s / L; the claim interval is 0 in virtual time).
            assert!(wait.is_some_and(|w| w <= MINUTE_MS / 25), "{wait:?}");
            // Every rolling 60 s at most L (so Exchange's 30 never 429s), bulk at most 80 %.
            assert!(most <= 25, "{most}");
            assert!(most_in_window_of(&run, &all, Priority::Bulk, MINUTE_MS) <= 20);
            // It displaced no one: every bulk message booked once and sent in its slot.
            assert_eq!(max_denials(&run), 1);
            // And the whole backlog went out at 20 a minute within the hour.
            assert_eq!(run.sent(&events), 1_001);
        }
    }
    // Today's wait: headroom off, the high one books behind the whole backlog (~40 min);
    // fixed-window sends it when the minute races let it through.
    assert!(waits[1].is_some_and(|w| w > 30 * MINUTE_MS), "{waits:?}");
    assert!(
        waits[2].is_none_or(|w| w > 2 * MINUTE_MS),
        "fixed-window: {waits:?}"
    );
}

#[tokio::test]
async fn high_traffic_over_its_share_waits_for_its_share_and_no_booking_is_denied_twice() {
    let events = mailbox("events");
    // 1,000 booked bulk; then 10 high a minute for 5 min (twice the reserved 5 of 25).
    let mut all = of(Priority::Bulk, &events, 1_000, 0);
    let highs: Vec<Msg> = (0..50)
        .map(|i| Msg {
            id: Uuid::new_v4(),
            due_ms: 2 * MINUTE_MS + i * 6_000,
            ..of(Priority::High, &events, 1, 0).remove(0)
        })
        .collect();
    all.extend(highs.iter().cloned());
    let start = at(12, 0, 0);
    let run = drain_from(start, Algorithm::Paced, reserving(25, 9_000, 20), 30, &all).await;
    let mut waits: Vec<i64> = highs
        .iter()
        .map(|h| run.sent_at[&h.id] - start.timestamp_millis() - h.due_ms)
        .collect();
    waits.sort_unstable();
    let pct = |p: usize| waits[(waits.len() - 1) * p / 100];
    let most = run.max_in_window(&events, MINUTE_MS, count);
    println!(
        "high at 2x its share behind 1,000 booked bulk: high wait p50 {} ms, p99 {} ms, max {} ms; most in a 60 s {most}; most denials of one message {}; bulk most in 60 s {}",
        pct(50),
        pct(99),
        waits[waits.len() - 1],
        max_denials(&run),
        most_in_window_of(&run, &all, Priority::Bulk, MINUTE_MS)
    );
    assert!(most <= 25, "{most}");
    assert_eq!(max_denials(&run), 1, "no message denied twice");
    assert!(most_in_window_of(&run, &all, Priority::High, MINUTE_MS) <= 25);
    // Its share, 5 a minute, went at once; the rest waited for the share, not for the bulk.
    assert_eq!(pct(0), 0);
    assert!(waits[waits.len() - 1] < 10 * MINUTE_MS, "{waits:?}");
}

/// Commands Redis ran (`INFO commandstats`) since the last `CONFIG RESETSTAT`: inside the
/// scripts (what a decision costs), and the `EVALSHA`/`EVAL` calls themselves.
pub(crate) async fn commands_run(redis: &mut redis::aio::MultiplexedConnection) -> (u64, u64) {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(redis)
        .await
        .unwrap();
    let (mut inside, mut evals) = (0, 0);
    for line in info.lines().filter_map(|l| l.strip_prefix("cmdstat_")) {
        let (name, rest) = line.split_once(':').unwrap();
        let calls: u64 = rest
            .split(',')
            .find_map(|kv| kv.strip_prefix("calls="))
            .unwrap()
            .parse()
            .unwrap();
        match name {
            "evalsha" | "eval" => evals += calls,
            "info" | "config" | "script" | "ping" | "client" | "hello" => {}
            _ => inside += calls,
        }
    }
    (inside, evals)
}

#[tokio::test]
async fn redis_commands_per_decision_with_priority_on_and_off() {
    // 1,000 bulk and 20 high (one every 2 min) on a private Redis, so only these are counted.
    let events = mailbox("events");
    let mut per_mail = Vec::new();
    for percent in [0u8, 20] {
        let server = PrivateRedis::start(&[]);
        let limiter = Arc::new(
            MailRateLimiter::new(&config(&server.url(), "mw:rl", Algorithm::Paced, 1)).unwrap(),
        );
        let mut redis = redis::Client::open(server.url().as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let mut all = of(Priority::Bulk, &events, 1_000, 0);
        all.extend((0..20).map(|i| high_at(&events, i * 2 * MINUTE_MS + 1_000, 0)));
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut redis)
            .await
            .unwrap();
        let start = at(12, 0, 0);
        let run = drain(
            vec![limiter],
            reserving(25, 9_000, percent),
            start + chrono::Duration::minutes(60),
        )
        .run(all, start)
        .await;
        let (inside, evals) = commands_run(&mut redis).await;
        println!(
            "paced reserved {percent} %: {} decisions, {} sent, {inside} commands inside the scripts ({evals} EVALSHA, decisions + releases): {:.2} per decision, {:.2} per mail sent",
            run.calls,
            run.sends.len(),
            inside as f64 / run.calls as f64,
            inside as f64 / run.sends.len() as f64,
        );
        assert_eq!(run.sends.len(), 1_020);
        assert_eq!(max_denials(&run), 1, "{:?}", run.reasons);
        per_mail.push(inside as f64 / run.sends.len() as f64);
    }
    // Priority costs no command of its own (one more HMGET field, `h` written instead of `tat`).
    assert!(
        per_mail[1] <= per_mail[0] * 1.10,
        "priority on: {per_mail:?}"
    );
}

/// `mail-worker run` (`paced`, `MAIL_RATE_LIMIT_RESERVED_PERCENT=percent`) against graph-sim
/// (Exchange's 30 per rolling 60 s), our limit 25: 1,000 bulk rows, all booked, then one `high`
/// row inserted. Returns the app, the running daemon, the bulk rows and the high one.
async fn daemon_with_booked_bulk(
    percent: &str,
) -> (
    crate::support::TestApp,
    tokio::process::Child,
    Vec<Uuid>,
    Uuid,
) {
    use crate::support::{TestApp, wait_until};
    let world = TestApp::paced().spawn().await;
    let bulk = world.insert(0, 1_000, "SCHEDULED").await;
    sqlx::query("UPDATE messages SET priority = 'bulk'")
        .execute(&world.db.pool)
        .await
        .unwrap();
    let daemon = world
        .daemon_command(&[("MAIL_RATE_LIMIT_RESERVED_PERCENT", percent)])
        .spawn()
        .unwrap();
    let booked = "SELECT count(*) FROM messages WHERE deferrals > 0 OR status = 'SENT'";
    wait_until(
        std::time::Duration::from_secs(120),
        "every bulk row booked",
        async || {
            sqlx::query_scalar::<_, i64>(booked)
                .fetch_one(&world.db.pool)
                .await
                .unwrap()
                == 1_000
        },
    )
    .await;
    let high = world.insert(0, 1, "SCHEDULED").await[0];
    world
        .execute("UPDATE messages SET priority = 'high' WHERE id = $1", high)
        .await;
    (world, daemon, bulk, high)
}

/// Waits (60 s at most) until `done` holds, then how long after the high message's insert its
/// `sql` (`SELECT created_at, <a later time> FROM messages WHERE id = $1`) says it went or is due.
async fn high_waited(
    world: &crate::support::TestApp,
    high: Uuid,
    what: &str,
    done: impl AsyncFnMut() -> bool,
    sql: &'static str,
) -> chrono::Duration {
    crate::support::wait_until(std::time::Duration::from_secs(60), what, done).await;
    let (created, later): (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>) =
        world.one_row(sql, high).await;
    later - created
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_daemon_a_high_message_behind_1000_booked_bulk_goes_out_at_once() {
    let (world, _daemon, bulk, high) = daemon_with_booked_bulk("20").await;
    let wait_ms = high_waited(
        &world,
        high,
        "the high message sent",
        async || world.status_of(high).await.0 == "SENT",
        "SELECT created_at, sent_at FROM messages WHERE id = $1",
    )
    .await
    .num_milliseconds();
    let mut received: Vec<i64> = world
        .sim
        .messages()
        .iter()
        .map(|m| m.received_at_ms)
        .collect();
    received.sort_unstable();
    let most = received
        .iter()
        .enumerate()
        .map(|(i, t)| {
            received[i..]
                .iter()
                .take_while(|u| *u - t < MINUTE_MS)
                .count()
        })
        .max()
        .unwrap_or(0);
    println!(
        "daemon: high behind 1,000 booked bulk sent {wait_ms} ms after its insert; graph-sim saw {} sends, most {most} in a 60 s, {} refused",
        received.len(),
        world.sim_refused()
    );
    // One pacing interval (2.48 s) + the claim interval (100 ms), with room for a loaded
    // machine; headroom off, it waits for the backlog (next test).
    assert!(wait_ms < 15_000, "{wait_ms} ms");
    assert_eq!(world.sim_refused(), 0, "no Graph 429");
    assert!(most <= 25, "{most}");
    let sent_bulk: i64 =
        sqlx::query_scalar("SELECT count(*) FROM messages WHERE status = 'SENT' AND id = ANY($1)")
            .bind(&bulk)
            .fetch_one(&world.db.pool)
            .await
            .unwrap();
    assert!(
        sent_bulk < 1_000,
        "the backlog still waits: {sent_bulk} sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_daemon_with_headroom_off_the_high_message_books_behind_the_backlog() {
    let (world, _daemon, _bulk, high) = daemon_with_booked_bulk("0").await;
    let wait = high_waited(
        &world,
        high,
        "the high message booked",
        async || world.row(high).await.2 > 0,
        "SELECT created_at, scheduled_on FROM messages WHERE id = $1",
    )
    .await;
    println!(
        "daemon, headroom off: the high message booked {} s after its insert",
        wait.num_seconds()
    );
    // 1,000 slots of (60 s + 2 s) / 25 ahead of it.
    assert!(wait > chrono::Duration::minutes(35), "{wait}");
}
