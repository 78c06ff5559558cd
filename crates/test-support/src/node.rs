//! Node's packages for the tests: npm's `standardwebhooks`, which `scripts/test-deps.sh`
//! installs at setup into target/test-node where Node is present. Nothing is installed while
//! the tests run.

use std::path::PathBuf;

/// The `node_modules` folder holding `package`; `None` when Node is not installed (the tests
/// that use it leave the npm receiver out and say so).
///
/// # Panics
/// Node installed but `package` missing: the message names `scripts/test-deps.sh`.
pub fn modules_with(package: &str) -> Option<PathBuf> {
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !node {
        eprintln!("Node is not installed: the npm `{package}` receiver is left out");
        return None;
    }
    let modules = PathBuf::from(crate::WORKSPACE).join("target/test-node/node_modules");
    assert!(
        modules.join(package).join("package.json").is_file(),
        "{} lacks the npm package `{package}`: run scripts/test-deps.sh (scripts/services.sh \
         runs it) once, with the network, before cargo test",
        modules.display()
    );
    Some(modules)
}
