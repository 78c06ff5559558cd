//! Warm-up (issue 43 point 3, docs/decisions/0047-warm-up.md): the senders file's `warmUp`
//! and its refusals; the ramp counted in sending days on a virtual clock, held by a dirty day,
//! stepped down by a reputation NDR; the limiter booking against the step's budget through
//! `mail-worker run` against graph-sim.

use std::{num::NonZeroU32, time::Duration};

use chrono::{DateTime, NaiveDate, TimeZone, Utc};
use mail_worker::{
    domain::{Sender, WarmUp, WarmUpGate},
    import,
    store::{SenderRef, events::Outbox, senders, warmups},
};
use uuid::Uuid;

use crate::support::{TestApp, TestDb, wait_until};

fn file(warm_up: &str) -> String {
    format!(
        r#"{{"systemMailboxes":[{{"address":"events@contoso.example","graphTenantId":"contoso.example",
  "clientId":"11111111-1111-4111-8111-111111111111","clientSecret":"env:S"{warm_up}}}],
  "tenants":[{{"name":"adatum","provider":"sendgrid","sender":"news@adatum.example",
  "sendgridApiKey":"env:K"{warm_up}}}]}}"#
    )
}

#[tokio::test]
async fn the_senders_file_refuses_a_bad_warm_up_naming_the_entry_and_stores_a_good_one() {
    let refused = |warm_up: &str| {
        let text = file(&format!(r#","warmUp":{warm_up}"#));
        import::senders::check(&text).unwrap_err().to_string()
    };
    let err = refused(r#"{"startPerDay":20000,"growth":1.5,"maxPerDay":10000}"#);
    assert!(
        err.contains(
            "systemMailboxes[0].warmUp.startPerDay: 20000 is above maxPerDay 10000; the ramp starts at or below the budget it ends at"
        ),
        "{err}"
    );
    // A SendGrid tenant: the limiter does not book it, a ramp would be a lie.
    assert!(
        err.contains("tenants[0].warmUp: is only for provider microsoft-graph"),
        "{err}"
    );
    let err = refused(r#"{"startPerDay":0,"growth":0.9,"maxPerDay":10000}"#);
    assert!(
        err.contains("systemMailboxes[0].warmUp.startPerDay: must be a positive whole number"),
        "{err}"
    );
    assert!(
        err.contains("systemMailboxes[0].warmUp.growth: must be a number of at least 1"),
        "{err}"
    );
    let err = refused(r#"{"startPerDay":500,"growth":1.5,"maxPerDay":0,"step":3}"#);
    assert!(
        err.contains("systemMailboxes[0].warmUp.maxPerDay: must be a positive whole number"),
        "{err}"
    );
    assert!(
        err.contains("systemMailboxes[0].warmUp.step: unknown field"),
        "{err}"
    );
    let err = refused(r#"{"startPerDay":500,"maxPerDay":1000}"#);
    assert!(
        err.contains("systemMailboxes[0].warmUp.growth: must be a number of at least 1 (1.5: half as much again after each clean sending day), got nothing"),
        "{err}"
    );
    let err = refused("500");
    assert!(
        err.contains("systemMailboxes[0].warmUp: must be an object"),
        "{err}"
    );

    // A good one is stored at step 0 and caps the limits in force; removed, it is gone.
    let db = TestDb::new().await;
    let mailbox = |warm_up: &str| {
        format!(
            r#"{{"systemMailboxes":[{{"address":"events@contoso.example","graphTenantId":"contoso.example",
            "clientId":"11111111-1111-4111-8111-111111111111","clientSecret":"env:S"{warm_up}}}]}}"#
        )
    };
    let good = mailbox(r#","warmUp":{"startPerDay":500,"growth":1.5,"maxPerDay":10000}"#);
    import::senders::import(&db.pool, &import::senders::parse(&good).unwrap())
        .await
        .unwrap();
    let address = mail_worker::domain::MailboxAddress::parse("events@contoso.example").unwrap();
    let Some(Sender::SystemMailbox(m)) = senders::by_address(&db.pool, &address).await.unwrap()
    else {
        panic!("no mailbox");
    };
    let step = m.warm_up.expect("a ramp");
    assert_eq!((step.step, step.day_budget().get()), (0, 500));
    let defaults = mail_worker::config::Config::from_lookup(|_| None)
        .unwrap()
        .rate_limit
        .defaults;
    assert_eq!(
        defaults
            .for_sender(&Sender::SystemMailbox(m.clone()))
            .recipients_per_day
            .get(),
        500,
        "min(9000, 500)"
    );
    let plain = mailbox("");
    import::senders::import(&db.pool, &import::senders::parse(&plain).unwrap())
        .await
        .unwrap();
    assert_eq!(db.rows_in("sender_warmups").await, 0);
}

/// Gives the test app's mailbox 0 the ramp `(startPerDay, growth, maxPerDay)`.
async fn warm_up(world: &TestApp, (start, growth, max): (u32, f64, u32)) {
    let ramp = WarmUp {
        start_per_day: NonZeroU32::new(start).unwrap(),
        growth,
        max_per_day: NonZeroU32::new(max).unwrap(),
    };
    let mailbox = SenderRef::SystemMailbox(world.mailboxes[0].1);
    warmups::configure(&world.db.pool, mailbox, Some(ramp))
        .await
        .unwrap();
}

fn day(d: u32) -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 12, d).unwrap()
}

