//! [`MeasuredRedis`]: a `redis-server` of a benchmark's (or test's) own whose `INFO
//! commandstats`, CPU time and memory hold only what the process under test did, and the
//! command counts read from it.

use std::{
    collections::BTreeMap,
    process::Stdio,
    time::{Duration, Instant},
};

use serde::Serialize;
use url::Url;

use crate::{
    proc_stats::cpu_seconds,
    process::{fail, free_port, register_child, unregister_child},
};

/// One Redis command family's counters from `INFO commandstats`.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CommandCount {
    /// Calls (commands run by Lua scripts count too, under their own name).
    pub calls: u64,
    /// Microseconds Redis spent running them.
    pub usec: u64,
}

/// `INFO commandstats` as command name → counters (`evalsha`, `get`, `client|setinfo`, …).
pub type CommandStats = BTreeMap<String, CommandCount>;

/// The commands the harness itself sends to a private Redis to read it; left out of every
/// figure (the daemon never sends them).
pub const HARNESS_COMMANDS: [&str; 3] = ["info", "hlen", "dbsize"];

/// `after − before` per command, without [`HARNESS_COMMANDS`] and zero rows.
pub fn command_delta(before: &CommandStats, after: &CommandStats) -> CommandStats {
    after
        .iter()
        .filter(|(name, _)| !HARNESS_COMMANDS.contains(&name.as_str()))
        .filter_map(|(name, a)| {
            let b = before.get(name).copied().unwrap_or_default();
            let d = CommandCount {
                calls: a.calls.saturating_sub(b.calls),
                usec: a.usec.saturating_sub(b.usec),
            };
            (d.calls > 0).then(|| (name.clone(), d))
        })
        .collect()
}

/// Total calls of a [`CommandStats`].
pub fn total_calls(stats: &CommandStats) -> u64 {
    stats.values().map(|c| c.calls).sum()
}

/// A `redis-server` of the benchmark's own on a free port (no persistence), so `INFO
/// commandstats`, its CPU time and its memory hold only what the daemon under test did — the
/// machine's shared Redis serves other work. Killed on drop.
pub struct MeasuredRedis {
    child: std::process::Child,
    /// `redis://127.0.0.1:<port>`.
    pub url: Url,
    conn: redis::aio::MultiplexedConnection,
}

impl MeasuredRedis {
    /// Starts `redis-server` and waits (up to 10 s) until it answers.
    pub async fn start() -> Self {
        let port = free_port();
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--loglevel", "warning"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                fail(&format!(
                    "cannot start redis-server (redis-server package): {e}"
                ))
            });
        register_child(child.id(), "KILL");
        let url = Url::parse(&format!("redis://127.0.0.1:{port}"))
            .unwrap_or_else(|e| fail(&format!("bad Redis URL: {e}")));
        let client = redis::Client::open(url.as_str())
            .unwrap_or_else(|e| fail(&format!("cannot use {url}: {e}")));
        let deadline = Instant::now() + Duration::from_secs(10);
        let conn = loop {
            match client.get_multiplexed_async_connection().await {
                Ok(conn) => break conn,
                Err(e) if Instant::now() > deadline => fail(&format!(
                    "the private redis-server on port {port} never answered: {e}"
                )),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        Self { child, url, conn }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// CPU seconds the server has used.
    pub fn cpu_seconds(&self) -> f64 {
        cpu_seconds(self.pid()).unwrap_or(0.0)
    }

    /// `INFO <section>`.
    async fn info(&mut self, section: &str) -> String {
        redis::cmd("INFO")
            .arg(section)
            .query_async(&mut self.conn)
            .await
            .unwrap_or_else(|e| fail(&format!("INFO {section} failed: {e}")))
    }

    /// `INFO commandstats`.
    pub async fn commandstats(&mut self) -> CommandStats {
        parse_commandstats(&self.info("commandstats").await)
    }

    /// `used_memory` of `INFO memory`, in bytes.
    pub async fn used_memory(&mut self) -> u64 {
        self.info("memory")
            .await
            .lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// `DBSIZE`: keys in database 0.
    pub async fn dbsize(&mut self) -> u64 {
        redis::cmd("DBSIZE")
            .query_async(&mut self.conn)
            .await
            .unwrap_or_else(|e| fail(&format!("DBSIZE failed: {e}")))
    }

    /// `HLEN key`.
    pub async fn hlen(&mut self, key: &str) -> u64 {
        redis::cmd("HLEN")
            .arg(key)
            .query_async(&mut self.conn)
            .await
            .unwrap_or_else(|e| fail(&format!("HLEN failed: {e}")))
    }
}

impl Drop for MeasuredRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        unregister_child(self.child.id());
    }
}

/// Parses `INFO commandstats` lines `cmdstat_<name>:calls=N,usec=N,…`.
pub fn parse_commandstats(info: &str) -> CommandStats {
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.trim().strip_prefix("cmdstat_")?.split_once(':')?;
            let mut count = CommandCount::default();
            for pair in rest.split(',') {
                match pair.split_once('=') {
                    Some(("calls", v)) => count.calls = v.parse().ok()?,
                    Some(("usec", v)) => count.usec = v.parse().ok()?,
                    _ => {}
                }
            }
            Some((name.to_owned(), count))
        })
        .collect()
}
