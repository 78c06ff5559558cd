//! Rolling upgrades (issue 47 point 2, docs/upgrading.md): the previous tagged release's binary
//! runs beside this one on a schema this one migrated, both replicas claim, send and write
//! outcomes on one database, and every message goes out exactly once.
//!
//! The previous release is built from its tag (`git archive` into
//! `target/previous-release/<tag>/src`, a debug `cargo build --bin mail-worker` with a target
//! directory of its own, kept between runs), so the test is `#[ignore]`d: `.ci/run` runs it
//! (`cargo test --test it upgrade:: -- --ignored`). Its first build compiles the release's
//! dependencies once more (docs/decisions/0043-release-image-and-upgrades.md has the figure).

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use crate::{
    daemon::{Logged, sigterm},
    support::{TestApp, private_redis::free_port, wait_until},
};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn git(args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(root())
        .args(args)
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Releases and their commits, newest first (CHANGELOG.md): the fallback where a clone came
/// without its tags (a CI's shallow or tag-less clone of main).
const RELEASES: &[(&str, &str)] = &[("v0.1.0", "4108f50c4f79b6b696fde4f099c7457097e0e683")];

/// The newest release tag (`v*`) in HEAD's history that is not this build's version, and the
/// revision to build it from (the tag; its recorded commit when the clone has no tags).
fn previous_tag() -> (String, String) {
    let this = format!("v{}", env!("CARGO_PKG_VERSION"));
    let tagged = git(&[
        "tag",
        "--merged",
        "HEAD",
        "--list",
        "v*",
        "--sort=-v:refname",
    ])
    .lines()
    .map(str::trim)
    .find(|tag| *tag != this)
    .map(|tag| (tag.to_owned(), tag.to_owned()));
    tagged.unwrap_or_else(|| {
        let (tag, commit) = RELEASES
            .iter()
            .find(|(tag, _)| *tag != this)
            .expect("a release before this version in RELEASES");
        eprintln!("upgrade: no release tag in this clone; {tag} from its recorded commit {commit}");
        ((*tag).to_owned(), (*commit).to_owned())
    })
}

/// The previous release's `mail-worker`, built from its tag (once; later runs reuse it).
fn previous_release() -> (String, PathBuf) {
    let (tag, rev) = previous_tag();
    let dir = root().join("target/previous-release").join(&tag);
    let src = dir.join("src");
    if !src.join("Cargo.toml").exists() {
        std::fs::create_dir_all(&src).unwrap();
        let tar = dir.join("src.tar");
        git(&["archive", "--format=tar", "-o", tar.to_str().unwrap(), &rev]);
        let untar = Command::new("tar")
            .arg("-xf")
            .arg(&tar)
            .arg("-C")
            .arg(&src)
            .status()
            .unwrap();
        assert!(untar.success());
    }
    let started = std::time::Instant::now();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // Only what a build needs from this environment: `cargo test` sets variables (CARGO_PKG_*,
    // LD_LIBRARY_PATH, …) that would make every run rebuild the old crate (minutes) instead of
    // finding it fresh (under a second).
    let mut build = Command::new(cargo);
    build.env_clear();
    for name in [
        "PATH",
        "HOME",
        "CARGO_HOME",
        "RUSTUP_HOME",
        "RUSTUP_TOOLCHAIN",
        "TMPDIR",
    ] {
        if let Some(value) = std::env::var_os(name) {
            build.env(name, value);
        }
    }
    let built = build
        .current_dir(&src)
        .args([
            "build",
            "--locked",
            "-p",
            "mail-worker",
            "--bin",
            "mail-worker",
        ])
        .env("CARGO_TARGET_DIR", dir.join("target"))
        // Not this checkout's git: the old build says its version without a commit.
        .env("GIT_CEILING_DIRECTORIES", &dir)
        .status()
        .unwrap();
    assert!(built.success(), "building {tag}");
    eprintln!(
        "upgrade: {tag}'s mail-worker built in {:.0?}",
        started.elapsed()
    );
    (tag, dir.join("target/debug/mail-worker"))
}

/// `mail_worker_sends_total{provider="graph",outcome="sent"}` of the replica on `port`.
async fn sent_by(port: u16) -> u64 {
    let body = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    body.lines()
        .find(|l| {
            l.starts_with("mail_worker_sends_total{")
                && l.contains("outcome=\"sent\"")
                && l.contains("provider=\"graph\"")
        })
        .and_then(|l| l.rsplit(' ').next())
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::test]
#[ignore = "builds the previous tagged release (minutes the first time): .ci/run runs it"]
async fn the_previous_release_and_this_one_send_side_by_side_on_the_new_schema() {
    let (tag, old_binary) = previous_release();
    let world = TestApp::builder().mailboxes(6).spawn().await;
    let new_binary = Path::new(env!("CARGO_BIN_EXE_mail-worker"));
    // The new binary migrates first, as the migrate Job of docs/upgrading.md does before the
    // rollout (the harness's database is at this version's schema already: it must succeed).
    let migrate = world
        .binary_command(new_binary, "migrate", &[])
        .output()
        .await
        .unwrap();
    assert!(
        migrate.status.success(),
        "{}",
        String::from_utf8_lossy(&migrate.stderr)
    );
    let (old_port, new_port) = (free_port(), free_port());
    let replica = |binary: &Path, port: u16| {
        let listen = format!("127.0.0.1:{port}");
        Logged::spawn(world.binary_command(
            binary,
            "run",
            &[
                ("RUST_LOG", "info"),
                ("WORKER_CONCURRENCY", "4"),
                ("METRICS_LISTEN", &listen),
            ],
        ))
    };
    let mut old = replica(&old_binary, old_port);
    let mut new = replica(new_binary, new_port);
    wait_until(
        Duration::from_secs(60),
        "both replicas started",
        async || old.count("daemon.started") == 1 && new.count("daemon.started") == 1,
    )
    .await;
    let old_version = old.lines.lock().unwrap().join("\n");
    assert!(
        old_version.contains(&format!("\"version\":\"{}", tag.trim_start_matches('v'))),
        "the old replica is {tag}: {old_version}"
    );

    // 10 messages for each of 6 mailboxes, after both replicas are up: both claim.
    let mut ids = Vec::new();
    for mailbox in 0..6 {
        ids.extend(world.insert(mailbox, 10, "SCHEDULED").await);
    }
    wait_until(Duration::from_secs(120), "every message SENT", async || {
        world.count("SENT").await == 60
    })
    .await;
    let (from_old, from_new) = (sent_by(old_port).await, sent_by(new_port).await);
    for daemon in [&mut old, &mut new] {
        assert_eq!(sigterm(&mut daemon.child).await.code(), Some(0));
    }
    let logs = |d: &Logged| d.lines.lock().unwrap().join("\n");
    assert!(
        from_old > 0 && from_new > 0,
        "both replicas sent: {tag} {from_old}, this one {from_new}\n{}",
        logs(&old)
    );
    assert_eq!(from_old + from_new, 60);
    // Exactly once at graph-sim: each message (its subject is its id) received once.
    let mut received: Vec<String> = world
        .sim
        .messages()
        .into_iter()
        .filter_map(|m| m.subject)
        .collect();
    received.sort();
    let mut expected: Vec<String> = ids.iter().map(ToString::to_string).collect();
    expected.sort();
    assert_eq!(received, expected);
    // Outcomes written: every row SENT with its send time and no error.
    let unfinished: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM messages WHERE status <> 'SENT' OR sent_at IS NULL OR last_error IS NOT NULL",
    )
    .fetch_one(&world.db.pool)
    .await
    .unwrap();
    assert_eq!(unfinished, 0);
    for (name, daemon) in [(tag.as_str(), &old), ("this version", &new)] {
        let errors: Vec<String> = daemon
            .lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains("\"level\":\"ERROR\""))
            .cloned()
            .collect();
        assert!(errors.is_empty(), "{name} logged errors: {errors:#?}");
    }
}