fn at(d: u32, h: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, d, h, 0, 0).unwrap()
}

/// `n` messages of the test app's mailbox 0 sent at `sent_at`, the first `bounced` of them
/// `BOUNCED` with `code`.
async fn sent(world: &TestApp, n: usize, sent_at: DateTime<Utc>, bounced: usize, code: &str) {
    let ids = world.insert(0, n, "SENT").await;
    sqlx::query("UPDATE messages SET sent_at = $2 WHERE id = ANY($1)")
        .bind(&ids)
        .bind(sent_at)
        .execute(&world.db.pool)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE messages SET status = 'BOUNCED', bounce_code = $2, bounced_at = $3 \
         WHERE id = ANY($1)",
    )
    .bind(&ids[..bounced])
    .bind(code)
    .bind(sent_at + chrono::Duration::minutes(5))
    .execute(&world.db.pool)
    .await
    .unwrap();
}

#[tokio::test]
async fn a_ramp_on_a_virtual_clock_steps_on_clean_sending_days_holds_on_a_dirty_one_and_steps_down_after_a_reputation_ndr()
 {
    let world = TestApp::paced().spawn().await;
    let pool = &world.db.pool;
    warm_up(&world, (100, 2.0, 1_000)).await;
    let gate = WarmUpGate::default();
    // (evaluated at, step, day budget, sending days, verdict, held reason)
    let state = async || {
        let s = warmups::all(pool).await.unwrap().pop().unwrap();
        (
            s.step,
            s.day_budget,
            s.sending_days,
            s.verdict,
            s.held_reason,
        )
    };
    let evaluate = async |now: DateTime<Utc>| {
        warmups::evaluate_due(pool, Some(now), gate)
            .await
            .unwrap()
            .into_iter()
            .map(|e| (e.day, e.step_before, e.state.step, e.verdict.as_str()))
            .collect::<Vec<_>>()
    };

    // Day 1: 50 sent, 2 hard bounces (4% ≤ 5%): clean. Day 2 steps up to 200.
    sent(&world, 50, at(1, 10), 2, "5.1.1").await;
    assert_eq!(evaluate(at(2, 0)).await, [(day(1), 0, 1, "stepped")]);
    assert_eq!(state().await, (1, 200, 1, Some("stepped".into()), None));
    // Again the same day: nothing (idempotent; another replica's call finds it done).
    assert_eq!(evaluate(at(2, 9)).await, []);

    // Day 2: no sends. Day 3's evaluation counts nothing: still step 1, 1 sending day.
    assert_eq!(evaluate(at(3, 0)).await, []);
    let (step, _, days, _, _) = state().await;
    assert_eq!((step, days), (1, 1));

    // Day 3: 40 sent, 3 hard bounces (7.5% > 5%): day 4 holds at step 1.
    sent(
        &world,
        40,
        at(3, 12),
        3,
        "550 5.1.1 RESOLVER.ADR.RecipNotFound",
    )
    .await;
    assert_eq!(evaluate(at(4, 0)).await, [(day(3), 1, 1, "held")]);
    assert_eq!(
        state().await,
        (
            1,
            200,
            2,
            Some("held".into()),
            Some("hard bounces 7.5% > 5% (3 of 40)".into())
        )
    );

    // Day 4: clean: day 5 at step 2 (400). Day 5: clean: step 3 (800).
    sent(&world, 30, at(4, 8), 0, "").await;
    assert_eq!(evaluate(at(5, 0)).await, [(day(4), 1, 2, "stepped")]);
    sent(&world, 30, at(5, 8), 0, "").await;
    assert_eq!(evaluate(at(6, 0)).await, [(day(5), 2, 3, "stepped")]);
    assert_eq!(state().await.1, 800);

    // Day 6: one 5.7.708 among clean sends: day 7 one step down (400).
    sent(
        &world,
        30,
        at(6, 8),
        1,
        "550 5.7.708 Access denied, traffic not accepted",
    )
    .await;
    assert_eq!(evaluate(at(7, 0)).await, [(day(6), 3, 2, "steppedDown")]);
    assert_eq!(
        state().await,
        (
            2,
            400,
            5,
            Some("steppedDown".into()),
            Some("reputation NDR 5.7.708".into())
        )
    );
    // The limits in force follow the step: min(9000, 400).
    let Some(sender) = senders::by_address(pool, &world.mailboxes[0].0)
        .await
        .unwrap()
    else {
        panic!("no sender");
    };
    assert_eq!(
        world
            .config
            .rate_limit
            .defaults
            .for_sender(&sender)
            .recipients_per_day
            .get(),
        400
    );
    // `mailbox usage` shows the step, the sending days and why it moved.
    let usage =
        mail_worker::reports::usage::mailbox_usage(&world.config, pool, &world.mailboxes[0].0)
            .await
            .unwrap();
    assert_eq!(
        (
            usage.limits.recipients_per_day,
            usage.limits.recipients_per_day_source
        ),
        (400, "warm-up")
    );
    // `--json`: snake_case as the rest of the report.
    let json = serde_json::to_value(&usage).unwrap();
    assert_eq!(
        (
            &json["warm_up"]["start_per_day"],
            &json["warm_up"]["sending_days"],
            &json["warm_up"]["day_budget"]
        ),
        (
            &serde_json::json!(100),
            &serde_json::json!(5),
            &serde_json::json!(400)
        ),
        "{json}"
    );
    let shown = usage.warm_up.expect("its warm-up").describe();
    assert_eq!(
        shown,
        "step 2 of 4, 400 recipients a day (100 × 2^step up to 1000), 5 sending days; \
         last (2026-12-06): steppedDown: reputation NDR 5.7.708"
    );
    // So does the admin UI's mailbox page.
    let (ui, login) = crate::admin::logged_in_ui(&world).await;
    let page = ui
        .page(
            &format!("/mailboxes/{}", world.mailboxes[0].0.as_str()),
            &login,
        )
        .await;
    assert!(
        page.contains(&format!("<p id=\"warm-up\">Warm-up: {shown}.</p>")),
        "{page}"
    );
}

