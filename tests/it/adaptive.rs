//! Adaptive rules with timed recovery (issue 43 point 4, docs/decisions/0048-adaptive-rules.md):
//! the rules file's refusals (`check-config` and `run`), a rule that fires on its threshold and
//! not before, a recovery that steps back up and ends at the whole budget (the limiter's own
//! pacing on real Redis, on a virtual clock), and an operator's `suspend` / `resume` through the
//! binary against a running daemon, also across a Redis that lost the key.

use std::{path::Path, time::Duration};

use chrono::{DateTime, Utc};
use mail_worker::{
    domain::{MailboxAddress, Priority, adaptive::Signal, adaptive::parse_rules},
    rate_limit::{
        Algorithm, Ask, Decision, MailRateLimiter, RateLimiter, RateLimits, ScopeKey, Signalled,
    },
};
use redis::AsyncCommands;
use uuid::Uuid;

use crate::{
    daemon::Logged,
    support::{
        TestApp,
        app::{TENANT, noon},
        redis_conn, temp_dir, wait_until, wait_until_showing,
    },
};

const BINARY: &str = env!("CARGO_BIN_EXE_mail-worker");

/// A 3-in-10-min MailboxConcurrency rule: a quarter of the per-minute budget for 10 min, then
/// doubling every 5 min.
const STORM_RULES: &str = r#"{"rules": [{"name": "storm", "signal": "429:MailboxConcurrency",
    "threshold": 3, "window": "10m", "scope": "mailbox", "action": "shrink", "factor": 0.25,
    "budgets": "perMinute", "duration": "10m", "recoverEvery": "5m"}]}"#;

/// `mail-worker ARGS…` with `app`'s database, Redis and graph-sim.
fn cli(app: &TestApp, args: &[&str]) -> tokio::process::Command {
    let mut command = app.binary_command(Path::new(BINARY), args[0], &[]);
    command.args(&args[1..]);
    command
}

