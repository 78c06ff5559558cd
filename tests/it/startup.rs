//! `run`'s start-up (issue 47 point 3): `SENDERS_FILE` imported idempotently, a bad one refused
//! before the database is touched; the `daemon.started` line's version, listen address and
//! configuration digest; start-up errors as a plain `mail-worker: …` line on stderr too.

use std::time::Duration;

use mail_worker::config::Config;

use crate::{
    cli::text,
    daemon::{Logged, sigterm},
    support::{TestApp, private_redis::free_port, spawn_app, temp_dir, wait_until},
};

/// A senders file of one new system mailbox (`imported@contoso.example`, `per_minute` a minute).
fn senders_json(per_minute: u32) -> String {
    format!(
        r#"{{"systemMailboxes": [{{"address": "imported@contoso.example", "graphTenantId": "contoso.example",
            "clientId": "11111111-1111-4111-8111-111111111111", "clientSecret": "env:MW_STARTUP_SECRET",
            "rateLimitPerMinute": {per_minute}}}]}}"#
    )
}

async fn system_mailboxes(world: &TestApp) -> Vec<(String, Option<i32>)> {
    sqlx::query_as("SELECT address, rate_limit_per_minute FROM system_mailboxes ORDER BY address")
        .fetch_all(&world.db.pool)
        .await
        .unwrap()
}

/// The first log line of `daemon` with `event`, parsed.
fn logged(daemon: &Logged, event: &str) -> serde_json::Value {
    let needle = format!("\"event\":\"{event}\"");
    let lines = daemon.lines.lock().unwrap();
    let line = lines.iter().find(|l| l.contains(&needle));
    serde_json::from_str(line.unwrap_or_else(|| panic!("no {event}: {lines:#?}"))).unwrap()
}

/// Starts `run` with `SENDERS_FILE=path` until `daemon.started`, then stops it; its
/// `senders.imported` line.
async fn run_once(world: &TestApp, path: &str) -> serde_json::Value {
    let mut daemon =
        Logged::spawn(world.daemon_command(&[("RUST_LOG", "info"), ("SENDERS_FILE", path)]));
    wait_until(Duration::from_secs(60), "daemon.started", async || {
        daemon.count("daemon.started") == 1
    })
    .await;
    assert_eq!(sigterm(&mut daemon.child).await.code(), Some(0));
    logged(&daemon, "senders.imported")
}

#[tokio::test]
async fn run_imports_the_senders_file_at_start_up_and_a_restart_changes_nothing() {
    let world = spawn_app().await;
    let dir = temp_dir("senders-file");
    let path = dir.path().join("senders.json");
    std::fs::write(&path, senders_json(20)).unwrap();
    let path = path.to_str().unwrap();

    let first = run_once(&world, path).await;
    assert_eq!(first["system_mailboxes"], 1, "{first}");
    let expected = vec![
        ("imported@contoso.example".to_owned(), Some(20)),
        ("mb0@contoso.example".to_owned(), Some(25)),
    ];
    assert_eq!(system_mailboxes(&world).await, expected);

    // A restart (every replica, every rollout) imports the same file: nothing changes.
    let again = run_once(&world, path).await;
    assert_eq!(again["limits_changed"], 0, "{again}");
    assert_eq!(system_mailboxes(&world).await, expected);

    // A changed file (the ConfigMap edited, the pods rolled): the new limit, no second row.
    std::fs::write(dir.path().join("senders.json"), senders_json(10)).unwrap();
    let changed = run_once(&world, path).await;
    assert_eq!(changed["limits_changed"], 1, "{changed}");
    assert_eq!(
        system_mailboxes(&world).await[0],
        ("imported@contoso.example".to_owned(), Some(10))
    );
}

