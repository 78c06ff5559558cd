//! The version the binary reports (issue 45 point 9): `mail-worker --version` and the
//! `daemon.started` line say Cargo.toml's version and, built from a checkout, its git commit, so
//! an operator can tell two images apart and look the difference up in CHANGELOG.md.

use std::time::Duration;

use crate::{
    cli::{mail_worker, text},
    daemon::{Logged, sigterm},
    support::{spawn_app, wait_until},
};

/// What this checkout's build reports: `0.1.0 (<12 hex digits of HEAD>)`, or `0.1.0` outside git.
fn expected() -> String {
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| text(&out.stdout).trim().to_owned());
    match head {
        Some(commit) => format!("{} ({commit})", env!("CARGO_PKG_VERSION")),
        None => env!("CARGO_PKG_VERSION").to_owned(),
    }
}

#[test]
fn version_says_the_package_version_and_the_commit_it_was_built_from() {
    let out = mail_worker(&["--version"], &[] as &[(&str, &str)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("mail-worker {}\n", expected()));
    assert_eq!(mail_worker::VERSION, expected());
}

#[tokio::test]
async fn the_daemon_started_line_carries_the_version() {
    let world = spawn_app().await;
    let mut daemon = Logged::spawn(world.daemon_command(&[("RUST_LOG", "info")]));
    wait_until(Duration::from_secs(60), "daemon.started", async || {
        daemon.count("daemon.started") == 1
    })
    .await;
    let started: serde_json::Value = daemon
        .lines
        .lock()
        .unwrap()
        .iter()
        .find(|l| l.contains("\"event\":\"daemon.started\""))
        .map(|l| serde_json::from_str(l).unwrap())
        .unwrap();
    assert_eq!(sigterm(&mut daemon.child).await.code(), Some(0));
    assert_eq!(started["version"], expected(), "{started}");
}
