//! Private `redis-server` processes for tests that stop, freeze or cluster a Redis: one
//! [`PrivateRedis`] (its own port and directory, stopped on drop) and [`start_cluster`] (a real
//! Redis Cluster of them, every slot served), with [`owner`] (the node serving a key).

use std::{
    process::{Child, Command, Stdio},
    time::Duration,
};

use url::Url;

pub use crate::process::free_port;

/// A `redis-server` of this test's own (no persistence), stopped on drop.
pub struct PrivateRedis {
    pub port: u16,
    child: Option<Child>,
    args: Vec<String>,
    dir: std::path::PathBuf,
}

impl PrivateRedis {
    pub fn start(extra: &[&str]) -> Self {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("mw-redis-{port}"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut redis = Self {
            port,
            child: None,
            args: extra.iter().map(|s| (*s).to_owned()).collect(),
            dir,
        };
        redis.spawn();
        redis
    }

    pub fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(&self.args)
            .current_dir(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (scripts/services.sh installs it)");
        self.child = Some(child);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes (`SIGSTOP`) or thaws (`SIGCONT`) the server: connections stay open, nothing answers.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        let status = Command::new("kill").args([signal, &pid]).status().unwrap();
        assert!(status.success(), "kill {signal} {pid}");
    }

    pub fn url(&self) -> Url {
        Url::parse(&format!("redis://127.0.0.1:{}", self.port)).unwrap()
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Cluster of `masters` masters with `replicas` replicas each (node timeout 1 s), every
/// slot served and every replica in sync; each node stopped and its directory removed on drop.
pub fn start_cluster(masters: usize, replicas: usize) -> Vec<PrivateRedis> {
    let nodes: Vec<PrivateRedis> = (0..masters * (1 + replicas))
        .map(|_| {
            PrivateRedis::start(&[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "1000",
            ])
        })
        .collect();
    let status = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)))
        .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "redis-cli --cluster create");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let cli = |n: &PrivateRedis, args: &[&str]| {
        let out = Command::new("redis-cli")
            .args(["-p", &n.port.to_string()])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let ready = |n: &PrivateRedis| {
        let replication = cli(n, &["info", "replication"]);
        cli(n, &["cluster", "info"]).contains("cluster_state:ok")
            && (replication.contains("master_link_status:up")
                || replication.contains(&format!("connected_slaves:{replicas}")))
    };
    while !nodes.iter().all(ready) {
        assert!(
            std::time::Instant::now() < deadline,
            "the cluster never became ok with every replica in sync"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    nodes
}

/// The node of `nodes` that serves `key` (the others answer `MOVED`, replicas included).
pub fn owner(nodes: &[PrivateRedis], key: &str) -> usize {
    nodes
        .iter()
        .position(|n| {
            let mut conn = redis::Client::open(n.url().as_str())
                .unwrap()
                .get_connection()
                .unwrap();
            redis::cmd("EXISTS")
                .arg(key)
                .query::<i64>(&mut conn)
                .is_ok()
        })
        .expect("one node serves every slot")
}
