//! The limiter's own Redis connection: standalone or Redis Cluster, short connect timeouts, a
//! deadline around every call, and a redial after repeated failures.
//!
//! Why its own connection: the redis crate's default `ConnectionManager` takes about 9.5 s per
//! call to fail while Redis is stopped (six reconnect attempts with exponential backoff) and
//! 500 ms while Redis is frozen (its default response timeout) — measured on the build machine
//! with redis 1.8. A send must not wait that long for a brake that fails open anyway, so this
//! connection dials with a 100 ms connect timeout and at most one retry, and every call is
//! bounded by `MAIL_RATE_LIMIT_REDIS_TIMEOUT_MS`. The job queue's connection wants the opposite
//! (patient reconnects), so the two are never shared.
//!
//! Cluster: `MAIL_RATE_LIMIT_REDIS_URL` names one node or several (comma-separated seeds).
//! Several mean a cluster from the start; one is a standalone Redis until its first `MOVED`/`ASK`
//! answer shows it is a cluster node. From then on the limiter never goes back to a standalone
//! link: the redis crate's cluster client follows redirections, refreshes its slot map on
//! `MOVED`/`READONLY`, and serves a dead master's slots from its promoted replica. The crate
//! reconnects only to the nodes it was built with, so as a backstop three failed calls in a row
//! rebuild the client from every seed: the configured ones and every node the cluster named in
//! its last `CLUSTER SLOTS` answer (read every 10 s). A dead configured node is then no obstacle.
//! Every key one script touches carries one hash tag, so no call can fail with `CROSSSLOT`.

use std::{
    fmt,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use redis::{
    Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, FromRedisValue, Pipeline, RedisError,
    RedisFuture, Script, Value,
    aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig},
    cluster::{ClusterClient, ClusterConfig},
    cluster_async::ClusterConnection,
    cluster_routing::{RoutingInfo, SingleNodeRoutingInfo},
};
use tokio::sync::RwLock;
use url::Url;

use super::RateLimitConfig;

/// The longest one connection attempt may take, capped at the call deadline: 100 ms.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(100);
/// Connection attempts after the first failed one, per (re)connect: 1.
const CONNECT_RETRIES: usize = 1;
/// Backoff before that retry: a random delay below 10 ms (jittered, capped at 50 ms).
const RETRY_MIN_DELAY: Duration = Duration::from_millis(10);
const RETRY_MAX_DELAY: Duration = Duration::from_millis(50);
/// Retries of one cluster request (after a redirection, a slot-map refresh or a reconnect): 2,
/// each after a jittered wait of 10–50 ms, so they fit within the deadline.
const CLUSTER_RETRIES: u32 = 2;
/// The redis crate does not redial after a response timeout (the socket may be fine and the
/// server merely slow), so a connection that is silently dead would stay in use until the
/// kernel gives up, minutes later; and its cluster client reconnects only to the nodes it was
/// built with. After this many calls in a row failed (standalone: timed out), the limiter drops
/// its link and dials a fresh one: 3.
const FAILURES_BEFORE_REDIAL: u32 = 3;
/// A cluster link younger than this is not redialled (it is still finding its nodes), so a
/// cluster that is down costs one new client a second at most: 1 s.
const CLUSTER_REDIAL_MIN_AGE: Duration = Duration::from_secs(1);
/// How often the cluster's nodes are read (`CLUSTER SLOTS`) to keep the seeds current: 10 s;
/// 1 s after a read that failed.
const LEARN_EVERY: Duration = Duration::from_secs(10);
const LEARN_RETRY: Duration = Duration::from_secs(1);

/// The limiter's Redis as configured: one URL (a standalone Redis, or a cluster node found out
/// from its first `MOVED`) or several (seed nodes of a Redis Cluster). Never empty.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrls(Vec<Url>);

impl RedisUrls {
    /// `urls`, or `None` for an empty list.
    pub fn new(urls: Vec<Url>) -> Option<Self> {
        (!urls.is_empty()).then_some(Self(urls))
    }

