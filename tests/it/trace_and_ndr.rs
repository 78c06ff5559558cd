//! Bounce reading and the message trace on for the same sender: both sources tell a failure
//! through one rule table (`mail_worker::domain::action_of`), agree, and count it once — one
//! suppression, one `bounced` event per recipient, one pause — whichever comes first.

use std::{sync::Arc, time::Duration};

use chrono::Utc;
use graph_sim::{SimBounces, SimTrace, UnknownRecipients};
use mail_worker::{
    bounces::{BounceReader, BounceSettings, ReadOutcome},
    clock::{Clock, ManualClock},
    daemon,
    delivery::{DeliveryReconciler, TraceOutcome, TraceSettings},
    ops::Metrics,
    store::{
        events::Outbox,
        outcomes::{self, Outcome, RecipientOutcome},
    },
};
use uuid::Uuid;

use crate::{
    support::{
        TestApp,
        app::noon,
        claim_and_send,
        logs::{capture_logs, logs_containing},
    },
    trace::{INTERVAL, insert_to, roles, send},
};

const NDR_DELAY: Duration = Duration::from_secs(30);

/// graph-sim bounces `nowhere.example` (5.1.10) after [`NDR_DELAY`] and lets the mailbox send
/// to `per_day` recipients a day (then `202` and an NDR 5.1.90); its trace tells the same.
async fn both_app(per_day: u64) -> (TestApp, ManualClock) {
    capture_logs();
    let clock = ManualClock::new(noon());
    let app = TestApp::paced()
        .sim_clock(clock.clone())
        .sim_roles(roles())
        .sim_recipients_per_day(per_day)
        .sim_bounces(SimBounces {
            delay_ms: NDR_DELAY.as_millis() as u64,
            unknown_recipients: vec![UnknownRecipients::domain("nowhere.example", "5.1.10")],
            ..SimBounces::default()
        })
        .sim_trace(SimTrace::default())
        .spawn()
        .await;
    (app, clock)
}

fn config(app: &TestApp) -> mail_worker::config::Config {
    let mut config = app.config.clone();
    config.events.webhook_urls = vec!["http://127.0.0.1:9/events".parse().unwrap()];
    config.events.secret = Some(mail_worker::domain::SecretRef::new("0123456789abcdef"));
    config.bounces = BounceSettings {
        enabled: true,
        interval: INTERVAL,
        folder: None,
    };
    config.trace = TraceSettings {
        enabled: true,
        interval: INTERVAL,
        lag: Duration::ZERO,
        probe: INTERVAL,
        ..TraceSettings::default()
    };
    config
}

fn readers(app: &TestApp, clock: &ManualClock) -> (BounceReader, DeliveryReconciler) {
    let config = config(app);
    let clock: Arc<dyn Clock> = Arc::new(clock.clone());
    let ndr = daemon::build_bounce_reader(
        &config,
        app.db.pool.clone(),
        Arc::clone(&clock),
        Arc::new(Metrics::new()),
    )
    .unwrap();
    let trace = daemon::build_delivery_reconciler(
        &config,
        app.db.pool.clone(),
        clock,
        Arc::new(Metrics::new()),
    )
    .unwrap();
    (ndr, trace)
}

async fn ndr_round(r: &BounceReader) -> ReadOutcome {
    tokio::time::sleep(INTERVAL + Duration::from_millis(50)).await;
    let mut done = r.round().await.unwrap();
    assert_eq!(done.len(), 1, "{done:?}");
    done.remove(0).1
}

async fn trace_round(r: &DeliveryReconciler) -> TraceOutcome {
    tokio::time::sleep(INTERVAL + Duration::from_millis(50)).await;
    let mut done = r.round().await.unwrap();
    assert_eq!(done.len(), 1, "{done:?}");
    done.remove(0).1
}

/// `message`'s `bounced` events: their recipient (`None`: the NDR's, for the message).
async fn bounced_events(app: &TestApp, message: Uuid) -> Vec<Option<String>> {
    sqlx::query_scalar(
        "SELECT recipient FROM events WHERE message_id = $1 AND kind = 'bounced' ORDER BY seq",
    )
    .bind(message)
    .fetch_all(&app.db.pool)
    .await
    .unwrap()
}

