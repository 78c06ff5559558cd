//! The outbox of events and its webhooks (issue 25, docs/events.md), end to end: the daemon in
//! process against graph-sim and receivers written in the test (`support::webhook`), which
//! verify every POST's signature with the documented algorithm.

use std::{collections::BTreeMap, time::Duration};

use mail_worker::{
    config::Config,
    daemon::{self, Handle},
    import,
    store::events::{Outbox, admin},
};
use serde_json::Value;
use uuid::Uuid;

use crate::support::{
    app::TestApp,
    wait_until,
    webhook::{Receiver, SECRET},
};

/// `app`'s config with events on to `urls`, 10 events a POST, `retry_for`.
pub(crate) fn with_events(app: &TestApp, urls: &[String], retry_for: Duration) -> Config {
    let mut config = app.config.clone();
    config.metrics_listen = None;
    config.rate_limit.caller_clock = false;
    config.intake.queue = None;
    config.worker.scheduler_interval = Duration::from_millis(100);
    config.events.webhook_urls = urls.iter().map(|u| u.parse().unwrap()).collect();
    config.events.secret = Some(mail_worker::domain::SecretRef::new(SECRET));
    config.events.batch_size = 10.try_into().unwrap();
    config.events.retry_for = retry_for;
    config
}

/// Starts the daemon of `config` in this process; it stops when the handle is told to.
pub(crate) async fn start(config: Config) -> (Handle, tokio::task::JoinHandle<()>) {
    let (handle, run) = daemon::start(config, daemon::Options::default())
        .await
        .unwrap();
    let task = tokio::spawn(async move { run.await.unwrap() });
    (handle, task)
}

pub(crate) async fn stop((handle, task): (Handle, tokio::task::JoinHandle<()>)) {
    handle.stop();
    task.await.unwrap();
}

/// A campaign line of mailbox `mailbox` to `to`, scheduled at `at` (RFC 3339) if given.
fn line(id: Uuid, mailbox: &str, to: &str, at: Option<&str>) -> String {
    let mut line = serde_json::json!({
        "id": id.to_string(),
        "systemMailbox": mailbox,
        "campaignId": "spring",
        "to": [{"address": to}],
        "subject": "Invitation",
        "body": {"contentType": "text", "content": "Hello"},
    });
    if let Some(at) = at {
        line["scheduledOn"] = Value::from(at);
    }
    line.to_string() + "\n"
}

/// Enqueues `n` messages of mailbox 0 to a good address, writing their `accepted` events.
pub(crate) async fn enqueue(app: &TestApp, n: usize) -> Vec<Uuid> {
    let ids: Vec<Uuid> = (0..n).map(|_| Uuid::new_v4()).collect();
    let mailbox = app.mailboxes[0].0.as_str();
    let text: String = ids
        .iter()
        .map(|id| line(*id, mailbox, "guest@fabrikam.example", None))
        .collect();
    let done = import::enqueue(&app.db.pool, text, Outbox::On)
        .await
        .unwrap();
    assert_eq!(done.inserted, n as u64);
    ids
}

/// The stored events' ids.
pub(crate) async fn stored_ids(app: &TestApp) -> Vec<Uuid> {
    sqlx::query_scalar("SELECT id FROM events ORDER BY xid, seq")
        .fetch_all(&app.db.pool)
        .await
        .unwrap()
}

/// The received events' types by message, in the order received.
fn by_message(events: &[Value]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in events {
        out.entry(e["messageId"].as_str().unwrap().to_owned())
            .or_default()
            .push(e["type"].as_str().unwrap().to_owned());
    }
    out
}

fn metric(handle: &Handle, name: &str) -> f64 {
    handle
        .metrics
        .encode()
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!("{name} "))
                .map(|v| v.parse().unwrap())
        })
        .unwrap_or(0.0)
}

