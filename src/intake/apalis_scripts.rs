//! The check that apalis-redis still ships the scripts `connection` intercepts by SHA-1 (test
//! only): it finds the crate we build through `cargo metadata`, hashes every `lua/*.lua` it ships
//! as Redis does (`redis::Script`'s SHA-1 of the text), and fails, naming the script, when one
//! we intercept is missing or changed. So a `cargo update` of apalis-redis breaks at `cargo test`,
//! never in production (where a changed script would silently run unpatched).

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use super::connection::{APALIS_REDIS_VERSION, INTERCEPTED};

/// The SHA-1 of every `*.lua` file in `dir`, by file name.
fn script_shas(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "lua"))
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, redis::Script::new(&text).get_hash().to_owned())
        })
        .collect()
}

/// The intercepted scripts that `shipped` lacks or ships with another SHA-1, one line each
/// naming the script; empty when all match.
fn changed_intercepted(shipped: &BTreeMap<String, String>) -> Vec<String> {
    INTERCEPTED
        .iter()
        .filter_map(|&(name, sha)| match shipped.get(name) {
            Some(now) if now == sha => None,
            Some(now) => Some(format!(
                "apalis-redis's lua/{name} changed (SHA-1 {now}, intercepted as {sha}): \
                 review lua/intake/ and src/intake/connection.rs against it, then update the SHA-1"
            )),
            None => Some(format!(
                "apalis-redis no longer ships lua/{name} (intercepted as {sha})"
            )),
        })
        .collect()
}

/// `cargo metadata` of this package for the platform we build (offline: the lock file decides,
/// and the other platforms' crates need not be downloaded).
fn metadata() -> serde_json::Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--offline"])
        .args(["--filter-platform", env!("MAIL_WORKER_TARGET")])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The package named `name` in `metadata` (the one this workspace resolves).
fn package<'m>(metadata: &'m serde_json::Value, name: &str) -> &'m serde_json::Value {
    metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("{name} in cargo metadata"))
}

#[test]
fn apalis_redis_is_pinned_and_ships_the_scripts_we_intercept() {
    let metadata = metadata();
    let ours = package(&metadata, env!("CARGO_PKG_NAME"));
    let requirement = ours["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "apalis-redis")
        .map(|d| d["req"].as_str().unwrap().to_owned());
    assert_eq!(
        requirement.as_deref(),
        Some(format!("={APALIS_REDIS_VERSION}").as_str()),
        "Cargo.toml pins apalis-redis to the version whose scripts we intercept"
    );
    let apalis = package(&metadata, "apalis-redis");
    assert_eq!(apalis["version"], APALIS_REDIS_VERSION);
    let manifest = PathBuf::from(apalis["manifest_path"].as_str().unwrap());
    let shipped = script_shas(&manifest.parent().unwrap().join("lua"));
    for (name, sha) in &shipped {
        println!("apalis-redis {APALIS_REDIS_VERSION} lua/{name} {sha}");
    }
    assert_eq!(shipped.len(), 19, "apalis-redis 1.0.0 ships 19 scripts");
    let changed = changed_intercepted(&shipped);
    assert!(changed.is_empty(), "{}", changed.join("\n"));
}

#[test]
fn a_changed_intercepted_script_is_named() {
    let apalis = package(&metadata(), "apalis-redis").clone();
    let manifest = PathBuf::from(apalis["manifest_path"].as_str().unwrap());
    let copy = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(manifest.parent().unwrap().join("lua")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, copy.path().join(path.file_name().unwrap())).unwrap();
    }
    // One character more in the lease script, and the register script gone.
    let leases = copy.path().join("acquire_leases.lua");
    let text = std::fs::read_to_string(&leases).unwrap();
    std::fs::write(&leases, format!("{text}\n")).unwrap();
    std::fs::remove_file(copy.path().join("register_worker.lua")).unwrap();

    let changed = changed_intercepted(&script_shas(copy.path()));
    assert_eq!(changed.len(), 2, "{changed:?}");
    assert!(
        changed[0].starts_with("apalis-redis no longer ships lua/register_worker.lua"),
        "{}",
        changed[0]
    );
    assert!(
        changed[1].starts_with("apalis-redis's lua/acquire_leases.lua changed (SHA-1 "),
        "{}",
        changed[1]
    );
    // The other scripts, changed, are not ours to check.
    let stats = copy.path().join("stats.lua");
    std::fs::write(&stats, "return 1").unwrap();
    std::fs::copy(
        manifest.parent().unwrap().join("lua/register_worker.lua"),
        copy.path().join("register_worker.lua"),
    )
    .unwrap();
    std::fs::write(&leases, text).unwrap();
    assert_eq!(
        changed_intercepted(&script_shas(copy.path())),
        Vec::<String>::new()
    );
}
