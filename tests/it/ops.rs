//! The daemon's operations surface, in process: `/metrics`, `/healthz` and `/readyz` through a
//! real HTTP client; a sender paused by a missing `env:` secret and resumed without a restart;
//! PostgreSQL going away, which the daemon lives through.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use mail_worker::{
    config::Config,
    daemon::{self, Handle, Options},
};

use crate::support::{
    TestApp, TestKeys, logs::capture_logs, redis_url, wait_until, wait_until_showing,
};

/// `config` for a fast in-process daemon with its listener on a free port.
fn fast(mut config: Config) -> Config {
    config.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    config.metrics_refresh = Duration::from_millis(100);
    config.worker.scheduler_interval = Duration::from_millis(100);
    config.defer_spread_max = Duration::from_millis(200);
    config.shutdown_grace = Duration::from_secs(5);
    config
}

async fn get(handle: &Handle, path: &str) -> (u16, String) {
    let addr = handle.ops_addr.expect("the listener is on");
    let answer = reqwest::get(format!("http://{addr}{path}")).await.unwrap();
    (answer.status().as_u16(), answer.text().await.unwrap())
}

/// The value of the sample line `name` (with its labels) in Prometheus text, if present.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Runs the daemon while `body` runs, then stops it; returns `body`'s value. Fails the test if
/// the daemon stops on its own.
async fn with_daemon<T>(
    config: Config,
    options: Options,
    body: impl AsyncFnOnce(&Handle) -> T,
) -> T {
    let (handle, run) = daemon::start(config, options).await.unwrap();
    let test = async {
        let value = body(&handle).await;
        handle.stop();
        value
    };
    let (result, value) = tokio::join!(run, test);
    result.expect("the daemon stops only when asked, and cleanly");
    value
}

#[tokio::test]
async fn metrics_equal_the_rows_sent_and_health_answers() {
    let world = TestApp::builder().spawn().await;
    let ids = world.insert(0, 12, "SCHEDULED").await;
    // Two the message trace told delivered: counted with the finished statuses.
    world.insert(0, 2, "DELIVERED").await;
    let config = fast(world.config.clone());
    // Each wait is a bound, not a timing: under a loaded CI (341 tests on 2 cores) a readiness
    // check may miss its 800 ms deadline once, so readiness is asked until it answers 200 and a
    // timeout prints the last answer.
    let text = with_daemon(config, Options::default(), async |d| {
        wait_until(Duration::from_secs(60), "all 12 SENT", async || {
            world.count("SENT").await == 12
        })
        .await;
        assert_eq!(get(d, "/healthz").await.0, 200);
        let last = Mutex::new(String::new());
        wait_until_showing(
            Duration::from_secs(20),
            "/readyz 200 with postgresql and intake_redis ok",
            async || {
                let (code, body) = get(d, "/readyz").await;
                let ready: serde_json::Value = serde_json::from_str(&body).unwrap();
                *last.lock().unwrap() = format!("{code} {body}");
                code == 200
                    && ready["ready"] == true
                    && ready["checks"]["postgresql"]["ok"] == true
                    && ready["checks"]["intake_redis"]["ok"] == true
            },
            || last.lock().unwrap().clone(),
        )
        .await;
        // The gauge is refreshed every 100 ms, its finished statuses every 20th time (2 s).
        let text = Mutex::new(String::new());
        wait_until_showing(
            Duration::from_secs(20),
            "gauge shows 12 SENT",
            async || {
                let body = get(d, "/metrics").await.1;
                let shown = sample(&body, "mail_worker_messages{status=\"SENT\"}") == Some(12.0);
                *text.lock().unwrap() = body;
                shown
            },
            || text.lock().unwrap().clone(),
        )
        .await;
        text.into_inner().unwrap()
    })
    .await;
    assert_eq!(ids.len(), 12);
    assert_eq!(
        world.sim.messages().len(),
        12,
        "graph-sim accepted each once"
    );
    for (line, value) in [
        (
            "mail_worker_sends_total{provider=\"graph\",outcome=\"sent\"}",
            12.0,
        ),
        (
            "mail_worker_provider_requests_total{provider=\"graph\",status=\"accepted\"}",
            12.0,
        ),
        (
            "mail_worker_provider_seconds_count{provider=\"graph\"}",
            12.0,
        ),
        (
            "mail_worker_rate_limit_decisions_total{decision=\"allowed\"}",
            12.0,
        ),
        ("mail_worker_rate_limit_seconds_count", 12.0),
        ("mail_worker_claimed_total", 12.0),
        ("mail_worker_in_flight", 0.0),
        ("mail_worker_messages{status=\"SCHEDULED\"}", 0.0),
        ("mail_worker_messages{status=\"ERROR\"}", 0.0),
        ("mail_worker_messages{status=\"DELIVERED\"}", 2.0),
    ] {
        assert_eq!(sample(&text, line), Some(value), "{line} in\n{text}");
    }
    // Each claim statement observed once: 12 rows took at least one, at most 12 (one a row).
    let claims = sample(&text, "mail_worker_claim_duration_seconds_count").unwrap();
    assert!((1.0..=12.0).contains(&claims), "{claims} claim statements");
    assert_eq!(
        sample(
            &text,
            "mail_worker_claim_duration_seconds_bucket{le=\"+Inf\"}"
        ),
        Some(claims)
    );
    let seconds = sample(&text, "mail_worker_claim_duration_seconds_sum").unwrap();
    assert!(seconds > 0.0 && seconds < claims * 5.0, "{seconds} s");
    assert!(
        !text.contains("guest0@example.org"),
        "no recipient address in a label"
    );
}

