//! The admin UI in a real browser: headless Chromium driven through WebDriver (chromedriver),
//! against the daemon (`paced` limiter, real Redis and PostgreSQL) sending to graph-sim and the
//! admin UI, all in process. An operator logs in, sees the mailboxes with their live use, sets a
//! mailbox to 5 a minute (graph-sim then records at most 5 of its sends in any 60 s), retries an
//! `ERROR` message and sees it `SENT`, opens the campaign from the Campaigns page and sees its
//! forecast finish, retries and discards a dead-lettered intake job on the Queue page, then adds
//! and removes an address on the Suppressions page.
//! Writes screenshots of the pages to `target/admin-*.png`
//! (docs/operations.md's `docs/admin-mailboxes.png` is one of those).
//!
//! Ignored by default: it needs Chromium (`scripts/browser.sh`); `.ci/run` runs it with
//! `cargo test --test browser -- --ignored`.

#[path = "it/support/mod.rs"]
#[allow(unused_imports)] // the harness of tests/it, of which this test uses a part
mod support;
#[path = "browser/webdriver.rs"]
mod webdriver;

use std::{num::NonZeroU32, time::Duration};

use chrono::{DateTime, Utc};
use mail_worker::{
    admin::{self, AdminState, AdminToken},
    daemon,
    domain::SecretRef,
    intake,
};
use support::{TestApp, wait_until};
use webdriver::{Browser, Chromedriver};

const TOKEN: &str = "browser-test-admin-token-42";
/// The limit the operator sets.
const LIMIT: usize = 5;

/// graph-sim's sends of `mailbox`, in order.
fn sends_of(world: &TestApp, mailbox: &str) -> Vec<DateTime<Utc>> {
    let mut at: Vec<_> = world
        .sim
        .messages()
        .into_iter()
        .filter(|m| m.mailbox.eq_ignore_ascii_case(mailbox))
        .map(|m| m.received_at)
        .collect();
    at.sort();
    at
}

/// Writes a screenshot to `target/<name>` (the run's artifacts).
/// Reloads `url` until the text of `css` (`None`: no such element) passes `done`, 30 s at the
/// most.
async fn reload_until(
    browser: &Browser,
    url: &str,
    css: &str,
    what: &str,
    done: impl Fn(Option<&str>) -> bool,
) {
    wait_until(Duration::from_secs(30), what, async || {
        browser.goto(url).await;
        done(browser.text_of(css).await.as_deref())
    })
    .await;
}

/// Ticks the row of `id` on the page open, presses Retry and returns the notice (waited for
/// until it starts with `expected`).
async fn retry_selected(browser: &Browser, id: uuid::Uuid, expected: &str) -> String {
    browser
        .click(
            &browser
                .find(&format!("input[name=\"id\"][value=\"{id}\"]"))
                .await,
        )
        .await;
    browser.click(&browser.find("#retry").await).await;
    browser.wait_text_starting("#notice", expected).await
}

fn artifact(name: &str, png: &[u8]) {
    assert_eq!(&png[1..4], b"PNG", "{name} is a PNG");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target")
        .join(name);
    std::fs::write(&path, png).unwrap();
    println!("screenshot: {} ({} bytes)", path.display(), png.len());
}

