//! The Graph tenant's external-recipient budget end to end: the senders file's
//! `externalRecipientsPerDay` / `acceptedDomains` stored, read by the factory and counted by the
//! `paced` limiter across every mailbox of the tenant, on an injected clock; the real service
//! stack against graph-sim.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use mail_worker::{
    clock::{Clock, ManualClock},
    domain::Sender,
    import::senders as senders_file,
    rate_limit::Algorithm,
    store::senders,
    worker::handler::Handler,
};
use uuid::Uuid;

use crate::support::{
    TestApp,
    app::{TestDb, noon},
    claim_and_send,
    logs::{capture_logs, logs_containing},
};

const DAY_MS: i64 = 86_400_000;
/// The tenant's budget in these tests: 6 external recipients per rolling 24 h.
const BUDGET: u32 = 6;

/// Inserts a due `SCHEDULED` message from mailbox `mailbox` to `to`, returning its id.
async fn insert_to(app: &TestApp, mailbox: usize, to: &str) -> Uuid {
    let id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO messages (id, system_mailbox_id, to_recipients, subject, body, status) \
         VALUES ($1, $2, $3, $4, '<p>hi</p>', 'SCHEDULED')",
    )
    .bind(id)
    .bind(app.mailboxes[mailbox].1)
    .bind(serde_json::json!([{ "address": to }]))
    .bind(id.to_string())
    .execute(&app.db.pool)
    .await
    .unwrap();
    id
}

/// Sends the rows never tried, then moves the clock to the next `scheduled_on` and sends what
/// is due by it, until nothing is left or `until` (what the claim loop does, one message at a
/// time).
async fn drain(app: &TestApp, handler: &Handler, clock: &ManualClock, until: DateTime<Utc>) {
    let mut due: Vec<Uuid> = sqlx::query_scalar(
        "SELECT id FROM messages WHERE status = 'SCHEDULED' AND attempts = 0 AND deferrals = 0 \
         ORDER BY id",
    )
    .fetch_all(&app.db.pool)
    .await
    .unwrap();
    loop {
        for id in due {
            claim_and_send(&app.db.pool, handler, id).await.unwrap();
        }
        let next: Option<DateTime<Utc>> =
            sqlx::query_scalar("SELECT min(scheduled_on) FROM messages WHERE status = 'SCHEDULED'")
                .fetch_one(&app.db.pool)
                .await
                .unwrap();
        let Some(next) = next else { return };
        if next > until {
            return;
        }
        if next > clock.now() {
            clock.set(next);
        }
        due = app.due_by(clock.now()).await;
    }
}

/// Two mailboxes of one Graph tenant with a budget of [`BUDGET`] external recipients a day;
/// each sends 5 messages to an outsider, and mailbox 1 also 5 to a colleague. Returns the app
/// (graph-sim on the same clock), the internal messages' ids, and what graph-sim received.
async fn two_mailboxes_of_one_tenant(
    algorithm: Algorithm,
    until: chrono::Duration,
) -> (TestApp, Vec<Uuid>, Vec<graph_sim::RecordedMessage>) {
    capture_logs();
    let clock = ManualClock::new(noon());
    let app = TestApp::builder()
        .mailboxes(2)
        .algorithm(algorithm)
        .tenant_budget(BUDGET)
        .sim_clock(clock.clone())
        .spawn()
        .await;
    let handler = app.real_handler(Arc::new(clock.clone()));
    for k in 0..5 {
        insert_to(&app, 0, &format!("guest{k}@example.org")).await;
        insert_to(&app, 1, &format!("partner{k}@Fabrikam.example")).await;
    }
    let mut internal = Vec::new();
    for k in 0..5 {
        // Internal: the accepted domain, in any case.
        internal.push(insert_to(&app, 1, &format!("colleague{k}@CONTOSO.example")).await);
    }
    drain(&app, &handler, &clock, noon() + until).await;
    let received = app.sim.messages();
    (app, internal, received)
}

fn is_external(address: &str) -> bool {
    !address.to_ascii_lowercase().ends_with("@contoso.example")
}

/// External recipients graph-sim received in the 24 h from each arrival: the largest.
fn most_external_in_24_h(received: &[graph_sim::RecordedMessage]) -> usize {
    let mut at: Vec<i64> = received
        .iter()
        .flat_map(|m| {
            m.to.iter()
                .filter(|a| is_external(a))
                .map(|_| m.received_at_ms)
        })
        .collect();
    at.sort_unstable();
    (0..at.len())
        .map(|i| at[i..].iter().take_while(|t| **t - at[i] < DAY_MS).count())
        .max()
        .unwrap_or(0)
}

