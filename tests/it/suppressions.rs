//! The suppression list (issue 25) against the real PostgreSQL, Redis and graph-sim: suppressed
//! recipients dropped from new messages (file import and intake queue) and again just before a
//! send, a message left with none `ERROR` without a Graph request, the counts on /metrics; the
//! `suppressions` commands (a bad CSV line named, nothing half-imported) and the admin page.

use std::{sync::Arc, time::Duration};

use mail_worker::{
    daemon,
    domain::{SuppressionSource, classify},
    import, intake, log_events,
    ops::Metrics,
    store::{events::Outbox, messages::SenderRef, suppressions},
};
use reqwest::StatusCode;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::{
    admin::{field, logged, logged_in_ui, redirected_to},
    cli::{mail_worker, stderr_of_exit, text},
    support::{TestApp, logs::capture_logs, redis_url, spawn_app, unique, wait_until},
};

/// A campaign line from the app's first mailbox to `to` (and `cc`), due at `at` (now if `None`).
fn line(app: &TestApp, id: Uuid, to: &[&str], cc: &[&str], at: Option<&str>) -> String {
    let list = |l: &[&str]| {
        l.iter()
            .map(|a| json!({ "address": a }))
            .collect::<Vec<_>>()
    };
    let mut line = json!({
        "id": id.to_string(),
        "systemMailbox": app.mailboxes[0].0.as_str(),
        "to": list(to),
        "cc": list(cc),
        "subject": "Invitation",
        "body": {"contentType": "text", "content": "Hello"},
    });
    if let Some(at) = at {
        line["scheduledOn"] = json!(at);
    }
    line.to_string()
}

fn scope(app: &TestApp) -> SenderRef {
    SenderRef::SystemMailbox(app.mailboxes[0].1)
}

/// `(status, last_error, to addresses, cc addresses, attempts)` of message `id`.
async fn row(app: &TestApp, id: Uuid) -> (String, Option<String>, Vec<String>, Vec<String>, i32) {
    let (status, error, to, cc, attempts): (String, Option<String>, Value, Value, i32) =
        sqlx::query_as(
            "SELECT status, last_error, to_recipients, cc_recipients, attempts FROM messages WHERE id = $1",
        )
        .bind(id)
        .fetch_one(&app.db.pool)
        .await
        .unwrap();
    let addresses = |v: Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| r["address"].as_str().unwrap().to_owned())
            .collect()
    };
    (status, error, addresses(to), addresses(cc), attempts)
}

async fn entries(app: &TestApp) -> i64 {
    app.db.rows_in("suppressions").await
}

#[tokio::test]
async fn suppressed_recipients_are_dropped_from_new_messages_and_counted() {
    let app = spawn_app().await;
    for (address, code) in [
        (
            "gone@fabrikam.example",
            "550 5.1.1 RESOLVER.ADR.RecipNotFound",
        ),
        (
            "Lotte@Bücher.example",
            "550 5.4.1 Recipient address rejected",
        ),
    ] {
        let bounce = classify(code).unwrap();
        let added = suppressions::add(
            &app.db.pool,
            scope(&app),
            address,
            &bounce.reason(),
            SuppressionSource::Bounce,
        )
        .await
        .unwrap();
        assert!(added);
    }
    // The same address again keeps its first entry.
    assert!(
        !suppressions::add(
            &app.db.pool,
            scope(&app),
            " GONE@fabrikam.example",
            "again",
            SuppressionSource::Manual
        )
        .await
        .unwrap()
    );
    assert_eq!(entries(&app).await, 2);

    // The file import: one message keeps one of its three recipients, one is left with none.
    let (some, none) = (Uuid::new_v4(), Uuid::new_v4());
    let file = [
        line(
            &app,
            some,
            &["keep@fabrikam.example", "GONE@Fabrikam.example"],
            &["lotte@bücher.example"],
            None,
        ),
        line(&app, none, &["gone@fabrikam.example"], &[], None),
    ]
    .join("\n");
    let report = import::enqueue(&app.db.pool, &file, Outbox::Off)
        .await
        .unwrap();
    assert_eq!(
        (report.inserted, report.suppressed, report.all_suppressed),
        (2, 3, 1)
    );
    let (status, error, to, cc, _) = row(&app, some).await;
    assert_eq!((status.as_str(), error), ("SCHEDULED", None));
    assert_eq!((to, cc), (vec!["keep@fabrikam.example".to_owned()], vec![]));
    let (status, error, to, _, attempts) = row(&app, none).await;
    assert_eq!(
        (status.as_str(), error.as_deref(), attempts),
        ("ERROR", Some("all recipients suppressed"), 0)
    );
    assert_eq!(
        to,
        ["gone@fabrikam.example"],
        "kept, for a retry once removed"
    );
    // Enqueued again, nothing is stored and nothing counted twice.
    let again = import::enqueue(&app.db.pool, &file, Outbox::Off)
        .await
        .unwrap();
    assert_eq!((again.inserted, again.suppressed), (0, 0));

    // The intake queue: the same code, counted on the consumer's metrics.
    let queue = app.config.intake.queue.clone().unwrap();
    let conn = intake::connect(&redis_url().into()).await.unwrap();
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let lines = vec![
        line(
            &app,
            a,
            &["gone@fabrikam.example", "keep@fabrikam.example"],
            &[],
            None,
        )
        .into_bytes(),
        line(
            &app,
            b,
            &["gone@fabrikam.example"],
            &["lotte@bücher.example"],
            None,
        )
        .into_bytes(),
    ];
    intake::push_lines(conn.clone(), &queue, lines)
        .await
        .unwrap();
    let metrics = Arc::new(Metrics::new());
    let (stop, consumer) = crate::intake::consume(&app, &conn, &metrics);
    wait_until(Duration::from_secs(20), "both rows", async || {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM messages WHERE id = ANY($1)")
            .bind([a, b])
            .fetch_one(&app.db.pool)
            .await
            .unwrap();
        n == 2
    })
    .await;
    stop.cancel();
    consumer.await.unwrap().unwrap();
    assert_eq!(row(&app, a).await.2, ["keep@fabrikam.example"]);
    assert_eq!(row(&app, b).await.0, "ERROR");
    let text = metrics.encode();
    assert!(
        text.contains("mail_worker_recipients_suppressed_total{stage=\"intake\"} 3"),
        "{text}"
    );
}

