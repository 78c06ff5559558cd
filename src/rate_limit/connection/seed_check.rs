//! The start-up check of a limiter given one URL: is that one node of a Redis Cluster? Then a
//! replica started while that node is down cannot find the cluster at all (issue 46: it
//! failed open for its whole life), so say so, once, naming the fix: list the masters
//! (comma-separated seeds) or give a DNS name that resolves to all of them (a Kubernetes
//! headless Service). A name that resolves to several addresses is that already: the redis
//! crate resolves a seed's name at every connection attempt and tries each address, so
//! nothing is said.
//!
//! Redis Cluster clients learn the topology from any one reachable node (`CLUSTER SLOTS`,
//! <https://redis.io/docs/latest/operate/oss_and_stack/reference/cluster-spec/#client-and-server-roles-in-the-redis-cluster-protocol>);
//! one node given is one node that must be up when the client starts.

use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo};

/// How long one attempt of the check may take.
const CHECK_WITHIN: Duration = Duration::from_secs(2);
/// The first wait after a seed that did not answer; it doubles up to [`RETRY_CAP`].
const RETRY_BASE: Duration = Duration::from_secs(1);
const RETRY_CAP: Duration = Duration::from_secs(30);

/// The warning for `seed` (the only configured URL) once it answers, or `None` when it is not a
/// cluster node or its name resolves to several addresses. Retries with backoff while the seed
/// does not answer, while `wanted` (the limiter still lives), so call it in a task of its own.
pub(super) async fn single_seed_warning(
    seed: ConnectionInfo,
    wanted: impl Fn() -> bool,
) -> Option<String> {
    let place = match seed.addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            (host.clone(), *port)
        }
        _ => return None,
    };
    let mut failures = 0;
    while wanted() {
        if let Ok(Ok(addresses)) =
            tokio::time::timeout(CHECK_WITHIN, tokio::net::lookup_host(place.clone())).await
        {
            let mut addresses: Vec<_> = addresses.map(|a| a.ip()).collect();
            addresses.sort();
            addresses.dedup();
            if addresses.len() > 1 {
                return None;
            }
        }
        match tokio::time::timeout(CHECK_WITHIN, cluster_enabled(&seed)).await {
            Ok(Ok(false)) => return None,
            Ok(Ok(true)) => {
                let (host, port) = &place;
                return Some(format!(
                    "MAIL_RATE_LIMIT_REDIS_URL (default REDIS_URL) names one node of a Redis Cluster ({host}:{port}): a replica that starts while that node is down cannot find the cluster and fails open until it answers; list the cluster's masters comma-separated, or give one DNS name that resolves to all of them (a headless Service)"
                ));
            }
            _ => {}
        }
        failures += 1;
        tokio::time::sleep(crate::backoff::jittered(failures, RETRY_BASE, RETRY_CAP)).await;
    }
    None
}

/// Whether `node` says `cluster_enabled:1` (`INFO cluster`).
async fn cluster_enabled(node: &ConnectionInfo) -> redis::RedisResult<bool> {
    let client = redis::Client::open(node.clone())?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO")
        .arg("cluster")
        .query_async(&mut conn)
        .await?;
    Ok(info.lines().any(|l| l.trim() == "cluster_enabled:1"))
}