/// The most sends in any 60 s window starting at a send.
fn busiest_minute(sends: &[DateTime<Utc>]) -> usize {
    sends
        .iter()
        .map(|start| {
            sends
                .iter()
                .filter(|t| **t >= *start && **t < *start + chrono::Duration::seconds(60))
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[tokio::test]
#[ignore = "needs Chromium: run scripts/browser.sh; .ci/run runs it"]
async fn an_operator_sets_a_limit_and_retries_a_message_in_chromium() {
    let started = std::time::Instant::now();
    let world = TestApp::paced().mailboxes(2).per_minute(25).spawn().await;
    let (mb0, mb1) = (
        world.mailboxes[0].0.to_string(),
        world.mailboxes[1].0.to_string(),
    );
    // Some history for the live bars, and the ERROR message the operator will retry.
    world.insert(1, 3, "SCHEDULED").await;
    let failed = world.insert(1, 1, "ERROR").await[0];

    // The daemon (one replica) and the admin UI.
    let mut config = world.config.clone();
    config.metrics_listen = None;
    config.worker.scheduler_interval = Duration::from_millis(200);
    config.defer_spread_max = Duration::from_millis(500);
    config.worker.concurrency = NonZeroU32::new(4).unwrap();
    let (handle, run) = daemon::start(config.clone(), daemon::Options::default())
        .await
        .unwrap();
    config.admin.token = Some(SecretRef::new(TOKEN));
    let token = AdminToken::resolve(config.admin.token.as_ref()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ui = format!("http://{}", listener.local_addr().unwrap());
    let (stop_ui, ui_stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(admin::serve(
        listener,
        AdminState::new(config, world.db.pool.clone(), token),
        async move {
            let _ = ui_stopped.await;
        },
    ));

    let driver = Chromedriver::start().await;
    let browser = Browser::new(&driver).await;
    let operator = async {
        wait_until(
            Duration::from_secs(30),
            "mb1's first 3 messages SENT",
            async || world.count("SENT").await == 3,
        )
        .await;

        // Log in.
        browser.goto(&format!("{ui}/mailboxes")).await;
        assert!(
            browser.current_url().await.ends_with("/login"),
            "sent to the login form"
        );
        let field = browser.find("#token").await;
        browser.type_into(&field, TOKEN).await;
        browser.click(&browser.find("#login").await).await;
        wait_until(
            Duration::from_secs(20),
            "the mailboxes page after logging in",
            async || browser.current_url().await == format!("{ui}/mailboxes"),
        )
        .await;

        // Every mailbox with its live use: mb1's 3 sends in the last 60 s.
        let row = |m: &str, cell: &str| format!("tr[data-mailbox=\"{m}\"] td.{cell}");
        let limits = browser.text_of(&row(&mb0, "limits")).await.unwrap();
        assert!(limits.contains("25/min override"), "mb0 limits: {limits:?}");
        let sent = browser.text_of(&row(&mb1, "sent")).await.unwrap();
        assert!(sent.starts_with("3 / 25"), "mb1 sent: {sent:?}");

        // Set mb0 to 5 a minute.
        browser
            .click(
                &browser
                    .find(&format!(
                        "a[href=\"/mailboxes/{}\"]",
                        mb0.replace('@', "%40")
                    ))
                    .await,
            )
            .await;
        let field = browser.find("#rate_limit_per_minute").await;
        browser.type_into(&field, &LIMIT.to_string()).await;
        browser.click(&browser.find("#save").await).await;
        let notice = browser.wait_text_starting("#notice", "Saved").await;
        assert!(notice.starts_with("Saved"), "{notice}");
        artifact("admin-mailbox.png", &browser.screenshot().await);
        let limits = browser.text_of(&row(&mb0, "limits")).await.unwrap();
        assert!(limits.contains("5/min override"), "mb0 limits: {limits:?}");

        // A campaign for mb0: 12 messages due now.
        for id in world.insert(0, 12, "SCHEDULED").await {
            sqlx::query("UPDATE messages SET campaign_id = 'winter-invitations' WHERE id = $1")
                .bind(id)
                .execute(&world.db.pool)
                .await
                .unwrap();
        }

        // Retry the ERROR message, then see it SENT.
        browser.goto(&format!("{ui}/messages?status=ERROR")).await;
        let notice = retry_selected(&browser, failed, "1 message retried").await;
        assert!(notice.starts_with("1 message retried"), "{notice}");
        artifact("admin-messages.png", &browser.screenshot().await);
        let status = format!("tr[data-id=\"{failed}\"] td.status");
        reload_until(
            &browser,
            &format!("{ui}/messages?sender={mb1}"),
            &status,
            "the retried message SENT on the page",
            |t| t == Some("SENT"),
        )
        .await;

        // The next rolling minute of mb0: at most 5 sends (graph-sim's records).
        wait_until(Duration::from_secs(30), "mb0's first send", async || {
            !sends_of(&world, &mb0).is_empty()
        })
        .await;
        let first = sends_of(&world, &mb0)[0];
        let minute_later = first + chrono::Duration::seconds(61);
        wait_until(
            Duration::from_secs(75),
            "a minute after mb0's first send",
            async || Utc::now() >= minute_later,
        )
        .await;
        let sends = sends_of(&world, &mb0);
        let in_first_minute = sends
            .iter()
            .filter(|t| **t < first + chrono::Duration::seconds(60))
            .count();
        println!(
            "mb0 at {LIMIT}/min: {in_first_minute} sends in the 60 s from its first, {} in all by then, busiest 60 s {}",
            sends.len(),
            busiest_minute(&sends)
        );
        assert!(
            (3..=LIMIT).contains(&in_first_minute),
            "{in_first_minute} sends in mb0's first minute: {sends:?}"
        );
        assert!(busiest_minute(&sends) <= LIMIT, "{sends:?}");

        // The campaigns page (from the navigation), then the campaign by sender: mb0's sends so
        // far and the forecast finish of the rest (at 5/min, 12 take over two minutes).
        browser
            .click(&browser.find("nav a[href=\"/campaigns\"]").await)
            .await;
        let sent = browser.text_of("tr.campaign td.sent").await.unwrap();
        assert!(
            sent.parse::<usize>().unwrap() >= 3,
            "campaign sent: {sent:?}"
        );
        browser
            .click(
                &browser
                    .find("a[href=\"/campaigns/winter-invitations\"]")
                    .await,
            )
            .await;
        let summary = browser.wait_text("#summary").await;
        assert!(summary.contains(" waiting"), "{summary}");
        let finish = browser.text_of("tr.sender td.finish").await.unwrap();
        assert!(finish.ends_with(" UTC"), "forecast finish: {finish:?}");
        artifact("admin-campaign.png", &browser.screenshot().await);

        // The mailboxes page, for docs/operations.md and as the run's artifact.
        browser.goto(&format!("{ui}/mailboxes")).await;
        let sent = browser.text_of(&row(&mb0, "sent")).await.unwrap();
        assert!(sent.ends_with("/ 5"), "mb0 sent: {sent:?}");
        let freshness = browser.text_of("#order-freshness").await.unwrap();
        assert!(freshness.starts_with("as of "), "{freshness}");
        // The rows refresh in place (admin.js, every 5 s), without a reload, and with them the
        // order's age (≥ 5 s later, so another text).
        wait_until(
            Duration::from_secs(12),
            "the rows refreshed in place",
            async || {
                browser
                    .text_of("#refreshed")
                    .await
                    .is_some_and(|t| t.starts_with("Refreshed "))
            },
        )
        .await;
        let refreshed = browser.text_of("#order-freshness").await.unwrap();
        assert!(
            refreshed.starts_with("as of ") && refreshed != freshness,
            "{freshness} → {refreshed}"
        );
        assert_eq!(browser.current_url().await, format!("{ui}/mailboxes"));
        artifact("admin-mailboxes.png", &browser.screenshot().await);

        // A campaign line for a sender nobody imported: dead-lettered by the daemon's intake,
        // listed on the Queue page, retried (dead again), then discarded.
        let queue = world.config.intake.queue.clone().unwrap();
        let conn = intake::connect(&support::redis_url().into()).await.unwrap();
        let task = uuid::Uuid::new_v4();
        let line = serde_json::json!({
            "id": task.to_string(),
            "systemMailbox": "nobody@contoso.example",
            "to": [{"address": "guest@fabrikam.example"}],
            "subject": "Invitation",
            "body": {"contentType": "text", "content": "Hello"},
        });
        intake::push_lines(conn.clone(), &queue, [line.to_string().into_bytes()])
            .await
            .unwrap();
        let dead_row = format!("tr[data-task=\"{task}\"]");
        let queue_page = format!("{ui}/queue");
        let shown = |t: Option<&str>| t.is_some();
        reload_until(
            &browser,
            &queue_page,
            &dead_row,
            "the job on the Queue page",
            shown,
        )
        .await;
        let reason = browser
            .text_of(&format!("{dead_row} td.error-text"))
            .await
            .unwrap();
        assert!(
            reason.contains("nobody@contoso.example is unknown"),
            "{reason}"
        );
        assert_eq!(browser.text_of("#dead").await.as_deref(), Some("1"));
        artifact("admin-queue.png", &browser.screenshot().await);
        let notice = retry_selected(&browser, task, "1 dead job retried").await;
        assert!(notice.starts_with("1 dead job retried"), "{notice}");
        reload_until(
            &browser,
            &queue_page,
            &dead_row,
            "the job dead again",
            shown,
        )
        .await;
        browser.click(&browser.find("#discard-all").await).await;
        let notice = browser
            .wait_text_starting("#notice", "1 dead job discarded")
            .await;
        assert!(notice.starts_with("1 dead job discarded"), "{notice}");
        assert!(browser.text_of("#no-dead").await.is_some());

        // The Suppressions page: an address added for the first scope, then removed.
        browser.goto(&format!("{ui}/suppressions")).await;
        browser
            .type_into(
                &browser.find("#add-address").await,
                "Bounced@Fabrikam.example",
            )
            .await;
        browser.click(&browser.find("#add-submit").await).await;
        let notice = browser.wait_text_starting("#notice", "Suppressed").await;
        assert!(notice.starts_with("Suppressed"), "{notice}");
        let entry = "tr[data-address=\"bounced@fabrikam.example\"]";
        assert!(browser.text_of(entry).await.is_some());
        assert_eq!(
            browser
                .text_of("#count")
                .await
                .map(|t| t.starts_with("1 entry")),
            Some(true)
        );
        browser
            .click(&browser.find(&format!("{entry} button")).await)
            .await;
        let notice = browser.wait_text_starting("#notice", "Removed").await;
        assert!(notice.starts_with("Removed"), "{notice}");
        assert!(browser.text_of("#none").await.is_some());
    };
    tokio::pin!(run);
    tokio::select! {
        result = &mut run => panic!("the daemon stopped on its own: {result:?}"),
        () = operator => {}
    }
    browser.quit().await;
    handle.stop();
    run.await.unwrap();
    let _ = stop_ui.send(());
    println!("wall time {:.1} s", started.elapsed().as_secs_f64());
}
