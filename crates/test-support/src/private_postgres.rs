//! [`PrivatePostgres`]: a throwaway PostgreSQL cluster of a test's or benchmark's own, for what
//! stops, restarts or counts a whole server.

use std::{path::PathBuf, process::Stdio};

use url::Url;
use uuid::Uuid;

use crate::{
    proc_stats::{children_of, clock_ticks, cpu_seconds, proc_stat_fields},
    process::{fail, free_port, register_child, run_quiet, unregister_child},
};

/// A throwaway PostgreSQL cluster of the benchmark's own (`initdb` defaults, same PostgreSQL
/// version as the local server) on a free port, with room for more connections than a default
/// server's 100: each daemon's pool holds up to `WORKER_CONCURRENCY` + 4 connections, so two
/// daemons at 64 need 136. Runs as the `postgres` user when the benchmark runs as root
/// (PostgreSQL refuses root). Stopped (fast shutdown) and deleted on drop.
pub struct PrivatePostgres {
    dir: PathBuf,
    bin: PathBuf,
    as_postgres: bool,
    pid: u32,
    options: String,
    /// `postgres://postgres@127.0.0.1:<port>/postgres`.
    pub url: Url,
}

impl PrivatePostgres {
    /// `initdb` + `pg_ctl start` with `max_connections` and `settings` (`name=value`, e.g.
    /// `shared_preload_libraries=pg_stat_statements`); takes a few seconds.
    pub fn start(max_connections: u32, settings: &[&str]) -> Self {
        let bin = postgres_bin_dir();
        let as_postgres = std::process::Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
        let dir = std::env::temp_dir().join(format!(
            "mail-worker-bench-pg-{}",
            &Uuid::new_v4().simple().to_string()[..12]
        ));
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| fail(&format!("cannot create {}: {e}", dir.display())));
        if as_postgres {
            run_quiet(
                std::process::Command::new("chown")
                    .arg("postgres:postgres")
                    .arg(&dir),
                "chown",
            );
        }
        let mut pg = Self {
            dir: dir.clone(),
            bin,
            as_postgres,
            pid: 0,
            options: String::new(),
            url: Url::parse("postgres://postgres@127.0.0.1:1/postgres")
                .unwrap_or_else(|e| fail(&e.to_string())),
        };
        let data = dir.join("data");
        run_quiet(
            pg.tool("initdb").arg("-D").arg(&data).args([
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
            ]),
            "initdb",
        );
        let port = free_port();
        pg.options = format!(
            "-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c max_connections={max_connections}{}",
            dir.display(),
            settings
                .iter()
                .map(|s| format!(" -c {s}"))
                .collect::<String>()
        );
        pg.start_server();
        pg.url = Url::parse(&format!("postgres://postgres@127.0.0.1:{port}/postgres"))
            .unwrap_or_else(|e| fail(&e.to_string()));
        pg
    }

    /// The postmaster's process id (0 while stopped).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// CPU seconds of the whole server so far: the postmaster, its live processes (backends,
    /// autovacuum, checkpointer, …) and the ones that exited (`cutime` + `cstime`).
    pub fn cpu_seconds(&self) -> f64 {
        let own = proc_stat_fields(self.pid).map_or(0.0, |f| {
            f.get(11..15)
                .unwrap_or_default()
                .iter()
                .filter_map(|v| v.parse::<f64>().ok())
                .sum::<f64>()
                / clock_ticks()
        });
        own + children_of(self.pid)
            .into_iter()
            .filter_map(cpu_seconds)
            .sum::<f64>()
    }

    fn start_server(&mut self) {
        let data = self.dir.join("data");
        run_quiet(
            self.tool("pg_ctl")
                .arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(self.dir.join("server.log"))
                .args(["-w", "-t", "60", "-o"])
                .arg(&self.options)
                .arg("start"),
            "pg_ctl start",
        );
        let pid = std::fs::read_to_string(data.join("postmaster.pid"))
            .ok()
            .and_then(|s| s.lines().next()?.trim().parse().ok())
            .unwrap_or_else(|| fail("the private PostgreSQL wrote no postmaster.pid"));
        register_child(pid, "INT");
        self.pid = pid;
    }

    /// Stops the server (fast shutdown: sessions are cut), keeping its data and port, so
    /// [`Self::restart`] brings the same cluster back. For outage tests.
    pub fn stop(&mut self) {
        if self.pid == 0 {
            return;
        }
        run_quiet(
            self.tool("pg_ctl")
                .arg("-D")
                .arg(self.dir.join("data"))
                .args(["-m", "fast", "-w", "stop"]),
            "pg_ctl stop",
        );
        unregister_child(self.pid);
        self.pid = 0;
    }

    /// Starts the stopped server again, on the same port with the same data.
    pub fn restart(&mut self) {
        if self.pid == 0 {
            self.start_server();
        }
    }

    fn tool(&self, name: &str) -> std::process::Command {
        let program = self.bin.join(name);
        if self.as_postgres {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            std::process::Command::new(program)
        }
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        if self.pid != 0 {
            let _ = self
                .tool("pg_ctl")
                .arg("-D")
                .arg(self.dir.join("data"))
                .args(["-m", "fast", "-w", "stop"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            unregister_child(self.pid);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The directory of `initdb` and `pg_ctl`: `PG_BIN` if set, else the newest
/// `/usr/lib/postgresql/<version>/bin` (Debian's layout), else whatever `PATH` holds.
fn postgres_bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("PG_BIN") {
        return PathBuf::from(dir);
    }
    let newest = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let e = e.ok()?;
            let version: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .max_by_key(|(v, _)| *v);
    newest.map_or_else(PathBuf::new, |(_, bin)| bin)
}