/// One line of `mb0@contoso.example` to `guest{i}@example.org`.
fn lines(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                r#"{{"id":"{}","systemMailbox":"mb0@contoso.example","to":[{{"address":"guest{i}@example.org"}}],"subject":"s","body":{{"contentType":"text","content":"x"}}}}"#,
                Uuid::new_v4()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn mail_worker_run_evaluates_the_ramp_and_the_limiter_books_against_its_budget() {
    let world = TestApp::paced().per_minute(60).spawn().await;
    let pool = &world.db.pool;
    // 2 a day, growth 1.5: step 1 is 3 a day.
    warm_up(&world, (2, 1.5, 100)).await;
    // An earlier UTC day (PostgreSQL's clock), out of the rolling 24 h, was a clean sending day.
    let yesterday = world.db_now().await - chrono::Duration::hours(25);
    sent(&world, 1, yesterday, 0, "").await;

    let listen = format!("127.0.0.1:{}", crate::support::private_redis::free_port());
    let mut daemon = world
        .daemon_command(&[
            ("MAIL_RATE_LIMIT_PER_MINUTE", "60"),
            ("MAIL_RATE_LIMIT_RESERVED_PERCENT", "0"),
            ("METRICS_LISTEN", &listen),
        ])
        .spawn()
        .unwrap();
    // Its first warm-up round counts yesterday: step 1, 3 recipients a day.
    wait_until(Duration::from_secs(60), "the ramp at step 1", async || {
        warmups::all(pool).await.unwrap()[0].step == 1
    })
    .await;
    let s = warmups::all(pool).await.unwrap().pop().unwrap();
    assert_eq!((s.day_budget, s.sending_days), (3, 1));
    // The gauge shows the step's budget.
    let url = format!("http://{listen}/metrics");
    wait_until(
        Duration::from_secs(60),
        "the gauge at 3",
        async || match reqwest::get(&url).await {
            Ok(answer) => answer
                .text()
                .await
                .unwrap_or_default()
                .contains("mail_worker_warmup_day_budget{mailbox=\"mb0@contoso.example\"} 3"),
            Err(_) => false,
        },
    )
    .await;

    // 5 messages of one recipient: 3 go today, 2 are booked for when the day frees.
    let enqueued = import::enqueue(pool, lines(5), Outbox::Off).await.unwrap();
    assert_eq!(enqueued.inserted, 5, "{:?}", enqueued.bad);
    wait_until(Duration::from_secs(60), "3 SENT, 2 deferred", async || {
        world.count("SENT").await == 4 && deferred(&world).await == 2
    })
    .await;
    daemon.kill().await.unwrap();
    assert_eq!(
        world.sim.messages().len(),
        3,
        "graph-sim received the ramp's 3"
    );
    let now = world.db_now().await;
    let waits: Vec<DateTime<Utc>> = sqlx::query_scalar(
        "SELECT scheduled_on FROM messages WHERE status = 'SCHEDULED' ORDER BY scheduled_on",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(waits.len(), 2);
    for w in waits {
        assert!(
            w > now + chrono::Duration::hours(20),
            "{w} is not after the rolling day frees (now {now})"
        );
    }
}

/// Messages `SCHEDULED` after a deferral.
async fn deferred(world: &TestApp) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM messages WHERE status = 'SCHEDULED' AND deferrals > 0")
        .fetch_one(&world.db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_filtered_share_over_the_threshold_holds_and_a_tenant_reputation_pause_steps_down() {
    let world = TestApp::paced().spawn().await;
    let pool = &world.db.pool;
    warm_up(&world, (10, 2.0, 1_000)).await;
    let evaluate = async |now: DateTime<Utc>| {
        warmups::evaluate_due(pool, Some(now), WarmUpGate::default())
            .await
            .unwrap()
            .into_iter()
            .map(|e| (e.state.step, e.verdict.as_str(), e.state.held_reason))
            .collect::<Vec<_>>()
    };
    sent(&world, 10, at(1, 9), 0, "").await;
    assert_eq!(evaluate(at(2, 0)).await, [(1, "stepped", None)]);

    // Day 2: the delivery trace found 2 of 10 recipients filtered (20 % > 10 %): held.
    sent(&world, 10, at(2, 9), 0, "").await;
    sqlx::query(
        "INSERT INTO recipient_outcomes (message_id, recipient, trace_status, outcome, at) \
         SELECT id, 'guest@example.org', 'x', \
             CASE WHEN row_number() OVER (ORDER BY id) <= 2 THEN 'filtered' ELSE 'delivered' END, \
             sent_at FROM messages WHERE sent_at >= $1",
    )
    .bind(at(2, 0))
    .execute(pool)
    .await
    .unwrap();
    assert_eq!(
        evaluate(at(3, 0)).await,
        [(
            1,
            "held",
            Some("filtered 20.0% > 10% (2 of 10 traced)".into())
        )]
    );

    // Day 3: clean sends, but the bounce reader paused the Graph tenant on a 5.7.705 (its
    // limit_pauses row; the message itself may be of another mailbox): one step down.
    sent(&world, 10, at(3, 9), 0, "").await;
    sqlx::query(
        "INSERT INTO limit_pauses (scope, key, code, whole_day, paused_at, paused_until, reason) \
         VALUES ('tenant', 'contoso.example', '5.7.705', true, $1, $1 + interval '1 day', 'x')",
    )
    .bind(at(3, 11))
    .execute(pool)
    .await
    .unwrap();
    assert_eq!(
        evaluate(at(4, 0)).await,
        [(0, "steppedDown", Some("reputation NDR 5.7.705".into()))]
    );
}

#[tokio::test]
async fn a_pool_skips_a_member_whose_warm_up_day_is_spent() {
    // Two members at 60 a minute; mb0 warms up at 2 a day. One worker: each placement sees the
    // slots the previous send left.
    let world = TestApp::paced().mailboxes(2).per_minute(60).spawn().await;
    let pool = &world.db.pool;
    let members: Vec<_> = world.mailboxes.iter().map(|(a, _)| a.clone()).collect();
    mail_worker::store::pools::upsert(pool, "invites", &members, None)
        .await
        .unwrap();
    warm_up(&world, (2, 2.0, 100)).await;
    let text = (0..10)
        .map(|i| {
            format!(
                r#"{{"id":"{}","senderPool":"invites","to":[{{"address":"guest{i}@example.org"}}],"subject":"s","body":{{"contentType":"text","content":"x"}}}}"#,
                Uuid::new_v4()
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    let enqueued = import::enqueue(pool, text, Outbox::Off).await.unwrap();
    assert_eq!(enqueued.inserted, 10, "{:?}", enqueued.bad);
    let mut daemon = world
        .daemon_command(&[
            ("MAIL_RATE_LIMIT_PER_MINUTE", "60"),
            ("MAIL_RATE_LIMIT_RESERVED_PERCENT", "0"),
            ("WORKER_CONCURRENCY", "1"),
        ])
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(120), "10 SENT", async || {
        world.count("SENT").await == 10
    })
    .await;
    daemon.kill().await.unwrap();
    let received = world.sim.messages();
    let from = |m: &mail_worker::domain::MailboxAddress| {
        received.iter().filter(|r| r.mailbox == m.as_str()).count()
    };
    assert_eq!(
        (from(&members[0]), from(&members[1]), received.len()),
        (2, 8, 10),
        "mb0 takes its warm-up day's 2, mb1 the rest"
    );
}
