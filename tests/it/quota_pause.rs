//! Quota and reputation NDRs pause (issue 40 point 5, docs/decisions/0032-quota-ndrs-pause.md):
//! graph-sim accepts a send over the mailbox's recipients per day (`202`) and bounces it with
//! `5.1.90`, as Exchange Online does; once the bounce reader has read that NDR the mailbox sends
//! nothing more until its rolling 24 h window frees, also after the limiter's Redis lost every
//! key. A `5.7.705` (tenant blocked) holds the tenant's external mail for 24 h; a `5.2.2` for a
//! full recipient mailbox pauses nothing.

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use graph_sim::{SimBounces, UnknownRecipients};
use mail_worker::{
    bounces::{BounceReader, BounceSettings},
    clock::{Clock, ManualClock},
    daemon,
    ops::Metrics,
};
use uuid::Uuid;

use crate::support::{
    TestApp,
    app::{Builder, noon},
    claim_and_send,
    logs::{capture_logs, first_logged, logs_containing},
    redis_conn,
};

/// graph-sim's delay before an NDR appears.
const NDR_DELAY: Duration = Duration::from_secs(30);
/// The reads' interval here (PostgreSQL's clock decides when a read is due).
const INTERVAL: Duration = Duration::from_millis(200);

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

/// `builder` (`paced`) on a manual clock at noon, graph-sim's NDRs after [`NDR_DELAY`], `bounce`
/// bouncing every user at its domain with its code.
async fn app_with(builder: Builder, bounce: Option<(&str, &str)>) -> (TestApp, ManualClock) {
    capture_logs();
    let clock = ManualClock::new(noon());
    let app = builder
        .sim_clock(clock.clone())
        .sim_bounces(SimBounces {
            delay_ms: NDR_DELAY.as_millis() as u64,
            unknown_recipients: bounce
                .map(|(domain, code)| vec![UnknownRecipients::domain(domain, code)])
                .unwrap_or_default(),
            ..SimBounces::default()
        })
        .spawn()
        .await;
    (app, clock)
}

fn reader(app: &TestApp, clock: &ManualClock) -> BounceReader {
    let mut config = app.config.clone();
    config.bounces = BounceSettings {
        enabled: true,
        interval: INTERVAL,
        folder: None,
    };
    daemon::build_bounce_reader(
        &config,
        app.db.pool.clone(),
        Arc::new(clock.clone()),
        Arc::new(Metrics::new()),
    )
    .unwrap()
}

use crate::support::next_bounce_read as read;

/// Sends `ids` through the real stack, moving the clock to each paced slot; each `SENT`.
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

/// Claims and sends `id` once at the clock's time; its status and `scheduled_on` after.
async fn try_send(app: &TestApp, clock: &ManualClock, id: Uuid) -> (String, DateTime<Utc>) {
    let handler = app.real_handler(Arc::new(clock.clone()));
    claim_and_send(&app.db.pool, &handler, id).await.unwrap();
    let (status, _, _, _, scheduled_on) = app.row(id).await;
    (status, scheduled_on)
}

async fn bounce_code(app: &TestApp, id: Uuid) -> (String, Option<String>) {
    sqlx::query_as("SELECT status, bounce_code FROM messages WHERE id = $1")
        .bind(id)
        .fetch_one(&app.db.pool)
        .await
        .unwrap()
}

/// The `limit_pauses` rows: (scope, key, code, whole_day, paused_until).
async fn pauses(app: &TestApp) -> Vec<(String, String, String, bool, DateTime<Utc>)> {
    sqlx::query_as(
        "SELECT scope, key, code, whole_day, paused_until FROM limit_pauses ORDER BY scope, key",
    )
    .fetch_all(&app.db.pool)
    .await
    .unwrap()
}

/// Every key of the app's limiter gone, as after a Redis restart without persistence.
async fn flush_limiter(app: &TestApp) -> usize {
    let mut conn = redis_conn().await;
    test_support::unlink_prefix(&mut conn, &app.config.rate_limit.key_prefix)
        .await
        .unwrap()
}

