//! The limiter's own Redis connection: standalone or Redis Cluster (`cluster.rs`), short
//! connect timeouts, a deadline around every call, and a redial after repeated failures.
//!
//! Its own because a send must not wait longer than `MAIL_RATE_LIMIT_REDIS_TIMEOUT` for a
//! brake that fails open anyway, while the redis crate's default `ConnectionManager` takes
//! seconds to fail against a stopped Redis; the job queue's connection wants the opposite
//! (patient reconnects), so the two are never shared.

mod cluster;
mod error;
pub(crate) mod replies;
mod seed_check;
mod urls;

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use redis::{
    Cmd, ConnectionInfo, FromRedisValue, Pipeline, RedisError, RedisFuture, Script, Value,
    aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig},
    cluster::ClusterClient,
    cluster_async::ClusterConnection,
    cluster_routing::{RoutingInfo, SingleNodeRoutingInfo},
};
use tokio::sync::RwLock;

use self::cluster::{Serving, slot_nodes};
pub use self::{
    error::{RateLimitSetupError, RedisCallError},
    urls::RedisUrls,
};

/// The longest one connection attempt may take, capped at the call deadline: 100 ms.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(100);
/// Connection attempts after the first failed one, per (re)connect: 1.
const CONNECT_RETRIES: usize = 1;
/// Backoff before that retry: a random delay below 10 ms (jittered, capped at 50 ms).
const RETRY_MIN_DELAY: Duration = Duration::from_millis(10);
const RETRY_MAX_DELAY: Duration = Duration::from_millis(50);
/// The redis crate does not redial after a response timeout (the socket may be fine and the
/// server merely slow), so a connection that is silently dead would stay in use until the
/// kernel gives up, minutes later; and its cluster client reconnects only to the nodes it was
/// built with. After this many calls in a row failed (standalone: timed out), the limiter drops
/// its link and dials a fresh one: 3.
const FAILURES_BEFORE_REDIAL: u32 = 3;
/// A cluster link younger than this is not redialled (it is still finding its nodes), so a
/// cluster that is down costs one new client a second at most: 1 s.
const CLUSTER_REDIAL_MIN_AGE: Duration = Duration::from_secs(1);

