//! The campaign forecast against what happens: a 3-mailbox campaign (different limits, one
//! mailbox with a backlog already waiting) is forecast with `campaign forecast`'s code, enqueued
//! and sent by a real daemon (`paced`, real Redis, PostgreSQL and graph-sim); each mailbox's
//! last send must land within max(5 %, 30 s) of its forecast (the goal), and `campaign
//! status` must count the campaign while it runs and when it is done.

use std::{num::NonZeroU32, time::Duration};

use chrono::{DateTime, Utc};
use mail_worker::{
    daemon,
    reports::campaign::{campaign_status, forecast_file},
    store::senders::{self, LimitsChange},
};
use uuid::Uuid;

use crate::support::{TestApp, wait_until};

/// (mailbox index, its limit per minute, the campaign's messages for it).
const SHARES: [(usize, u32, usize); 3] = [(0, 30, 20), (1, 20, 12), (2, 60, 30)];
/// Messages already waiting for mb1 before the campaign (not part of it).
const BACKLOG: usize = 6;
const CAMPAIGN: &str = "forecast-accuracy";

/// The campaign file: every line with the `x-campaign-id` header (the default campaign).
fn campaign_file(world: &TestApp) -> String {
    let mut lines = Vec::new();
    for (mailbox, _, n) in SHARES {
        for k in 0..n {
            lines.push(
                serde_json::json!({
                    "id": Uuid::new_v4(),
                    "systemMailbox": world.mailboxes[mailbox].0.as_str(),
                    "to": [{"address": format!("guest{k}@example.org")}],
                    "subject": "Invitation",
                    "body": {"contentType": "text", "content": "hi"},
                    "headers": [{"name": "x-campaign-id", "value": CAMPAIGN}],
                })
                .to_string(),
            );
        }
    }
    lines.join("\n")
}

/// graph-sim's last send of `mailbox`.
fn last_send(world: &TestApp, mailbox: &str) -> Option<DateTime<Utc>> {
    world
        .sim
        .messages()
        .into_iter()
        .filter(|m| m.mailbox.eq_ignore_ascii_case(mailbox))
        .map(|m| m.received_at)
        .max()
}

#[tokio::test]
async fn a_three_mailbox_campaign_finishes_within_5_percent_or_30_s_of_its_forecast() {
    let world = TestApp::paced().mailboxes(3).sim_per_minute(1_000).await;
    for (mailbox, per_minute, _) in SHARES {
        let change = LimitsChange::Set {
            per_minute: NonZeroU32::new(per_minute),
            recipients_per_day: None,
            reserved_percent: None,
        };
        senders::set_limits(&world.db.pool, &world.mailboxes[mailbox].0, change)
            .await
            .unwrap();
    }
    world.insert(1, BACKLOG, "SCHEDULED").await;
    let file = campaign_file(&world);
    let mut config = world.config.clone();
    config.metrics_listen = None;
    config.rate_limit.caller_clock = false;
    config.worker.scheduler_interval = Duration::from_millis(200);
    config.worker.concurrency = NonZeroU32::new(8).unwrap();

    let forecast = forecast_file(&config, &world.db.pool, file.as_bytes(), None)
        .await
        .unwrap();
    assert!(forecast.bad_lines.is_empty(), "{:?}", forecast.bad_lines);
    let backlogs: Vec<u64> = forecast
        .senders
        .iter()
        .map(|s| s.backlog.unbooked)
        .collect();
    assert_eq!(backlogs, [0, BACKLOG as u64, 0]);
    let report = mail_worker::import::enqueue(&world.db.pool, file.as_bytes(), Default::default())
        .await
        .unwrap();
    assert_eq!(report.inserted, 62);
    let running = campaign_status(&config, &world.db.pool, CAMPAIGN)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((running.total.waiting, running.total.sent), (62, 0));
    assert!(running.forecast_finish.is_some());

    let (handle, run) = daemon::start(config.clone(), daemon::Options::default())
        .await
        .unwrap();
    tokio::pin!(run);
    let all = 62 + BACKLOG as i64;
    let done = wait_until(Duration::from_secs(180), "every message SENT", async || {
        world.count("SENT").await == all
    });
    tokio::select! {
        result = &mut run => panic!("the daemon stopped on its own: {result:?}"),
        () = done => {}
    }
    handle.stop();
    run.await.unwrap();

    let mut worst = 0.0_f64;
    for s in &forecast.senders {
        let actual = last_send(&world, &s.mailbox).unwrap();
        let forecast_s = s.seconds;
        let actual_s = (actual - forecast.now).num_milliseconds() as f64 / 1000.0;
        let error = (actual_s - forecast_s).abs();
        let allowed = (0.05 * forecast_s).max(30.0);
        println!(
            "{}: {} messages at {}/min after {} waiting: forecast {forecast_s:.1} s, actual {actual_s:.1} s, error {error:.1} s ({:.1} %)",
            s.mailbox,
            s.messages.messages,
            s.limits.per_minute,
            s.backlog.unbooked,
            100.0 * error / forecast_s
        );
        assert!(
            error <= allowed,
            "{}: forecast {forecast_s:.1} s, actual {actual_s:.1} s",
            s.mailbox
        );
        worst = worst.max(error);
    }
    println!("worst error {worst:.1} s");
    assert_eq!(world.sim_refused(), 0, "no Graph 429");

    let finished = campaign_status(&config, &world.db.pool, CAMPAIGN)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            finished.total.sent,
            finished.total.waiting,
            finished.total.failed
        ),
        (62, 0, 0)
    );
    assert_eq!(finished.forecast_finish, None, "nothing waits");
}

