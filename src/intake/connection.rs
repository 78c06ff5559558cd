//! The intake queue's Redis connection ([`QueueConnection`]): one node (`REDIS_URL` one URL: the
//! redis crate's connection manager) or a Redis Cluster (`REDIS_URL` several comma-separated
//! seeds: its cluster client, which follows `MOVED`/`ASK` and a failover). The same connection
//! serves apalis-redis's storage (generic over the connection), our scripts and the queue
//! commands.
//!
//! Every key of the queue carries the queue name's hash tag (`{…}`: the config refuses a
//! cluster queue name without one), so every script runs on the one node owning that slot. All
//! but one of apalis-redis 1.0.0's scripts touch only keys under the queue name;
//! `register_worker.lua` also writes `core:apalis:queues:list`, which a cluster node that does
//! not own that key's slot refuses. On a cluster this connection therefore runs
//! `lua/intake/register.lua` in its place: the same KEYS, ARGV and effect on the queue's keys,
//! without the global list (a list of queues for apalis-board; nothing of ours reads it).
//!
//! On every connection, apalis-redis's `acquire_leases.lua` runs as
//! `lua/intake/acquire_leases.lua`: the same without a per-job `LREM` of the active list, which
//! `fetch_next.lua` has already trimmed (that scan made each job cost O(backlog)).

use std::{
    sync::{Arc, LazyLock},
    time::Duration,
};

use redis::{
    Arg, Cmd, Pipeline, RedisFuture, Script, ScriptInvocation, Value,
    aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig},
    cluster::{ClusterClient, ClusterConfig},
};

use super::IntakeError;
use crate::ops::intake::ConsumerHealth;
use crate::rate_limit::{RedisLink as Link, RedisUrls};

/// The longest one connection attempt may take: 2 s.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest one command may wait for its answer: 30 s.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);

/// The apalis-redis version the SHA-1s below were taken from: `Cargo.toml` pins it (`=1.0.0`), and
/// the unit test `intake::apalis_scripts` fails, naming the script, when the crate we build ships
/// an intercepted script whose SHA-1 is not the one below (an upgrade breaks at `cargo test`).
#[cfg(test)]
pub(super) const APALIS_REDIS_VERSION: &str = "1.0.0";

/// The scripts of apalis-redis this connection intercepts by SHA-1: (file under the crate's
/// `lua/`, its SHA-1).
#[cfg(test)]
pub(super) const INTERCEPTED: [(&str, &str); 2] = [
    ("register_worker.lua", APALIS_REGISTER_SHA),
    ("acquire_leases.lua", APALIS_ACQUIRE_LEASES_SHA),
];

/// The SHA-1 of apalis-redis 1.0.0's `lua/register_worker.lua`, the script replaced on a cluster
/// (a later apalis-redis with a changed script would no longer match: `intake::apalis_scripts`
/// then fails naming it).
const APALIS_REGISTER_SHA: &str = "0d5fbce91e1dcff1121ece41f7169da3c0e39194";

static REGISTER: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/intake/register.lua")));

/// The SHA-1 of apalis-redis 1.0.0's `lua/acquire_leases.lua`, replaced on every connection (a
/// changed script would no longer match and run as apalis-redis wrote it: `intake::apalis_scripts`
/// fails naming it).
const APALIS_ACQUIRE_LEASES_SHA: &str = "f7ff133460a6cd6a739e294b0f4f7a584599f1fc";

static ACQUIRE_LEASES: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/intake/acquire_leases.lua")));

/// A connection to the queue's Redis: one node or a cluster (see the module docs). Cheap to
/// clone (multiplexed). The consumer's own clone ([`Self::reporting_to`]) tells its
/// [`ConsumerHealth`] of every answer, so `/readyz` knows whether the consumer polls.
#[derive(Clone)]
pub struct QueueConnection {
    link: Link,
    answers: Option<Arc<ConsumerHealth>>,
}

impl std::fmt::Debug for QueueConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.link {
            Link::Single(_) => "QueueConnection::Single",
            Link::Cluster(_) => "QueueConnection::Cluster",
        })
    }
}

impl QueueConnection {
    /// Connects to `urls` now (`mail-worker queue …`, `enqueue --via queue`, the demo).
    ///
    /// # Errors
    /// A URL the client refuses, or a Redis that does not answer.
    pub async fn connect(urls: &RedisUrls) -> Result<Self, IntakeError> {
        Ok(Self::from(if urls.is_cluster() {
            Link::Cluster(
                cluster_client(urls)?
                    .get_async_connection_with_config(cluster_config())
                    .await?,
            )
        } else {
            Link::Single(apalis_redis::connect(urls.first().as_str()).await?)
        }))
    }

    /// A connection that does not need Redis to answer now (the daemon starts with the queue's
    /// Redis down; the worker waits for it, `/readyz` says degraded meanwhile).
    ///
    /// # Errors
    /// A URL the client refuses.
    pub(crate) fn lazy(urls: &RedisUrls) -> Result<Self, IntakeError> {
        Ok(Self::from(if urls.is_cluster() {
            Link::Cluster(
                cluster_client(urls)?.get_pending_async_connection_with_config(cluster_config()),
            )
        } else {
            let client = redis::Client::open(urls.first().as_str())?;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(CONNECT_TIMEOUT))
                .set_response_timeout(Some(RESPONSE_TIMEOUT));
            Link::Single(ConnectionManager::new_lazy_with_config(client, config)?)
        }))
    }

    /// Whether this is a Redis Cluster connection.
    pub fn is_cluster(&self) -> bool {
        matches!(self.link, Link::Cluster(_))
    }

    /// A clone that tells `health` of each answer it gets (the consumer's storage).
    pub(crate) fn reporting_to(&self, health: &Arc<ConsumerHealth>) -> Self {
        Self {
            link: self.link.clone(),
            answers: Some(Arc::clone(health)),
        }
    }
}