#[tokio::test]
async fn every_transition_writes_one_event_and_each_post_is_signed() {
    let app = TestApp::builder().mailboxes(2).await;
    // Two recipients a day: mb0's third message is deferred (`day`), deterministically.
    let change = mail_worker::store::senders::LimitsChange::Set {
        per_minute: None,
        recipients_per_day: std::num::NonZeroU32::new(2),
        reserved_percent: None,
    };
    mail_worker::store::senders::set_limits(&app.db.pool, &app.mailboxes[0].0, change)
        .await
        .unwrap();
    let receiver = Receiver::start().await;
    let config = with_events(&app, &[receiver.url()], Duration::from_secs(3600));
    let (mb0, mb1) = (app.mailboxes[0].0.as_str(), app.mailboxes[1].0.as_str());
    let [a, b, c, bad, later] = [(); 5].map(|()| Uuid::new_v4());
    let text = [
        line(a, mb0, "guest@fabrikam.example", None),
        line(b, mb0, "guest@fabrikam.example", None),
        line(c, mb0, "guest@fabrikam.example", None),
        line(bad, mb1, "not an address", None),
        line(
            later,
            mb1,
            "guest@fabrikam.example",
            Some("2099-01-01T00:00:00Z"),
        ),
    ]
    .concat();
    let done = import::enqueue(&app.db.pool, text, Outbox::On)
        .await
        .unwrap();
    assert_eq!(done.inserted, 5);
    // An operator cancels the scheduled one, through the binary (its own environment).
    let cancel = std::process::Command::new(env!("CARGO_BIN_EXE_mail-worker"))
        .args(["messages", "cancel", "--id", &later.to_string()])
        .env("DATABASE_URL", app.config.database_url.as_str())
        .env("EVENTS_WEBHOOK_URL", receiver.url())
        .env("EVENTS_WEBHOOK_SECRET", SECRET)
        .output()
        .unwrap();
    assert!(cancel.status.success(), "{cancel:?}");

    let daemon = start(config).await;
    wait_until(Duration::from_secs(180), "10 events received", async || {
        receiver.accepted().len() >= 10
    })
    .await;
    stop(daemon).await;

    let posts = receiver.posts();
    assert!(posts.iter().all(|p| p.signed), "every POST verifies");
    let events = receiver.accepted();
    let seen = by_message(&events);
    let mut mb0: Vec<&Vec<String>> = [a, b, c].iter().map(|id| &seen[&id.to_string()]).collect();
    mb0.sort();
    assert_eq!(
        mb0,
        [
            &["accepted", "deferred"][..],
            &["accepted", "sent"],
            &["accepted", "sent"]
        ],
        "{seen:?}"
    );
    assert_eq!(seen[&bad.to_string()], ["accepted", "failed"]);
    assert_eq!(seen[&later.to_string()], ["accepted", "cancelled"]);
    let deferred = events.iter().find(|e| e["type"] == "deferred").unwrap();
    assert_eq!(deferred["reason"], "day");
    assert!(deferred["nextAttemptAt"].is_string(), "{deferred}");
    let failed = events.iter().find(|e| e["type"] == "failed").unwrap();
    assert!(
        failed["reason"]
            .as_str()
            .unwrap()
            .contains("not one valid email address"),
        "{failed}"
    );
    for e in &events {
        assert_eq!(e["campaignId"], "spring");
        assert_eq!(e["recipients"], 1);
        assert!(
            e["sender"].as_str().unwrap().ends_with("@contoso.example"),
            "{e}"
        );
        assert!(e["occurredAt"].is_string());
    }
    // Nothing more was written than received, and no id twice.
    let ids: Vec<Uuid> = events
        .iter()
        .map(|e| e["id"].as_str().unwrap().parse().unwrap())
        .collect();
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), ids.len());
    assert_eq!(stored_ids(&app).await, ids);
}

