//! A private Redis Cluster for the scale benchmark: `masters` `redis-server --cluster-enabled
//! yes` processes on free ports, joined by `redis-cli --cluster create` (no replicas), every
//! slot served; with the counters the benchmark reads of each master (`INFO commandstats`,
//! `used_memory`, CPU). Each node is killed and its directory removed on drop.

use std::{
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use crate::{
    daemon::{CommandStats, command_delta, cpu_seconds, free_port, parse_commandstats},
    fail, register_child, unregister_child,
};

/// One node of a [`PrivateCluster`].
struct Node {
    port: u16,
    child: Child,
    dir: std::path::PathBuf,
}

/// A Redis Cluster of masters only, of the benchmark's own.
pub struct PrivateCluster {
    nodes: Vec<Node>,
}

impl PrivateCluster {
    /// Starts `masters` nodes (at least 3, as `redis-cli --cluster create` wants) and waits (up
    /// to 30 s) until every node says `cluster_state:ok`.
    pub fn start(masters: usize) -> Self {
        let nodes: Vec<Node> = (0..masters.max(3))
            .map(|_| {
                let port = free_port();
                let dir = std::env::temp_dir().join(format!("mail-worker-bench-cluster-{port}"));
                std::fs::create_dir_all(&dir)
                    .unwrap_or_else(|e| fail(&format!("cannot create {}: {e}", dir.display())));
                let child = Command::new("redis-server")
                    .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                    .args(["--save", "", "--appendonly", "no", "--loglevel", "warning"])
                    .args([
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                    ])
                    .current_dir(&dir)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap_or_else(|e| fail(&format!("cannot start redis-server: {e}")));
                register_child(child.id(), "KILL");
                Node { port, child, dir }
            })
            .collect();
        let cluster = Self { nodes };
        let deadline = Instant::now() + Duration::from_secs(10);
        for node in &cluster.nodes {
            while std::net::TcpStream::connect(("127.0.0.1", node.port)).is_err() {
                if Instant::now() > deadline {
                    fail(&format!(
                        "redis-server on port {} never answered",
                        node.port
                    ));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(
                cluster
                    .nodes
                    .iter()
                    .map(|n| format!("127.0.0.1:{}", n.port)),
            )
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap_or_else(|e| fail(&format!("cannot run redis-cli --cluster create: {e}")));
        if !created.success() {
            fail("redis-cli --cluster create failed");
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while !cluster.nodes.iter().all(|n| {
            cluster
                .cli(n, &["cluster", "info"])
                .contains("cluster_state:ok")
        }) {
            if Instant::now() > deadline {
                fail("the private Redis Cluster never reached cluster_state:ok");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        cluster
    }

    fn cli(&self, node: &Node, args: &[&str]) -> String {
        Command::new("redis-cli")
            .args(["-p", &node.port.to_string()])
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// The seeds, comma-separated (`MAIL_RATE_LIMIT_REDIS_URL`'s cluster form).
    pub fn seeds(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}", n.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `INFO commandstats` of every master, summed per command.
    pub fn commandstats(&self) -> CommandStats {
        let mut total = CommandStats::new();
        for node in &self.nodes {
            for (name, c) in parse_commandstats(&self.cli(node, &["info", "commandstats"])) {
                let t = total.entry(name).or_default();
                t.calls += c.calls;
                t.usec += c.usec;
            }
        }
        total
    }

    /// What happened between two [`Self::commandstats`].
    pub fn delta(before: &CommandStats, after: &CommandStats) -> CommandStats {
        command_delta(before, after)
    }

    /// `used_memory` of every master, summed, bytes.
    pub fn used_memory(&self) -> u64 {
        self.nodes
            .iter()
            .filter_map(|n| {
                self.cli(n, &["info", "memory"])
                    .lines()
                    .find_map(|l| l.strip_prefix("used_memory:"))
                    .and_then(|v| v.trim().parse::<u64>().ok())
            })
            .sum()
    }

    /// Keys on every master, summed.
    pub fn keys(&self) -> u64 {
        self.nodes
            .iter()
            .filter_map(|n| self.cli(n, &["dbsize"]).trim().parse::<u64>().ok())
            .sum()
    }

    /// CPU seconds of each master so far.
    pub fn cpu_seconds(&self) -> Vec<f64> {
        self.nodes
            .iter()
            .map(|n| cpu_seconds(n.child.id()).unwrap_or(0.0))
            .collect()
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            let _ = node.child.kill();
            let _ = node.child.wait();
            unregister_child(node.child.id());
            let _ = std::fs::remove_dir_all(&node.dir);
        }
    }
}