/// A standalone or a cluster connection, both multiplexed and cheap to clone (also the intake
/// queue's, in `intake::QueueConnection`).
#[derive(Clone)]
pub(crate) enum Link {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

/// The limiter's connection (see the module docs). Dialled lazily on first use and redialled
/// by itself, so building it never waits for Redis and a Redis that comes back is used again
/// without a restart.
pub(crate) struct RedisConn {
    /// The configured nodes (credentials, TLS and database included).
    seeds: Vec<ConnectionInfo>,
    connection_config: ConnectionManagerConfig,
    /// Known to be a cluster: several seeds, or a `MOVED` seen. Never reset.
    cluster: AtomicBool,
    /// The nodes the cluster named in its last `CLUSTER SLOTS` answer, as seeds for a redial.
    learned: Arc<Mutex<Vec<ConnectionInfo>>>,
    /// The link in use and when it was dialled.
    link: RwLock<Option<(Link, Instant)>>,
    /// Bumped at every cluster dial and on drop: the learner of an older link stops.
    generation: Arc<AtomicU64>,
    deadline: Duration,
    failures_in_a_row: AtomicU32,
    /// Whether the one-seed check ([`seed_check`]) was started; its task holds a weak
    /// reference and ends when this connection is dropped.
    seed_checked: Arc<AtomicBool>,
    /// Some call got an answer (a reply or a Redis error) since this connection was made:
    /// a limiter never reached since start-up is a wrong URL more likely than an outage.
    answered: AtomicBool,
}

impl RedisConn {
    /// A connection to `urls` with `deadline` per call. Touches no network.
    pub(crate) fn new(urls: &RedisUrls, deadline: Duration) -> Result<Self, RateLimitSetupError> {
        let seeds = urls
            .as_slice()
            .iter()
            .map(|url| {
                Ok(redis::Client::open(url.as_str())?
                    .get_connection_info()
                    .clone())
            })
            .collect::<Result<Vec<_>, RedisError>>()
            .map_err(RateLimitSetupError::RedisUrl)?;
        if urls.is_cluster() {
            // The cluster client refuses seeds with different credentials: say so at start-up.
            ClusterClient::new(seeds.clone()).map_err(RateLimitSetupError::RedisUrl)?;
        }
        let connection_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT.min(deadline)))
            .set_response_timeout(Some(deadline))
            .set_number_of_retries(CONNECT_RETRIES)
            .set_min_delay(RETRY_MIN_DELAY)
            .set_max_delay(RETRY_MAX_DELAY);
        Ok(Self {
            seeds,
            connection_config,
            cluster: AtomicBool::new(urls.is_cluster()),
            learned: Arc::default(),
            link: RwLock::new(None),
            generation: Arc::default(),
            deadline,
            failures_in_a_row: AtomicU32::new(0),
            seed_checked: Arc::default(),
            answered: AtomicBool::new(false),
        })
    }

    pub(crate) fn deadline(&self) -> Duration {
        self.deadline
    }

    /// Whether the limiter's Redis is a cluster: configured with several seeds, or a `MOVED`
    /// answer seen.
    pub(crate) fn is_cluster(&self) -> bool {
        self.cluster.load(Ordering::Relaxed)
    }

    /// The shared link, creating one (without waiting for the network) when there is none: a
    /// cluster client once the Redis is known to be a cluster, else a standalone one.
    async fn link(&self) -> Result<Link, RedisError> {
        if let Some((link, _)) = self.link.read().await.as_ref() {
            return Ok(link.clone());
        }
        let mut slot = self.link.write().await;
        if let Some((link, _)) = slot.as_ref() {
            return Ok(link.clone());
        }
        self.check_single_seed();
        let link = if self.is_cluster() {
            self.dial_cluster()?
        } else {
            Link::Single(ConnectionManager::new_lazy_with_config(
                redis::Client::open(self.seeds[0].clone())?,
                self.connection_config.clone(),
            )?)
        };
        *slot = Some((link.clone(), Instant::now()));
        Ok(link)
    }

    /// Once, on first use, when one URL is configured: a task that warns if it names one node of
    /// a Redis Cluster ([`seed_check`]).
    fn check_single_seed(&self) {
        if self.seeds.len() != 1 || self.seed_checked.swap(true, Ordering::Relaxed) {
            return;
        }
        let seed = self.seeds[0].clone();
        let alive = Arc::downgrade(&self.seed_checked);
        tokio::spawn(async move {
            let wanted = || alive.strong_count() > 0;
            if let Some(warning) = seed_check::single_seed_warning(seed, wanted).await {
                tracing::warn!(event = crate::log_events::CONFIG_WARNING, "{warning}");
            }
        });
    }

    /// Replaces a standalone link that got `MOVED`/`ASK` with a cluster client (once: calls
    /// that got `MOVED` at the same time share the first one's client).
    async fn switch_to_cluster(&self) -> Result<Link, RedisError> {
        let mut slot = self.link.write().await;
        if let Some((link @ Link::Cluster(_), _)) = slot.as_ref() {
            return Ok(link.clone());
        }
        let link = self.dial_cluster()?;
        self.cluster.store(true, Ordering::Relaxed);
        *slot = Some((link.clone(), Instant::now()));
        tracing::info!(
            event = crate::log_events::MAIL_RATE_LIMIT_CLUSTER,
            "the limiter's Redis is a cluster node; following the cluster from now on"
        );
        Ok(link)
    }

    /// Runs `call` on the link within the deadline, keeping count of failures in a row. A
    /// standalone link that gets `MOVED`/`ASK` (it was pointed at one node of a cluster)
    /// switches to a cluster client and runs `call` once more.
    async fn bounded<T, F>(&self, call: impl Fn(Link) -> F) -> Result<T, RedisCallError>
    where
        F: Future<Output = Result<T, RedisError>>,
    {
        let outcome = match tokio::time::timeout(self.deadline, async {
            let link = self.link().await?;
            let single = matches!(link, Link::Single(_));
            match call(link).await {
                Err(e) if single && matches!(e.code(), Some("MOVED" | "ASK")) => {
                    let cluster = self.switch_to_cluster().await?;
                    call(cluster).await
                }
                other => other,
            }
        })
        .await
        {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(RedisCallError::Redis(e)),
            Err(_) => Err(RedisCallError::Deadline {
                after: self.deadline,
            }),
        };
        match &outcome {
            Err(e) if e.is_timeout() || (self.is_cluster() && e.is_connectivity()) => {
                self.note_failure().await;
            }
            // A refused or reset standalone connection is redialled by the client itself.
            Err(e) if e.is_connectivity() => {}
            // Any answer at all proves the link alive.
            _ => {
                self.failures_in_a_row.store(0, Ordering::Relaxed);
                self.answered.store(true, Ordering::Relaxed);
            }
        }
        outcome
    }

    /// Whether any call got an answer since this connection was made.
    pub(crate) fn ever_answered(&self) -> bool {
        self.answered.load(Ordering::Relaxed)
    }

    /// Counts one failed call; after [`FAILURES_BEFORE_REDIAL`] in a row drops the link, so the
    /// next call dials a fresh one of the same kind (a cluster client from every seed).
    async fn note_failure(&self) {
        if self.failures_in_a_row.fetch_add(1, Ordering::Relaxed) + 1 < FAILURES_BEFORE_REDIAL {
            return;
        }
        let mut slot = self.link.write().await;
        if let Some((Link::Cluster(_), dialled)) = slot.as_ref()
            && dialled.elapsed() < CLUSTER_REDIAL_MIN_AGE
        {
            return;
        }
        self.failures_in_a_row.store(0, Ordering::Relaxed);
        // Calls in flight keep their clone of the old link and fail on their own.
        *slot = None;
    }

    /// One `PING` within the deadline; on a cluster, one to every master that serves slots now
    /// (`CLUSTER SLOTS` from any node), so a master this process cannot reach fails the check.
    /// (The crate's own fan-out of `PING` silently skips a master it has no connection to.)
    pub(crate) async fn ping(&self) -> Result<(), RedisCallError> {
        self.bounded(|link| async move {
            match link {
                Link::Single(mut c) => redis::cmd("PING").query_async::<()>(&mut c).await,
                Link::Cluster(mut c) => {
                    let slots: Value = redis::cmd("CLUSTER")
                        .arg("SLOTS")
                        .query_async(&mut c)
                        .await?;
                    for (host, port) in slot_nodes(&slots, Serving::Masters) {
                        let node = SingleNodeRoutingInfo::ByAddress { host, port };
                        c.route_command(redis::cmd("PING"), RoutingInfo::SingleNode(node))
                            .await?;
                    }
                    Ok(())
                }
            }
        })
        .await
    }

    /// `pipeline` (its keys in one slot) within the deadline.
    pub(crate) async fn query<T: FromRedisValue>(
        &self,
        pipeline: &Pipeline,
    ) -> Result<T, RedisCallError> {
        self.bounded(|mut link| async move { pipeline.query_async::<T>(&mut link).await })
            .await
    }

    /// `EVALSHA` of `script` with `keys` and `args` (on `NOSCRIPT` the crate loads the script
    /// and retries), within the deadline.
    pub(crate) async fn eval(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[String],
    ) -> Result<Value, RedisCallError> {
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        for arg in args {
            invocation.arg(arg.as_str());
        }
        let invocation = &invocation;
        self.bounded(|mut link| async move { invocation.invoke_async::<Value>(&mut link).await })
            .await
    }
}

impl Drop for RedisConn {
    fn drop(&mut self) {
        // Stops the learner, which holds a clone of the cluster client.
        self.generation.fetch_add(1, Ordering::Relaxed);
    }
}
