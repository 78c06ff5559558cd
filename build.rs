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
/// this again when `HEAD` moves (the checkout's `HEAD`, the branch it names, `packed-refs`).
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
    let mut watched = vec![format!("{git_dir}/HEAD"), format!("{common}/packed-refs")];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(format!("{common}/{branch}"));
    }
    // A path that does not exist would rerun this script on every build.
    for path in watched.iter().filter(|p| Path::new(p).exists()) {
        println!("cargo:rerun-if-changed={path}");
    }
    git(&["rev-parse", "--short=12", "HEAD"])
}
