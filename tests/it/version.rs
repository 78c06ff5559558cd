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

/// build.rs's commit follows HEAD in a debug build's incremental rebuilds: a throwaway crate
/// built by build.rs itself, in a repository of its own, commits and rebuilds. The hard case is
/// a branch whose ref was packed (`git gc` packs refs): its next commit writes a loose ref that
/// did not exist when build.rs chose what to watch. Once with the reflog (the default), once
/// without it (`core.logAllRefUpdates=false`: build.rs watches the refs' directory instead).
#[test]
fn a_rebuild_after_a_commit_says_the_new_commit_even_when_the_branch_was_packed() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    for reflog in ["true", "false"] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let run = |program: &str, args: &[&str]| -> String {
            let out = std::process::Command::new(program)
                .args(args)
                .current_dir(root)
                .env("CARGO_TARGET_DIR", root.join("target"))
                .env_remove("RUSTFLAGS")
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{program} {args:?}: {}",
                text(&out.stderr)
            );
            text(&out.stdout).trim().to_owned()
        };
        let git = |args: &[&str]| {
            let mut all = vec![
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@example.org",
                "-c",
                "commit.gpgsign=false",
            ];
            all.extend_from_slice(args);
            run("git", &all)
        };
        std::fs::write(
            root.join("Cargo.toml"),
            "[package]\nname = \"version-probe\"\nversion = \"9.9.9\"\nedition = \"2024\"\n[workspace]\n",
        )
        .unwrap();
        std::fs::copy(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("build.rs"),
            root.join("build.rs"),
        )
        .unwrap();
        std::fs::create_dir_all(root.join("src")).unwrap();
        for watched in ["migrations", "lua"] {
            std::fs::create_dir_all(root.join(watched)).unwrap();
            std::fs::write(root.join(watched).join("keep"), "").unwrap();
        }
        std::fs::write(
            root.join("src/main.rs"),
            "fn main() { print!(\"{}\", env!(\"MAIL_WORKER_VERSION\")); }\n",
        )
        .unwrap();
        std::fs::write(root.join(".gitignore"), "target/\n").unwrap();
        git(&["init", "-q", "-b", "main"]);
        git(&["config", "core.logAllRefUpdates", reflog]);
        git(&["add", "."]);
        git(&["commit", "-q", "-m", "a"]);
        let built = || run(&cargo, &["run", "-q", "--offline"]);
        let head = || format!("9.9.9 ({})", git(&["rev-parse", "--short=12", "HEAD"]));
        assert_eq!(built(), head(), "reflog {reflog}: the first build");
        git(&["commit", "-q", "--allow-empty", "-m", "b"]);
        assert_eq!(built(), head(), "reflog {reflog}: a commit on a loose ref");
        git(&["pack-refs", "--all"]);
        assert!(!root.join(".git/refs/heads/main").exists());
        assert_eq!(built(), head(), "reflog {reflog}: packed");
        git(&["commit", "-q", "--allow-empty", "-m", "c"]);
        assert_eq!(built(), head(), "reflog {reflog}: a commit on a packed ref");
    }
}