    /// The first URL (the only one unless this is a list of cluster seeds).
    pub fn first(&self) -> &Url {
        &self.0[0]
    }

    /// Every URL, in the configured order.
    pub fn as_slice(&self) -> &[Url] {
        &self.0
    }

    /// Whether several seeds were given: a Redis Cluster from the start.
    pub fn is_cluster(&self) -> bool {
        self.0.len() > 1
    }

    /// The URLs comma-separated with passwords replaced by `***`, for `check-config`, logs and
    /// error messages.
    pub fn redacted(&self) -> String {
        self.0
            .iter()
            .map(crate::config::redact_url)
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl From<Url> for RedisUrls {
    fn from(url: Url) -> Self {
        Self(vec![url])
    }
}

impl fmt::Debug for RedisUrls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Redacted: a `{:?}` of the configuration must not print a password.
        f.debug_tuple("RedisUrls").field(&self.redacted()).finish()
    }
}

/// The limiter cannot be built from its configuration.
#[derive(Debug, thiserror::Error)]
pub enum RateLimitSetupError {
    /// `MAIL_RATE_LIMIT_REDIS_URL` (or `REDIS_URL`) is not usable by the Redis client, e.g. a
    /// `rediss://` URL while this build has no TLS support for Redis.
    #[error("MAIL_RATE_LIMIT_REDIS_URL cannot be used by the Redis client: {0}")]
    RedisUrl(#[source] RedisError),
}

/// One Redis call that did not produce a usable answer. The limiter turns every one of these
/// into fail-open (`check_and_reserve`) or a skipped release; [`super::MailRateLimiter::ping`]
/// returns them.
#[derive(Debug, thiserror::Error)]
pub enum RedisCallError {
    /// No answer within the deadline (`MAIL_RATE_LIMIT_REDIS_TIMEOUT_MS`).
    #[error("no answer from Redis within {} ms", after.as_millis())]
    Deadline {
        /// The deadline that passed.
        after: Duration,
    },
    /// The client or the server reported an error.
    #[error("redis: {0}")]
    Redis(#[from] RedisError),
    /// The script answered something outside its contract (a bug in the script or a foreign
    /// script under the same SHA).
    #[error("unexpected reply from {script}: {reply}")]
    UnexpectedReply {
        /// The script's file name.
        script: &'static str,
        /// The reply, as the redis crate prints it.
        reply: String,
    },
}

impl RedisCallError {
    /// Whether this is Redis being unreachable, refusing, dropping the connection, slow,
    /// loading, busy or failing over — trouble that fixes itself or an operator fixes in Redis
    /// (`mail.rateLimit.redisError`, warn) — rather than a script bug such as `WRONGTYPE` or
    /// `CROSSSLOT` (`mail.rateLimit.scriptError`, error).
    pub(crate) fn is_connectivity(&self) -> bool {
        match self {
            Self::Deadline { .. } => true,
            Self::UnexpectedReply { .. } => false,
            Self::Redis(e) => {
                e.is_io_error()
                    || e.is_timeout()
                    || e.is_connection_refusal()
                    || e.is_connection_dropped()
                    || e.kind() == ErrorKind::AuthenticationFailed
                    || e.kind() == ErrorKind::ClusterConnectionNotFound
                    || matches!(
                        e.code(),
                        Some(
                            "LOADING"
                                | "BUSY"
                                | "MASTERDOWN"
                                | "CLUSTERDOWN"
                                | "TRYAGAIN"
                                | "READONLY"
                                | "NOAUTH"
                                | "WRONGPASS"
                        )
                    )
            }
        }
    }

