//! The delivery reconciler end to end: messages sent through the real stack (draft mode, our
//! `internetMessageId`) to graph-sim, whose message trace says each recipient's fate (its
//! unknown users fail, a spam rule filters, a quota breach fails with 5.1.90); the reconciler
//! (`crate::delivery`) reads it on the same manual clock.

use std::{sync::Arc, time::Duration};

use graph_sim::{SimBounces, SimTrace, TraceRule, UnknownRecipients};
use mail_worker::{
    clock::{Clock, ManualClock},
    daemon,
    delivery::{DeliveryReconciler, TraceOutcome, TraceSettings},
    ops::Metrics,
};
use uuid::Uuid;

use crate::support::{TestApp, app::noon, claim_and_send};

/// The reads' interval (PostgreSQL's clock decides when a read is due).
pub(crate) const INTERVAL: Duration = Duration::from_millis(200);

pub(crate) fn roles() -> Vec<String> {
    [
        "Mail.Send",
        "Mail.ReadWrite",
        "Mail.Read",
        "ExchangeMessageTrace.Read.All",
    ]
    .map(str::to_owned)
    .to_vec()
}

async fn traced_app(unprovisioned: bool) -> (TestApp, ManualClock) {
    let clock = ManualClock::new(noon());
    let app = TestApp::paced()
        .sim_clock(clock.clone())
        .sim_roles(roles())
        .sim_recipients_per_day(4)
        .sim_bounces(SimBounces {
            unknown_recipients: vec![UnknownRecipients::domain("nowhere.example", "5.1.10")],
            ..SimBounces::default()
        })
        .sim_trace(SimTrace {
            filtered: vec![TraceRule::domain("spam.example", "FilteredAsSpam")],
            unprovisioned_tenants: if unprovisioned {
                vec![crate::support::app::TENANT.to_owned()]
            } else {
                Vec::new()
            },
            ..SimTrace::default()
        })
        .spawn()
        .await;
    (app, clock)
}

pub(crate) fn reconciler(app: &TestApp, clock: &ManualClock) -> (DeliveryReconciler, Arc<Metrics>) {
    reconciler_by_default(app, clock, true)
}

/// A reconciler whose `GRAPH_TRACE_DELIVERY` is `enabled`.
fn reconciler_by_default(
    app: &TestApp,
    clock: &ManualClock,
    enabled: bool,
) -> (DeliveryReconciler, Arc<Metrics>) {
    let mut config = app.config.clone();
    config.events.webhook_urls = vec!["http://127.0.0.1:9/events".parse().unwrap()];
    config.events.secret = Some(mail_worker::domain::SecretRef::new("0123456789abcdef"));
    config.trace = TraceSettings {
        enabled,
        interval: INTERVAL,
        lag: Duration::ZERO,
        probe: INTERVAL,
        ..TraceSettings::default()
    };
    let metrics = Arc::new(Metrics::new());
    let r = daemon::build_delivery_reconciler(
        &config,
        app.db.pool.clone(),
        Arc::new(clock.clone()),
        Arc::clone(&metrics),
    )
    .unwrap();
    (r, metrics)
}

pub(crate) async fn insert_to(app: &TestApp, to: &[&str]) -> Uuid {
    let id = Uuid::new_v4();
    let to: Vec<_> = to
        .iter()
        .map(|a| serde_json::json!({ "address": a }))
        .collect();
    sqlx::query(
        "INSERT INTO messages (id, system_mailbox_id, to_recipients, subject, body, status) \
         VALUES ($1, $2, $3, 'Invitation', '<p>hi</p>', 'SCHEDULED')",
    )
    .bind(id)
    .bind(app.mailboxes[0].1)
    .bind(serde_json::Value::Array(to))
    .execute(&app.db.pool)
    .await
    .unwrap();
    id
}