async fn fates(app: &TestApp, id: Uuid) -> Vec<(String, String, Option<String>)> {
    sqlx::query_as(
        "SELECT trace_status, outcome, code FROM recipient_outcomes WHERE message_id = $1 ORDER BY recipient",
    )
    .bind(id)
    .fetch_all(&app.db.pool)
    .await
    .unwrap()
}

async fn suppressed(app: &TestApp) -> Vec<String> {
    sqlx::query_scalar("SELECT address FROM suppressions ORDER BY address")
        .fetch_all(&app.db.pool)
        .await
        .unwrap()
}

/// The trace told both failures first: one `bounced` each, for its recipient (none from the
/// NDR), and the unknown user suppressed once.
async fn told_once_by_the_trace(app: &TestApp, (ghost, over): (Uuid, Uuid), over_to: &str) {
    assert_eq!(
        bounced_events(app, ghost).await,
        vec![Some("ghost@nowhere.example".to_owned())]
    );
    assert_eq!(
        bounced_events(app, over).await,
        vec![Some(over_to.to_owned())]
    );
    assert_eq!(suppressed(app).await, vec!["ghost@nowhere.example"]);
}

/// The pause lines logged for `message` (whichever source paused).
fn pause_lines(message: Uuid) -> usize {
    logs_containing(&message.to_string())
        .iter()
        .filter(|l| l["event"] == "mail.bounce.mailboxPaused")
        .count()
}

async fn kept_pauses(app: &TestApp) -> Vec<(String, String, String)> {
    sqlx::query_as("SELECT scope, key, code FROM limit_pauses ORDER BY scope, key")
        .fetch_all(&app.db.pool)
        .await
        .unwrap()
}

/// An unknown user, a delivered message and a quota breach (the mailbox takes 2 a day), sent.
async fn three_sent() -> (TestApp, ManualClock, [Uuid; 3]) {
    let (app, clock) = both_app(2).await;
    let ids = [
        insert_to(&app, &["ghost@nowhere.example"]).await,
        insert_to(&app, &["friend@example.org"]).await,
        insert_to(&app, &["late@example.org"]).await,
    ];
    send(&app, &clock, &ids).await;
    (app, clock, ids)
}

#[tokio::test]
async fn the_ndr_first_then_the_trace_counts_each_failure_once() {
    let (app, clock, [ghost, fine, over]) = three_sent().await;
    let (ndr, trace) = readers(&app, &clock);

    clock.advance(NDR_DELAY);
    let read = ndr_round(&ndr).await;
    assert_eq!((read.bounced, read.mailbox_paused), (2, true), "{read:?}");
    // The NDR kept each failed recipient's fate where the trace keeps its own.
    assert_eq!(
        fates(&app, ghost).await,
        vec![(
            "NDR".to_owned(),
            "failed".to_owned(),
            Some("5.1.10".to_owned())
        )]
    );
    let traced = trace_round(&trace).await;
    // The trace reads only what the NDR left open, and adds nothing it counted.
    assert_eq!(
        (traced.delivered, traced.failed, traced.filtered),
        (1, 0, 0),
        "{traced:?}"
    );
    assert!(traced.paused_budgets.is_empty(), "{traced:?}");
    assert_eq!(app.row(ghost).await.0, "BOUNCED");
    assert_eq!(app.row(over).await.0, "BOUNCED");
    assert_eq!(app.row(fine).await.0, "DELIVERED");
    assert_eq!(bounced_events(&app, ghost).await, vec![None]);
    assert_eq!(bounced_events(&app, over).await, vec![None]);
    assert_eq!(suppressed(&app).await, vec!["ghost@nowhere.example"]);
    assert_eq!(pause_lines(over), 1);
    assert_eq!(
        kept_pauses(&app).await,
        vec![(
            "mailbox".to_owned(),
            "mb0@contoso.example".to_owned(),
            "5.1.90".to_owned()
        )]
    );
    assert_eq!(app.sim.trace_stats().throttled, 0);
}

