//! Issue 42's "Done when", end to end against graph-sim: a 1,000-message campaign over 10
//! mailboxes sent through the real stack, with unknown users (`nowhere.example`, 5.1.10), a
//! spam rule (`spam.example`, FilteredAsSpam) and a quota breach (graph-sim lets each mailbox
//! send to 99 recipients a day: its 100th is accepted and fails 5.1.90). One trace read tells
//! every recipient's fate. The tenant without the service principal, paused with its fix and
//! resumed: `trace::a_tenant_without_the_service_principal_is_paused_with_its_fix_and_resumes`.

use std::{sync::Arc, time::Duration};

use graph_sim::{SimBounces, SimTrace, TraceRule, UnknownRecipients};
use mail_worker::clock::{Clock, ManualClock};
use uuid::Uuid;

use crate::{
    support::{TestApp, app::noon, claim_and_send_all},
    trace::{INTERVAL, reconciler, roles},
};

const MAILBOXES: usize = 10;
const MESSAGES: usize = 1_000;
/// graph-sim's recipients per day per mailbox: one under each mailbox's 100 messages.
const PER_DAY: u64 = 99;

/// Message i's recipient: every 50th (from 7) an unknown user, every 25th (from 3) at the
/// spam-filtered domain, the rest ordinary.
fn recipient(i: usize) -> String {
    if i % 50 == 7 {
        format!("u{i}@nowhere.example")
    } else if i % 25 == 3 {
        format!("s{i}@spam.example")
    } else {
        format!("g{i}@example.org")
    }
}

/// Sends every `SCHEDULED` message, a claim of the due ones at a time, moving the clock to the
/// next slot when none is due.
async fn send_all(app: &TestApp, clock: &ManualClock) {
    let handler = app.real_handler(Arc::new(clock.clone()));
    for _ in 0..10_000 {
        if app.count("SCHEDULED").await == 0 {
            return;
        }
        let due = app.due_by(clock.now()).await;
        if due.is_empty() {
            let next: chrono::DateTime<chrono::Utc> = sqlx::query_scalar(
                "SELECT min(scheduled_on) FROM messages WHERE status = 'SCHEDULED'",
            )
            .fetch_one(&app.db.pool)
            .await
            .unwrap();
            clock.set(next.max(clock.now()));
            continue;
        }
        claim_and_send_all(&app.db.pool, &handler, &due)
            .await
            .unwrap();
    }
    panic!("messages still SCHEDULED: {}", app.count("SCHEDULED").await);
}