pub(crate) async fn send(app: &TestApp, clock: &ManualClock, ids: &[Uuid]) {
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

async fn round(r: &DeliveryReconciler) -> TraceOutcome {
    tokio::time::sleep(INTERVAL + Duration::from_millis(50)).await;
    let mut done = r.round().await.unwrap();
    assert_eq!(done.len(), 1, "one tenant read: {done:?}");
    done.remove(0).1
}

async fn fates(app: &TestApp, id: Uuid) -> Vec<(String, String, Option<String>)> {
    sqlx::query_as(
        "SELECT recipient, outcome, code FROM recipient_outcomes WHERE message_id = $1 ORDER BY recipient",
    )
    .bind(id)
    .fetch_all(&app.db.pool)
    .await
    .unwrap()
}

async fn events(app: &TestApp) -> Vec<(String, Uuid, Option<String>)> {
    sqlx::query_as(
        "SELECT kind, message_id, recipient FROM events WHERE recipient IS NOT NULL ORDER BY seq",
    )
    .fetch_all(&app.db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn each_recipients_fate_comes_from_the_trace_within_its_budget() {
    let (app, clock) = traced_app(false).await;
    let friend = insert_to(&app, &["friend@example.org"]).await;
    let mixed = insert_to(&app, &["a@example.org", "ghost@nowhere.example"]).await;
    let junk = insert_to(&app, &["junk@spam.example"]).await;
    // graph-sim's mailbox takes 4 recipients a day: the 5th is over its quota (5.1.90).
    let over = insert_to(&app, &["late@example.org"]).await;
    send(&app, &clock, &[friend, mixed, junk, over]).await;
    let (r, metrics) = reconciler(&app, &clock);

    let first = round(&r).await;
    assert_eq!(first.paused, None, "{first:?}");
    // One listing page, one detail for each of the two failed recipients.
    assert_eq!(
        (
            first.requests,
            first.records,
            first.delivered,
            first.failed,
            first.filtered
        ),
        (3, 5, 2, 2, 1),
        "{first:?}"
    );
    assert_eq!(app.row(friend).await.0, "DELIVERED");
    assert_eq!(app.row(mixed).await.0, "BOUNCED");
    assert_eq!(app.row(junk).await.0, "DELIVERED");
    assert_eq!(app.row(over).await.0, "BOUNCED");
    assert_eq!(
        fates(&app, mixed).await,
        vec![
            ("a@example.org".into(), "delivered".into(), None),
            (
                "ghost@nowhere.example".into(),
                "failed".into(),
                Some("5.1.10".into())
            ),
        ]
    );
    assert_eq!(
        fates(&app, over).await,
        vec![(
            "late@example.org".into(),
            "failed".into(),
            Some("5.1.90".into())
        )]
    );
    assert_eq!(
        fates(&app, junk).await,
        vec![("junk@spam.example".into(), "filtered".into(), None)]
    );
    // The hard failure is suppressed; the quota failure is not the recipient's fault.
    let suppressed: Vec<String> =
        sqlx::query_scalar("SELECT address FROM suppressions ORDER BY address")
            .fetch_all(&app.db.pool)
            .await
            .unwrap();
    assert_eq!(suppressed, vec!["ghost@nowhere.example".to_owned()]);

    // A second read finds nothing left to do: no request, no event twice.
    let second = round(&r).await;
    assert_eq!((second.requests, second.delivered + second.failed), (0, 0));
    let written = events(&app).await;
    let kinds = |k: &str| written.iter().filter(|(kind, _, _)| kind == k).count();
    assert_eq!(
        (kinds("delivered"), kinds("bounced"), kinds("filtered")),
        (2, 2, 1)
    );
    assert!(
        metrics
            .encode()
            .contains("mail_worker_recipients_outcome_total{mailbox=\"mb0@contoso.example\",outcome=\"delivered\"} 2"),
        "{}",
        metrics.encode()
    );
    let stats = app.sim.trace_stats();
    assert_eq!((stats.throttled, stats.requests), (0, 3), "{stats:?}");
}

#[tokio::test]
async fn a_tenant_without_the_service_principal_is_paused_with_its_fix_and_resumes() {
    let (app, clock) = traced_app(true).await;
    let friend = insert_to(&app, &["friend@example.org"]).await;
    send(&app, &clock, &[friend]).await;
    let (r, _) = reconciler(&app, &clock);

    let paused = round(&r).await;
    let reason = paused.paused.clone().expect("paused");
    assert!(
        reason.contains("8bd644d1-64a1-4d4b-ae52-2e0cbf64e373"),
        "{reason}"
    );
    assert_eq!(
        mail_worker::store::trace_reads::paused(&app.db.pool, crate::support::app::TENANT)
            .await
            .unwrap()
            .as_deref(),
        Some(reason.as_str())
    );
    assert_eq!(app.row(friend).await.0, "SENT");

    app.sim
        .set_trace_provisioned(crate::support::app::TENANT, true);
    let resumed = round(&r).await;
    assert_eq!((resumed.paused, resumed.delivered), (None, 1));
    assert_eq!(app.row(friend).await.0, "DELIVERED");
    assert_eq!(
        mail_worker::store::trace_reads::paused(&app.db.pool, crate::support::app::TENANT)
            .await
            .unwrap(),
        None
    );
}

/// The senders file's `traceDelivery` for `mb0` (as the import writes it).
async fn import_trace_delivery(app: &TestApp, on: bool) {
    use crate::support::app::{CLIENT, SECRET, TENANT};
    let text = format!(
        r#"{{"systemMailboxes":[{{"address":"mb0@{TENANT}","graphTenantId":"{TENANT}","clientId":"{CLIENT}","clientSecret":"{SECRET}","traceDelivery":{on}}}]}}"#
    );
    let file = mail_worker::import::senders::parse(&text).unwrap();
    mail_worker::import::senders::import(&app.db.pool, &file)
        .await
        .unwrap();
}

#[tokio::test]
async fn the_senders_files_trace_delivery_overrides_graph_trace_delivery() {
    let (app, clock) = traced_app(false).await;
    let friend = insert_to(&app, &["friend@example.org"]).await;
    send(&app, &clock, &[friend]).await;
    // GRAPH_TRACE_DELIVERY=off, but the file turns mb0's trace on.
    let (r, _) = reconciler_by_default(&app, &clock, false);
    import_trace_delivery(&app, true).await;
    let stored: Option<bool> =
        sqlx::query_scalar("SELECT trace_delivery FROM system_mailboxes WHERE id = $1")
            .bind(app.mailboxes[0].1)
            .fetch_one(&app.db.pool)
            .await
            .unwrap();
    assert_eq!(stored, Some(true));
    let read = round(&r).await;
    assert_eq!(read.delivered, 1, "{read:?}");
    assert_eq!(app.row(friend).await.0, "DELIVERED");

    // `false` turns it off again: no tenant is read.
    import_trace_delivery(&app, false).await;
    tokio::time::sleep(INTERVAL + Duration::from_millis(50)).await;
    assert_eq!(r.round().await.unwrap(), Vec::new());
}