/// Runs `command`, asserts it succeeded (else shows its stderr) and returns its stdout.
async fn succeeds(mut command: tokio::process::Command) -> String {
    let out = command.output().await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `command`, asserts it failed (`what` names it) and returns its exit code and stderr.
async fn fails(mut command: tokio::process::Command, what: &str) -> (Option<i32>, String) {
    let out = command.output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{what} accepted it: {stderr}");
    (out.status.code(), stderr)
}

/// Waits up to 90 s until contoso.example's adaptive key of `scope` (`tenant`, or a mailbox
/// address) holds an action; returns its JSON.
async fn action_set(app: &TestApp, scope: &str, what: &str) -> String {
    let key = format!(
        "{}:{{contoso.example}}:{scope}:adaptive",
        app.config.rate_limit.key_prefix
    );
    let mut redis = redis_conn().await;
    wait_until(Duration::from_secs(90), what, async || {
        redis.exists::<_, bool>(&key).await.unwrap()
    })
    .await;
    redis.get(&key).await.unwrap()
}

#[tokio::test]
async fn a_bad_rules_file_stops_check_config_and_run_naming_the_rule_and_the_field() {
    let app = TestApp::paced().spawn().await;
    let dir = temp_dir("adaptive-rules");
    let path = dir.path().join("rules.json");
    std::fs::write(&path, STORM_RULES.replace("0.25", "1.5")).unwrap();
    let file = path.to_str().unwrap();
    let expected = "rule \"storm\" (#1): field `factor`: must be a number above 0 and below 1";
    for subcommand in ["check-config", "run"] {
        let (code, stderr) = fails(
            app.binary_command(
                Path::new(BINARY),
                subcommand,
                &[("ADAPTIVE_RULES_FILE", file)],
            ),
            subcommand,
        )
        .await;
        assert!(
            stderr.contains("ADAPTIVE_RULES_FILE"),
            "{subcommand}: {stderr}"
        );
        assert!(stderr.contains(expected), "{subcommand}: {stderr}");
        assert_eq!(code, Some(78), "{subcommand}: EX_CONFIG");
    }
    let check = app.binary_command(
        Path::new(BINARY),
        "check-config",
        &[("ADAPTIVE_RULES_FILE", file)],
    );
    assert_eq!(fails(check, "check-config").await.0, Some(78));
    // The good file passes.
    std::fs::write(&path, STORM_RULES).unwrap();
    succeeds(app.binary_command(
        Path::new(BINARY),
        "check-config",
        &[("ADAPTIVE_RULES_FILE", file)],
    ))
    .await;
}

/// `--tenant` takes a known Graph tenant id, or a tenant's name (its Graph tenant id then);
/// anything else is refused, not recorded as a suspension that holds nothing.
#[tokio::test]
async fn suspend_tenant_refuses_an_unknown_tenant_and_takes_a_known_one() {
    let app = TestApp::paced().spawn().await;
    let (_, stderr) = fails(
        cli(
            &app,
            &["suspend", "--tenant", "nonexistent.example", "--for", "1h"],
        ),
        "an unknown tenant",
    )
    .await;
    assert!(
        stderr.contains("--tenant nonexistent.example: no Graph sender has this Graph tenant id"),
        "{stderr}"
    );
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM operator_suspensions")
        .fetch_one(&app.db.pool)
        .await
        .unwrap();
    assert_eq!(rows, 0, "nothing recorded");
    let out = succeeds(cli(
        &app,
        &["suspend", "--tenant", "CONTOSO.example", "--for", "1h"],
    ))
    .await;
    assert!(out.contains("suspended tenant contoso.example"), "{out}");
    // A campaign with no message stored is taken (its lines may come later) with a note; the
    // time is to the second.
    let out = succeeds(cli(
        &app,
        &["suspend", "--campaign", "sprnig", "--for", "1h"],
    ))
    .await;
    let first = out.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("suspended campaign sprnig until ") && first.ends_with(" UTC"),
        "{out}"
    );
    assert_eq!(
        first.len(),
        "suspended campaign sprnig until 2026-12-07 10:00:00 UTC".len()
    );
    assert!(
        out.contains("note: no message of campaign \"sprnig\" is stored yet"),
        "{out}"
    );
    // `campaign status` of it says it is suspended; ids no message can have and a reason over
    // lines are refused, naming the flag.
    let refused = async |args: &[&str]| fails(cli(&app, args), &format!("{args:?}")).await.1;
    let status = refused(&["campaign", "status", "sprnig"]).await;
    assert!(
        status.contains("no message has campaign \"sprnig\" yet; it is suspended until "),
        "{status}"
    );
    let long = "c".repeat(201);
    for (args, says) in [
        (
            vec!["suspend", "--campaign", " ", "--for", "1h"],
            "--campaign",
        ),
        (
            vec!["suspend", "--campaign", long.as_str(), "--for", "1h"],
            "at most 200 characters, as a line's campaignId (this one has 201)",
        ),
        (
            vec![
                "suspend",
                "--campaign",
                "x",
                "--for",
                "1h",
                "--reason",
                "a\nb",
            ],
            "--reason",
        ),
    ] {
        let stderr = refused(&args).await;
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// How long a second message asked at `now` waits for the first's slot: the pacing's spacing,
/// 60 s ÷ the per-minute budget in force.
async fn spacing(limiter: &MailRateLimiter, mailbox: &MailboxAddress, now: DateTime<Utc>) -> u128 {
    let ask = |id| Ask {
        message_id: id,
        mailbox,
        tenant: "contoso.example",
        recipients: 1,
        limits: RateLimits {
            per_minute: 20.try_into().unwrap(),
            recipients_per_day: 9_000.try_into().unwrap(),
            reserved_percent: 0,
        },
        tenant_budget: None,
        priority: Priority::Normal,
    };
    let first = limiter
        .check_and_reserve(&ask(Uuid::new_v4()), now)
        .await
        .unwrap();
    let Decision::Allowed(reservation) = first else {
        panic!("the first message of a free minute goes: {first:?}")
    };
    limiter
        .release(&reservation, mail_worker::rate_limit::RequestEnd::Done)
        .await;
    match limiter
        .check_and_reserve(&ask(Uuid::new_v4()), now)
        .await
        .unwrap()
    {
        Decision::Denied { retry_after, .. } => retry_after.as_millis(),
        other => panic!("the second waits for its slot: {other:?}"),
    }
}

#[tokio::test]
async fn a_rule_fires_on_its_threshold_not_before_and_recovers_step_by_step_to_the_whole_budget() {
    let app = TestApp::paced().spawn().await;
    let mut config = app.config.rate_limit.clone();
    config.algorithm = Algorithm::Paced;
    config.caller_clock = true;
    let limiter = MailRateLimiter::new(&config)
        .unwrap()
        .with_adaptive_rules(parse_rules(STORM_RULES).unwrap());
    let mailbox = MailboxAddress::parse("storm@contoso.example").unwrap();
    let on = Signalled {
        tenant: "contoso.example",
        mailbox: &mailbox,
    };
    let scope = ScopeKey::Mailbox {
        tenant: "contoso.example".into(),
        mailbox: mailbox.clone(),
    };
    let t0 = noon();
    let minutes = |m: i64| t0 + chrono::Duration::minutes(m);
    // 20 a minute: the pacing's spacing at the whole budget; a budget of B spaces 20/B as far.
    let base = spacing(&limiter, &mailbox, t0).await;
    assert!(base >= 3_000, "{base}");
    let per_minute = |spacing: u128| (20 * base + spacing / 2) / spacing;
    // Two signals: below the threshold, nothing in force.
    limiter
        .adaptive_signal(Signal::MailboxConcurrency, on, minutes(1))
        .await;
    limiter
        .adaptive_signal(Signal::MailboxConcurrency, on, minutes(2))
        .await;
    assert_eq!(limiter.adaptive_of(&scope).await.unwrap(), None);
    assert_eq!(
        per_minute(spacing(&limiter, &mailbox, minutes(3)).await),
        20
    );
    // The third within 10 min fires: a quarter, 5 a minute, one every 12 s.
    limiter
        .adaptive_signal(Signal::MailboxConcurrency, on, minutes(4))
        .await;
    let action = limiter.adaptive_of(&scope).await.unwrap().expect("fired");
    assert_eq!((action.rule.as_str(), action.held_permille), ("storm", 250));
    let mut budget = Vec::new();
    for m in [5, 13, 14, 18, 19, 20, 30] {
        let spacing = spacing(&limiter, &mailbox, minutes(m)).await;
        budget.push((m - 4, per_minute(spacing)));
    }
    // Per minute after the signal that fired it: a quarter for 10 min, a half for 5, then 20.
    assert_eq!(
        budget,
        [
            (1, 5),
            (9, 5),
            (10, 10),
            (14, 10),
            (15, 20),
            (16, 20),
            (26, 20)
        ]
    );
}

#[tokio::test]
async fn an_operator_suspension_defers_a_mailbox_survives_a_lost_key_and_resume_sends_it() {
    let app = TestApp::paced().spawn().await;
    let mailbox = app.mailboxes[0].0.to_string();
    let out = succeeds(cli(
        &app,
        &[
            "suspend",
            "--mailbox",
            &mailbox,
            "--for",
            "2h",
            "--reason",
            "checking",
        ],
    ))
    .await;
    assert!(out.contains("suspended mailbox"), "{out}");
    let kept: (String, Option<String>) =
        sqlx::query_as("SELECT key, reason FROM operator_suspensions WHERE scope = 'mailbox'")
            .fetch_one(&app.db.pool)
            .await
            .unwrap();
    assert_eq!(kept, (mailbox.clone(), Some("checking".to_owned())));
    // `mailbox usage` shows it.
    let usage = cli(&app, &["mailbox", "usage", &mailbox])
        .output()
        .await
        .unwrap();
    let usage = String::from_utf8_lossy(&usage.stdout);
    assert!(
        usage.contains("adaptive            mailbox: operator (checking) suspends it"),
        "{usage}"
    );
    // `campaign forecast` starts the mailbox's sends at the suspension's end and says why.
    let lines: String = (0..3)
        .map(|k| {
            serde_json::json!({
                "id": Uuid::new_v4(),
                "systemMailbox": mailbox,
                "to": [{"address": format!("guest{k}@example.org")}],
                "body": {"contentType": "text", "content": "hi"},
            })
            .to_string()
                + "\n"
        })
        .collect();
    let forecast = mail_worker::reports::campaign::forecast_file(
        &app.config,
        &app.db.pool,
        lines.as_bytes(),
        None,
    )
    .await
    .unwrap();
    let sender = &forecast.senders[0];
    let ahead = sender.finish.first.unwrap() - Utc::now();
    assert!(
        ahead > chrono::Duration::minutes(119) && ahead <= chrono::Duration::hours(2),
        "the first send at the suspension's end: {sender:?}"
    );
    let warnings: Vec<String> = sender.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("suspended (operator) until ")
            && warnings[0].ends_with(": nothing goes before then, and the forecast starts then"),
        "{warnings:?}"
    );
    let ids = app.insert(0, 2, "SCHEDULED").await;
    // `mailbox usage`'s `waiting sent by` is after the suspension's end too.
    let usage =
        mail_worker::reports::usage::mailbox_usage(&app.config, &app.db.pool, &app.mailboxes[0].0)
            .await
            .unwrap();
    let ends = usage.backlog_ends.expect("two wait") - Utc::now();
    assert!(
        ends > chrono::Duration::minutes(119) && ends <= chrono::Duration::minutes(121),
        "two slots from the end of 2 h: {ends:?}"
    );
    let _daemon = Logged::spawn(app.daemon_command(&[]));
    wait_until(Duration::from_secs(60), "both deferred as suspended", async || {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM messages WHERE status = 'SCHEDULED' AND wait_reason = 'suspended'",
        )
        .fetch_one(&app.db.pool)
        .await
        .unwrap();
        n == 2
    })
    .await;
    assert_eq!(app.sim.messages().len(), 0, "nothing reached Graph");
    // A Redis that lost the key gets it back from PostgreSQL within the daemon's tick.
    let key = format!(
        "{}:{{contoso.example}}:{mailbox}:adaptive",
        app.config.rate_limit.key_prefix
    );
    let mut redis = redis_conn().await;
    let held: Option<String> = redis.get(&key).await.unwrap();
    assert!(
        held.is_some_and(|h| h.contains("\"rule\":\"operator\"")),
        "{key}"
    );
    let _: () = redis.del(&key).await.unwrap();
    wait_until(
        Duration::from_secs(30),
        "the suspension written back",
        async || redis.exists::<_, bool>(&key).await.unwrap(),
    )
    .await;
    succeeds(cli(&app, &["resume", "--mailbox", &mailbox])).await;
    wait_until(
        Duration::from_secs(60),
        "both SENT after resume",
        async || app.count("SENT").await == 2,
    )
    .await;
    assert_eq!(app.sim.messages().len(), ids.len());
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM operator_suspensions")
        .fetch_one(&app.db.pool)
        .await
        .unwrap();
    assert_eq!(left, 0);
}