#[tokio::test]
async fn the_trace_first_then_the_ndr_counts_each_failure_once() {
    let (app, clock, [ghost, fine, over]) = three_sent().await;
    let (ndr, trace) = readers(&app, &clock);

    // The trace tells the quota breach first and pauses the mailbox as the NDR would.
    let traced = trace_round(&trace).await;
    assert_eq!(
        (traced.delivered, traced.failed, traced.paused_budgets.len()),
        (1, 2, 1),
        "{traced:?}"
    );
    assert_eq!(app.row(fine).await.0, "DELIVERED");
    assert_eq!(pause_lines(over), 1);
    let logged = logs_containing(&over.to_string())
        .into_iter()
        .find(|l| l["event"] == "mail.bounce.mailboxPaused")
        .unwrap();
    assert_eq!(logged["code"], "5.1.90");
    assert!(
        logged["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("message trace 5.1.90"),
        "{logged}"
    );
    // Paused in the limiter too: the next message to the mailbox waits.
    let next = insert_to(&app, &["next@example.org"]).await;
    let handler = app.real_handler(Arc::new(clock.clone()));
    claim_and_send(&app.db.pool, &handler, next).await.unwrap();
    let (status, _, _, _, scheduled_on) = app.row(next).await;
    assert_eq!(status, "SCHEDULED");
    assert!(
        scheduled_on > clock.now() + chrono::Duration::hours(20),
        "{scheduled_on}"
    );

    clock.advance(NDR_DELAY);
    let read = ndr_round(&ndr).await;
    assert_eq!((read.bounced, read.mailbox_paused), (0, false), "{read:?}");
    told_once_by_the_trace(&app, (ghost, over), "late@example.org").await;
    assert_eq!(pause_lines(over), 1);
    assert_eq!(kept_pauses(&app).await.len(), 1);
    assert_eq!(app.sim.trace_stats().throttled, 0);
}

fn told(recipient: &str, failure: Option<(&str, &str)>) -> RecipientOutcome {
    RecipientOutcome {
        recipient: recipient.to_owned(),
        trace_status: if failure.is_some() {
            "Failed"
        } else {
            "Pending"
        }
        .to_owned(),
        outcome: if failure.is_some() {
            Outcome::Failed
        } else {
            Outcome::Pending
        },
        at: Utc::now(),
        failure: failure.map(|(c, t)| (c.to_owned(), t.to_owned())),
        trace_id: Uuid::new_v4().to_string(),
    }
}

/// The trace told one recipient's failure while another was still pending (the message stays
/// `SENT`), then the NDR comes: it bounces the message, but writes no second `bounced` and does
/// not pause again.
#[tokio::test]
async fn an_ndr_after_a_partial_trace_adds_no_event_and_no_pause() {
    let (app, clock) = both_app(3).await;
    let mixed = insert_to(&app, &["ghost@nowhere.example", "b@example.org"]).await;
    let over = insert_to(&app, &["x@example.org", "y@example.org"]).await;
    send(&app, &clock, &[mixed, over]).await;
    let (ndr, _) = readers(&app, &clock);

    let partly = |failed: &str, code: &str, text: &str, pending: &str| {
        [told(failed, Some((code, text))), told(pending, None)]
    };
    let applied = outcomes::apply(
        &app.db.pool,
        mixed,
        &partly(
            "ghost@nowhere.example",
            "5.1.10",
            "RESOLVER.ADR.RecipientNotFound",
            "b@example.org",
        ),
        Outbox::On,
    )
    .await
    .unwrap();
    assert_eq!(
        (applied.status.as_deref(), applied.suppressed),
        (Some("SENT"), 1)
    );
    let text = "daily limit for message recipients";
    let applied = outcomes::apply(
        &app.db.pool,
        over,
        &partly("x@example.org", "5.1.90", text, "y@example.org"),
        Outbox::On,
    )
    .await
    .unwrap();
    // The same table says pause (the reconciler pauses on it).
    assert_eq!(applied.pauses, vec![("5.1.90".to_owned(), text.to_owned())]);

    clock.advance(NDR_DELAY);
    let read = ndr_round(&ndr).await;
    assert_eq!((read.bounced, read.mailbox_paused), (2, false), "{read:?}");
    assert_eq!(app.row(mixed).await.0, "BOUNCED");
    told_once_by_the_trace(&app, (mixed, over), "x@example.org").await;
    assert_eq!(pause_lines(over), 0);
    assert!(kept_pauses(&app).await.is_empty());
}
