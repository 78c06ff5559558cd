//! Redis Cluster: `MAIL_RATE_LIMIT_REDIS_URL` names one node or several (comma-separated seeds).
//! Several mean a cluster from the start; one is a standalone Redis until its first `MOVED`/`ASK`
//! answer shows it is a cluster node, and from then on the limiter never goes back to a
//! standalone link. The redis crate's cluster client follows redirections, refreshes its slot
//! map and serves a dead master's slots from its promoted replica, but reconnects only to the
//! nodes it was built with; so the nodes the cluster names in `CLUSTER SLOTS` (read every 10 s)
//! become seeds of the next client, dialled after repeated failures. Every key one script
//! touches carries one hash tag, so no call can fail with `CROSSSLOT`.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use redis::{
    ConnectionAddr, ConnectionInfo, RedisError, Value,
    cluster::{ClusterClient, ClusterConfig},
    cluster_async::ClusterConnection,
};

use super::{CONNECT_TIMEOUT, Link, RETRY_MAX_DELAY, RETRY_MIN_DELAY, RedisConn};

/// Retries of one cluster request (after a redirection, a slot-map refresh or a reconnect): 2,
/// each after a jittered wait of 10–50 ms, so they fit within the deadline.
const CLUSTER_RETRIES: u32 = 2;
/// How often the cluster's nodes are read (`CLUSTER SLOTS`) to keep the seeds current: 10 s;
/// 1 s after a read that failed.
const LEARN_EVERY: Duration = Duration::from_secs(10);
const LEARN_RETRY: Duration = Duration::from_secs(1);

impl RedisConn {
    /// A cluster client seeded with the configured and the learned nodes, connecting in the
    /// background (the first calls wait for it within their deadline), and its learner.
    pub(super) fn dial_cluster(&self) -> Result<Link, RedisError> {
        let mut nodes = self.seeds.clone();
        let learned = self.learned.lock().map(|l| l.clone()).unwrap_or_default();
        for node in learned {
            if !nodes.iter().any(|n| n.addr() == node.addr()) {
                nodes.push(node);
            }
        }
        let connect = CONNECT_TIMEOUT.min(self.deadline);
        let wait_ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let client = ClusterClient::builder(nodes)
            .connection_timeout(connect)
            .response_timeout(self.deadline)
            .retries(CLUSTER_RETRIES)
            .retry_wait_formula(wait_ms(RETRY_MIN_DELAY), 2)
            .min_retry_wait(wait_ms(RETRY_MIN_DELAY))
            .max_retry_wait(wait_ms(RETRY_MAX_DELAY))
            .build()?;
        let conn = client.get_pending_async_connection_with_config(
            ClusterConfig::new()
                .set_connection_timeout(connect)
                .set_response_timeout(self.deadline),
        );
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        tokio::spawn(learn_nodes(
            conn.clone(),
            self.seeds[0].clone(),
            Arc::clone(&self.learned),
            (Arc::clone(&self.generation), generation),
            self.deadline,
        ));
        Ok(Link::Cluster(conn))
    }
}

/// Reads the cluster's nodes (`CLUSTER SLOTS`) into `learned` now and every [`LEARN_EVERY`]
/// while `conn` is the newest link (`generation.0` still equals `generation.1`). Each node
/// takes `template`'s credentials, TLS and database.
async fn learn_nodes(
    mut conn: ClusterConnection,
    template: ConnectionInfo,
    learned: Arc<Mutex<Vec<ConnectionInfo>>>,
    generation: (Arc<AtomicU64>, u64),
    deadline: Duration,
) {
    let current = || generation.0.load(Ordering::Relaxed) == generation.1;
    while current() {
        let answer = tokio::time::timeout(
            deadline.max(Duration::from_secs(1)),
            redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query_async::<Value>(&mut conn),
        )
        .await;
        let nodes = match answer {
            Ok(Ok(slots)) => slot_nodes(&slots, Serving::All),
            _ => Vec::new(),
        };
        let pause = if nodes.is_empty() {
            LEARN_RETRY
        } else {
            let nodes = nodes
                .into_iter()
                .map(|(host, port)| node_at(&template, host, port))
                .collect();
            if let Ok(mut learned) = learned.lock() {
                *learned = nodes;
            }
            LEARN_EVERY
        };
        let until = Instant::now() + pause;
        while current() && Instant::now() < until {
            tokio::time::sleep(LEARN_RETRY.min(pause)).await;
        }
    }
}

/// Which nodes of a `CLUSTER SLOTS` answer [`slot_nodes`] lists.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Serving {
    /// The masters and their replicas.
    All,
    /// The masters only.
    Masters,
}

/// The nodes (`host`, `port`) a `CLUSTER SLOTS` answer names, once each.
pub(super) fn slot_nodes(answer: &Value, which: Serving) -> Vec<(String, u16)> {
    let mut nodes: Vec<(String, u16)> = Vec::new();
    let Value::Array(ranges) = answer else {
        return nodes;
    };
    for range in ranges {
        let Value::Array(fields) = range else {
            continue;
        };
        // start, end, the master's [host, port, id, …], then one such array per replica.
        let serving = fields.iter().skip(2);
        let serving = serving.take(if which == Serving::Masters {
            1
        } else {
            usize::MAX
        });
        for node in serving {
            let Value::Array(node) = node else { continue };
            let host = node
                .first()
                .and_then(crate::rate_limit::text)
                .unwrap_or_default();
            let port = match node.get(1) {
                Some(Value::Int(port)) => u16::try_from(*port).ok(),
                _ => None,
            };
            if let Some(port) = port
                && !host.is_empty()
                && host != "?"
                && !nodes.iter().any(|(h, p)| h == host && *p == port)
            {
                nodes.push((host.to_owned(), port));
            }
        }
    }
    nodes
}

/// `template` pointed at `host:port` (same credentials, TLS settings and database).
fn node_at(template: &ConnectionInfo, host: String, port: u16) -> ConnectionInfo {
    let addr = match template.addr() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host,
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host, port),
    };
    template.clone().set_addr(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_slots_name_every_node_once_or_the_masters_with_the_seeds_credentials() {
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let answer = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(8191),
                node("10.0.0.1", 7000),
                node("10.0.0.2", 7001),
            ]),
            Value::Array(vec![
                Value::Int(8192),
                Value::Int(16383),
                node("10.0.0.3", 7002),
                node("", 7003),
                node("10.0.0.1", 7000),
            ]),
        ]);
        let all = slot_nodes(&answer, Serving::All);
        let at = |h: &str, p: u16| (h.to_owned(), p);
        assert_eq!(
            all,
            [
                at("10.0.0.1", 7000),
                at("10.0.0.2", 7001),
                at("10.0.0.3", 7002)
            ]
        );
        let masters = slot_nodes(&answer, Serving::Masters);
        assert_eq!(masters, [at("10.0.0.1", 7000), at("10.0.0.3", 7002)]);
        assert!(slot_nodes(&Value::Nil, Serving::All).is_empty());

        let seed =
            redis::IntoConnectionInfo::into_connection_info("redis://u:pw@seed:6379/0").unwrap();
        let learned = node_at(&seed, "10.0.0.2".into(), 7001);
        assert_eq!(
            learned.addr(),
            &ConnectionAddr::Tcp("10.0.0.2".into(), 7001)
        );
        let settings = learned.redis_settings();
        assert_eq!(
            (settings.username(), settings.password(), settings.db()),
            (Some("u"), Some("pw"), 0)
        );
    }
}