#[tokio::test]
async fn a_campaign_with_unknown_users_a_spam_rule_and_a_quota_breach_ends_with_every_fate_right() {
    let clock = ManualClock::new(noon());
    let app = TestApp::paced()
        .mailboxes(MAILBOXES)
        .per_minute(1_000)
        .sim_per_minute(1_000)
        .sim_clock(clock.clone())
        .sim_roles(roles())
        .sim_recipients_per_day(PER_DAY)
        .sim_bounces(SimBounces {
            unknown_recipients: vec![UnknownRecipients::domain("nowhere.example", "5.1.10")],
            ..SimBounces::default()
        })
        .sim_trace(SimTrace {
            filtered: vec![TraceRule::domain("spam.example", "FilteredAsSpam")],
            ..SimTrace::default()
        })
        .spawn()
        .await;
    let mailbox_ids: Vec<Uuid> = app.mailboxes.iter().map(|m| m.1).collect();
    let recipients: Vec<String> = (0..MESSAGES).map(recipient).collect();
    let ids: Vec<Uuid> = sqlx::query_scalar(
        "INSERT INTO messages (id, system_mailbox_id, to_recipients, subject, body, status, campaign_id) \
         SELECT gen_random_uuid(), ($1::uuid[])[(i % cardinality($1::uuid[])) + 1], \
             jsonb_build_array(jsonb_build_object('address', ($2::text[])[i + 1])), \
             'Invitation', '<p>hi</p>', 'SCHEDULED', 'done-when' \
         FROM generate_series(0, $3 - 1) AS i ORDER BY i RETURNING id",
    )
    .bind(&mailbox_ids)
    .bind(&recipients)
    .bind(MESSAGES as i64)
    .fetch_all(&app.db.pool)
    .await
    .unwrap();
    assert_eq!(ids.len(), MESSAGES);
    send_all(&app, &clock).await;
    assert_eq!(app.count("SENT").await, MESSAGES as i64);

    let (r, metrics) = reconciler(&app, &clock);
    tokio::time::sleep(INTERVAL + Duration::from_millis(50)).await;
    let read = r.round().await.unwrap().remove(0).1;
    assert_eq!((read.error, read.paused), (None, None));

    // Every recipient has a final fate, the right one for its address.
    let fates: Vec<(String, String, Option<String>, String)> = sqlx::query_as(
        "SELECT o.recipient, o.outcome, o.code, m.status FROM recipient_outcomes o \
         JOIN messages m ON m.id = o.message_id ORDER BY o.recipient",
    )
    .fetch_all(&app.db.pool)
    .await
    .unwrap();
    assert_eq!(fates.len(), MESSAGES);
    let mut quota = 0;
    for (recipient, outcome, code, status) in &fates {
        let expected = match (outcome.as_str(), code.as_deref()) {
            ("failed", Some("5.1.90")) => {
                quota += 1;
                "BOUNCED"
            }
            ("failed", Some("5.1.10")) if recipient.ends_with("@nowhere.example") => "BOUNCED",
            ("filtered", None) if recipient.ends_with("@spam.example") => "DELIVERED",
            ("delivered", None) if recipient.ends_with("@example.org") => "DELIVERED",
            other => panic!("{recipient}: {other:?}"),
        };
        assert_eq!(status, expected, "{recipient}");
    }
    // Each mailbox's 100th recipient was over graph-sim's quota.
    assert_eq!(quota, MAILBOXES);
    let failed = fates.iter().filter(|f| f.1 == "failed").count();
    let unknown = recipients
        .iter()
        .filter(|r| r.ends_with("@nowhere.example"))
        .count();
    assert_eq!(unknown, 20);
    assert_eq!(
        (read.delivered + read.filtered + read.failed) as usize,
        MESSAGES
    );
    assert_eq!(read.failed as usize, failed);
    assert_eq!(app.count("BOUNCED").await as usize, failed);
    assert_eq!(app.count("DELIVERED").await as usize, MESSAGES - failed);

    // Each event once, its kind the fate's.
    let (events, kinds_right, distinct): (i64, i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE (e.kind, o.outcome) IN \
             (('delivered', 'delivered'), ('bounced', 'failed'), ('filtered', 'filtered'))), \
             count(DISTINCT (e.message_id, e.recipient)) \
         FROM events e JOIN recipient_outcomes o \
             ON o.message_id = e.message_id AND o.recipient = e.recipient",
    )
    .fetch_one(&app.db.pool)
    .await
    .unwrap();
    assert_eq!((events, kinds_right, distinct), (1_000, 1_000, 1_000));

    // The unknown users suppressed (not the quota's recipients); each mailbox paused once.
    let suppressed: Vec<String> = sqlx::query_scalar("SELECT address FROM suppressions")
        .fetch_all(&app.db.pool)
        .await
        .unwrap();
    let hard: Vec<&String> = fates
        .iter()
        .filter(|f| f.2.as_deref() == Some("5.1.10"))
        .map(|f| &f.0)
        .collect();
    assert_eq!(suppressed.len(), hard.len());
    assert!(hard.iter().all(|h| suppressed.contains(h)));
    let paused: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM limit_pauses WHERE scope = 'mailbox' AND code = '5.1.90'",
    )
    .fetch_one(&app.db.pool)
    .await
    .unwrap();
    assert_eq!((paused, read.paused_budgets.len()), (10, 10));

    // Within the budget: one listing, one detail request per failed recipient; no 429.
    let stats = app.sim.trace_stats();
    assert_eq!((stats.throttled, stats.requests), (0, 1 + failed as u64));
    assert!(
        metrics
            .encode()
            .contains("mail_worker_recipients_outcome_total{mailbox=\"mb3@contoso.example\",outcome=\"failed\"}"),
        "{}",
        metrics.encode()
    );
}