#[tokio::test]
async fn a_recipient_suppressed_after_its_message_was_stored_is_dropped_at_send() {
    let app = spawn_app().await;
    let (all, some) = (Uuid::new_v4(), Uuid::new_v4());
    let file = [
        line(&app, all, &["gone@fabrikam.example"], &[], None),
        line(
            &app,
            some,
            &["keep@fabrikam.example", "gone@fabrikam.example"],
            &["cc@fabrikam.example"],
            Some("2099-01-01T00:00:00Z"),
        ),
    ]
    .join("\n");
    let report = import::enqueue(&app.db.pool, &file, Outbox::Off)
        .await
        .unwrap();
    assert_eq!((report.inserted, report.suppressed), (2, 0));
    // The bounce of an earlier message arrives after these were stored.
    suppressions::add(
        &app.db.pool,
        scope(&app),
        "gone@fabrikam.example",
        "5.1.1 recipient address unknown",
        SuppressionSource::Bounce,
    )
    .await
    .unwrap();

    let mut config = app.config.clone();
    config.metrics_listen = None;
    config.rate_limit.caller_clock = false;
    config.worker.scheduler_interval = Duration::from_millis(100);
    // The outbox on (a receiver nobody answers: only the events table is read here).
    config.events.webhook_urls = vec!["http://127.0.0.1:9/events".parse().unwrap()];
    let (handle, run) = daemon::start(config, daemon::Options::default())
        .await
        .unwrap();
    tokio::pin!(run);
    let failed = wait_until(
        Duration::from_secs(30),
        "the all-suppressed ERROR",
        async || row(&app, all).await.0 == "ERROR",
    );
    tokio::select! {
        result = &mut run => panic!("the daemon stopped on its own: {result:?}"),
        () = failed => {}
    }
    let (_, error, _, _, attempts) = row(&app, all).await;
    assert_eq!(
        (error.as_deref(), attempts),
        (Some("all recipients suppressed"), 1)
    );
    let stats = app.sim.stats();
    assert_eq!(
        stats.requests.values().sum::<u64>(),
        0,
        "{:?}",
        stats.requests
    );
    assert!(stats.token_requests.values().all(|n| *n == 0), "{stats:?}");
    assert!(app.sim.messages().is_empty());

    // Due now, the other is sent to its two other recipients.
    sqlx::query("UPDATE messages SET scheduled_on = now() WHERE id = $1")
        .bind(some)
        .execute(&app.db.pool)
        .await
        .unwrap();
    let sent = wait_until(Duration::from_secs(30), "the other SENT", async || {
        row(&app, some).await.0 == "SENT"
    });
    tokio::select! {
        result = &mut run => panic!("the daemon stopped on its own: {result:?}"),
        () = sent => {}
    }
    let messages = app.sim.messages();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].to, ["keep@fabrikam.example"]);
    assert_eq!(messages[0].cc, ["cc@fabrikam.example"]);
    assert_eq!(messages[0].recipient_count, 2);
    assert_eq!(
        row(&app, some).await.1.as_deref(),
        Some("1 recipient suppressed: not sent to it")
    );
    let text = handle.metrics.encode();
    assert!(
        text.contains("mail_worker_recipients_suppressed_total{stage=\"send\"} 2"),
        "{text}"
    );
    // Its `sent` event counts the 2 recipients it went to, not the row's 3.
    let sent_to: Vec<i32> =
        sqlx::query_scalar("SELECT recipients FROM events WHERE kind = 'sent' AND message_id = $1")
            .bind(some)
            .fetch_all(&app.db.pool)
            .await
            .unwrap();
    assert_eq!(sent_to, [2]);
    handle.stop();
    run.await.unwrap();
}