#[tokio::test]
async fn through_the_daemon_a_new_tenants_5_7_705_suspends_its_external_mail_within_one_message() {
    // graph-sim trusts the new tenant with 2 external recipients a day, then bounces 5.7.705.
    let app = TestApp::paced()
        .tenant_budget(1_000)
        .sim_new_tenant((2, "5.7.705"))
        .spawn()
        .await;
    let mailbox = app.mailboxes[0].0.to_string();
    let ids = app.insert(0, 8, "SCHEDULED").await;
    let _daemon = Logged::spawn(app.daemon_command(&[
        ("GRAPH_READ_BOUNCES", "on"),
        ("GRAPH_BOUNCE_INTERVAL", "1s"),
    ]));
    let held = action_set(&app, "tenant", "the tenant suspended").await;
    assert!(
        held.contains("\"rule\":\"tenant-reputation-705\""),
        "{held}"
    );
    // A window in which no more external mail may reach Graph.
    let seen = |app: &TestApp| {
        let stats = app.sim.mailbox_stats(&mailbox).unwrap();
        (stats.accepted, stats.refused.tenant_reputation)
    };
    let at_suspension = seen(&app);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (accepted, bounced) = seen(&app);
    assert_eq!((accepted, bounced), at_suspension, "nothing more went");
    println!(
        "new tenant, 5.7.705 after 2 trusted: {accepted} accepted, {bounced} bounced (the first bounce and {} further), {} of {} left waiting",
        bounced.saturating_sub(1),
        ids.len() as u64 - accepted - bounced,
        ids.len()
    );
    assert_eq!(accepted, 2);
    assert!(bounced <= 2, "within 1 further message: {bounced} bounced");
    // The rest wait (deferred, never failed).
    assert_eq!(
        app.count("SCHEDULED").await as u64,
        ids.len() as u64 - accepted - bounced
    );
    assert_eq!(app.count("ERROR").await, 0);
}

