//! The campaign forecast against what happens: a 3-mailbox campaign (different limits, one
//! mailbox with a backlog already waiting) is forecast with `campaign forecast`'s code, enqueued
//! and sent by a real daemon (`paced`, real Redis, PostgreSQL and graph-sim); each mailbox's
//! last send must land within max(5 %, 30 s) of its forecast (the goal), and `campaign
//! status` must count the campaign while it runs and when it is done.

use std::{num::NonZeroU32, time::Duration};

use chrono::{DateTime, Utc};
use mail_worker::{
    admin::campaign::{campaign_status, forecast_file},
    daemon,
    rate_limit::Algorithm,
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
    let world = TestApp::builder()
        .mailboxes(3)
        .algorithm(Algorithm::Paced)
        .sim_per_minute(1_000)
        .sim_concurrency(64)
        .await;
    for (mailbox, per_minute, _) in SHARES {
        let change = LimitsChange::Set {
            per_minute: NonZeroU32::new(per_minute),
            recipients_per_day: None,
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
    let report = mail_worker::import::enqueue(&world.db.pool, file.as_bytes())
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
