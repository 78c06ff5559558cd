//! The tests' Python: the venv `scripts/test-deps.sh` makes at setup (target/test-venv, or
//! `TEST_VENV`), with `redis` (the producer example) and `standardwebhooks` (the outbox's
//! reference receivers). Nothing is installed while the tests run: a venv that is missing or
//! lacks a package fails the test with the script to run.

use std::path::PathBuf;

/// The venv's python, checked to import `module`.
///
/// # Panics
/// No venv, or one without `module`: the message names `scripts/test-deps.sh`.
pub fn with(module: &str) -> PathBuf {
    let venv = std::env::var_os("TEST_VENV").map_or_else(
        || PathBuf::from(crate::WORKSPACE).join("target/test-venv"),
        |v| {
            let v = PathBuf::from(v);
            if v.is_absolute() {
                v
            } else {
                PathBuf::from(crate::WORKSPACE).join(v)
            }
        },
    );
    let python = venv.join("bin/python");
    let imports = std::process::Command::new(&python)
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        imports,
        "the tests' Python venv {} lacks the Python package `{module}` (or is missing): run \
         scripts/test-deps.sh (scripts/services.sh runs it) once, with the network, before cargo test",
        venv.display()
    );
    python
}