/// What reached graph-sim: drafts created, messages accepted.
fn reached(app: &TestApp) -> (usize, usize) {
    (app.sim.drafts().len(), app.sim.messages().len())
}

fn parse_time(value: &serde_json::Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(value.as_str().unwrap())
        .unwrap()
        .with_timezone(&Utc)
}

#[tokio::test]
async fn a_5_1_90_pauses_the_mailbox_until_its_window_frees_also_after_a_redis_flush() {
    // graph-sim lets the mailbox send to 2 recipients a day (a person used the rest); ours
    // would allow 9,000. The third message is accepted (202) and bounced with 5.1.90.
    let (app, clock) = app_with(TestApp::paced().sim_recipients_per_day(2), None).await;
    let first = [
        insert_to(&app, "a@example.org").await,
        insert_to(&app, "b@example.org").await,
        insert_to(&app, "c@example.org").await,
    ];
    send(&app, &clock, &first).await;
    // The first went at noon on the manual clock the limiter decides by (`sent_at` is
    // PostgreSQL's own clock).
    let first_sent = noon();
    clock.advance(NDR_DELAY);
    let outcome = read(&reader(&app, &clock)).await;
    assert!(
        outcome.mailbox_paused && !outcome.tenant_paused && outcome.bounced == 1,
        "{outcome:?}"
    );
    assert_eq!(
        bounce_code(&app, first[2]).await,
        ("BOUNCED".to_owned(), Some("5.1.90".to_owned()))
    );
    let logged = first_logged("mail.bounce.mailboxPaused", &first[2].to_string());
    assert_eq!(logged["mailbox"], "mb0@contoso.example");
    assert_eq!(logged["code"], "5.1.90");
    assert_eq!(logged["limiter"], true);
    let until = parse_time(&logged["until"]);
    // The window frees when the first recipient we counted leaves it: its minute + 24 h.
    let window_end = first_sent + chrono::Duration::hours(24);
    assert!(
        until >= window_end && until <= window_end + chrono::Duration::minutes(1),
        "{until} vs the first send at {first_sent}"
    );
    let kept = pauses(&app).await;
    assert_eq!(kept.len(), 1, "{kept:?}");
    let (scope, key, code, whole_day, kept_until) = &kept[0];
    assert_eq!(
        (scope.as_str(), key.as_str(), code.as_str(), *whole_day),
        ("mailbox", "mb0@contoso.example", "5.1.90", false)
    );
    assert_eq!(*kept_until, until);

    // Every further message waits for the window, rescheduled to when it frees; none fails
    // and nothing reaches graph-sim (no draft, no send) — now, and an hour later.
    let before = reached(&app);
    let later = [
        insert_to(&app, "d@example.org").await,
        insert_to(&app, "e@example.org").await,
        insert_to(&app, "f@example.org").await,
    ];
    for round in 0..2 {
        for id in later {
            let (status, scheduled_on) = try_send(&app, &clock, id).await;
            assert_eq!(status, "SCHEDULED", "round {round}");
            assert!(
                scheduled_on >= until,
                "round {round}: {scheduled_on} < {until}"
            );
        }
        clock.advance(Duration::from_secs(3600));
    }
    assert_eq!(reached(&app), before);
    assert_eq!(app.count("ERROR").await, 0);

    // The limiter's Redis loses every key: the seed from the send history re-applies the
    // pause kept in PostgreSQL.
    assert!(flush_limiter(&app).await > 0);
    let after_flush = insert_to(&app, "g@example.org").await;
    let (status, scheduled_on) = try_send(&app, &clock, after_flush).await;
    assert_eq!(status, "SCHEDULED");
    assert!(scheduled_on >= until, "{scheduled_on} < {until}");
    assert!(
        logs_containing("re-applied to the rebuilt budget")
            .iter()
            .any(|l| l["scope"] == "mailbox"),
        "the seed re-applied the pause"
    );
    assert_eq!(reached(&app), before);
    assert_eq!(app.count("ERROR").await, 0);

    // When the window frees, the mailbox sends again (graph-sim's own window has room).
    clock.set(scheduled_on);
    let (status, _) = try_send(&app, &clock, after_flush).await;
    assert_eq!(status, "SENT");
    assert_eq!(reached(&app).1, before.1 + 1);
}