#[tokio::test]
async fn readyz_names_postgresql_while_it_is_down_and_is_ready_again_when_it_is_back() {
    let mut pg = test_support::private_postgres::PrivatePostgres::start(50, &[]);
    let mut url = pg.url.clone();
    url.set_path("/mw_ready");
    mail_worker::store::migrate(&url).await.unwrap();
    let keys = TestKeys::new();
    let mut config = Config::from_lookup(|_| None).unwrap();
    config.database_url = url;
    config.redis_url = redis_url().into();
    config.rate_limit.redis_url = redis_url().into();
    config.rate_limit.key_prefix = keys.sub("rl");
    let config = fast(config);
    let ready = |body: &str| serde_json::from_str::<serde_json::Value>(body).unwrap();
    with_daemon(config, Options::default(), async |d| {
        wait_until(Duration::from_secs(10), "ready at first", async || {
            get(d, "/readyz").await.0 == 200
        })
        .await;
        pg.stop();
        let mut body = String::new();
        wait_until(
            Duration::from_secs(10),
            "503 while PostgreSQL is down",
            async || {
                let (code, text) = get(d, "/readyz").await;
                body = text;
                code == 503
            },
        )
        .await;
        let report = ready(&body);
        assert_eq!(report["ready"], false, "{body}");
        assert_eq!(report["down"], serde_json::json!(["postgresql"]), "{body}");
        assert_eq!(report["checks"]["postgresql"]["ok"], false);
        assert_eq!(report["checks"]["claim_loop"]["ok"], true, "{body}");
        assert_eq!(get(d, "/healthz").await.0, 200, "alive while not ready");
        pg.restart();
        wait_until(Duration::from_secs(20), "ready again", async || {
            get(d, "/readyz").await.0 == 200
        })
        .await;
    })
    .await;
}

#[tokio::test]
async fn readyz_with_redis_unreachable_is_ready_degraded_and_each_check_within_its_deadline() {
    let world = TestApp::builder().mailboxes(0).spawn().await;
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dead: url::Url = format!("redis://127.0.0.1:{closed}").parse().unwrap();
    let mut config = fast(world.config.clone());
    config.redis_url = dead.clone().into();
    config.rate_limit.redis_url = dead.into();
    with_daemon(config, Options::default(), async |d| {
        let (code, body) = get(d, "/readyz").await;
        assert_eq!(code, 200, "degraded, not unready: {body}");
        let report: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(report["ready"], true, "{body}");
        assert_eq!(
            report["degraded"],
            serde_json::json!(["rate_limit_redis", "intake_redis"]),
            "{body}"
        );
        // The intake's connection waits to reconnect rather than failing at once: its check
        // ends at the deadline, which keeps /readyz inside a probe's default 1 s.
        let intake = report["checks"]["intake_redis"]["error"].as_str().unwrap();
        assert!(
            intake == "no answer within 800 ms" || intake.contains("refused"),
            "{body}"
        );
    })
    .await;
}

#[tokio::test]
async fn a_stop_with_the_queues_redis_unreachable_does_not_wait_for_it() {
    let (capture, _guard) = crate::support::logs::Capture::install();
    let world = TestApp::builder().mailboxes(0).spawn().await;
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut config = fast(world.config.clone());
    config.redis_url = url::Url::parse(&format!("redis://127.0.0.1:{closed}"))
        .unwrap()
        .into();
    with_daemon(config, Options::default(), async |_| {
        tokio::time::sleep(Duration::from_millis(200)).await;
    })
    .await;
    // The consumer was still waiting for Redis to join the queue: it leaves at once, without a
    // failure that "starts again in 5 s" logged after the daemon stopped.
    let errors: Vec<String> = capture
        .with_event("intake.redisError")
        .iter()
        .map(|e| e.field("message").to_owned())
        .collect();
    assert_eq!(errors, Vec::<String>::new());
    assert_eq!(capture.with_event("daemon.stopped").len(), 1);
}