#[tokio::test]
async fn a_receiver_down_for_60_s_loses_nothing_and_gets_the_same_ids_again() {
    let app = TestApp::builder().per_minute(1_000).await;
    let mut receiver = Receiver::down_from_start().await;
    let daemon = start(with_events(
        &app,
        &[receiver.url()],
        Duration::from_secs(3600),
    ))
    .await;
    let ids = enqueue(&app, 20).await;
    wait_until(Duration::from_secs(30), "20 SENT", async || {
        app.count("SENT").await == 20
    })
    .await;
    // Down for 60 s as the daemon sees it: its oldest undelivered event is a minute old.
    wait_until(
        Duration::from_secs(120),
        "an event undelivered for 60 s",
        async || metric(&daemon.0, "mail_worker_events_oldest_undelivered_seconds") >= 60.0,
    )
    .await;
    assert!(metric(&daemon.0, "mail_worker_events_retried_total") > 0.0);
    assert_eq!(metric(&daemon.0, "mail_worker_events_delivered_total"), 0.0);
    // Up again, but the first POST is answered 500 after it was read (a lost answer).
    receiver.fail_next(1);
    receiver.up().await;
    // The backoff is at its 60 s cap by now: the next try may be up to a minute away, and the
    // try after the refused one another minute (jittered), so allow three.
    wait_until(
        Duration::from_secs(180),
        "40 events delivered",
        async || receiver.accepted().len() >= 40,
    )
    .await;
    stop(daemon).await;
    // Stopped, the daemon gave its receiver's lease back (a restart delivers at once).
    let leased: Vec<Option<uuid::Uuid>> =
        sqlx::query_scalar("SELECT leased_by FROM event_receivers")
            .fetch_all(&app.db.pool)
            .await
            .unwrap();
    assert_eq!(leased, vec![None]);
    let posts = receiver.posts();
    assert!(posts.iter().all(|p| p.signed));
    let refused = &posts.iter().find(|p| p.status == 500).unwrap().events;
    let accepted = receiver.accepted();
    for e in refused {
        assert_eq!(accepted.iter().filter(|a| a["id"] == e["id"]).count(), 1);
        assert!(accepted.contains(e), "redelivered identically: {e}");
    }
    let got: Vec<Uuid> = accepted
        .iter()
        .map(|e| e["id"].as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(
        got,
        stored_ids(&app).await,
        "all 40, once each, in commit order"
    );
    let seen = by_message(&accepted);
    for id in ids {
        assert_eq!(seen[&id.to_string()], ["accepted", "sent"]);
    }
}

#[tokio::test]
async fn a_receiver_answering_500_slows_only_its_own_deliveries() {
    let app = TestApp::builder().per_minute(1_000).await;
    let (good, broken) = (Receiver::start().await, Receiver::start().await);
    broken.fail_next(u32::MAX);
    let config = with_events(&app, &[good.url(), broken.url()], Duration::from_secs(3600));
    let daemon = start(config).await;
    enqueue(&app, 30).await;
    wait_until(Duration::from_secs(30), "30 SENT", async || {
        app.count("SENT").await == 30
    })
    .await;
    wait_until(
        Duration::from_secs(30),
        "60 events at the good receiver",
        async || good.accepted().len() == 60,
    )
    .await;
    let broken_failed = async || {
        let stats = admin::stats(&app.db.pool).await.unwrap();
        stats
            .receivers
            .iter()
            .any(|r| r.receiver == broken.url() && r.failures >= 2)
    };
    wait_until(
        Duration::from_secs(30),
        "the broken receiver failed twice",
        broken_failed,
    )
    .await;
    let stats = admin::stats(&app.db.pool).await.unwrap();
    stop(daemon).await;
    assert!(!broken.posts().is_empty() && broken.accepted().is_empty());
    let by_url: BTreeMap<String, (i64, i64, i32)> = stats
        .receivers
        .iter()
        .map(|r| (r.receiver.clone(), (r.delivered, r.pending, r.failures)))
        .collect();
    assert_eq!(by_url[&good.url()], (60, 0, 0));
    let (delivered, pending, failures) = by_url[&broken.url()];
    assert_eq!((delivered, pending), (0, 60));
    assert!(failures >= 2);
}

#[tokio::test]
async fn events_are_dead_after_events_retry_for_and_a_replay_delivers_them_again() {
    let app = TestApp::builder().per_minute(1_000).await;
    let receiver = Receiver::start().await;
    receiver.fail_next(u32::MAX);
    let daemon = start(with_events(&app, &[receiver.url()], Duration::from_secs(3))).await;
    enqueue(&app, 5).await;
    wait_until(Duration::from_secs(180), "10 events dead", async || {
        admin::dead_list(
            &app.db.pool,
            chrono::Utc::now() - chrono::Duration::hours(1),
            100,
        )
        .await
        .unwrap()
        .len()
            == 10
    })
    .await;
    // The counter moves after the dead notes commit: under load a scrape can come between.
    wait_until(
        Duration::from_secs(5),
        "the dead counter at 10",
        async || metric(&daemon.0, "mail_worker_events_dead_total") == 10.0,
    )
    .await;
    assert_eq!(metric(&daemon.0, "mail_worker_events_dead_total"), 10.0);
    let dead = admin::dead_list(
        &app.db.pool,
        chrono::Utc::now() - chrono::Duration::hours(1),
        100,
    )
    .await
    .unwrap();
    assert!(
        dead.iter()
            .all(|d| d.reason.contains("EVENTS_RETRY_FOR") && d.reason.contains("500"))
    );
    assert!(receiver.accepted().is_empty());
    receiver.heal();
    let cli_with = |args: &[&str], webhooks: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_mail-worker"))
            .args(args)
            .env("DATABASE_URL", app.config.database_url.as_str())
            .env("EVENTS_WEBHOOK_URL", webhooks)
            .env("EVENTS_WEBHOOK_SECRET", SECRET)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let cli = |args: &[&str]| cli_with(args, "off");
    let listed = cli(&["events", "dead", "--since", "1h"]);
    assert_eq!(listed.lines().count(), 10, "{listed}");
    assert!(
        listed.contains("not delivered within EVENTS_RETRY_FOR"),
        "{listed}"
    );
    let stats = cli(&["events", "stats"]);
    let line = format!(
        "{}: delivered 0, dead 10 (10 to replay), pending 0",
        receiver.url()
    );
    assert!(stats.contains(&line), "{stats}");
    // Configured: no note; taken out of EVENTS_WEBHOOK_URL: said so.
    let here = cli_with(&["events", "stats"], receiver.url().as_str());
    assert!(!here.contains("not in EVENTS_WEBHOOK_URL"), "{here}");
    let json = |webhooks: &str| -> Value {
        serde_json::from_str(&cli_with(&["events", "stats", "--json"], webhooks)).unwrap()
    };
    let on = json(receiver.url().as_str());
    assert_eq!(
        (
            &on["webhooks_on"],
            &on["webhook_urls"][0],
            &on["receivers"][0]["dead"],
            &on["receivers"][0]["dead_to_replay"]
        ),
        (
            &Value::Bool(true),
            &Value::String(receiver.url().to_string()),
            &Value::from(10),
            &Value::from(10)
        ),
        "{on}"
    );
    let off = json("off");
    assert_eq!(
        (&off["webhooks_on"], &off["webhook_urls"]),
        (&Value::Bool(false), &serde_json::json!([])),
        "{off}"
    );
    let elsewhere = cli_with(&["events", "stats"], "http://127.0.0.1:9/other");
    assert!(
        elsewhere.contains("(not in EVENTS_WEBHOOK_URL: last claimed "),
        "{elsewhere}"
    );
    let replayed = cli(&["events", "replay", "--since", "1h"]);
    assert_eq!(
        replayed,
        "10 events since 1h to be delivered again to 1 receiver (10 dead cleared)\n"
    );
    wait_until(
        Duration::from_secs(180),
        "10 events delivered",
        async || receiver.accepted().len() == 10,
    )
    .await;
    // The dead total stays, none is left to replay (the cursor's update may trail the POSTs).
    let line = format!(
        "{}: delivered 10, dead 10 (0 to replay), pending 0",
        receiver.url()
    );
    wait_until(Duration::from_secs(10), &line, async || {
        cli(&["events", "stats"]).contains(&line)
    })
    .await;
    stop(daemon).await;
    let got: Vec<Uuid> = receiver
        .accepted()
        .iter()
        .map(|e| e["id"].as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(got, stored_ids(&app).await);
    // A receiver no replica claimed for a day (removed) is not replayed to.
    sqlx::query("UPDATE event_receivers SET seen_at = now() - interval '2 days'")
        .execute(&app.db.pool)
        .await
        .unwrap();
    assert_eq!(
        cli(&["events", "replay", "--since", "1h"]),
        "10 events since 1h to be delivered again to 0 receivers (0 dead cleared)\n"
    );
}

#[tokio::test]
async fn retention_deletes_old_events_only_once_every_recent_receiver_passed_them() {
    let app = TestApp::builder().await;
    enqueue(&app, 3).await;
    sqlx::query("UPDATE events SET occurred_at = now() - interval '40 days'")
        .execute(&app.db.pool)
        .await
        .unwrap();
    // A receiver claimed an hour ago whose cursor is before them keeps them.
    sqlx::query(
        "INSERT INTO event_receivers (url_key, display, seen_at) VALUES ('k', 'https://r.example/', now() - interval '1 hour')",
    )
    .execute(&app.db.pool)
    .await
    .unwrap();
    let purge = async || {
        let stop = mail_worker::shutdown::CancellationToken::new();
        mail_worker::store::retention::purge(
            &app.db.pool,
            Duration::from_secs(30 * 86_400),
            Duration::ZERO,
            stop,
        )
        .await
        .unwrap()
        .unwrap()
        .events
    };
    assert_eq!(purge().await, 0);
    assert_eq!(stored_ids(&app).await.len(), 3);
    // Once it is past them (or silent for over a day), they go.
    sqlx::query("UPDATE event_receivers SET cursor_xid = (SELECT max(xid) FROM events), cursor_seq = (SELECT max(seq) FROM events)")
        .execute(&app.db.pool)
        .await
        .unwrap();
    assert_eq!(purge().await, 3);
    assert!(stored_ids(&app).await.is_empty());
}

#[tokio::test]
async fn the_lag_gauge_counts_only_the_receivers_this_replica_delivers_to() {
    let app = TestApp::builder().per_minute(1_000).await;
    let receiver = Receiver::start().await;
    // A receiver since removed from EVENTS_WEBHOOK_URL: its row stays, its cursor at the start.
    sqlx::query(
        "INSERT INTO event_receivers (url_key, display) VALUES ('removed', 'https://old.example/hook')",
    )
    .execute(&app.db.pool)
    .await
    .unwrap();
    let mut config = with_events(&app, &[receiver.url()], Duration::from_secs(3600));
    config.metrics_refresh = Duration::from_millis(200);
    let daemon = start(config).await;
    enqueue(&app, 5).await;
    wait_until(
        Duration::from_secs(180),
        "10 events delivered",
        async || receiver.accepted().len() >= 10,
    )
    .await;
    // An hour old, every event: the removed receiver has none of them, the configured one all.
    sqlx::query("UPDATE events SET occurred_at = now() - interval '1 hour'")
        .execute(&app.db.pool)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        metric(&daemon.0, "mail_worker_events_oldest_undelivered_seconds"),
        0.0
    );
    stop(daemon).await;
}
