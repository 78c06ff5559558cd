//! The `mail-worker` binary's commands, run as a user would.

use std::{
    ffi::OsStr,
    process::{Command, Output},
};

use crate::support::TestDb;

pub(crate) fn mail_worker(args: &[&str], env: &[(&str, impl AsRef<OsStr>)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mail-worker"))
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

/// The environment of a command run against `world`'s database and limiter (paced), with a
/// day budget of `recipients_per_day`.
pub(crate) fn paced_env(
    world: &crate::support::TestApp,
    recipients_per_day: &str,
) -> [(&'static str, String); 5] {
    [
        ("DATABASE_URL", world.db.url.to_string()),
        (
            "MAIL_RATE_LIMIT_KEY_PREFIX",
            world.config.rate_limit.key_prefix.clone(),
        ),
        ("MAIL_RATE_LIMIT_ALGORITHM", "paced".to_owned()),
        (
            "MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY",
            recipients_per_day.to_owned(),
        ),
        // As the test app's limiter: no share reserved for `high`.
        ("MAIL_RATE_LIMIT_RESERVED_PERCENT", "0".to_owned()),
    ]
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The stderr of `out`, a run that must have exited with `code` (`case` names it if not).
pub(crate) fn stderr_of_exit(out: &Output, code: i32, case: &str) -> String {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{case}: {stderr}");
    stderr
}

#[test]
fn check_config_takes_durations_with_units_and_warns_of_a_deprecated_ms_name() {
    let out = mail_worker(
        &["check-config"],
        &[("SEND_LEASE", "20m"), ("HTTP_TIMEOUT_MS", "45000")],
    );
    let stdout = text(&out.stdout);
    let stderr = stderr_of_exit(&out, 0, "a unit and an alias");
    assert!(stdout.contains("SEND_LEASE=20m\n"), "{stdout}");
    assert!(stdout.contains("HTTP_TIMEOUT=45s\n"), "{stdout}");
    assert!(
        stderr.contains("warning: HTTP_TIMEOUT_MS is deprecated: set HTTP_TIMEOUT instead"),
        "{stderr}"
    );
    let both = mail_worker(
        &["check-config"],
        &[("SEND_LEASE", "20m"), ("SEND_LEASE_MS", "1200000")],
    );
    let stderr = stderr_of_exit(&both, 78, "both names");
    assert!(
        stderr.contains("SEND_LEASE: is set, and so is SEND_LEASE_MS"),
        "{stderr}"
    );
}

#[test]
fn check_config_names_a_misspelt_setting_and_the_one_it_is_near() {
    let out = mail_worker(
        &["check-config"],
        &[
            ("MAIL_RATE_LIMIT_PERMINUTE", "5"),
            ("INGEST_TOKEN_CRM", "0123456789abcdef0123"),
            ("MAIL_WORKER_INGEST_SERVICE_HOST", "10.0.0.1"),
        ],
    );
    let stdout = text(&out.stdout);
    let stderr = stderr_of_exit(&out, 0, "a misspelt setting");
    // The default applies (the misspelt variable is not read), and the warning says so.
    assert!(
        stdout.contains("MAIL_RATE_LIMIT_PER_MINUTE=25\n"),
        "{stdout}"
    );
    assert!(
        stderr.contains(
            "warning: MAIL_RATE_LIMIT_PERMINUTE is not a setting and is ignored; did you mean MAIL_RATE_LIMIT_PER_MINUTE?"
        ),
        "{stderr}"
    );
    // Near INGEST_TOKENS but not referenced by it here: warned too; Kubernetes' service links
    // are never warned.
    assert!(
        stderr.contains("warning: INGEST_TOKEN_CRM is not a setting"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("MAIL_WORKER_INGEST_SERVICE_HOST"),
        "{stderr}"
    );
}

#[test]
fn check_config_prints_the_effective_config_without_secrets() {
    let out = mail_worker(
        &["check-config"],
        &[
            ("DATABASE_URL", "postgres://app:hunter2@db.internal/mail"),
            ("MAIL_RATE_LIMIT_REDIS_URL", "redis://:s3cret@limiter:6379"),
            ("MAIL_RATE_LIMIT_PER_MINUTE", "20"),
            ("ADMIN_TOKEN", "a-literal-admin-token-hunter3"),
            (
                "INGEST_TOKENS",
                "crm=hunter2-hunter2-hunter2,billing=env:BILLING_TOKEN",
            ),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("DATABASE_URL=postgres://app:***@db.internal/mail"),
        "{stdout}"
    );
    assert!(stdout.contains("MAIL_RATE_LIMIT_PER_MINUTE=20"), "{stdout}");
    // One line per declared setting (src/config/settings/), in the declarations' order: 60
    // today (59 before ADR 0040, which prints PROVIDER_CLEARTEXT_HOSTS too). Compared with the
    // declarations, so a new setting needs no edit here.
    let printed: Vec<&str> = stdout
        .lines()
        .map(|line| line.split_once('=').map_or(line, |(name, _)| name))
        .collect();
    let declared: Vec<&str> = mail_worker::config::settings::all()
        .map(|s| s.name)
        .collect();
    assert_eq!(printed, declared, "{stdout}");
    assert!(printed.len() >= 60, "{stdout}");
    assert!(
        stdout.contains("PROVIDER_CLEARTEXT_HOSTS=(unset)\n"),
        "{stdout}"
    );
    assert!(stdout.contains("GRAPH_TRACE_DELIVERY=off\n"), "{stdout}");
    assert!(stdout.contains("SENDERS_FILE=(unset)\n"), "{stdout}");
    assert!(
        stdout.contains("INGEST_TOKENS=crm=<literal>,billing=env:BILLING_TOKEN\n"),
        "{stdout}"
    );
    assert!(stdout.contains("ADMIN_TOKEN=<literal>\n"), "{stdout}");
    assert!(stdout.contains("ADMIN_LISTEN=127.0.0.1:9185\n"), "{stdout}");
    assert!(stdout.contains("MAIL_RETRY_FOR=1d\n"), "{stdout}");
    assert!(stdout.contains("MAIL_RETENTION=30d\n"), "{stdout}");
    assert!(stdout.contains("GRAPH_SEND_MODE=draft"), "{stdout}");
    assert!(
        !stdout.contains("hunter2") && !stdout.contains("s3cret") && !stdout.contains("hunter3"),
        "{stdout}"
    );
}

#[test]
fn a_bad_variable_stops_start_up_naming_it() {
    for (var, value) in [
        ("MAIL_RATE_LIMIT_PER_MINUTE", "abc"),
        ("WORKER_CONCURRENCY", "0"),
    ] {
        let out = mail_worker(&["check-config"], &[(var, value)]);
        let stderr = stderr_of_exit(&out, 78, &format!("{var}={value}"));
        assert!(stderr.contains(var) && stderr.contains(value), "{stderr}");
    }
    // Several at once: each named, one line each, in the order they are read.
    let out = mail_worker(
        &["check-config"],
        &[
            ("MAIL_RATE_LIMIT_PER_MINUTE", "abc"),
            ("WORKER_CONCURRENCY", "0"),
            ("LOG_FORMAT", "xml"),
        ],
    );
    let stderr = stderr_of_exit(&out, 78, "");
    let named: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("mail-worker: bad configuration: "))
        .filter_map(|l| l.split_once(':').map(|(var, _)| var))
        .collect();
    assert_eq!(named.len(), 3, "{stderr}");
    for var in [
        "MAIL_RATE_LIMIT_PER_MINUTE",
        "WORKER_CONCURRENCY",
        "LOG_FORMAT",
    ] {
        assert!(named.contains(&var), "{var} not named: {stderr}");
    }
}

#[test]
fn check_config_refuses_an_admin_token_that_admin_would_refuse_without_echoing_it() {
    for (value, names) in [
        ("short-hunter4", "at least"),
        (
            "env:MW_CHECK_CONFIG_SURELY_UNSET",
            "MW_CHECK_CONFIG_SURELY_UNSET",
        ),
    ] {
        let out = mail_worker(&["check-config"], &[("ADMIN_TOKEN", value)]);
        let stderr = stderr_of_exit(&out, 78, &format!("ADMIN_TOKEN={value}"));
        assert!(
            stderr.contains("ADMIN_TOKEN") && stderr.contains(names),
            "{stderr}"
        );
        assert!(!stderr.contains("hunter4"), "{stderr}");
    }
    // Both refused: both named in one run, not one per fix-and-retry round.
    let out = mail_worker(
        &["check-config"],
        &[
            ("ADMIN_TOKEN", "short-hunter4"),
            ("EVENTS_WEBHOOK_URL", "https://hooks.example.org/mail"),
            ("EVENTS_WEBHOOK_SECRET", "short-hunter4"),
        ],
    );
    assert_eq!(out.status.code(), Some(78));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.matches("bad configuration").count(), 2, "{stderr}");
    assert!(
        stderr.contains("ADMIN_TOKEN") && stderr.contains("EVENTS_WEBHOOK_SECRET"),
        "{stderr}"
    );
}

#[test]
fn check_config_refuses_a_webhook_secret_run_would_refuse_and_echoes_neither_it_nor_a_url_token() {
    let hook = "https://hooks.example.org/mail";
    for (secret, names) in [
        ("short-hunter5", "at least 16"),
        (
            "env:MW_CHECK_CONFIG_SURELY_UNSET",
            "MW_CHECK_CONFIG_SURELY_UNSET",
        ),
        ("my webhook hunter5 secret", "whitespace"),
        // A `whsec_` key of 7 bytes ("hunter5"): the specification's keys have 24 to 64.
        ("whsec_aHVudGVyNQ==", "24 to 64"),
        // Three secrets: a rotation lists two.
        (
            "hunter5-0123456789abcdef,hunter5-1123456789abcdef,hunter5-2123456789abcdef",
            "at most 2",
        ),
    ] {
        let out = mail_worker(
            &["check-config"],
            &[
                ("EVENTS_WEBHOOK_URL", hook),
                ("EVENTS_WEBHOOK_SECRET", secret),
            ],
        );
        let stderr = stderr_of_exit(&out, 78, &format!("EVENTS_WEBHOOK_SECRET={secret}"));
        assert!(
            stderr.contains("EVENTS_WEBHOOK_SECRET") && stderr.contains(names),
            "{stderr}"
        );
        assert!(!stderr.contains("hunter5"), "{stderr}");
    }
    // A refused URL is shown without its password and its query (a receiver's token).
    let out = mail_worker(
        &["check-config"],
        &[
            (
                "EVENTS_WEBHOOK_URL",
                "http://user:pw-hunter6@hooks.example.org/mail?token=tok-hunter6",
            ),
            ("EVENTS_WEBHOOK_SECRET", "0123456789abcdef0123"),
        ],
    );
    let stderr = stderr_of_exit(&out, 78, "");
    assert!(
        stderr.contains("EVENTS_WEBHOOK_URL") && stderr.contains("?***"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter6"), "{stderr}");
}

#[test]
fn limits_above_exchanges_warn_when_set_by_env() {
    let out = mail_worker(
        &["check-config"],
        &[
            ("MAIL_RATE_LIMIT_PER_MINUTE", "40"),
            ("MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY", "12000"),
        ],
    );
    let stderr = stderr_of_exit(&out, 0, "");
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 2, "{stderr}");
    assert!(warnings[0].contains("MAIL_RATE_LIMIT_PER_MINUTE=40 is above Exchange Online's 30"));
    assert!(
        warnings[1]
            .contains("MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY=12000 is above Exchange Online's 10000")
    );
}

#[tokio::test]
async fn a_senders_file_with_limits_above_exchanges_imports_and_warns_naming_the_field() {
    let db = TestDb::new().await;
    let url = db.url.to_string();
    let mut senders: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(crate::import::SENDERS).unwrap()).unwrap();
    let first = &mut senders["systemMailboxes"][0];
    first["rateLimitPerMinute"] = 31.into();
    first["rateLimitRecipientsPerDay"] = 9_000.into();
    let address = first["address"].as_str().unwrap().to_owned();
    let dir = crate::support::temp_dir("mw-cli-");
    let file = dir.path().join("senders.json");
    std::fs::write(&file, senders.to_string()).unwrap();
    let out = mail_worker(
        &["senders", "import", file.to_str().unwrap()],
        &[("DATABASE_URL", url.as_str())],
    );
    let stderr = stderr_of_exit(&out, 0, "");
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "only the minute is above: {stderr}");
    assert!(
        warnings[0].contains(&format!(
            "{address}: rateLimitPerMinute=31 is above Exchange Online's 30"
        )),
        "{stderr}"
    );
}

#[tokio::test]
async fn enqueue_reports_every_bad_line_inserts_the_good_ones_and_status_counts_them() {
    let db = TestDb::new().await;
    let url = db.url.to_string();
    let env = [("DATABASE_URL", url.as_str())];
    let out = mail_worker(&["senders", "import", crate::import::SENDERS], &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        format!(
            "imported 3 tenants and 3 system mailboxes from {}",
            crate::import::SENDERS
        )
    );

    let dir = crate::support::temp_dir("mw-cli-");
    let file = dir.path().join("campaign.jsonl");
    let good = |id: &str| {
        format!(
            r#"{{"id":"{id}","tenant":"northwind","to":[{{"address":"a@example.org"}}],"subject":"s","body":{{"contentType":"text","content":"x"}}}}"#
        )
    };
    std::fs::write(
        &file,
        [
            good("00000000-0000-4000-8000-000000000001"),
            "{broken".to_owned(),
            good("00000000-0000-4000-8000-000000000002"),
            r#"{"id":"00000000-0000-4000-8000-000000000003","tenant":"nobody","to":[{"address":"a@example.org"}],"body":{"contentType":"text","content":"x"}}"#.to_owned(),
        ]
        .join("\n"),
    )
    .unwrap();
    let dry = mail_worker(&["enqueue", "--dry-run", file.to_str().unwrap()], &env);
    assert_eq!(dry.status.code(), Some(1), "bad lines fail a dry run too");
    assert!(text(&dry.stderr).contains("campaign.jsonl:line 2: not a message"));
    assert_eq!(
        text(&dry.stdout).trim(),
        "2 messages would be inserted, 0 already present, 2 bad lines (dry run: nothing written)"
    );
    let stored = db.rows_in("messages").await;
    assert_eq!(stored, 0, "a dry run writes nothing");
    let out = mail_worker(&["enqueue", file.to_str().unwrap()], &env);
    let stderr = stderr_of_exit(&out, 1, "a bad line makes the exit non-zero");
    assert!(
        stderr.contains("campaign.jsonl:line 2: not a message"),
        "{stderr}"
    );
    assert!(
        stderr.contains("line 4: tenant \"nobody\" is unknown"),
        "{stderr}"
    );
    assert_eq!(
        text(&out.stdout).trim(),
        "2 messages inserted, 0 already present, 2 bad lines"
    );
    let again = mail_worker(&["enqueue", file.to_str().unwrap()], &env);
    assert_eq!(
        text(&again.stdout).trim(),
        "0 messages inserted, 2 already present, 2 bad lines"
    );
    let dry = mail_worker(&["enqueue", "--dry-run", file.to_str().unwrap()], &env);
    assert_eq!(
        text(&dry.stdout).trim(),
        "0 messages would be inserted, 2 already present, 2 bad lines (dry run: nothing written)"
    );

    let status = mail_worker(&["status", "--json"], &env);
    let rows: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 1);
    assert_eq!(rows[0]["mailbox"], "hello@northwind.example");
    assert_eq!(rows[0]["scheduled"], 2);
    let table = text(&mail_worker(&["status"], &env).stdout);
    assert!(
        table
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("hello@northwind.example"),
        "{table}"
    );

    let limits = mail_worker(
        &[
            "mailbox",
            "set-limits",
            "Events@Contoso.example",
            "--per-minute",
            "12",
        ],
        &env,
    );
    assert_eq!(
        text(&limits.stdout).trim(),
        "events@contoso.example: per minute 12, recipients per day 5000, reserved percent default\n\
         0 bookings dropped, 0 messages due now (they take fresh decisions under the new limits)"
    );
    let reserved = mail_worker(
        &[
            "mailbox",
            "set-limits",
            "events@contoso.example",
            "--reserved-percent",
            "35",
        ],
        &env,
    );
    assert_eq!(
        text(&reserved.stdout).lines().next().unwrap(),
        "events@contoso.example: per minute 12, recipients per day 5000, reserved percent 35",
        "{}",
        text(&reserved.stderr)
    );
    assert_eq!(
        text(&reserved.stdout).lines().next().unwrap(),
        "events@contoso.example: per minute 12, recipients per day 5000, reserved percent 35",
        "the other overrides are kept"
    );
    let usage = text(&mail_worker(&["mailbox", "usage", "events@contoso.example"], &env).stdout);
    assert!(
        usage.contains("12 per minute (override), 5000 recipients per day (override), 35 % reserved for high (override)"),
        "{usage}"
    );
    // Every row's value starts in the same column.
    for line in usage.lines() {
        assert_eq!(line.get(19..20), Some(" "), "{usage}");
        assert_ne!(line.get(20..21), Some(" "), "{usage}");
    }
    let too_much = mail_worker(
        &[
            "mailbox",
            "set-limits",
            "events@contoso.example",
            "--reserved-percent",
            "95",
        ],
        &env,
    );
    let stderr = stderr_of_exit(&too_much, 2, "");
    assert!(
        stderr.contains("must be a whole number from 0 to 90"),
        "{stderr}"
    );
    assert!(
        !text(&limits.stderr).contains("warning"),
        "12/min is below Exchange's"
    );
    let set_limits = |flag: &str, value: &str| {
        mail_worker(
            &[
                "mailbox",
                "set-limits",
                "events@contoso.example",
                flag,
                value,
            ],
            &env,
        )
    };
    let above = set_limits("--per-minute", "45");
    assert_eq!(above.status.code(), Some(0), "it warns, and sets");
    let stderr = text(&above.stderr);
    assert!(
        stderr.contains("warning: --per-minute=45 is above Exchange Online's 30 messages"),
        "{stderr}"
    );
    let again = set_limits("--per-minute", "45");
    assert_eq!(
        text(&again.stdout).lines().nth(1),
        Some("limits unchanged: bookings kept"),
        "the same value is no change: {}",
        text(&again.stdout)
    );
    let other = set_limits("--reserved-percent", "30");
    assert!(
        !text(&other.stderr).contains("warning"),
        "the stored 45 was warned of when it was set: {}",
        text(&other.stderr)
    );
    assert!(
        text(&other.stdout).contains("0 bookings dropped"),
        "{}",
        text(&other.stdout)
    );
    let unknown = mail_worker(
        &["mailbox", "set-limits", "x@contoso.example", "--clear"],
        &env,
    );
    assert_eq!(unknown.status.code(), Some(1));
    assert!(text(&unknown.stderr).contains("no system mailbox x@contoso.example"));
}

#[tokio::test]
async fn migrate_twice_is_idempotent() {
    let url = crate::support::TestDb::reserve();
    let _dropped_at_the_end = crate::support::app::DropDatabase(url.clone());
    for _ in 0..2 {
        let out = mail_worker(&["migrate"], &[("DATABASE_URL", url.as_str())]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let pool = mail_worker::store::connect(&url, 1).await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(n as usize, mail_worker::store::MIGRATOR.iter().count());
}

#[tokio::test]
async fn commands_on_a_missing_or_unmigrated_database_name_mail_worker_migrate_and_create_nothing()
{
    let url = crate::support::TestDb::reserve();
    let _dropped_at_the_end = crate::support::app::DropDatabase(url.clone());
    let env = [("DATABASE_URL", url.as_str())];
    let name = url.path().trim_start_matches('/').to_owned();
    for args in [
        &["status"][..],
        &["enqueue", "/dev/null"],
        &["messages", "retry", "--all"],
    ] {
        let out = mail_worker(args, &env);
        let stderr = stderr_of_exit(&out, 1, &format!("{args:?}"));
        assert_eq!(
            stderr.trim(),
            format!(
                "mail-worker: DATABASE_URL names database \"{name}\", which does not exist: run `mail-worker migrate` to create it"
            ),
            "{args:?}: printed once, naming migrate"
        );
    }
    assert!(
        mail_worker::store::create_database_if_missing(&url)
            .await
            .unwrap(),
        "none of those commands created the database"
    );
    // Now it exists but has no schema.
    let out = mail_worker(&["status", "--json"], &env);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr).trim(),
        format!("mail-worker: database \"{name}\" has no schema: run `mail-worker migrate`")
    );
    let refused = mail_worker(
        &["status"],
        &[("DATABASE_URL", "postgres://postgres@127.0.0.1:9/x")],
    );
    assert_eq!(
        text(&refused.stderr).trim(),
        "mail-worker: DATABASE_URL (127.0.0.1:9): connection refused"
    );
}

#[test]
fn run_help_lists_every_environment_variable() {
    let out = mail_worker(&["run", "--help"], &[] as &[(&str, &str)]);
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    for mail_worker::config::settings::Setting {
        name: var, flag, ..
    } in mail_worker::config::settings::all()
    {
        assert!(
            help.contains(&format!("[env: {var}")),
            "{var} missing:\n{help}"
        );
        assert!(help.contains(&format!("--{flag}")), "--{flag} missing");
    }
    assert!(help.contains("METRICS_LISTEN") && help.contains("MAIL_RETRY_FOR"));
}

#[tokio::test]
async fn messages_retry_and_cancel_filter_report_counts_and_a_dry_run_writes_nothing() {
    let world = crate::support::spawn_app().await;
    let url = world.db.url.to_string();
    let env = [("DATABASE_URL", url.as_str())];
    let refused = world.insert(0, 3, "ERROR").await;
    let other = world.insert(0, 2, "ERROR").await;
    let scheduled = world.insert(0, 2, "SCHEDULED").await;
    for &id in &refused {
        sqlx::query("UPDATE messages SET last_error = 'unauthorized: AADSTS7000215: bad secret', attempts = 4 WHERE id = $1")
            .bind(id)
            .execute(&world.db.pool)
            .await
            .unwrap();
    }
    let json = |out: Output| -> serde_json::Value {
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let dry = json(mail_worker(
        &[
            "messages",
            "retry",
            "--error-like",
            "aadsts7000215",
            "--dry-run",
            "--json",
        ],
        &env,
    ));
    assert_eq!(dry["matched"], 3);
    assert_eq!(dry["changed"], 0);
    assert_eq!(dry["dry_run"], true);
    assert_eq!(world.count("ERROR").await, 5, "a dry run writes nothing");

    let done = json(mail_worker(
        &[
            "messages",
            "retry",
            "--sender",
            "mb0@contoso.example",
            "--status",
            "error",
            "--error-like",
            "AADSTS",
            "--json",
        ],
        &env,
    ));
    assert_eq!(
        (done["matched"].as_u64(), done["changed"].as_u64()),
        (Some(3), Some(3))
    );
    for &id in &refused {
        let (status, attempts, deferrals, _, scheduled_on) = world.row(id).await;
        assert_eq!((status.as_str(), attempts, deferrals), ("SCHEDULED", 0, 0));
        assert!(scheduled_on <= chrono::Utc::now());
    }
    assert_eq!(world.row(other[0]).await.0, "ERROR", "the filter held");

    let by_id = json(mail_worker(
        &["messages", "retry", "--id", &other[0].to_string(), "--json"],
        &env,
    ));
    assert_eq!(by_id["changed"], 1);
    assert_eq!(world.row(other[1]).await.0, "ERROR");

    let sent = mail_worker(&["messages", "retry", "--status", "SENT"], &env);
    assert_eq!(
        sent.status.code(),
        Some(1),
        "a SENT message is never resent"
    );

    let cancelled = json(mail_worker(
        &[
            "messages",
            "cancel",
            "--sender",
            "mb0@contoso.example",
            "--json",
        ],
        &env,
    ));
    // The 2 scheduled ones, the 3 retried and the 1 retried by id.
    assert_eq!(cancelled["changed"], 6);
    let (status, _, _, last_error, _) = world.row(scheduled[0]).await;
    assert_eq!(status, "ERROR");
    assert!(last_error.unwrap().starts_with("cancelled by an operator"));
    let plain = mail_worker(&["messages", "cancel", "--dry-run"], &env);
    assert_eq!(
        text(&plain.stdout).trim(),
        "0 messages match; dry run: nothing cancelled"
    );
}

#[tokio::test]
async fn mailbox_usage_shows_the_limits_the_live_budget_and_the_messages() {
    use mail_worker::{clock::SystemClock, rate_limit::Algorithm, service::SendOutcome};
    let world = crate::support::TestApp::paced().per_minute(20).await;
    let handler = world.real_handler(std::sync::Arc::new(SystemClock));
    let ids = world.insert(0, 4, "SCHEDULED").await;
    let mut sent = 0;
    let mut deferred = 0;
    for id in ids {
        match crate::support::claim_and_send(&world.db.pool, &handler, id)
            .await
            .unwrap()
        {
            Some(SendOutcome::Sent) => sent += 1,
            Some(SendOutcome::Deferred { .. }) => deferred += 1,
            other => panic!("{other:?}"),
        }
    }
    assert!(sent >= 1, "{sent} sent");
    let env = paced_env(&world, "7000");
    let out = mail_worker(&["mailbox", "usage", "MB0@contoso.example", "--json"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let usage: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(usage["mailbox"], "mb0@contoso.example");
    assert_eq!(usage["sender"], "system mailbox");
    assert_eq!(usage["limits"]["per_minute"], 20);
    assert_eq!(usage["limits"]["per_minute_source"], "override");
    assert_eq!(usage["limits"]["recipients_per_day"], 7000);
    assert_eq!(usage["limits"]["recipients_per_day_source"], "default");
    let limiter = &usage["limiter"];
    assert_eq!(limiter["algorithm"], "paced");
    assert_eq!(limiter["sent_last_minute"], sent, "{usage}");
    // One recipient each; a booked slot holds its recipients, reported apart from the used.
    assert_eq!(limiter["recipients_last_day"], sent, "{usage}");
    assert_eq!(limiter["recipients_booked"], deferred, "{usage}");
    assert_eq!(limiter["in_flight"], 0);
    assert_eq!(limiter["booked"], deferred, "{usage}");
    assert!(limiter["next_free_slot"].is_string());
    assert_eq!(usage["messages"]["by_status"]["SENT"], sent);
    assert_eq!(usage["messages"]["by_status"]["SCHEDULED"], deferred);
    assert_eq!(usage["messages"]["paused"], 0);
    // What waits is booked: it is sent by the next free slot (one spacing after the last).
    let time = |v: &serde_json::Value| {
        chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap_or_else(|| panic!("{usage}")))
            .unwrap()
    };
    if deferred > 0 {
        assert_eq!(
            time(&usage["backlog_ends"]),
            time(&limiter["next_free_slot"])
        );
    }
    // 10 more, unbooked: paced behind the bookings, (60 s + the pacing allowance) / 20 apart.
    world.insert(0, 10, "SCHEDULED").await;
    let out = mail_worker(&["mailbox", "usage", "mb0@contoso.example", "--json"], &env);
    let usage: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let behind = time(&usage["backlog_ends"]) - time(&usage["limiter"]["next_free_slot"]);
    let spacing = mail_worker::forecast::spacing(Algorithm::Paced, 20);
    assert_eq!(spacing.num_milliseconds(), 3100);
    assert_eq!(behind, spacing * 9, "{usage}");
    // One for 30 days from now (a producer's scheduledOn): nothing waiting ends before it.
    let later = world.insert(0, 1, "SCHEDULED").await;
    sqlx::query("UPDATE messages SET scheduled_on = now() + interval '30 days' WHERE id = $1")
        .bind(later[0])
        .execute(&world.db.pool)
        .await
        .unwrap();
    let out = mail_worker(&["mailbox", "usage", "mb0@contoso.example", "--json"], &env);
    let usage: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ahead = time(&usage["backlog_ends"]).with_timezone(&chrono::Utc) - chrono::Utc::now();
    assert!(
        ahead > chrono::Duration::days(29) && ahead <= chrono::Duration::days(30),
        "{usage}"
    );
    let lines = text(&mail_worker(&["mailbox", "usage", "mb0@contoso.example"], &env).stdout);
    assert!(lines.contains("20 per minute (override)"), "{lines}");
    assert!(lines.contains("waiting sent by     20"), "{lines}");
}

#[tokio::test]
async fn messages_list_and_show_say_why_a_scheduled_message_waits_and_until_when() {
    let world = crate::support::spawn_app().await;
    let url = world.db.url.to_string();
    let env = [("DATABASE_URL", url.as_str())];
    let mailbox = "mb0@contoso.example";
    // One row per reason, as an attempt leaves it (`wait_reason`, `scheduled_on` ahead), plus
    // a producer's future `scheduledOn` and a due row no attempt has touched.
    let reasons = [
        "minute",
        "day",
        "tenant",
        "cooldown",
        "in_flight",
        "paused",
        "retry",
        "unconfirmed",
    ];
    let ids = world.insert(0, reasons.len() + 2, "SCHEDULED").await;
    for (id, reason) in ids.iter().zip(reasons) {
        sqlx::query(
            "UPDATE messages SET wait_reason = $2, deferrals = 1, \
                 scheduled_on = date_trunc('second', now()) + interval '90 seconds' WHERE id = $1",
        )
        .bind(id)
        .bind(reason)
        .execute(&world.db.pool)
        .await
        .unwrap();
    }
    let producer = ids[reasons.len()];
    world
        .execute(
            "UPDATE messages SET scheduled_on = now() + interval '2 days' WHERE id = $1",
            producer,
        )
        .await;
    let sent = world.insert(0, 1, "SENT").await;

    let out = mail_worker(
        &["messages", "list", "--status", "scheduled", "--json"],
        &env,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let lines: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(lines.len(), reasons.len() + 2);
    let of = |id: uuid::Uuid| {
        lines
            .iter()
            .find(|l| l["id"] == id.to_string())
            .unwrap_or_else(|| panic!("{id} listed"))
            .clone()
    };
    for (id, reason) in ids.iter().zip(reasons) {
        let line = of(*id);
        assert_eq!(line["wait_reason"], reason);
        let words = line["waiting"].as_str().unwrap();
        let due: chrono::DateTime<chrono::Utc> =
            serde_json::from_value(line["scheduled_on"].clone()).unwrap();
        assert!(
            words.contains(&due.format("%H:%M:%S UTC").to_string()),
            "{reason}: {words}"
        );
    }
    assert_eq!(of(producer)["wait_reason"], "scheduled");
    assert_eq!(of(ids[reasons.len() + 1])["wait_reason"], "due");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("guest0@example.org"),
        "recipients are masked"
    );

    let day = mail_worker(&["messages", "show", &ids[1].to_string()], &env);
    assert_eq!(day.status.code(), Some(0), "{}", text(&day.stderr));
    let shown = text(&day.stdout);
    assert!(
        shown.contains(&format!(
            "waiting     waiting for {mailbox}'s 24 h recipient budget; booked "
        )),
        "{shown}"
    );
    let done = text(&mail_worker(&["messages", "show", &sent[0].to_string()], &env).stdout);
    assert!(
        done.contains("status      SENT") && !done.contains("waiting"),
        "{done}"
    );
    let missing = mail_worker(
        &["messages", "show", &uuid::Uuid::new_v4().to_string()],
        &env,
    );
    let stderr = stderr_of_exit(&missing, 1, "");
    assert!(stderr.contains("no message"), "{stderr}");

    let table = text(&mail_worker(&["messages", "list", "--sender", mailbox], &env).stdout);
    assert_eq!(table.lines().count(), 1 + reasons.len() + 3, "{table}");
    assert!(table.contains("scheduled by its producer for "), "{table}");

    let waiting = mail_worker::store::waiting::count_waiting(&world.db.pool)
        .await
        .unwrap();
    let counts: std::collections::BTreeMap<&str, i64> =
        waiting.iter().map(|(r, n)| (r.as_str(), *n)).collect();
    for reason in reasons.into_iter().chain(["scheduled", "due"]) {
        assert_eq!(counts[reason], 1, "{reason}: {counts:?}");
    }
    // Only the untouched due row is due; make it 20 minutes late.
    world
        .execute(
            "UPDATE messages SET scheduled_on = now() - interval '20 minutes' WHERE id = $1",
            ids[reasons.len() + 1],
        )
        .await;
    let late = mail_worker::store::waiting::oldest_due_seconds(&world.db.pool)
        .await
        .unwrap();
    assert!((1200.0..1260.0).contains(&late), "{late}");

    // A bounced message shows the NDR's code and text.
    let bounced = world.insert(0, 1, "SENT").await[0];
    world
        .execute(
            "UPDATE messages SET status = 'BOUNCED', bounce_code = '5.1.1', \
             bounce_text = 'RESOLVER.ADR.RecipNotFound; not found' WHERE id = $1",
            bounced,
        )
        .await;
    let shown = text(&mail_worker(&["messages", "show", &bounced.to_string()], &env).stdout);
    assert!(
        shown.contains("status      BOUNCED\n")
            && shown.contains("bounced     5.1.1 RESOLVER.ADR.RecipNotFound; not found\n"),
        "{shown}"
    );
    // Each recipient's fate (here the NDR's), the address masked.
    sqlx::query(
        "INSERT INTO recipient_outcomes (message_id, recipient, trace_status, outcome, at, code, detail) \
         VALUES ($1, 'lotte.jansen@example.org', 'NDR', 'failed', '2027-02-01T08:00:00Z', '5.1.1', 'not found')",
    )
    .bind(bounced)
    .execute(&world.db.pool)
    .await
    .unwrap();
    let shown = text(&mail_worker(&["messages", "show", &bounced.to_string()], &env).stdout);
    assert!(
        shown.ends_with(
            "recipients  l***@example.org failed (NDR) 2027-02-01 08:00:00 UTC 5.1.1 not found\n"
        ) && !shown.contains("lotte.jansen"),
        "{shown}"
    );
    let json = mail_worker(&["messages", "show", &bounced.to_string(), "--json"], &env);
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        json["recipients"],
        serde_json::json!([{"recipient": "l***@example.org", "status": "NDR", "outcome": "failed",
            "at": "2027-02-01T08:00:00Z", "code": "5.1.1", "detail": "not found"}])
    );
}

/// A mailbox that sent its whole day (D = 4) with a backlog booked into tomorrow: `mailbox usage`
/// says 4 of 4 used (100 %, what `mail.budget.nearlyUsed` and the budget gauge read) and 2
/// booked apart — not 6 of 4 (150 %: issue 46, point 7).
#[tokio::test]
async fn a_mailbox_that_sent_its_day_with_a_backlog_booked_into_tomorrow_used_100_percent() {
    use mail_worker::clock::SystemClock;
    let mut world = crate::support::TestApp::paced().per_minute(1_000).await;
    world.config.rate_limit.defaults.recipients_per_day = std::num::NonZeroU32::new(4).unwrap();
    let handler = world.real_handler(std::sync::Arc::new(SystemClock));
    let env = paced_env(&world, "4");
    let ids = world.insert(0, 6, "SCHEDULED").await;
    // Sent as they come due (a slot is 62 ms after the last at 1,000 a minute).
    for _ in 0..50 {
        let due: Vec<uuid::Uuid> = sqlx::query_scalar(
            "SELECT id FROM messages WHERE status = 'SCHEDULED' AND scheduled_on <= now()",
        )
        .fetch_all(&world.db.pool)
        .await
        .unwrap();
        for id in due {
            crate::support::claim_and_send(&world.db.pool, &handler, id)
                .await
                .unwrap();
        }
        if world.count("SENT").await == 4 && world.count("SCHEDULED").await == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(ids.len(), 6);
    assert_eq!(world.count("SENT").await, 4, "the day's 4 recipients sent");
    let tomorrow: f64 = sqlx::query_scalar(
        "SELECT min(extract(epoch FROM scheduled_on - now()))::float8 FROM messages \
         WHERE status = 'SCHEDULED'",
    )
    .fetch_one(&world.db.pool)
    .await
    .unwrap();
    assert!(tomorrow > 23.0 * 3600.0, "booked {tomorrow} s out");
    let out = mail_worker(&["mailbox", "usage", "mb0@contoso.example", "--json"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let usage: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let limiter = &usage["limiter"];
    let used = limiter["recipients_last_day"].as_u64().unwrap();
    println!(
        "used {used} of 4 ({} %), booked ahead {}",
        used * 100 / 4,
        limiter["recipients_booked"]
    );
    assert_eq!(used, 4, "the day used: 100 %, not 150 % {usage}");
    assert_eq!(limiter["recipients_booked"], 2, "{usage}");
    assert_eq!(limiter["booked"], 2, "{usage}");
    let plain = text(&mail_worker(&["mailbox", "usage", "mb0@contoso.example"], &env).stdout);
    assert!(
        plain.contains("4 recipients in the last day")
            && plain.contains("(2 recipients booked ahead)"),
        "{plain}"
    );
}

#[tokio::test]
async fn a_limit_change_a_cancel_and_a_retry_free_the_bookings_the_old_decisions_made() {
    use mail_worker::{clock::SystemClock, service::SendOutcome};
    let world = crate::support::TestApp::paced().per_minute(1).await;
    let handler = world.real_handler(std::sync::Arc::new(SystemClock));
    let env = paced_env(&world, "7000");
    let usage = || {
        let out = mail_worker(&["mailbox", "usage", "mb0@contoso.example", "--json"], &env);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["limiter"].clone()
    };
    let send = |id| {
        let (pool, handler) = (&world.db.pool, &handler);
        async move {
            crate::support::claim_and_send(pool, handler, id)
                .await
                .unwrap()
                .unwrap()
        }
    };
    let waits = |id: uuid::Uuid| {
        let pool = world.db.pool.clone();
        async move {
            let s: f64 = sqlx::query_scalar(
                "SELECT extract(epoch FROM scheduled_on - now())::float8 FROM messages WHERE id = $1",
            )
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap();
            s
        }
    };
    // 1 a minute: the first goes, the next 5 are booked a minute apart (62 s, 124 s, …).
    let ids = world.insert(0, 6, "SCHEDULED").await;
    assert!(matches!(send(ids[0]).await, SendOutcome::Sent));
    for &id in &ids[1..] {
        assert!(matches!(send(id).await, SendOutcome::Deferred { .. }));
    }
    assert!(waits(ids[5]).await > 240.0, "booked 5 minutes out");
    assert_eq!(usage()["booked"], 5);
    assert_eq!(usage()["recipients_last_day"], 1);
    assert_eq!(usage()["recipients_booked"], 5);

    // A cancel frees its booking (and its recipient) at once, not 15 min after its slot.
    let out = mail_worker(&["messages", "cancel", "--id", &ids[5].to_string()], &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(usage()["booked"], 4);
    assert_eq!(usage()["recipients_booked"], 4);

    // A retry takes a fresh decision: its old booking goes.
    let out = mail_worker(
        &[
            "messages",
            "retry",
            "--status",
            "SCHEDULED",
            "--id",
            &ids[4].to_string(),
        ],
        &env,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(usage()["booked"], 3);
    assert_eq!(usage()["recipients_booked"], 3);
    assert!(waits(ids[4]).await <= 0.0, "due now");

    // The limit raised: every booking goes, the booked rows are due now and go as the new
    // limit allows (25 a minute: 2.48 s apart), not at the old slots minutes out.
    let out = mail_worker(
        &[
            "mailbox",
            "set-limits",
            "mb0@contoso.example",
            "--per-minute",
            "25",
        ],
        &env,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("3 bookings dropped, 3 messages due now"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(usage()["booked"], 0);
    assert_eq!(usage()["recipients_last_day"], 1, "the one sent");
    assert_eq!(usage()["recipients_booked"], 0);
    for &id in &ids[1..5] {
        assert!(waits(id).await <= 0.0, "due now");
    }
    let reasons: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM messages WHERE id = ANY($1) AND wait_reason IS NOT NULL",
    )
    .bind(&ids[1..4])
    .fetch_one(&world.db.pool)
    .await
    .unwrap();
    assert_eq!(reasons, 0, "no row still says it waits for its old booking");
    let mut sent = 0;
    for &id in &ids[1..5] {
        match send(id).await {
            SendOutcome::Sent => sent += 1,
            SendOutcome::Deferred { .. } => {
                assert!(waits(id).await < 15.0, "booked under the new limit");
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(sent >= 1, "{sent} sent at once");
}

#[tokio::test]
async fn messages_cancel_without_a_filter_is_refused_unless_all_and_retry_and_cancel_log_one_line()
{
    let world = crate::support::spawn_app().await;
    let url = world.db.url.to_string();
    let env = [("DATABASE_URL", url.as_str())];
    let ids = world.insert(0, 5, "SCHEDULED").await;
    let (one, two) = (ids[0].to_string(), ids[1].to_string());

    let refused = mail_worker(&["messages", "cancel"], &env);
    assert_eq!(refused.status.code(), Some(1));
    let stderr = text(&refused.stderr);
    for named in ["--all", "--sender", "--id", "--error-like", "every unsent"] {
        assert!(stderr.contains(named), "{named} missing: {stderr}");
    }
    assert_eq!(
        world.count("SCHEDULED").await,
        5,
        "a refusal writes nothing"
    );
    let status_only = mail_worker(&["messages", "cancel", "--status", "SCHEDULED"], &env);
    assert_eq!(
        status_only.status.code(),
        Some(1),
        "--status alone does not narrow it"
    );
    let both = mail_worker(
        &["messages", "cancel", "--all", "--sender", "x@y.example"],
        &env,
    );
    assert_eq!(
        both.status.code(),
        Some(2),
        "--all with a filter is a usage error"
    );
    assert_eq!(world.count("SCHEDULED").await, 5);

    // The stdout, the stderr and the fields of the one `event` line a run logs.
    let logged = |args: &[&str], event: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_mail-worker"))
            .args(args)
            .env("DATABASE_URL", &url)
            .env("RUST_LOG", "info")
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let mut lines = stderr
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|line| line["event"] == event);
        let mut line = lines
            .next()
            .unwrap_or_else(|| panic!("no {event}: {stderr}"));
        assert!(lines.next().is_none(), "one {event} line: {stderr}");
        if line["fields"].is_object() {
            line = line["fields"].take();
        }
        (text(&out.stdout), stderr, line)
    };
    let (stdout, stderr, fields) = logged(
        &[
            "messages",
            "cancel",
            "--sender",
            "mb0@contoso.example",
            "--id",
            &one,
            "--id",
            &two,
        ],
        "mail.cli.messagesCancelled",
    );
    assert_eq!(stdout.trim(), "2 messages cancelled (2 matched)");
    assert!(!stderr.contains("mb0@contoso.example"), "{stderr}");
    assert_eq!(
        (fields["changed"].as_u64(), fields["ids"].as_u64()),
        (Some(2), Some(2)),
        "{fields}"
    );
    assert_eq!(fields["sender"], "m***@contoso.example", "{fields}");
    assert_eq!(fields["all"], false, "{fields}");

    let (stdout, _, fields) = logged(
        &["messages", "cancel", "--all"],
        "mail.cli.messagesCancelled",
    );
    assert_eq!(stdout.trim(), "3 messages cancelled (3 matched)");
    assert_eq!(
        (fields["changed"].as_u64(), fields["all"].as_bool()),
        (Some(3), Some(true))
    );
    assert_eq!(world.count("SCHEDULED").await, 0);

    // Without a filter a retry is refused, naming the way out.
    let unfiltered = mail_worker(&["messages", "retry"], &env);
    assert!(
        stderr_of_exit(&unfiltered, 1, "retry without a filter").contains(
            "messages retry: no filter given, so this would retry every ERROR message (or of \
             --status); narrow it with --sender, --id or --error-like, or give --all"
        )
    );
    // --all leaves the cancelled rows alone; named, they go.
    let plain = mail_worker(&["messages", "retry", "--all"], &env);
    assert_eq!(
        text(&plain.stdout).trim(),
        "0 messages retried (0 matched)",
        "{}",
        text(&plain.stderr)
    );
    assert_eq!(world.count("SCHEDULED").await, 0);
    let (_, _, fields) = logged(
        &["messages", "retry", "--error-like", "cancelled"],
        "mail.cli.messagesRetried",
    );
    assert_eq!(
        (fields["changed"].as_u64(), fields["error_like"].as_str()),
        (Some(5), Some("cancelled"))
    );
    assert_eq!(world.count("SCHEDULED").await, 5);
}

#[test]
fn set_limits_zero_or_past_the_column_names_the_flag_and_what_a_limit_is() {
    for (flag, value) in [
        ("--per-minute", "0"),
        ("--per-minute", "2147483648"),
        ("--recipients-per-day", "4294967295"),
    ] {
        let out = mail_worker(
            &["mailbox", "set-limits", "a@b.example", flag, value],
            &[("RUST_LOG", "warn")],
        );
        let stderr = stderr_of_exit(&out, 2, &format!("{flag} {value}"));
        assert!(
            stderr.contains(flag) && stderr.contains("whole number from 1 to 2147483647"),
            "{stderr}"
        );
    }
}

#[tokio::test]
async fn lowering_the_day_budget_below_waiting_messages_warns_how_many_would_fail() {
    let world = crate::support::TestApp::builder().spawn().await;
    let env = paced_env(&world, "7000");
    let ids = world.insert(0, 3, "SCHEDULED").await;
    // 4 and 6 recipients on two of them (the third keeps its one).
    for (id, n) in [(ids[0], 4), (ids[1], 6)] {
        let to: Vec<serde_json::Value> = (0..n)
            .map(|i| serde_json::json!({"address": format!("r{i}@fabrikam.example")}))
            .collect();
        sqlx::query("UPDATE messages SET to_recipients = $2 WHERE id = $1")
            .bind(id)
            .bind(serde_json::Value::Array(to))
            .execute(&world.db.pool)
            .await
            .unwrap();
    }
    let set = |per_day: &str| {
        let out = mail_worker(
            &[
                "mailbox",
                "set-limits",
                "mb0@contoso.example",
                "--recipients-per-day",
                per_day,
            ],
            &env,
        );
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        (text(&out.stdout), text(&out.stderr))
    };
    let (stdout, stderr) = set("3");
    assert!(
        stdout.contains("0 bookings dropped, 0 messages due now"),
        "said even when nothing was booked: {stdout}"
    );
    assert!(
        stderr.contains(
            "2 waiting messages have more recipients than the 3 a day now allowed (up to 6)"
        ),
        "{stderr}"
    );
    let (_, stderr) = set("5");
    assert!(
        stderr.contains(
            "1 waiting message has more recipients than the 5 a day now allowed (up to 6)"
        ),
        "{stderr}"
    );
    assert!(!set("6").1.contains("waiting message"));
}

/// Claims and sends each of three new `SCHEDULED` rows of mailbox 0 once: the first is sent,
/// the other two are booked (asserted). Returns the three ids.
async fn one_sent_two_booked(world: &crate::support::TestApp) -> Vec<uuid::Uuid> {
    use mail_worker::{clock::SystemClock, service::SendOutcome};
    let handler = world.real_handler(std::sync::Arc::new(SystemClock));
    let ids = world.insert(0, 3, "SCHEDULED").await;
    for (i, id) in ids.iter().enumerate() {
        let outcome = crate::support::claim_and_send(&world.db.pool, &handler, *id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            matches!(outcome, SendOutcome::Sent),
            i == 0,
            "{i}: {outcome:?}"
        );
    }
    ids
}

/// `senders import` of a file with mailbox 0 alone, its app and `fields`; its stdout.
fn import_mailbox_0(env: &[(&'static str, String)], fields: serde_json::Value) -> String {
    use crate::support::app::{CLIENT, SECRET, TENANT};
    let mut entry = serde_json::json!({
        "address": "mb0@contoso.example", "graphTenantId": TENANT, "clientId": CLIENT,
        "clientSecret": SECRET,
    });
    for (k, v) in fields.as_object().into_iter().flatten() {
        entry[k] = v.clone();
    }
    import_senders(env, &serde_json::json!({"systemMailboxes": [entry]}))
}

/// `senders import` of the senders file `senders` (exit 0 asserted); its stdout.
fn import_senders(env: &[(&'static str, String)], senders: &serde_json::Value) -> String {
    let dir = crate::support::temp_dir("mw-cli-");
    let file = dir.path().join("senders.json");
    std::fs::write(&file, senders.to_string()).unwrap();
    let out = mail_worker(&["senders", "import", file.to_str().unwrap()], env);
    stderr_of_exit(&out, 0, "senders import");
    text(&out.stdout)
}

/// How many of `ids` are due now without a wait reason (each takes a fresh decision).
async fn due_now(world: &crate::support::TestApp, ids: &[uuid::Uuid]) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM messages WHERE id = ANY($1) AND scheduled_on <= now() \
         AND wait_reason IS NULL",
    )
    .bind(ids)
    .fetch_one(&world.db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_senders_import_that_changes_a_mailboxs_limits_drops_its_bookings() {
    let world = crate::support::TestApp::paced().per_minute(1).spawn().await;
    let env = paced_env(&world, "7000");
    // 1 a minute: the first goes, the next 2 are booked a minute and two out.
    let ids = one_sent_two_booked(&world).await;
    let import = |per_minute: u32| {
        import_mailbox_0(&env, serde_json::json!({"rateLimitPerMinute": per_minute}))
    };
    let changed = import(25);
    let unchanged = import(25);
    assert!(
        changed.contains(
            "limits or tenant budget changed for 1 sender: 2 bookings dropped, 2 messages due now"
        ),
        "{changed}"
    );
    assert!(!unchanged.contains("changed for"), "{unchanged}");
    assert_eq!(
        due_now(&world, &ids[1..]).await,
        2,
        "both take a fresh decision under 25 a minute"
    );
}

#[tokio::test]
async fn a_senders_import_that_changes_the_tenant_budget_drops_the_bookings_it_made() {
    // 1 external recipient a day for the tenant: the first goes, the next 2 are booked a day out.
    let world = crate::support::TestApp::paced()
        .tenant_budget(1)
        .spawn()
        .await;
    let env = paced_env(&world, "7000");
    let import = |per_day: u32| {
        import_mailbox_0(
            &env,
            serde_json::json!({
                "externalRecipientsPerDay": per_day, "acceptedDomains": ["contoso.example"],
            }),
        )
    };
    // The file as it will stay, before any booking: the mailbox's rows as the file gives them.
    import(1);
    let ids = one_sent_two_booked(&world).await;
    let reasons: Vec<Option<String>> =
        sqlx::query_scalar("SELECT wait_reason FROM messages WHERE id = ANY($1)")
            .bind(&ids[1..])
            .fetch_all(&world.db.pool)
            .await
            .unwrap();
    assert_eq!(
        reasons,
        [Some("tenant".to_owned()), Some("tenant".to_owned())]
    );
    let unchanged = import(1);
    let changed = import(100);
    assert!(!unchanged.contains("changed for"), "{unchanged}");
    assert!(
        changed.contains(
            "limits or tenant budget changed for 1 sender: 2 bookings dropped, 2 messages due now"
        ),
        "{changed}"
    );
    assert_eq!(
        due_now(&world, &ids[1..]).await,
        2,
        "both take a fresh decision under 100 a day"
    );
}

#[tokio::test]
async fn a_senders_import_that_changes_a_tenants_budget_names_its_sender_once() {
    let world = crate::support::TestApp::paced().spawn().await;
    let env = paced_env(&world, "7000");
    // Two tenants sending from one address, a system mailbox's too: each tenant is read by its
    // name (not by the address, which finds the system mailbox), and the address is listed once.
    let import = |per_day: u32| {
        let tenant = |name: &str| {
            serde_json::json!({
                "name": name, "provider": "microsoft-graph", "sender": "mb0@contoso.example",
                "graphTenantId": "northwind.example",
                "clientId": "33333333-3333-4333-8333-333333333333", "clientSecret": "env:NW",
                "externalRecipientsPerDay": per_day, "acceptedDomains": ["northwind.example"],
            })
        };
        import_senders(
            &env,
            &serde_json::json!({"tenants": [tenant("northwind"), tenant("northwind-2")]}),
        )
    };
    let new = import(5);
    let unchanged = import(5);
    let changed = import(6);
    assert!(!new.contains("changed for"), "{new}");
    assert!(!unchanged.contains("changed for"), "{unchanged}");
    assert!(
        changed.contains(
            "limits or tenant budget changed for 1 sender: 0 bookings dropped, 0 messages due now"
        ),
        "{changed}"
    );
}

#[test]
fn check_config_reads_the_senders_file_as_run_does_and_names_a_bad_entry() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("senders.json");
    let good = r#"{"systemMailboxes": [{"address": "noreply@contoso.example",
        "graphTenantId": "contoso.example", "clientId": "11111111-1111-4111-8111-111111111111",
        "clientSecret": "env:X"}]}"#;
    std::fs::write(&path, good).unwrap();
    let file = path.to_str().unwrap();
    stderr_of_exit(
        &mail_worker(&["check-config"], &[("SENDERS_FILE", file)]),
        0,
        "a good senders file",
    );
    std::fs::write(
        &path,
        good.replace("noreply@contoso.example", "not an address"),
    )
    .unwrap();
    let stderr = stderr_of_exit(
        &mail_worker(&["check-config"], &[("SENDERS_FILE", file)]),
        78,
        "a bad entry",
    );
    assert!(
        stderr.contains(&format!(
            "mail-worker: bad configuration: SENDERS_FILE ({file}): "
        )),
        "{stderr}"
    );
    assert!(stderr.contains("systemMailboxes[0]"), "{stderr}");
    let missing = dir.path().join("absent.json");
    let stderr = stderr_of_exit(
        &mail_worker(
            &["check-config"],
            &[("SENDERS_FILE", missing.to_str().unwrap())],
        ),
        78,
        "a file that is not there",
    );
    assert!(stderr.contains("absent.json): "), "{stderr}");
}

#[test]
fn check_config_resolves_the_ingest_tokens_as_run_does_when_ingest_listen_is_set() {
    let listen = ("INGEST_LISTEN", "127.0.0.1:0");
    let good = mail_worker(
        &["check-config"],
        &[listen, ("INGEST_TOKENS", "crm=0123456789abcdef0123")],
    );
    stderr_of_exit(&good, 0, "a good token");
    for (tokens, says) in [
        (
            ("INGEST_TOKENS", "crm=a"),
            "INGEST_TOKENS: token crm: <literal> is 1 characters long; a token needs at least 16",
        ),
        (
            ("INGEST_TOKENS", "crm=env:MW_CHECK_CONFIG_UNSET_TOKEN"),
            "MW_CHECK_CONFIG_UNSET_TOKEN",
        ),
        (
            ("INGEST_TOKENS_FILE", "/nonexistent/mw-tokens.json"),
            "INGEST_TOKENS_FILE (/nonexistent/mw-tokens.json): ",
        ),
    ] {
        let out = mail_worker(&["check-config"], &[listen, tokens]);
        let stderr = stderr_of_exit(&out, 78, tokens.1);
        assert!(
            stderr.contains("mail-worker: bad configuration: ") && stderr.contains(says),
            "{stderr}"
        );
    }
    // A tokens file that gives no token, or a token allowed no sender: refused too.
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.json");
    std::fs::write(&empty, "[]").unwrap();
    let none = dir.path().join("none.json");
    std::fs::write(
        &none,
        r#"[{"name": "crm", "secret": "0123456789abcdef0123", "senders": []}]"#,
    )
    .unwrap();
    for (file, says) in [
        (&empty, "INGEST_TOKENS and INGEST_TOKENS_FILE give no token"),
        (&none, "token crm: `senders` lists no sender"),
    ] {
        let out = mail_worker(
            &["check-config"],
            &[listen, ("INGEST_TOKENS_FILE", file.to_str().unwrap())],
        );
        let stderr = stderr_of_exit(&out, 78, says);
        assert!(stderr.contains(says), "{stderr}");
    }
    // Without INGEST_LISTEN, `run` reads no token: neither does the check.
    let off = mail_worker(&["check-config"], &[("INGEST_TOKENS", "crm=a")]);
    stderr_of_exit(&off, 0, "ingest off");
}