#[tokio::test]
async fn a_5_2_2_for_a_full_recipient_mailbox_pauses_nothing() {
    let (app, clock) = app_with(TestApp::paced(), Some(("full.example", "5.2.2"))).await;
    let full = insert_to(&app, "someone@full.example").await;
    send(&app, &clock, &[full]).await;
    clock.advance(NDR_DELAY);
    let outcome = read(&reader(&app, &clock)).await;
    assert!(
        outcome.bounced == 1 && !outcome.mailbox_paused && !outcome.tenant_paused,
        "{outcome:?}"
    );
    assert_eq!(
        bounce_code(&app, full).await,
        ("BOUNCED".to_owned(), Some("5.2.2".to_owned()))
    );
    assert!(pauses(&app).await.is_empty());
    let next = insert_to(&app, "other@example.org").await;
    send(&app, &clock, &[next]).await;
}

#[tokio::test]
async fn a_5_7_705_holds_the_tenants_external_mail_for_24_hours_also_after_a_redis_flush() {
    // The tenant's external budget is 10 a day (ours and graph-sim's): far from used up.
    let builder = TestApp::paced().tenant_budget(10).sim_tenant_budget(10);
    let (app, clock) = app_with(builder, Some(("blocked.example", "5.7.705"))).await;
    let blocked = insert_to(&app, "guest@blocked.example").await;
    send(&app, &clock, &[blocked]).await;
    // One external message booked before the NDR is read (the next paced slot, 2.48 s on).
    let booked = insert_to(&app, "booked@example.org").await;
    let (status, slot) = try_send(&app, &clock, booked).await;
    assert_eq!(status, "SCHEDULED");
    assert!(
        slot > clock.now() && slot < clock.now() + NDR_DELAY,
        "{slot}"
    );
    clock.advance(NDR_DELAY);
    let read_at = clock.now();
    let outcome = read(&reader(&app, &clock)).await;
    assert!(
        outcome.tenant_paused && !outcome.mailbox_paused,
        "{outcome:?}"
    );
    let logged = first_logged("mail.bounce.tenantPaused", &blocked.to_string());
    assert_eq!(
        (&logged["tenant"], &logged["code"]),
        (&"contoso.example".into(), &"5.7.705".into())
    );
    let until = parse_time(&logged["until"]);
    let day = chrono::Duration::hours(24);
    assert!(
        until >= read_at + day && until <= read_at + day + chrono::Duration::minutes(1),
        "{until}"
    );
    let kept = pauses(&app).await;
    assert_eq!(
        kept.iter()
            .map(|p| (p.0.as_str(), p.1.as_str(), p.2.as_str(), p.3))
            .collect::<Vec<_>>(),
        [("tenant", "contoso.example", "5.7.705", true)]
    );

    // External mail waits 24 h, the booking made before the pause too; mail inside the tenant
    // goes on.
    let before = reached(&app);
    let (status, scheduled_on) = try_send(&app, &clock, booked).await;
    assert_eq!(
        status, "SCHEDULED",
        "the booking before the pause is not sent"
    );
    assert!(scheduled_on >= read_at + day, "{scheduled_on}");
    let external = insert_to(&app, "guest@example.org").await;
    let (status, scheduled_on) = try_send(&app, &clock, external).await;
    assert_eq!(status, "SCHEDULED");
    assert!(scheduled_on >= read_at + day, "{scheduled_on}");
    let internal = insert_to(&app, "colleague@contoso.example").await;
    send(&app, &clock, &[internal]).await;
    assert_eq!(reached(&app).1, before.1 + 1);

    // After a flush the tenant's budget is rebuilt with the pause: still 24 h.
    assert!(flush_limiter(&app).await > 0);
    let external2 = insert_to(&app, "guest2@example.org").await;
    let (status, scheduled_on) = try_send(&app, &clock, external2).await;
    assert_eq!(status, "SCHEDULED");
    assert!(scheduled_on >= read_at + day, "{scheduled_on}");
    assert_eq!(reached(&app).1, before.1 + 1);
    assert_eq!(app.count("ERROR").await, 0);
}