#[tokio::test]
async fn a_tenant_sends_at_most_its_external_budget_in_24_h_across_two_mailboxes() {
    let (app, internal, received) =
        two_mailboxes_of_one_tenant(Algorithm::Paced, chrono::Duration::hours(30)).await;
    // Everything goes out in the end: the 4 external messages over the budget a day later.
    assert_eq!(
        app.count("SENT").await,
        15,
        "every message sent within 30 h"
    );
    assert_eq!(received.len(), 15, "each exactly once");
    assert_eq!(most_external_in_24_h(&received), BUDGET as usize);
    let first_day: Vec<_> = received
        .iter()
        .filter(|m| m.received_at < noon() + chrono::Duration::hours(24))
        .collect();
    let external_first_day = first_day
        .iter()
        .filter(|m| m.to.iter().any(|a| is_external(a)))
        .count();
    assert_eq!(external_first_day, BUDGET as usize);
    // When graph-sim (on the test's clock) received each message, by message id (the subject).
    let received_at = |id: &Uuid| {
        received
            .iter()
            .find(|m| m.subject.as_deref() == Some(id.to_string().as_str()))
            .map(|m| m.received_at)
            .unwrap_or_else(|| panic!("{id} was never received"))
    };
    // Internal recipients do not count: all 5 went out in the first minutes.
    for id in &internal {
        assert_eq!(app.row(*id).await.0, "SENT");
        let at = received_at(id);
        assert!(
            at < noon() + chrono::Duration::minutes(5),
            "internal message {id} received at {at}"
        );
        assert!(
            !logs_containing(&id.to_string())
                .iter()
                .any(|l| l["event"] == "mail.rateLimit.deferred" && l["reason"] == "tenant"),
            "an internal message was held by the tenant budget"
        );
    }
    // The messages over the budget were deferred for `tenant`, logged as a deferral (INFO).
    let ids: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM messages")
        .fetch_all(&app.db.pool)
        .await
        .unwrap();
    let held: Vec<&Uuid> = ids
        .iter()
        .filter(|id| received_at(id) >= noon() + chrono::Duration::hours(24))
        .collect();
    assert_eq!(held.len(), 10 - BUDGET as usize);
    for id in held {
        let deferred: Vec<_> = logs_containing(&id.to_string())
            .into_iter()
            .filter(|l| l["event"] == "mail.rateLimit.deferred")
            .collect();
        assert!(
            deferred
                .iter()
                .any(|l| l["reason"] == "tenant" && l["level"] == "INFO"),
            "{id}: {deferred:?}"
        );
    }
    // graph-sim, enforcing the same tenant budget, refused nothing and bounced nothing.
    assert_eq!(app.sim_refused(), 0);
    assert_eq!(app.sim_bounced(), 0);
}

/// `fixed-window` (the seed's baseline) ignores the tenant budget: every external message goes
/// out at once, and graph-sim bounces the 4 over it (Exchange would block the tenant's external
/// mail) — recorded `SENT` for mail that never arrives. The proof the test above can fail.
#[tokio::test]
async fn fixed_window_ignores_the_tenant_budget_and_graph_sim_bounces_the_excess() {
    let (app, _, received) =
        two_mailboxes_of_one_tenant(Algorithm::FixedWindow, chrono::Duration::minutes(5)).await;
    assert_eq!(app.count("SENT").await, 15);
    assert_eq!(received.len(), 15 - 4, "4 bounced");
    assert_eq!(most_external_in_24_h(&received), BUDGET as usize);
    assert_eq!(app.sim_bounced(), 10 - u64::from(BUDGET));
}

#[tokio::test]
async fn the_senders_file_stores_a_tenant_budget_and_an_import_without_it_removes_it() {
    let db = TestDb::new().await;
    let file = |budget: &str| {
        format!(
            r#"{{"systemMailboxes":[{{"address":"events@contoso.example","graphTenantId":"contoso.example",
                  "clientId":"c","clientSecret":"env:S"{budget}}}],
                "tenants":[{{"name":"northwind","provider":"microsoft-graph","sender":"hi@contoso.example",
                  "graphTenantId":"Contoso.example","clientId":"c","clientSecret":"env:S"{budget}}}]}}"#
        )
    };
    let with = file(
        r#","externalRecipientsPerDay":500,"acceptedDomains":["Contoso.example","München.example","contoso.example"]"#,
    );
    senders_file::import(&db.pool, &senders_file::check(&with).unwrap())
        .await
        .unwrap();
    let address = mail_worker::domain::MailboxAddress::parse("events@contoso.example").unwrap();
    let Some(Sender::SystemMailbox(mailbox)) =
        senders::by_address(&db.pool, &address).await.unwrap()
    else {
        panic!("the system mailbox")
    };
    let budget = mailbox.graph.tenant_budget.expect("a tenant budget");
    assert_eq!(budget.external_recipients_per_day.get(), 500);
    assert_eq!(
        budget.accepted_domains,
        ["contoso.example", "xn--mnchen-3ya.example"]
    );
    let tenant_id: Uuid = sqlx::query_scalar("SELECT id FROM tenants WHERE name = 'northwind'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let tenant = senders::tenant_by_id(&db.pool, tenant_id)
        .await
        .unwrap()
        .unwrap();
    let mail_worker::domain::TenantTransport::Graph(graph) = tenant.transport else {
        panic!("a Graph tenant")
    };
    assert_eq!(graph.tenant_budget, Some(budget));

    // Importing the entries without the fields turns the budget off.
    senders_file::import(&db.pool, &senders_file::check(&file("")).unwrap())
        .await
        .unwrap();
    let Some(Sender::SystemMailbox(mailbox)) =
        senders::by_address(&db.pool, &address).await.unwrap()
    else {
        panic!("the system mailbox")
    };
    assert_eq!(mailbox.graph.tenant_budget, None);
}

