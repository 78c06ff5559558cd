//! The processes a test or benchmark starts: a free port, a signal by process id, a set-up step
//! that must succeed, and [`fail`], which stops every registered child before it exits (exit
//! runs no destructors).

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

/// Ends the process with `message` (exit 2) after stopping every child registered with
/// [`register_child`]: for set-up a test or benchmark cannot go on without.
pub fn fail(message: &str) -> ! {
    eprintln!("test-support error: {message}");
    let children = CHILDREN.lock().map(|c| c.clone()).unwrap_or_default();
    for (pid, signal) in children {
        let _ = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status();
    }
    std::process::exit(2)
}

/// Processes started here (servers, daemons) with the signal that stops each:
/// `std::process::exit` runs no destructors, so [`fail`] stops them by their ids.
static CHILDREN: std::sync::Mutex<Vec<(u32, &'static str)>> = std::sync::Mutex::new(Vec::new());

/// Registers a child process for [`fail`] to stop with `signal` (`TERM`, `INT`, `KILL`).
pub fn register_child(pid: u32, signal: &'static str) {
    if let Ok(mut c) = CHILDREN.lock() {
        c.push((pid, signal));
    }
}

/// Forgets a child process that was stopped.
pub fn unregister_child(pid: u32) {
    if let Ok(mut c) = CHILDREN.lock() {
        c.retain(|(p, _)| *p != pid);
    }
}

/// Sends `signal` (`TERM`, `KILL`) to process `pid` with `kill(1)` — only ever a process this
/// test or benchmark started.
pub fn signal(pid: u32, signal: &str) {
    let _ = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status();
}

/// A free TCP port on 127.0.0.1 (bound and released; another process could take it before us,
/// which start-up then reports).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| fail(&format!("cannot find a free port: {e}")))
}

/// Runs a set-up step (`initdb`, `pg_ctl`, `chown`), quietly; [`fail`]s naming `what` if it
/// does not succeed.
pub fn run_quiet(command: &mut Command, what: &str) {
    match command.output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => fail(&format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => fail(&format!("cannot run {what}: {e}")),
    }
}

/// The path of the workspace's binary `name` built beside the running test or benchmark
/// (`target/<profile>/<name>`; Cargo builds a package's binaries before its integration tests
/// and benchmarks, and sets `CARGO_BIN_EXE_*` only for those, not for this library).
pub fn built_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe()
        .unwrap_or_else(|e| fail(&format!("cannot find the running executable: {e}")));
    exe.parent()
        .and_then(Path::parent)
        .map(|profile_dir| profile_dir.join(name))
        .unwrap_or_else(|| fail(&format!("no build folder above {}", exe.display())))
}