#[tokio::test]
async fn campaign_forecast_warns_of_the_deadline_the_day_and_the_tenant_budget_and_status_counts() {
    use crate::cli::{mail_worker, text};
    use mail_worker::{clock::SystemClock, service::SendOutcome};
    let world = TestApp::paced()
        .mailboxes(2)
        .per_minute(20)
        .tenant_budget(5)
        .await;
    // mb0's limiter first holds 4 recipients (sent or booked), all external (example.org).
    let handler = world.real_handler(std::sync::Arc::new(SystemClock));
    let mut booked = 0;
    for id in world.insert(0, 4, "SCHEDULED").await {
        match crate::support::claim_and_send(&world.db.pool, &handler, id)
            .await
            .unwrap()
        {
            Some(SendOutcome::Sent) => {}
            Some(SendOutcome::Deferred { .. }) => booked += 1,
            other => panic!("{other:?}"),
        }
    }
    assert!(booked >= 1, "at 20/min some of 4 are booked");
    // The file: 10 external messages for mb0, 3 internal ones for mb1.
    let line = |mailbox: usize, to: String| {
        serde_json::json!({
            "id": Uuid::new_v4(),
            "systemMailbox": world.mailboxes[mailbox].0.as_str(),
            "campaignId": "cli-campaign",
            "to": [{"address": to}],
            "body": {"contentType": "text", "content": "hi"},
        })
        .to_string()
    };
    let mut lines: Vec<String> = (0..10)
        .map(|k| line(0, format!("guest{k}@example.org")))
        .collect();
    lines.extend((0..3).map(|k| line(1, format!("colleague{k}@contoso.example"))));
    let dir = crate::support::temp_dir("mw-forecast-");
    let path = dir.path().join("campaign.jsonl");
    std::fs::write(&path, lines.join("\n")).unwrap();
    let file = path.to_str().unwrap();
    let env = crate::cli::paced_env(&world, "8");
    let by = (Utc::now() + chrono::Duration::hours(1)).to_rfc3339();

    let out = mail_worker(&["campaign", "forecast", file, "--by", &by, "--json"], &env);
    assert_eq!(
        out.status.code(),
        Some(1),
        "past --by: {}",
        text(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mb0 = &report["senders"][0];
    assert_eq!(mb0["mailbox"], "mb0@contoso.example");
    assert_eq!(mb0["messages"]["messages"], 10);
    assert_eq!(mb0["recipients_last_day"], 4, "{mb0}");
    assert_eq!(mb0["backlog"]["unbooked"], 0, "booked rows need no slot");
    assert_eq!(mb0["backlog"]["booked"], booked);
    // 8 a day, 4 held: 4 new fit today, the other 6 wait for tomorrow.
    assert_eq!(mb0["spilled"], 6, "{mb0}");
    let kinds: Vec<&str> = mb0["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["after_deadline", "day_budget"]);
    assert!(mb0["seconds"].as_f64().unwrap() > 86_400.0);
    let mb1 = &report["senders"][1];
    assert_eq!(mb1["warnings"], serde_json::json!([]));
    // 20/min: 3.1 s a slot; mb1 is idle, so its 3rd slot is 6.2 s out.
    assert_eq!(mb1["seconds"], 6.2);
    assert_eq!(
        report["tenant_warnings"],
        serde_json::json!([{"kind": "tenant_budget", "tenant": "contoso.example", "external": 14, "external_recipients_per_day": 5}])
    );

    let table = text(&mail_worker(&["campaign", "forecast", file], &env).stdout);
    assert!(
        table.contains("warning: mb0@contoso.example: 6 messages exceed the mailbox's day budget of 8 recipients and spill into the next day"),
        "{table}"
    );
    assert!(
        table.contains(
            "warning: tenant contoso.example: 14 external recipients exceed its budget of 5 a day"
        ),
        "{table}"
    );

    let out = mail_worker(&["enqueue", file], &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = mail_worker(&["campaign", "status", "cli-campaign", "--json"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["total"]["waiting"], 13);
    assert_eq!(status["total"]["sent"], 0);
    assert_eq!(status["total"]["bounced"], 0);
    assert_eq!(status["senders"][1]["waiting"], 3);
    assert!(status["senders"][1]["forecast_finish"].is_string());
    let table = text(&mail_worker(&["campaign", "status", "cli-campaign"], &env).stdout);
    assert!(table.starts_with("campaign cli-campaign\n"), "{table}");
    assert!(table.contains("all senders"), "{table}");
    assert!(
        table
            .lines()
            .nth(1)
            .unwrap()
            .contains(" sent delivered bounced  waiting "),
        "{table}"
    );
    // The recipients by fate: nothing sent yet, so none pending.
    assert_eq!(status["total"]["recipients_pending"], 0);
    assert!(
        table.contains(
            "recipients\nmailbox                          delivered  failed filtered pending\n"
        ),
        "{table}"
    );
    let out = mail_worker(&["campaign", "status", "no-such-campaign"], &env);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no message has campaign \"no-such-campaign\""));
}

/// A fresh user's findings: stored ids are not forecast again, `high` goes at once within its
/// share, the per-minute column is the usable share, bad lines exit 1 naming them, and `--by`
/// says the format it expects.
#[tokio::test]
async fn campaign_forecast_skips_stored_ids_goes_ahead_with_high_and_refuses_bad_lines() {
    use crate::cli::{mail_worker, text};
    let world = TestApp::paced().mailboxes(2).per_minute(25).await;
    let line = |id: Uuid, mailbox: usize, priority: &str| {
        serde_json::json!({
            "id": id,
            "systemMailbox": world.mailboxes[mailbox].0.as_str(),
            "priority": priority,
            "to": [{"address": "guest@example.org"}],
            "body": {"contentType": "text", "content": "hi"},
        })
        .to_string()
    };
    let ids: Vec<Uuid> = (0..5).map(|_| Uuid::new_v4()).collect();
    let dir = crate::support::temp_dir("mw-forecast-fixes-");
    let env: Vec<(&str, String)> = crate::cli::paced_env(&world, "9000")
        .into_iter()
        .map(|(k, v)| match k {
            "MAIL_RATE_LIMIT_RESERVED_PERCENT" => (k, "20".to_owned()),
            _ => (k, v),
        })
        .collect();
    // Two of mb0's five lines are stored already.
    let first = dir.path().join("first.jsonl");
    std::fs::write(
        &first,
        format!("{}\n{}\n", line(ids[0], 0, "bulk"), line(ids[1], 0, "bulk")),
    )
    .unwrap();
    let out = mail_worker(&["enqueue", first.to_str().unwrap()], &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let mut lines: Vec<String> = ids.iter().map(|id| line(*id, 0, "bulk")).collect();
    lines.extend((0..3).map(|_| line(Uuid::new_v4(), 1, "high")));
    let path = dir.path().join("campaign.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let file = path.to_str().unwrap();

    let out = mail_worker(&["campaign", "forecast", file, "--json"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["already_stored"], 2);
    let (mb0, mb1) = (&report["senders"][0], &report["senders"][1]);
    assert_eq!(mb0["messages"]["messages"], 3, "{mb0}");
    assert_eq!(
        (&mb0["limits"]["per_minute"], &mb0["usable"]["per_minute"]),
        (&serde_json::json!(25), &serde_json::json!(20))
    );
    // The 2 stored wait (unbooked: never claimed), ahead of the 3 new, once each: bulk at 20
    // a minute → 3.1 s a slot, the 5th at 12.4 s. `high` at once, with the whole budget.
    assert_eq!(mb0["backlog"]["unbooked"], 2, "{mb0}");
    assert_eq!(mb0["seconds"], 12.4, "{mb0}");
    assert_eq!(mb1["usable"]["per_minute"], 25);
    assert!(mb1["seconds"].as_f64().unwrap() < 0.1, "{mb1}");
    let table = text(&mail_worker(&["campaign", "forecast", file], &env).stdout);
    assert!(table.contains(" 20 of 25 "), "{table}");
    assert!(
        table.contains("2 messages already stored: `enqueue` skips them, not forecast"),
        "{table}"
    );

    // A bad line: exit 1, named by its number, as `enqueue --dry-run`.
    let mut bad = lines.clone();
    bad.insert(2, "{\"id\": \"not-a-uuid\"}".to_owned());
    std::fs::write(&path, bad.join("\n") + "\n").unwrap();
    let out = mail_worker(&["campaign", "forecast", file], &env);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!("{file}:line 3: not a message")),
        "{stderr}"
    );
    assert!(stderr.contains("1 bad line not forecast"), "{stderr}");

    let out = mail_worker(&["campaign", "forecast", file, "--by", "17:00"], &env);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("expected an RFC 3339 time with its offset, e.g. 2026-12-02T17:00:00Z"),
        "{stderr}"
    );
}