#[tokio::test]
async fn a_port_in_use_stops_start_up_naming_metrics_listen() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let world = TestApp::builder().mailboxes(0).spawn().await;
    let mut config = world.config.clone();
    config.metrics_listen = Some(addr);
    let err = daemon::start(config, Options::default())
        .await
        .err()
        .expect("start-up fails");
    let text = format!("{err:#}");
    assert!(
        text.starts_with(&format!("METRICS_LISTEN ({addr}): ")),
        "{text}"
    );
}

#[tokio::test]
async fn a_missing_env_secret_pauses_the_sender_and_setting_it_sends_everything_without_a_restart()
{
    capture_logs();
    let world = TestApp::builder().spawn().await;
    let var = crate::support::unique("MW_TEST_SECRET_").to_uppercase();
    sqlx::query("UPDATE system_mailboxes SET graph_client_secret = $1 WHERE id = $2")
        .bind(format!("env:{var}"))
        .bind(world.mailboxes[0].1)
        .execute(&world.db.pool)
        .await
        .unwrap();
    let ids = world.insert(0, 10, "SCHEDULED").await;
    let env: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    let lookup = Arc::clone(&env);
    let options = Options {
        secret_env: Some(Arc::new(move |name| {
            lookup.lock().unwrap().get(name).cloned()
        })),
        ..Options::default()
    };
    let paused_rows = "SELECT count(*) FROM messages WHERE status = 'SCHEDULED' AND deferrals > 0 \
         AND last_error LIKE 'sender paused: %'";
    let config = fast(world.config.clone());
    with_daemon(config, options, async |d| {
        wait_until(Duration::from_secs(20), "all 10 paused", async || {
            let n: i64 = sqlx::query_scalar(paused_rows)
                .fetch_one(&world.db.pool)
                .await
                .unwrap();
            n == 10
        })
        .await;
        assert_eq!(world.count("ERROR").await, 0, "no message failed");
        let (_, attempts, _, last_error, _) = world.row(ids[0]).await;
        assert_eq!(attempts, 0, "a paused try is not an attempt");
        assert!(last_error.unwrap().contains(&format!("env:{var}")));
        // `status` and `mailbox usage` show it.
        let status = mail_worker::store::report::by_sender(&world.db.pool)
            .await
            .unwrap();
        assert_eq!((status[0].scheduled, status[0].paused), (10, 10));
        let usage = mail_worker::reports::usage::mailbox_usage(
            &world.config,
            &world.db.pool,
            &world.mailboxes[0].0,
        )
        .await
        .unwrap();
        assert_eq!(usage.messages.paused, 10);
        let reason = usage.messages.paused_reason.unwrap();
        assert!(reason.contains(&format!("env:{var}")), "{reason}");
        let metrics = get(d, "/metrics").await.1;
        assert_eq!(
            sample(
                &metrics,
                "mail_worker_sender_paused{mailbox=\"mb0@contoso.example\"}"
            ),
            Some(1.0),
            "{metrics}"
        );
        assert!(
            sample(
                &metrics,
                "mail_worker_sends_total{provider=\"graph\",outcome=\"paused\"}"
            )
            .is_some_and(|n| n >= 10.0)
        );

        env.lock()
            .unwrap()
            .insert(var.clone(), crate::support::app::SECRET.into());
        wait_until(Duration::from_secs(30), "all 10 SENT", async || {
            world.count("SENT").await == 10
        })
        .await;
        let metrics = get(d, "/metrics").await.1;
        assert_eq!(
            sample(
                &metrics,
                "mail_worker_sender_paused{mailbox=\"mb0@contoso.example\"}"
            ),
            Some(0.0)
        );
    })
    .await;
    assert_eq!(world.count("ERROR").await, 0);
    assert_eq!(world.sim.messages().len(), 10, "each sent once");
    let paused: Vec<_> = crate::support::logs::logs_containing(&var)
        .into_iter()
        .filter(|l| l["event"] == "mail.sender.paused")
        .collect();
    assert_eq!(
        paused.len(),
        1,
        "paused logged once per state change: {paused:?}"
    );
    assert_eq!(paused[0]["level"], "ERROR");
    assert_eq!(paused[0]["mailbox"], "mb0@contoso.example");
}