#[tokio::test]
async fn the_commands_add_list_remove_and_import_naming_a_bad_csv_line() {
    let app = spawn_app().await;
    let dir = crate::support::temp_dir("mw-suppressions-");
    let env = [("DATABASE_URL", app.db.url.to_string())];
    let run = |args: &[&str]| mail_worker(args, &env);
    let senders = dir.path().join("senders.json");
    std::fs::write(
        &senders,
        r#"{"tenants": [{"name": "northwind", "provider": "sendgrid", "sender": "news@northwind.example", "sendgridApiKey": "SG.test"}]}"#,
    )
    .unwrap();
    let out = run(&["senders", "import", senders.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let mailbox = app.mailboxes[0].0.as_str();

    let out = run(&[
        "suppressions",
        "add",
        "Lotte@Example.com",
        "--scope",
        mailbox,
        "--reason",
        "asked by phone",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("Lotte@Example.com suppressed for {mailbox}\n")
    );
    let out = run(&[
        "suppressions",
        "add",
        "lotte@example.com",
        "--scope",
        &mailbox.to_uppercase(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("already"),
        "{}",
        text(&out.stdout)
    );
    let out = run(&["suppressions", "add", "a@example.com", "--scope", "nobody"]);
    let stderr = stderr_of_exit(&out, 1, "");
    assert!(
        stderr.contains(
            "--scope: scope \"nobody\" is neither a system mailbox's address nor a tenant's name"
        ),
        "{stderr}"
    );
    let out = run(&[
        "suppressions",
        "add",
        "lotte.jansen at example.com",
        "--scope",
        "northwind",
    ]);
    let stderr = stderr_of_exit(&out, 1, "");
    assert!(stderr.contains("is not a mailbox address"), "{stderr}");
    assert_eq!(entries(&app).await, 1);

    // A CSV with a bad line imports nothing and names the line.
    let csv = dir.path().join("bad.csv");
    std::fs::write(
        &csv,
        "address,scope,reason\nguest@example.org,northwind\nother@example.org,nobody,x\n",
    )
    .unwrap();
    let out = run(&["suppressions", "import", csv.to_str().unwrap()]);
    let stderr = stderr_of_exit(&out, 1, "");
    assert!(
        stderr.contains(&format!("{}:line 3: scope \"nobody\"", csv.display())),
        "{stderr}"
    );
    assert!(
        stderr.contains("1 bad line in") && stderr.contains("nothing imported"),
        "{stderr}"
    );
    assert_eq!(entries(&app).await, 1, "nothing half-imported");

    let csv = dir.path().join("good.csv");
    std::fs::write(
        &csv,
        format!("address,scope,reason\nguest@example.org,northwind,\"5.1.1, from the old system\"\nlotte@example.com,{mailbox}\n"),
    )
    .unwrap();
    let out = run(&["suppressions", "import", csv.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("1 entry added from {} (1 already listed)\n", csv.display())
    );

    let out = run(&["suppressions", "list", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let brief: Vec<(String, String, String, String)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let f = |k: &str| e[k].as_str().unwrap().to_owned();
            (f("address"), f("scope"), f("source"), f("reason"))
        })
        .collect();
    assert_eq!(
        brief,
        [
            (
                "guest@example.org".into(),
                "northwind".into(),
                "import".into(),
                "5.1.1, from the old system".into()
            ),
            (
                "lotte@example.com".into(),
                mailbox.to_owned(),
                "manual".into(),
                "asked by phone".into()
            ),
        ]
    );
    let out = run(&["suppressions", "list", "--scope", "northwind"]);
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 3, "{stdout}");
    assert!(
        stdout
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("guest@example.org "),
        "{stdout}"
    );
    assert!(stdout.ends_with("1 shown of 1 entry\n"), "{stdout}");

    let out = run(&[
        "suppressions",
        "remove",
        "LOTTE@example.com",
        "--scope",
        mailbox,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = run(&[
        "suppressions",
        "remove",
        "lotte@example.com",
        "--scope",
        mailbox,
    ]);
    let stderr = stderr_of_exit(&out, 1, "");
    assert!(stderr.contains("is not suppressed for"), "{stderr}");
    assert_eq!(entries(&app).await, 1);
}

#[tokio::test]
async fn the_admin_page_adds_and_removes_entries_with_csrf_pages_them_and_masks_the_log() {
    capture_logs();
    let app = spawn_app().await;
    let (ui, login) = logged_in_ui(&app).await;
    let mailbox = app.mailboxes[0].0.as_str();
    let page = ui.page("/suppressions", &login).await;
    assert!(
        page.contains("<a href=\"/suppressions\">Suppressions</a>"),
        "{page}"
    );
    assert!(page.contains("0 entries; page 1 of 1"), "{page}");
    assert!(
        page.contains(&format!("<option value=\"{mailbox}\">")),
        "{page}"
    );

    let address = format!("{}@fabrikam.example", unique("zoe.x"));
    let form = [("address", address.as_str()), ("scope", mailbox)];
    for csrf in [None, Some("00")] {
        let mut fields = form.to_vec();
        fields.extend(csrf.map(|c| ("csrf", c)));
        let answer = ui.post("/suppressions/add", Some(&login), &fields).await;
        assert_eq!(answer.status(), StatusCode::FORBIDDEN);
    }
    assert_eq!(entries(&app).await, 0);

    let answer = ui
        .submit(
            "/suppressions/add",
            &login,
            &[
                ("address", &address.to_uppercase()),
                ("scope", mailbox),
                ("reason", "asked by phone"),
            ],
        )
        .await;
    let back = redirected_to(&answer);
    assert_eq!(back, "/suppressions?scope=mb0%40contoso.example&done=added");
    let page = ui.page(&back, &login).await;
    assert!(
        page.contains(&format!("<tr data-address=\"{address}\">")),
        "{page}"
    );
    assert!(
        page.contains("asked by phone") && page.contains("<td>manual</td>"),
        "{page}"
    );
    assert!(page.contains("1 entry; page 1 of 1"), "{page}");
    let lines = logged(
        log_events::MAIL_ADMIN_SUPPRESSION_ADDED,
        "z***@fabrikam.example",
    );
    assert_eq!(lines.len(), 1);
    assert_eq!(field(&lines[0], "added"), "true");
    assert!(
        logs_without(&address),
        "the full address never reaches a log line"
    );

    let bad = ui
        .submit(
            "/suppressions/add",
            &login,
            &[("address", "not an address"), ("scope", mailbox)],
        )
        .await;
    assert_eq!(bad.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        bad.text()
            .await
            .unwrap()
            .contains("is not a mailbox address")
    );

    let answer = ui
        .submit(
            "/suppressions/remove",
            &login,
            &[("address", &address), ("scope", mailbox)],
        )
        .await;
    assert!(redirected_to(&answer).ends_with("done=removed"));
    assert_eq!(entries(&app).await, 0);
    assert_eq!(
        logged(
            log_events::MAIL_ADMIN_SUPPRESSION_REMOVED,
            "z***@fabrikam.example"
        )
        .len(),
        1
    );

    // 150 entries: two pages, newest first.
    let many: Vec<suppressions::NewSuppression> = (0..150)
        .map(|i| {
            (
                scope(&app),
                format!("guest{i:03}@example.org"),
                String::new(),
            )
        })
        .collect();
    assert_eq!(
        suppressions::add_many(&app.db.pool, &many, SuppressionSource::Import)
            .await
            .unwrap(),
        150
    );
    let first = ui.page("/suppressions", &login).await;
    assert!(first.contains("150 entries; page 1 of 2"), "{first}");
    assert_eq!(first.matches("<tr data-address=").count(), 100);
    assert!(first.contains("id=\"next\""), "{first}");
    let second = ui.page("/suppressions?page=2", &login).await;
    assert_eq!(second.matches("<tr data-address=").count(), 50);
    let filtered = ui.page("/suppressions?address=guest14", &login).await;
    assert!(filtered.contains("10 entries; page 1 of 1"), "{filtered}");
}

/// No captured log line holds `address`.
fn logs_without(address: &str) -> bool {
    crate::support::logs::logs_containing(address).is_empty()
}