impl From<Link> for QueueConnection {
    fn from(link: Link) -> Self {
        Self {
            link,
            answers: None,
        }
    }
}

/// `answer`, told to `health` when it is one.
fn told<'a, T: Send + 'a>(
    health: Option<&Arc<ConsumerHealth>>,
    answer: RedisFuture<'a, T>,
) -> RedisFuture<'a, T> {
    match health {
        None => answer,
        Some(health) => {
            let health = Arc::clone(health);
            Box::pin(async move {
                let answer = answer.await;
                if answer.is_ok() {
                    health.answered();
                }
                answer
            })
        }
    }
}

fn cluster_client(urls: &RedisUrls) -> Result<ClusterClient, IntakeError> {
    let seeds = urls.as_slice().iter().map(url::Url::as_str);
    Ok(ClusterClient::builder(seeds)
        .connection_timeout(CONNECT_TIMEOUT)
        .response_timeout(RESPONSE_TIMEOUT)
        .build()?)
}

fn cluster_config() -> ClusterConfig {
    ClusterConfig::new()
        .set_connection_timeout(CONNECT_TIMEOUT)
        .set_response_timeout(RESPONSE_TIMEOUT)
}

/// A script call's keys and arguments.
type KeysAndArgs<'a> = (Vec<&'a [u8]>, Vec<&'a [u8]>);

/// The keys and the arguments of `cmd` when it is an `EVALSHA` of the script `sha`; else `None`.
fn evalsha_of<'c>(cmd: &'c Cmd, sha: &str) -> Option<KeysAndArgs<'c>> {
    let mut args = cmd.args_iter().map(|arg| match arg {
        Arg::Simple(bytes) => bytes,
        _ => &[],
    });
    if !args.next()?.eq_ignore_ascii_case(b"EVALSHA") || args.next()? != sha.as_bytes() {
        return None;
    }
    let keys: usize = std::str::from_utf8(args.next()?).ok()?.parse().ok()?;
    let keys: Vec<&[u8]> = args.by_ref().take(keys).collect();
    Some((keys, args.collect()))
}

/// Our script to run in place of `cmd` (an apalis-redis script call we replace: its register
/// script on a cluster, its lease script everywhere), with `cmd`'s keys and arguments.
fn replacement(cmd: &Cmd, cluster: bool) -> Option<ScriptInvocation<'static>> {
    let (script, (keys, args)) = match evalsha_of(cmd, APALIS_ACQUIRE_LEASES_SHA) {
        Some(call) => (&*ACQUIRE_LEASES, call),
        None if cluster => (&*REGISTER, evalsha_of(cmd, APALIS_REGISTER_SHA)?),
        None => return None,
    };
    let mut call = script.prepare_invoke();
    for key in keys {
        call.key(key);
    }
    for arg in args {
        call.arg(arg);
    }
    Some(call)
}

impl ConnectionLike for QueueConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let answer: RedisFuture<'a, Value> =
            match (replacement(cmd, self.is_cluster()), &mut self.link) {
                (Some(call), Link::Cluster(c)) => {
                    Box::pin(async move { call.invoke_async(c).await })
                }
                (Some(call), Link::Single(c)) => {
                    Box::pin(async move { call.invoke_async(c).await })
                }
                (None, link) => link.req_packed_command(cmd),
            };
        told(self.answers.as_ref(), answer)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        told(
            self.answers.as_ref(),
            self.link.req_packed_commands(pipeline, offset, count),
        )
    }

    fn get_db(&self) -> i64 {
        self.link.get_db()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_apalis_redis_register_script_is_replaced_its_keys_and_arguments_kept() {
        let mut apalis = redis::cmd("EVALSHA");
        apalis
            .arg(APALIS_REGISTER_SHA)
            .arg(2)
            .arg("{q}:workers")
            .arg("{q}:workers:metadata:w")
            .arg(1_700_000_000)
            .arg("w");
        let (keys, args) = evalsha_of(&apalis, APALIS_REGISTER_SHA).expect("replaced");
        assert_eq!(keys, [&b"{q}:workers"[..], b"{q}:workers:metadata:w"]);
        assert_eq!(args, [&b"1700000000"[..], b"w"]);
        assert!(replacement(&apalis, true).is_some(), "on a cluster");
        assert!(replacement(&apalis, false).is_none(), "on one node");
        let mut other = redis::cmd("EVALSHA");
        other.arg("0".repeat(40)).arg(0);
        assert!(replacement(&other, true).is_none());
        assert!(replacement(&redis::cmd("PING"), true).is_none());
    }

    #[test]
    fn apalis_redis_lease_script_is_replaced_on_every_connection() {
        let mut apalis = redis::cmd("EVALSHA");
        apalis
            .arg(APALIS_ACQUIRE_LEASES_SHA)
            .arg(4)
            .arg(&["{q}:inflight:w", "{q}:workers", "{q}:meta", "{q}:active"][..])
            .arg(&["w", "1700000000", "false", "task-1"][..]);
        for cluster in [false, true] {
            assert!(replacement(&apalis, cluster).is_some(), "cluster {cluster}");
        }
        // Our script is apalis-redis's without the LREM, nothing else.
        let ours = include_str!("../../lua/intake/acquire_leases.lua");
        assert!(!ours.contains("\"lrem\""), "{ours}");
        assert!(ours.contains("redis.call(\"sadd\", KEYS[1], task_id)"));
    }
}