#[tokio::test]
async fn without_a_tenant_budget_a_5_7_705_holds_the_whole_mailbox_for_24_hours() {
    let (app, clock) = app_with(TestApp::paced(), Some(("blocked.example", "5.7.705"))).await;
    let blocked = insert_to(&app, "guest@blocked.example").await;
    send(&app, &clock, &[blocked]).await;
    clock.advance(NDR_DELAY);
    let read_at = clock.now();
    let outcome = read(&reader(&app, &clock)).await;
    assert!(outcome.tenant_paused, "{outcome:?}");
    let logged = first_logged("mail.bounce.mailboxPaused", &blocked.to_string());
    assert_eq!(logged["code"], "5.7.705");
    assert!(
        logged["message"]
            .as_str()
            .unwrap()
            .contains("no external budget configured"),
        "{logged}"
    );
    let kept = pauses(&app).await;
    assert_eq!(
        kept.iter()
            .map(|p| (p.0.as_str(), p.2.as_str(), p.3))
            .collect::<Vec<_>>(),
        [("mailbox", "5.7.705", true)]
    );
    // Nothing tells external from internal recipients: both wait 24 h.
    let before = reached(&app);
    for to in ["guest@example.org", "colleague@contoso.example"] {
        let id = insert_to(&app, to).await;
        let (status, scheduled_on) = try_send(&app, &clock, id).await;
        assert_eq!(status, "SCHEDULED", "{to}");
        assert!(
            scheduled_on >= read_at + chrono::Duration::hours(24),
            "{to}: {scheduled_on}"
        );
    }
    assert_eq!(reached(&app), before);
}

#[tokio::test]
async fn the_limit_paused_gauge_shows_the_pauses_in_force_and_drops_an_ended_one() {
    let app = TestApp::paced().spawn().await;
    sqlx::query(
        "INSERT INTO limit_pauses (scope, key, code, whole_day, paused_at, paused_until, reason) \
         VALUES ('mailbox', 'mb0@contoso.example', '5.1.90', false, now(), now() + interval '1 hour', 'x'), \
                ('tenant', 'contoso.example', '5.7.705', true, now() - interval '2 days', now() - interval '1 day', 'y')",
    )
    .execute(&app.db.pool)
    .await
    .unwrap();
    let listen = format!("127.0.0.1:{}", crate::support::private_redis::free_port());
    let mut child = app
        .daemon_command(&[("METRICS_LISTEN", &listen), ("METRICS_REFRESH", "200ms")])
        .spawn()
        .unwrap();
    let url = format!("http://{listen}/metrics");
    let metrics = async || match reqwest::get(&url).await {
        Ok(answer) => answer.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    let paused =
        "mail_worker_limit_paused{scope=\"mailbox\",key=\"mb0@contoso.example\",code=\"5.1.90\"} 1";
    crate::support::wait_until(
        Duration::from_secs(60),
        "the pause on /metrics",
        async || metrics().await.contains(paused),
    )
    .await;
    assert!(
        !metrics().await.contains("code=\"5.7.705\""),
        "an ended pause is not shown"
    );
    sqlx::query("UPDATE limit_pauses SET paused_until = now() - interval '1 second'")
        .execute(&app.db.pool)
        .await
        .unwrap();
    crate::support::wait_until(Duration::from_secs(10), "the pause gone", async || {
        let text = metrics().await;
        !text.is_empty() && !text.contains("mail_worker_limit_paused{")
    })
    .await;
    child.start_kill().unwrap();
    let _ = child.wait().await;
}
