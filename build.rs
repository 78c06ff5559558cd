//! Rebuilds the crate when a migration or Lua script changes (both are compiled in), and sets
//! `MAIL_WORKER_VERSION`: the package version, plus the git commit when built from a checkout
//! (`0.1.0 (3be3ae5c1f2a)`; a build without `.git`, as in the Docker image, says `0.1.0`).
//! It also passes the build's target triple on as `MAIL_WORKER_TARGET` (a unit test asks
//! `cargo metadata` for this platform only).
use std::{path::Path, process::Command};

fn main() {
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-changed=lua");
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let version = match commit() {
        Some(commit) => format!("{version} ({commit})"),
        None => version,
    };
    println!("cargo:rustc-env=MAIL_WORKER_VERSION={version}");
    let target = std::env::var("TARGET").unwrap_or_default();
    println!("cargo:rustc-env=MAIL_WORKER_TARGET={target}");
}

/// The checkout's commit (12 hex digits), or `None` outside a git checkout. Asks cargo to run
/// this again when `HEAD` moves: the checkout's `HEAD` (a checkout, a detached commit), its
/// reflog `logs/HEAD` (appended on every commit, reset or checkout in this worktree, whichever
/// file holds the branch), the branch's loose ref and `packed-refs`. A branch whose ref is packed
/// has no loose file to watch, and its next commit writes one that nothing watched; without a
/// reflog (`core.logAllRefUpdates=false`) the directory the loose ref will appear in is watched
/// instead (any branch's commit there reruns this: a rebuild too many, never a stale commit).
fn commit() -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let git_dir = git(&["rev-parse", "--absolute-git-dir"])?;
    let common = git(&["rev-parse", "--git-common-dir"]).unwrap_or_else(|| git_dir.clone());
    let common = if Path::new(&common).is_absolute() {
        common
    } else {
        format!(
            "{}/{common}",
            std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default()
        )
    };
    let reflog = format!("{git_dir}/logs/HEAD");
    let mut watched = vec![
        format!("{git_dir}/HEAD"),
        reflog.clone(),
        format!("{common}/packed-refs"),
    ];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        let loose = format!("{common}/{branch}");
        if !Path::new(&loose).exists()
            && !Path::new(&reflog).exists()
            && let Some(dir) = Path::new(&loose).parent()
        {
            watched.push(dir.to_string_lossy().into_owned());
        }
        watched.push(loose);
    }
    // A path that does not exist would rerun this script on every build.
    for path in watched.iter().filter(|p| Path::new(p).exists()) {
        println!("cargo:rerun-if-changed={path}");
    }
    git(&["rev-parse", "--short=12", "HEAD"])
}