#[tokio::test]
async fn status_counts_a_sender_paused_only_while_its_messages_wait_for_the_pause() {
    let world = TestApp::builder().spawn().await;
    let ids = world.insert(0, 3, "SCHEDULED").await;
    // Two rows wait for the pause as the service writes them; the third was resumed (due now,
    // `wait_reason` cleared as `resume_paused` does, its last error kept until it is sent).
    sqlx::query(
        "UPDATE messages SET last_error = 'sender paused: env:MW_X is not set', \
         wait_reason = CASE WHEN id = $1 THEN NULL ELSE 'paused' END, \
         scheduled_on = CASE WHEN id = $1 THEN now() ELSE now() + interval '1 hour' END \
         WHERE id = ANY($2)",
    )
    .bind(ids[0])
    .bind(&ids)
    .execute(&world.db.pool)
    .await
    .unwrap();
    let status = mail_worker::store::report::by_sender(&world.db.pool)
        .await
        .unwrap();
    assert_eq!((status[0].scheduled, status[0].paused), (3, 2));
}

/// Options with one more supervised part, `name`, that runs `part` (given the daemon's last stop).
fn with_part<F>(name: &'static str, part: impl Fn() -> F + Send + Sync + 'static) -> Options
where
    F: Future<Output = ()> + Send + 'static,
{
    Options {
        extra_part: Some((name, Arc::new(move |_| Box::pin(part())))),
        ..Options::default()
    }
}

#[tokio::test]
async fn a_part_that_panics_stops_the_daemon_naming_it() {
    let (capture, _guard) = crate::support::logs::Capture::install();
    let world = TestApp::builder().spawn().await;
    let (release, panic_now) = tokio::sync::oneshot::channel::<()>();
    let panic_now = Arc::new(Mutex::new(Some(panic_now)));
    let options = with_part("canary", move || {
        let panic_now = panic_now.lock().unwrap().take();
        async move {
            let _ = panic_now.expect("started once").await;
            let code = 7;
            assert_ne!(code, 7, "the canary's code is {code}");
        }
    });
    let (handle, run) = daemon::start(fast(world.config.clone()), options)
        .await
        .unwrap();
    let mut run = std::pin::pin!(run);
    // The daemon serves until the part dies: then it stops by itself, with an error.
    let serving = async {
        wait_until(Duration::from_secs(30), "/healthz answers", async || {
            get(&handle, "/healthz").await.0 == 200
        })
        .await;
    };
    tokio::select! {
        () = serving => {}
        result = &mut run => panic!("the daemon stopped before the part died: {result:?}"),
    }
    release.send(()).unwrap();
    let error = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the daemon stops once a part died")
        .expect_err("a dead part is an error (mail-worker run exits 1)");
    assert_eq!(
        format!("{error:#}"),
        "the daemon's part `canary` panicked: assertion `left != right` failed: the canary's code is 7\n  left: 7\n right: 7"
    );
    let lines = capture.with_event("daemon.partFailed");
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].field("part"), "canary");
    assert!(lines[0].field("error").contains("the canary's code is 7"));
    assert_eq!(lines[0].level, tracing::Level::ERROR);
    // Every other part stopped: the listener no longer answers.
    let addr = handle.ops_addr.unwrap();
    assert!(
        reqwest::get(format!("http://{addr}/healthz"))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn a_part_that_returns_stops_the_daemon_and_sends_in_flight_finish() {
    let (capture, _guard) = crate::support::logs::Capture::install();
    let world = TestApp::builder().spawn().await;
    world.insert(0, 3, "SCHEDULED").await;
    let (release, end_now) = tokio::sync::oneshot::channel::<()>();
    let end_now = Arc::new(Mutex::new(Some(end_now)));
    let options = with_part("canary", move || {
        let end_now = end_now.lock().unwrap().take();
        async move {
            let _ = end_now.expect("started once").await;
        }
    });
    let (_handle, run) = daemon::start(fast(world.config.clone()), options)
        .await
        .unwrap();
    let mut run = std::pin::pin!(run);
    let all_sent = wait_until(Duration::from_secs(30), "all 3 SENT", async || {
        world.count("SENT").await == 3
    });
    tokio::select! {
        () = all_sent => {}
        result = &mut run => panic!("the daemon stopped before the part returned: {result:?}"),
    }
    release.send(()).unwrap();
    let error = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the daemon stops once a part returned")
        .expect_err("a part that returned is an error");
    assert_eq!(
        error.to_string(),
        "the daemon's part `canary` stopped on its own"
    );
    assert_eq!(capture.with_event("daemon.partFailed").len(), 1);
    // It stopped as for SIGTERM: the claim loop said so once; no clean `daemon.stopped`.
    assert_eq!(capture.with_event("daemon.stopping").len(), 1);
    assert_eq!(capture.with_event("daemon.stopped").len(), 0);
}