/// Issue 11's "a limiter Redis that comes back empty": the tenant's external budget is rebuilt
/// from what PostgreSQL knows was sent (every mailbox of the tenant, external recipients only)
/// before its first decision, so an empty Redis does not hand the tenant a fresh 24 h.
#[tokio::test]
async fn an_empty_limiter_redis_rebuilds_the_tenant_budget_from_postgresql() {
    use mail_worker::{
        clock::SystemClock, rate_limit::SendHistory, service::SendOutcome,
        store::history::PgSendHistory,
    };
    capture_logs();
    let app = TestApp::paced().mailboxes(2).tenant_budget(3).spawn().await;
    // What the tenant sent before the limiter's Redis lost everything: 3 external recipients
    // in the last 24 h over both mailboxes, plus internal mail and an older external send.
    let sent = [
        (0, 1, vec!["guest@example.org", "colleague@Contoso.Example"]),
        (1, 2, vec!["a@fabrikam.example", "b@fabrikam.example."]),
        (1, 3, vec!["colleague@contoso.example"]),
        (0, 25, vec!["old@example.org"]),
    ];
    for (mailbox, hours_ago, to) in sent {
        let id = app.insert(mailbox, 1, "SENT").await[0];
        let to: Vec<_> = to
            .iter()
            .map(|a| serde_json::json!({ "address": a }))
            .collect();
        sqlx::query(
            "UPDATE messages SET to_recipients = $2, sent_at = now() - make_interval(hours => $3) \
             WHERE id = $1",
        )
        .bind(id)
        .bind(serde_json::Value::Array(to))
        .bind(hours_ago)
        .execute(&app.db.pool)
        .await
        .unwrap();
    }
    let history = PgSendHistory::new(app.db.pool.clone());
    let external = history
        .external_sent_since("Contoso.Example", Utc::now() - chrono::Duration::hours(24))
        .await
        .unwrap();
    assert_eq!(
        external.iter().map(|r| r.recipients).collect::<Vec<_>>(),
        [2, 1],
        "oldest first: 2 h ago 2 external, 1 h ago 1; internal and 25 h old ones left out"
    );

    let handler = app.real_handler(Arc::new(SystemClock));
    let outsider = insert_to(&app, 0, "new@example.org").await;
    let before = Utc::now();
    let outcome = claim_and_send(&app.db.pool, &handler, outsider)
        .await
        .unwrap()
        .unwrap();
    let SendOutcome::Deferred { until, reason } = &outcome else {
        panic!("the tenant's budget is spent: {outcome:?}")
    };
    assert!(reason.contains("tenant"), "{reason}");
    // Room again when the send of 2 h ago leaves the 24 h window (its minute bucket's end).
    let room = before + chrono::Duration::hours(22);
    assert!(
        *until >= room - chrono::Duration::seconds(5)
            && *until <= room + chrono::Duration::seconds(65),
        "booked for {until}, expected ~{room}"
    );
    // (Other tests' apps log seeds of the same addresses, from their own, empty histories.)
    let seeded: Vec<_> = logs_containing(app.mailboxes[0].0.as_str())
        .into_iter()
        .filter(|l| {
            l["event"] == "mail.rateLimit.seeded"
                && l["graph_tenant"] == "contoso.example"
                && l["external_recipients_in_24h"] == 3
        })
        .collect();
    assert_eq!(seeded.len(), 1, "the tenant seeded once: {seeded:?}");
    assert_eq!(seeded[0]["sent_in_24h"], 2);
    // Internal mail is not held by the tenant budget.
    let colleague = insert_to(&app, 0, "colleague@contoso.example").await;
    assert_eq!(
        claim_and_send(&app.db.pool, &handler, colleague)
            .await
            .unwrap(),
        Some(SendOutcome::Sent)
    );
    assert_eq!(
        app.sim.messages().len(),
        1,
        "only the internal message went"
    );
}