    /// A short, stable label for the `error.kind` log field: `deadline`, `timeout`, `refused`,
    /// `dropped`, `io`, `auth`, `reply`, or the server's error code (`WRONGTYPE`, `CROSSSLOT`, …).
    pub(crate) fn kind(&self) -> String {
        match self {
            Self::Deadline { .. } => "deadline".into(),
            Self::UnexpectedReply { .. } => "reply".into(),
            Self::Redis(e) if e.is_timeout() => "timeout".into(),
            Self::Redis(e) if e.is_connection_refusal() => "refused".into(),
            Self::Redis(e) if e.is_connection_dropped() => "dropped".into(),
            Self::Redis(e) if e.is_io_error() => "io".into(),
            Self::Redis(e) if e.kind() == ErrorKind::AuthenticationFailed => "auth".into(),
            Self::Redis(e) => e
                .code()
                .map_or_else(|| format!("{:?}", e.kind()), str::to_owned),
        }
    }

    fn is_timeout(&self) -> bool {
        match self {
            Self::Deadline { .. } => true,
            Self::Redis(e) => e.is_timeout(),
            Self::UnexpectedReply { .. } => false,
        }
    }
}

/// A standalone or a cluster connection, both multiplexed and cheap to clone.
#[derive(Clone)]
enum Link {
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
}

impl RedisConn {
    /// The limiter's connection: `config.redis_url`, `config.redis_timeout` per call.
    pub(crate) fn new(config: &RateLimitConfig) -> Result<Self, RateLimitSetupError> {
        Self::with_deadline(&config.redis_url, config.redis_timeout)
    }

    /// A connection to `urls` with `deadline` per call. Touches no network.
    pub(crate) fn with_deadline(
        urls: &RedisUrls,
        deadline: Duration,
    ) -> Result<Self, RateLimitSetupError> {
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
            event = crate::events::MAIL_RATE_LIMIT_CLUSTER,
            "the limiter's Redis is a cluster node; following the cluster from now on"
        );
        Ok(link)
    }

    /// A cluster client seeded with the configured and the learned nodes, connecting in the
    /// background (the first calls wait for it within their deadline), and its learner.
    fn dial_cluster(&self) -> Result<Link, RedisError> {
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
            _ => self.failures_in_a_row.store(0, Ordering::Relaxed),
        }
        outcome
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
enum Serving {
    /// The masters and their replicas.
    All,
    /// The masters only.
    Masters,
}

/// The nodes (`host`, `port`) a `CLUSTER SLOTS` answer names, once each.
fn slot_nodes(answer: &Value, which: Serving) -> Vec<(String, u16)> {
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
            let host = node.first().and_then(super::text).unwrap_or_default();
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

    #[test]
    fn a_list_of_urls_is_redacted_when_printed() {
        let urls = RedisUrls::new(vec![
            Url::parse("redis://:secret@a:7000").unwrap(),
            Url::parse("redis://b:7001").unwrap(),
        ])
        .unwrap();
        assert_eq!(urls.redacted(), "redis://:***@a:7000,redis://b:7001");
        assert!(!format!("{urls:?}").contains("secret"));
        assert!(urls.is_cluster());
        assert!(RedisUrls::new(Vec::new()).is_none());
    }

    #[test]
    fn server_errors_split_into_connectivity_and_script_bugs() {
        let server = |code: &str| {
            let wire = format!("-{code} detail\r\n");
            let value = redis::parse_redis_value(wire.as_bytes()).unwrap();
            RedisCallError::Redis(value.extract_error().unwrap_err())
        };
        assert!(
            RedisCallError::Deadline {
                after: Duration::from_millis(250)
            }
            .is_connectivity()
        );
        assert!(server("LOADING").is_connectivity());
        assert!(server("NOAUTH").is_connectivity());
        assert!(!server("WRONGTYPE").is_connectivity());
        assert!(!server("CROSSSLOT").is_connectivity());
        assert!(!server("ERR").is_connectivity());
        assert_eq!(server("WRONGTYPE").kind(), "WRONGTYPE");
        let io = RedisCallError::Redis(RedisError::from(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )));
        assert!(io.is_connectivity());
        assert_eq!(io.kind(), "refused");
    }
}
