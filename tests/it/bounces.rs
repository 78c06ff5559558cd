//! Bounce reading end to end: messages sent through the real stack (draft mode, our
//! `internetMessageId`) to graph-sim, which files NDRs in the sending mailbox's Inbox; the
//! bounce reader (`GRAPH_READ_BOUNCES=on`) reads them back on the same manual clock.

use std::{sync::Arc, time::Duration};

use graph_sim::{SimBounces, UnknownRecipients};
use mail_worker::{
    bounces::{BounceReader, BounceSettings, ReadOutcome},
    clock::{Clock, ManualClock},
    daemon,
    ops::Metrics,
};
use uuid::Uuid;

use crate::support::{
    TestApp,
    app::noon,
    claim_and_send,
    logs::{capture_logs, first_logged, logs_containing},
};

/// graph-sim's delay before an NDR appears.
const NDR_DELAY: Duration = Duration::from_secs(30);

async fn insert_to(app: &TestApp, to: &str) -> Uuid {
    let id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO messages (id, system_mailbox_id, to_recipients, subject, body, status) \
         VALUES ($1, $2, $3, 'Invitation', '<p>hi</p>', 'SCHEDULED')",
    )
    .bind(id)
    .bind(app.mailboxes[0].1)
    .bind(serde_json::json!([{ "address": to }]))
    .execute(&app.db.pool)
    .await
    .unwrap();
    id
}

/// An app on `paced` whose graph-sim bounces every user at `nowhere.example` (5.1.1) after
/// [`NDR_DELAY`], on one manual clock; `budget` gives the tenant an external budget (ours,
/// and graph-sim's `sim_budget`).
async fn bouncing_app(budget: Option<(u32, u64)>) -> (TestApp, ManualClock) {
    capture_logs();
    let clock = ManualClock::new(noon());
    let mut builder = TestApp::paced()
        .sim_clock(clock.clone())
        .sim_bounces(SimBounces {
            delay_ms: NDR_DELAY.as_millis() as u64,
            unknown_recipients: vec![UnknownRecipients::domain("nowhere.example", "5.1.1")],
            ..SimBounces::default()
        });
    if let Some((ours, sims)) = budget {
        builder = builder.tenant_budget(ours).sim_tenant_budget(sims);
    }
    (builder.spawn().await, clock)
}

/// The reads' interval in these tests (PostgreSQL's clock decides when a read is due).
const INTERVAL: Duration = Duration::from_millis(200);

fn reader(
    app: &TestApp,
    clock: &ManualClock,
    folder: Option<&str>,
) -> (BounceReader, Arc<Metrics>) {
    reader_every(app, clock, folder, INTERVAL)
}

fn reader_every(
    app: &TestApp,
    clock: &ManualClock,
    folder: Option<&str>,
    interval: Duration,
) -> (BounceReader, Arc<Metrics>) {
    let mut config = app.config.clone();
    // Events on (no dispatcher runs here): a `BOUNCED` row writes its `bounced` event.
    config.events.webhook_urls = vec!["http://127.0.0.1:9/events".parse().unwrap()];
    config.events.secret = Some(mail_worker::domain::SecretRef::new("0123456789abcdef"));
    config.bounces = BounceSettings {
        enabled: true,
        interval,
        folder: folder.map(str::to_owned),
    };
    let metrics = Arc::new(Metrics::new());
    let reader = daemon::build_bounce_reader(
        &config,
        app.db.pool.clone(),
        Arc::new(clock.clone()),
        Arc::clone(&metrics),
    )
    .unwrap();
    (reader, metrics)
}

/// Sends `ids` through the real stack, moving the clock to each paced slot (each `SENT`
/// afterwards).
async fn send(app: &TestApp, clock: &ManualClock, ids: &[Uuid]) {
    let handler = app.real_handler(Arc::new(clock.clone()));
    for id in ids {
        for _ in 0..3 {
            claim_and_send(&app.db.pool, &handler, *id).await.unwrap();
            let (status, _, _, _, scheduled_on) = app.row(*id).await;
            if status != "SCHEDULED" {
                break;
            }
            clock.set(scheduled_on.max(clock.now()));
        }
        assert_eq!(app.row(*id).await.0, "SENT", "{id}");
    }
}

use crate::support::next_bounce_read as read;

