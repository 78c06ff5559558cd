//! The intake consumer outlives its Redis (issue 46): a private `redis-server` restarted,
//! frozen (`SIGSTOP` for 35 s) or poisoned under a running daemon; jobs pushed after it is back
//! are stored within 10 s, and `/readyz` names a consumer that does not poll.

use std::time::{Duration, Instant};

use mail_worker::{
    config::Config,
    daemon::{self, Handle, Options},
    intake,
    rate_limit::RedisUrls,
};
use uuid::Uuid;

use crate::{
    intake::line,
    support::{TestApp, private_redis::PrivateRedis, wait_until},
};

/// The world's config with the intake on `redis` (heartbeat 1 s: silent after 3 s), a fast
/// daemon and its listener on a free port; the limiter stays on the shared Redis.
fn on_private_redis(world: &TestApp, redis: &PrivateRedis) -> Config {
    let mut config = world.config.clone();
    config.redis_url = RedisUrls::from(redis.url());
    config.intake.heartbeat = Duration::from_secs(1);
    config.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    config.metrics_refresh = Duration::from_millis(100);
    config.worker.scheduler_interval = Duration::from_millis(100);
    config.shutdown_grace = Duration::from_secs(5);
    config
}

async fn get(handle: &Handle, path: &str) -> (u16, serde_json::Value) {
    let addr = handle.ops_addr.expect("the listener is on");
    let answer = reqwest::get(format!("http://{addr}{path}")).await.unwrap();
    let code = answer.status().as_u16();
    let text = answer.text().await.unwrap();
    (
        code,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

async fn metrics(handle: &Handle) -> String {
    let addr = handle.ops_addr.expect("the listener is on");
    reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Pushes `n` fresh lines of `mailbox` onto the world's queue on `redis`; their ids.
async fn push(world: &TestApp, redis: &PrivateRedis, mailbox: &str, n: usize) -> Vec<Uuid> {
    let conn = intake::connect(&RedisUrls::from(redis.url()))
        .await
        .unwrap();
    let ids: Vec<Uuid> = (0..n).map(|_| Uuid::new_v4()).collect();
    let lines = ids.iter().map(|id| line(*id, mailbox));
    let queue = world.config.intake.queue.as_deref().unwrap();
    assert_eq!(intake::push_lines(conn, queue, lines).await.unwrap(), n);
    ids
}

async fn stored(world: &TestApp, ids: &[Uuid]) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM messages WHERE id = ANY($1)")
        .bind(ids)
        .fetch_one(&world.db.pool)
        .await
        .unwrap()
}

/// Waits until every one of `ids` is stored, within `within`; how long it took.
async fn all_stored(world: &TestApp, ids: &[Uuid], within: Duration, what: &str) -> Duration {
    let started = Instant::now();
    wait_until(within, what, async || {
        stored(world, ids).await == ids.len() as i64
    })
    .await;
    started.elapsed()
}

/// Runs the daemon on `config` while `body` runs, then stops it.
async fn with_daemon(config: Config, body: impl AsyncFnOnce(&Handle)) {
    let (handle, run) = daemon::start(config, Options::default()).await.unwrap();
    let test = async {
        body(&handle).await;
        handle.stop();
    };
    let (result, ()) = tokio::join!(run, test);
    result.expect("the daemon stops only when asked, and cleanly");
}

/// The world's first mailbox.
fn mailbox(world: &TestApp) -> String {
    world.mailboxes[0].0.as_str().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_queues_redis_restarts_jobs_pushed_are_stored_within_10_s() {
    let world = TestApp::builder().spawn().await;
    let mut redis = PrivateRedis::start(&[]);
    let mailbox = mailbox(&world);
    with_daemon(on_private_redis(&world, &redis), async |d| {
        let before = push(&world, &redis, &mailbox, 5).await;
        all_stored(&world, &before, Duration::from_secs(20), "5 jobs before").await;
        redis.kill();
        tokio::time::sleep(Duration::from_secs(3)).await;
        redis.spawn();
        let after = push(&world, &redis, &mailbox, 5).await;
        let took = all_stored(
            &world,
            &after,
            Duration::from_secs(10),
            "5 jobs after the restart",
        )
        .await;
        eprintln!("stored {} s after Redis came back", took.as_secs_f64());
        let text = metrics(d).await;
        assert!(
            text.lines().any(
                |l| l.starts_with("mail_worker_intake_consumer_restarts_total ")
                    && !l.ends_with(" 0")
            ),
            "a restart counted: {text}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_queues_redis_froze_for_35_s_jobs_pushed_are_stored_within_10_s() {
    let world = TestApp::builder().spawn().await;
    let redis = PrivateRedis::start(&[]);
    let mailbox = mailbox(&world);
    with_daemon(on_private_redis(&world, &redis), async |_| {
        let before = push(&world, &redis, &mailbox, 5).await;
        all_stored(&world, &before, Duration::from_secs(20), "5 jobs before").await;
        redis.signal("-STOP");
        tokio::time::sleep(Duration::from_secs(35)).await;
        redis.signal("-CONT");
        let after = push(&world, &redis, &mailbox, 5).await;
        let took = all_stored(
            &world,
            &after,
            Duration::from_secs(10),
            "5 jobs after the freeze",
        )
        .await;
        eprintln!("stored {} s after Redis thawed", took.as_secs_f64());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_that_cannot_poll_is_named_by_readyz_until_it_polls_again() {
    let world = TestApp::builder().spawn().await;
    let redis = PrivateRedis::start(&[]);
    let mailbox = mailbox(&world);
    let queue = world.config.intake.queue.clone().unwrap();
    with_daemon(on_private_redis(&world, &redis), async |d| {
        let first = push(&world, &redis, &mailbox, 1).await;
        all_stored(&world, &first, Duration::from_secs(20), "the first job").await;
        let (code, ready) = get(d, "/readyz").await;
        assert_eq!(
            (code, &ready["degraded"]),
            (200, &serde_json::json!([])),
            "{ready}"
        );
        // The queue's list of waiting jobs is a string now: each fetch fails (WRONGTYPE)
        // while Redis answers every PING.
        let mut conn = redis::Client::open(redis.url().as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let active = format!("{queue}:active");
        let _: () = redis::cmd("DEL")
            .arg(&active)
            .query_async(&mut conn)
            .await
            .unwrap();
        let _: () = redis::cmd("SET")
            .arg(&active)
            .arg("not a list")
            .query_async(&mut conn)
            .await
            .unwrap();
        wait_until(
            Duration::from_secs(10),
            "readyz names the consumer",
            async || {
                let (_, ready) = get(d, "/readyz").await;
                ready["degraded"]
                    .as_array()
                    .is_some_and(|d| d.iter().any(|n| n == "intake_consumer"))
            },
        )
        .await;
        let (code, ready) = get(d, "/readyz").await;
        assert_eq!(code, 200, "degraded, not unready: {ready}");
        assert_eq!(ready["checks"]["intake_redis"]["ok"], true, "{ready}");
        let why = ready["checks"]["intake_consumer"]["error"]
            .as_str()
            .unwrap();
        assert!(
            why.contains("has not polled") && why.contains("WRONGTYPE"),
            "{ready}"
        );
        assert_eq!(
            get(d, "/healthz").await.0,
            200,
            "a restart of the pod would not help"
        );
        let _: () = redis::cmd("DEL")
            .arg(&active)
            .query_async(&mut conn)
            .await
            .unwrap();
        let later = push(&world, &redis, &mailbox, 3).await;
        all_stored(
            &world,
            &later,
            Duration::from_secs(10),
            "3 jobs after the repair",
        )
        .await;
        wait_until(
            Duration::from_secs(10),
            "readyz without the consumer",
            async || get(d, "/readyz").await.1["degraded"] == serde_json::json!([]),
        )
        .await;
    })
    .await;
}