#[tokio::test]
async fn through_the_daemon_a_mailbox_concurrency_storm_fires_the_built_in_rule_and_a_suspended_campaign_waits()
 {
    let app = TestApp::paced().sim_ignoring_retry_after().spawn().await;
    let mailbox = app.mailboxes[0].0.clone();
    // The campaign's two messages, suspended before the daemon starts.
    let campaign = app.insert(0, 2, "SCHEDULED").await;
    for id in &campaign {
        app.execute(
            "UPDATE messages SET campaign_id = 'spring' WHERE id = $1",
            *id,
        )
        .await;
    }
    let out = succeeds(cli(
        &app,
        &["suspend", "--campaign", "spring", "--for", "1h"],
    ))
    .await;
    assert!(!out.contains("note:"), "its messages are stored: {out}");
    // Graph answers the next 3 sends 429 MailboxConcurrency.
    app.sim
        .mailbox_concurrency_storm(graph_sim::Target::mailbox(mailbox.as_str()), 3)
        .unwrap();
    // Four more messages whose sends meet the storm.
    app.insert(0, 4, "SCHEDULED").await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let _daemon = Logged::spawn(app.daemon_command(&[("METRICS_LISTEN", listen.as_str())]));
    let held = action_set(&app, mailbox.as_str(), "the storm's rule fired").await;
    assert!(held.contains("\"rule\":\"mailbox-concurrency\""), "{held}");
    assert!(held.contains("\"heldPermille\":250"), "{held}");
    // The metrics name the mailbox and its tenant: which sender is held back, not only which rule.
    let labels = format!(
        "{{rule=\"mailbox-concurrency\",scope=\"mailbox\",tenant=\"{TENANT}\",mailbox=\"{mailbox}\"}}"
    );
    let text = std::sync::Mutex::new(String::new());
    wait_until_showing(
        Duration::from_secs(30),
        "the adaptive metrics with the mailbox's labels",
        async || {
            let body = match reqwest::get(format!("http://{listen}/metrics")).await {
                Ok(answer) => answer.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            let shown = body.contains(&format!("mail_worker_adaptive_actions_total{labels} 1\n"))
                && body.contains(&format!("mail_worker_adaptive_factor{labels} 0.25\n"));
            *text.lock().unwrap() = body;
            shown
        },
        || {
            text.lock()
                .unwrap()
                .lines()
                .filter(|l| l.starts_with("mail_worker_adaptive"))
                .collect::<Vec<_>>()
                .join("\n")
        },
    )
    .await;
    // The suspended campaign's messages wait, never fail, and made no Graph request.
    wait_until(
        Duration::from_secs(60),
        "the campaign deferred as suspended",
        async || {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM messages WHERE campaign_id = 'spring' \
             AND status = 'SCHEDULED' AND wait_reason = 'suspended'",
            )
            .fetch_one(&app.db.pool)
            .await
            .unwrap();
            n == 2
        },
    )
    .await;
    // `campaign forecast` of more lines of the campaign starts them at its suspension's end.
    let dir = temp_dir("mw-suspended-forecast-");
    let file = dir.path().join("more.jsonl");
    let more = serde_json::json!({
        "id": Uuid::new_v4(),
        "systemMailbox": mailbox.as_str(),
        "campaignId": "spring",
        "to": [{"address": "guest@example.org"}],
        "body": {"contentType": "text", "content": "hi"},
    });
    std::fs::write(&file, more.to_string()).unwrap();
    let forecast = mail_worker::reports::campaign::forecast_file(
        &app.config,
        &app.db.pool,
        more.to_string().as_bytes(),
        None,
    )
    .await
    .unwrap();
    let finish = forecast.senders[0].finish.finish - Utc::now();
    assert!(
        finish > chrono::Duration::minutes(58) && finish <= chrono::Duration::minutes(61),
        "{:?}",
        forecast.senders[0]
    );
    assert_eq!(forecast.campaigns_suspended.len(), 1);
    let table = succeeds(cli(&app, &["campaign", "forecast", file.to_str().unwrap()])).await;
    assert!(
        table.contains("warning: campaign spring is suspended until ")
            && table.contains(" UTC: its lines are forecast from then\n"),
        "{table}"
    );
    // `campaign status` says so, and its forecast counts from the suspension's end; the
    // mailbox suspended as long too holds it once, not twice (a trial found the two added).
    succeeds(cli(
        &app,
        &["suspend", "--mailbox", mailbox.as_str(), "--for", "1h"],
    ))
    .await;
    let status: serde_json::Value = serde_json::from_str(
        &succeeds(cli(&app, &["campaign", "status", "spring", "--json"])).await,
    )
    .unwrap();
    let until: DateTime<Utc> = serde_json::from_value(status["suspended"]["until"].clone())
        .unwrap_or_else(|e| panic!("{e}: {status}"));
    let ahead = until - Utc::now();
    assert!(
        ahead > chrono::Duration::minutes(58) && ahead <= chrono::Duration::hours(1),
        "{status}"
    );
    let finish: DateTime<Utc> = serde_json::from_value(status["forecast_finish"].clone())
        .unwrap_or_else(|e| panic!("{e}: {status}"));
    assert!(
        finish >= until && finish - until < chrono::Duration::minutes(5),
        "{status}"
    );
    let table = succeeds(cli(&app, &["campaign", "status", "spring"])).await;
    assert!(
        table.contains(&format!(
            "suspended until {} UTC: nothing of it goes until then (`resume --campaign spring`)",
            until.format("%Y-%m-%d %H:%M:%S")
        )),
        "{table}"
    );
    let (ui, login) = crate::admin::logged_in_ui(&app).await;
    let page = ui.page("/campaigns/spring", &login).await;
    assert!(
        page.contains(&format!(
            "<p id=\"suspended\" class=\"error-text\">Suspended until {} UTC: nothing of it goes",
            until.format("%Y-%m-%d %H:%M:%S")
        )),
        "{page}"
    );
    let sent_subjects: Vec<String> = app
        .sim
        .messages()
        .into_iter()
        .filter_map(|m| m.subject)
        .collect();
    for id in &campaign {
        assert!(
            !sent_subjects.contains(&id.to_string()),
            "{id} reached Graph"
        );
    }
    assert_eq!(app.count("ERROR").await, 0);
}