async fn bounce_of(app: &TestApp, id: Uuid) -> (String, Option<String>, Option<String>) {
    sqlx::query_as("SELECT status, bounce_code, bounce_text FROM messages WHERE id = $1")
        .bind(id)
        .fetch_one(&app.db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn an_ndr_for_an_unknown_user_makes_the_message_bounced_with_its_code_and_text() {
    let (app, clock) = bouncing_app(None).await;
    let ghost = insert_to(&app, "ghost@nowhere.example").await;
    let friend = insert_to(&app, "friend@example.org").await;
    send(&app, &clock, &[ghost, friend]).await;
    let (reader, metrics) = reader(&app, &clock, None);

    // Before the NDR's delay: one listing, nothing found.
    let before = read(&reader).await;
    assert_eq!((before.requests, before.reports, before.bounced), (1, 0, 0));
    clock.advance(NDR_DELAY);
    let after = read(&reader).await;
    // One listing page, the NDR's MIME ($value), one PATCH marking it read.
    assert_eq!(
        after,
        ReadOutcome {
            requests: 3,
            reports: 1,
            bounced: 1,
            left: 0,
            tenant_paused: false,
            mailbox_paused: false
        }
    );
    assert_eq!(
        bounce_of(&app, ghost).await,
        (
            "BOUNCED".to_owned(),
            Some("5.1.1".to_owned()),
            Some("RESOLVER.ADR.RecipNotFound; not found".to_owned())
        )
    );
    assert_eq!(bounce_of(&app, friend).await.0, "SENT");
    let inbox = app.sim.inbox(app.mailboxes[0].0.as_str());
    assert_eq!(inbox.len(), 1);
    assert!(inbox[0].is_read && inbox[0].folder == "inbox", "{inbox:?}");
    assert!(
        metrics
            .encode()
            .contains("mail_worker_bounces_total{code_class=\"5.1\"} 1"),
        "{}",
        metrics.encode()
    );
    let line = first_logged("mail.bounce.recorded", &ghost.to_string());
    assert_eq!(line["code"], "5.1.1");
    assert!(
        !line.to_string().contains("ghost@"),
        "no address in the line: {line}"
    );
    // Read, the NDR is not listed again: an idle read is one request.
    let idle = read(&reader).await;
    assert_eq!((idle.requests, idle.reports), (1, 0));
    // Graph-sim counted exactly what the reads said they made.
    let stats = app.sim.stats();
    assert_eq!(stats.requests.get("listInbox"), Some(&3));
    assert_eq!(stats.requests.get("getMimeContent"), Some(&1));
    assert_eq!(stats.requests.get("patchMessage"), Some(&1));

    // A hard bounce (5.1.1) put the address on the mailbox's suppression list, in the same
    // transaction; the friend it did not name is not on it.
    let listed: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT address, source, reason FROM suppressions WHERE system_mailbox_id = $1",
    )
    .bind(app.mailboxes[0].1)
    .fetch_all(&app.db.pool)
    .await
    .unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(
        (listed[0].0.as_str(), listed[0].1.as_str()),
        ("ghost@nowhere.example", "bounce")
    );
    assert!(listed[0].2.starts_with("5.1.1"), "{listed:?}");
    // So a second message to that address is never sent: ERROR, no Graph request.
    let sent_before = app.sim.messages().len();
    let again = insert_to(&app, "Ghost@Nowhere.example").await;
    let handler = app.real_handler(Arc::new(clock.clone()));
    claim_and_send(&app.db.pool, &handler, again).await.unwrap();
    let (status, _, _, error, _) = app.row(again).await;
    assert_eq!(
        (status.as_str(), error.as_deref()),
        ("ERROR", Some("all recipients suppressed"))
    );
    assert_eq!(app.sim.messages().len(), sent_before);

    // The outbox got one `bounced` event, in the BOUNCED write's transaction, with the code.
    let bounced: Vec<(uuid::Uuid, String)> =
        sqlx::query_as("SELECT message_id, reason FROM events WHERE kind = 'bounced'")
            .fetch_all(&app.db.pool)
            .await
            .unwrap();
    assert_eq!(bounced.len(), 1, "{bounced:?}");
    assert_eq!(bounced[0].0, ghost);
    assert_eq!(bounced[0].1, "5.1.1 RESOLVER.ADR.RecipNotFound; not found");
}

#[tokio::test]
async fn a_read_costs_one_listing_and_a_mime_read_and_a_move_per_ndr_and_leaves_what_is_not_ours() {
    let (app, clock) = bouncing_app(None).await;
    let mut ids = Vec::new();
    for k in 0..3 {
        ids.push(insert_to(&app, &format!("nobody{k}@nowhere.example")).await);
    }
    send(&app, &clock, &ids).await;
    // An NDR of a message we did not send (another client of the mailbox) stays where it is.
    app.sim
        .deliver_to_inbox(app.mailboxes[0].0.as_str(), "a@example.org", "Hello", "hi")
        .unwrap();
    clock.advance(NDR_DELAY);
    let (reader, _metrics) = reader(&app, &clock, Some("deleteditems"));
    let outcome = read(&reader).await;
    assert_eq!(
        (outcome.requests, outcome.reports, outcome.bounced),
        (7, 3, 3)
    );
    for id in &ids {
        assert_eq!(bounce_of(&app, *id).await.0, "BOUNCED");
    }
    let stats = app.sim.stats();
    assert_eq!(stats.requests.get("listInbox"), Some(&1));
    assert_eq!(stats.requests.get("getMimeContent"), Some(&3));
    assert_eq!(stats.requests.get("moveMessage"), Some(&3));
    let folders: Vec<(String, String)> = app
        .sim
        .inbox(app.mailboxes[0].0.as_str())
        .into_iter()
        .map(|i| (i.folder, i.message_class))
        .collect();
    assert_eq!(
        folders.iter().filter(|(f, _)| f == "deleteditems").count(),
        3
    );
    assert!(
        folders.contains(&("inbox".into(), "IPM.Note".into())),
        "{folders:?}"
    );
}

#[tokio::test]
async fn a_5_7_233_pauses_the_tenants_external_sending_until_its_window_frees() {
    // Our budget says 10 external recipients a day; Exchange (graph-sim) counts the tenant's
    // other senders too and allows only 1 more.
    let (app, clock) = bouncing_app(Some((10, 1))).await;
    let first = insert_to(&app, "guest1@example.org").await;
    let second = insert_to(&app, "guest2@example.org").await;
    send(&app, &clock, &[first, second]).await;
    clock.advance(NDR_DELAY);
    let (reader, _metrics) = reader(&app, &clock, None);
    let outcome = read(&reader).await;
    assert!(outcome.tenant_paused && outcome.bounced == 1, "{outcome:?}");
    assert_eq!(bounce_of(&app, first).await.0, "SENT");
    let (status, code, text) = bounce_of(&app, second).await;
    assert_eq!(
        (status.as_str(), code.as_deref()),
        ("BOUNCED", Some("5.7.233"))
    );
    assert!(
        text.unwrap()
            .contains("tenant external recipient rate limit")
    );
    let paused = first_logged("mail.bounce.tenantPaused", &second.to_string());
    assert_eq!(paused["tenant"], "contoso.example");
    // 5.7.233 is the tenant's limit, not the recipient's fault: nobody is suppressed.
    let suppressed = app.db.rows_in("suppressions").await;
    assert_eq!(suppressed, 0);
    let until = chrono::DateTime::parse_from_rfc3339(paused["until"].as_str().unwrap()).unwrap();
    // The first free slot is when the first counted recipient leaves the 24 h window.
    assert!(until > noon() + chrono::Duration::hours(24), "{until}");

    // The next external message is deferred for the tenant; an internal one goes at once.
    let external = insert_to(&app, "guest3@example.org").await;
    let internal = insert_to(&app, "colleague@contoso.example").await;
    let handler = app.real_handler(Arc::new(clock.clone()));
    claim_and_send(&app.db.pool, &handler, external)
        .await
        .unwrap();
    claim_and_send(&app.db.pool, &handler, internal)
        .await
        .unwrap();
    let (status, _, _, _, scheduled_on) = app.row(external).await;
    assert_eq!(status, "SCHEDULED");
    assert!(
        scheduled_on > noon() + chrono::Duration::hours(24),
        "{scheduled_on}"
    );
    assert!(
        logs_containing(&external.to_string())
            .iter()
            .any(|l| l["event"] == "mail.rateLimit.deferred" && l["reason"] == "tenant"),
        "deferred with reason tenant"
    );
    assert_eq!(app.row(internal).await.0, "SENT");
}

/// An app with one message to an unknown user sent, and its NDR visible now.
async fn one_ndr_waiting() -> (TestApp, ManualClock, Uuid) {
    let (app, clock) = bouncing_app(None).await;
    let id = insert_to(&app, "ghost@nowhere.example").await;
    send(&app, &clock, &[id]).await;
    clock.advance(NDR_DELAY);
    (app, clock, id)
}

#[tokio::test]
async fn two_replicas_do_not_both_read_one_inbox() {
    let (app, clock, id) = one_ndr_waiting().await;
    // Slow Inbox requests, so the two rounds overlap.
    app.sim
        .set_latency(graph_sim::Target::Global, graph_sim::Latency::Fixed(300))
        .unwrap();
    let every = Duration::from_secs(5);
    let (one, _) = reader_every(&app, &clock, None, every);
    let (two, _) = reader_every(&app, &clock, None, every);
    let (a, b) = tokio::join!(one.round(), two.round());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(
        a.len() + b.len(),
        1,
        "one replica read the Inbox: {a:?} {b:?}"
    );
    // Right after, neither reads it again before the interval.
    assert!(two.round().await.unwrap().is_empty());
    assert!(one.round().await.unwrap().is_empty());
    let stats = app.sim.stats();
    assert_eq!(stats.requests.get("listInbox"), Some(&1));
    assert_eq!(stats.requests.get("patchMessage"), Some(&1));
    assert_eq!(bounce_of(&app, id).await.0, "BOUNCED");
}

/// The figure of BENCHMARKS.md §14: an hour of reads at the default interval (5 min: 12 reads)
/// while 5 of the mailbox's messages bounce costs 12 listings + 5 MIME reads + 5 PATCHes = 22
/// Graph requests.
#[tokio::test]
async fn an_hour_of_reads_costs_one_listing_per_interval_and_two_requests_per_ndr() {
    let (app, clock) = bouncing_app(None).await;
    let (reader, _metrics) = reader(&app, &clock, None);
    let mut outcomes = Vec::new();
    for minute in (0..60).step_by(5) {
        if [0, 10, 25, 40, 50].contains(&minute) {
            let id = insert_to(&app, &format!("gone{minute}@nowhere.example")).await;
            send(&app, &clock, &[id]).await;
        }
        clock.set(noon() + chrono::Duration::minutes(minute + 1));
        outcomes.push(read(&reader).await);
    }
    let requests: u32 = outcomes.iter().map(|o| o.requests).sum();
    let bounced: u32 = outcomes.iter().map(|o| o.bounced).sum();
    let stats = app.sim.stats();
    let at_graph: u64 = ["listInbox", "getMimeContent", "patchMessage"]
        .iter()
        .filter_map(|r| stats.requests.get(*r))
        .sum();
    println!(
        "bounce reading, 1 mailbox, 1 h at a 5 min interval, {bounced} NDRs: {requests} Graph requests ({at_graph} counted by graph-sim)"
    );
    assert_eq!((outcomes.len(), bounced), (12, 5));
    assert_eq!(requests, 12 + 5 + 5);
    assert_eq!(at_graph, u64::from(requests));
}

/// Each Inbox request takes one of the mailbox's in-flight leases, the ones sends take: with
/// every slot held by running sends the read makes no request and waits for the next interval.
#[tokio::test]
async fn a_read_waits_for_a_free_in_flight_slot_of_the_mailbox() {
    let (app, clock, id) = one_ndr_waiting().await;
    let keys = mail_worker::rate_limit::paced::keys::PacedKeys::new(
        &app.config.rate_limit.key_prefix,
        "contoso.example",
        &app.mailboxes[0].0,
    );
    let mut conn = crate::support::redis_conn().await;
    let held = app.config.rate_limit.max_in_flight.get();
    let expiry = clock.now().timestamp_millis() + 60_000;
    for k in 0..held {
        let _: i64 = redis::cmd("ZADD")
            .arg(keys.in_flight())
            .arg(expiry)
            .arg(format!("running-send-{k}"))
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let (reader, _metrics) = reader(&app, &clock, None);
    let done = crate::support::next_bounce_round(&reader).await;
    assert_eq!(
        done[0].1,
        ReadOutcome::default(),
        "no request without a lease"
    );
    assert_eq!(app.sim.stats().requests.get("listInbox"), None);
    assert_eq!(bounce_of(&app, id).await.0, "SENT");
    // A send ends: the next read gets its slot.
    let _: i64 = redis::cmd("ZREM")
        .arg(keys.in_flight())
        .arg("running-send-0")
        .query_async(&mut conn)
        .await
        .unwrap();
    let outcome = read(&reader).await;
    assert_eq!((outcome.requests, outcome.bounced), (3, 1));
    let left: i64 = redis::cmd("ZCARD")
        .arg(keys.in_flight())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(left, i64::from(held) - 1, "the read's leases were released");
}
