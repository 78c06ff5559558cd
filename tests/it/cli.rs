//! The `mail-worker` binary's commands, run as a user would.

use std::process::{Command, Output};

use crate::support::TestDb;

fn mail_worker(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mail-worker"))
        .args(args)
        .envs(env.iter().copied())
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn check_config_prints_the_effective_config_without_secrets() {
    let out = mail_worker(
        &["check-config"],
        &[
            ("DATABASE_URL", "postgres://app:hunter2@db.internal/mail"),
            ("MAIL_RATE_LIMIT_REDIS_URL", "redis://:s3cret@limiter:6379"),
            ("MAIL_RATE_LIMIT_PER_MINUTE", "20"),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("DATABASE_URL=postgres://app:***@db.internal/mail"),
        "{stdout}"
    );
    assert!(stdout.contains("MAIL_RATE_LIMIT_PER_MINUTE=20"), "{stdout}");
    assert!(stdout.contains("GRAPH_SEND_MODE=draft"), "{stdout}");
    assert_eq!(stdout.lines().count(), 29, "{stdout}");
    assert!(
        !stdout.contains("hunter2") && !stdout.contains("s3cret"),
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
        assert_eq!(out.status.code(), Some(78), "{var}={value}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(var) && stderr.contains(value), "{stderr}");
    }
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

    let dir = std::env::temp_dir().join(crate::support::unique("mw-cli-"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("campaign.jsonl");
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
    let out = mail_worker(&["enqueue", file.to_str().unwrap()], &env);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a bad line makes the exit non-zero"
    );
    let stderr = text(&out.stderr);
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
        "events@contoso.example: per minute 12, recipients per day 5000"
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