#[tokio::test]
async fn a_bad_senders_file_stops_start_up_before_the_database_is_touched() {
    let world = spawn_app().await;
    let dir = temp_dir("senders-file");
    let path = dir.path().join("senders.json");
    // One good entry, one bad: all or nothing.
    let good = senders_json(20);
    let bad = good.replace(
        "]}",
        r#", {"address": "not an address", "graphTenantId": "contoso.example",
            "clientId": "11111111-1111-4111-8111-111111111111", "clientSecret": "env:X"}]}"#,
    );
    std::fs::write(&path, bad).unwrap();
    let before = system_mailboxes(&world).await;
    let path = path.to_str().unwrap();
    for database in [
        world.config.database_url.as_str(),
        // Nothing listens here: the file is refused before PostgreSQL is asked.
        "postgres://postgres@127.0.0.1:9/x",
    ] {
        let out = world
            .daemon_command(&[("SENDERS_FILE", path), ("DATABASE_URL", database)])
            .output()
            .await
            .unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        let plain: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("mail-worker: "))
            .collect();
        assert_eq!(plain.len(), 1, "{stderr}");
        assert!(
            plain[0].starts_with(&format!("mail-worker: SENDERS_FILE ({path}): ")),
            "{stderr}"
        );
        assert!(plain[0].contains("systemMailboxes[1]"), "{stderr}");
        assert!(!stderr.contains("127.0.0.1:9"), "{stderr}");
    }
    assert_eq!(system_mailboxes(&world).await, before);
    // A file that is not there is named too.
    let out = world
        .daemon_command(&[("SENDERS_FILE", "/nonexistent/senders.json")])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr)
            .lines()
            .any(|l| l.starts_with("mail-worker: SENDERS_FILE (/nonexistent/senders.json): ")),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test]
async fn the_daemon_started_line_says_the_listen_address_and_the_configurations_digest() {
    let world = spawn_app().await;
    let listen = format!("127.0.0.1:{}", free_port());
    let command = world.daemon_command(&[("RUST_LOG", "info"), ("METRICS_LISTEN", &listen)]);
    // The configuration the binary reads: the command's variables, then the test's own.
    let env: Vec<(String, String)> = command
        .as_std()
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_str()?.to_owned(), v?.to_str()?.to_owned())))
        .collect();
    let config = Config::from_lookup(|name| {
        env.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var(name).ok())
    })
    .unwrap();
    let mut daemon = Logged::spawn(command);
    wait_until(Duration::from_secs(60), "daemon.started", async || {
        daemon.count("daemon.started") == 1
    })
    .await;
    assert_eq!(sigterm(&mut daemon.child).await.code(), Some(0));
    let started = logged(&daemon, "daemon.started");
    assert_eq!(started["metrics_listen"], listen, "{started}");
    assert_eq!(started["config_digest"], config.digest(), "{started}");
    assert_eq!(started["version"], mail_worker::VERSION, "{started}");
    let digest = config.digest();
    assert_eq!(digest.len(), 16);
    // A changed setting is another digest; a changed secret is not (it is redacted).
    let other =
        Config::from_lookup(|name| (name == "WORKER_CONCURRENCY").then(|| "3".to_owned())).unwrap();
    assert_ne!(
        other.digest(),
        Config::from_lookup(|_| None).unwrap().digest()
    );
    let with_secret = |token: &'static str| {
        Config::from_lookup(move |name| (name == "ADMIN_TOKEN").then(|| token.to_owned()))
            .unwrap()
            .digest()
    };
    assert_eq!(
        with_secret("a-first-token-of-32-characters!!"),
        with_secret("another-token-of-32-characters!!")
    );
}

#[tokio::test]
async fn a_start_up_error_is_a_json_line_and_a_plain_mail_worker_line() {
    let world = spawn_app().await;
    let out = world
        .daemon_command(&[("DATABASE_URL", "postgres://postgres@127.0.0.1:9/x")])
        .output()
        .await
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("\"event\":\"daemon.stopped\"") && l.contains("127.0.0.1:9")),
        "{stderr}"
    );
    assert_eq!(
        lines.last().copied(),
        Some("mail-worker: DATABASE_URL (127.0.0.1:9): connection refused"),
        "{stderr}"
    );
}
