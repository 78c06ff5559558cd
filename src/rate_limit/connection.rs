//! The limiter's own Redis connection: standalone or Redis Cluster (detected from the first
//! `MOVED`), short connect timeouts, a deadline around every call, and a
//! redial after repeated timeouts.
//!
//! Why its own connection: the redis crate's default `ConnectionManager` takes about 9.5 s per
//! call to fail while Redis is stopped (six reconnect attempts with exponential backoff) and
//! 500 ms while Redis is frozen (its default response timeout) — measured on the build machine
//! with redis 1.8. A send must not wait that long for a brake that fails open anyway, so this
//! connection dials with a 100 ms connect timeout and at most one retry, and every call is
//! bounded by `MAIL_RATE_LIMIT_REDIS_TIMEOUT_MS`. The job queue's connection wants the opposite
//! (patient reconnects), so the two are never shared.
//!
//! Cluster: point `MAIL_RATE_LIMIT_REDIS_URL` at any node. The first `MOVED`/`ASK` answer
//! switches the limiter to a cluster client seeded with that node, which knows the slot map and
//! follows redirections from then on. Every key one script touches carries one hash tag, so no call
//! can fail with `CROSSSLOT`.

use std::{
    sync::atomic::{AtomicU32, Ordering},
    time::Duration,
};

use redis::{
    Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, Script, Value,
    aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig},
    cluster::ClusterClient,
    cluster_async::ClusterConnection,
};
use tokio::sync::RwLock;

use super::RateLimitConfig;

/// The longest one connection attempt may take, capped at the call deadline: 100 ms.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(100);
/// Connection attempts after the first failed one, per (re)connect: 1.
const CONNECT_RETRIES: usize = 1;
/// Backoff before that retry: a random delay below 10 ms (jittered, capped at 50 ms).
const RETRY_MIN_DELAY: Duration = Duration::from_millis(10);
const RETRY_MAX_DELAY: Duration = Duration::from_millis(50);
/// The redis crate does not redial after a response timeout (the socket may be fine and the
/// server merely slow), so a connection that is silently dead would stay in use until the
/// kernel gives up, minutes later. After this many calls in a row timed out, the limiter drops
/// its connection and dials a fresh one: 3.
const TIMEOUTS_BEFORE_REDIAL: u32 = 3;

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
    client: redis::Client,
    connection_config: ConnectionManagerConfig,
    link: RwLock<Option<Link>>,
    deadline: Duration,
    timeouts_in_a_row: AtomicU32,
}

impl RedisConn {
    pub(crate) fn new(config: &RateLimitConfig) -> Result<Self, RateLimitSetupError> {
        let client = redis::Client::open(config.redis_url.as_str())
            .map_err(RateLimitSetupError::RedisUrl)?;
        let deadline = config.redis_timeout;
        let connection_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT.min(deadline)))
            .set_response_timeout(Some(deadline))
            .set_number_of_retries(CONNECT_RETRIES)
            .set_min_delay(RETRY_MIN_DELAY)
            .set_max_delay(RETRY_MAX_DELAY);
        Ok(Self {
            client,
            connection_config,
            link: RwLock::new(None),
            deadline,
            timeouts_in_a_row: AtomicU32::new(0),
        })
    }

    pub(crate) fn deadline(&self) -> Duration {
        self.deadline
    }

    /// Whether the connection in use is a cluster connection (after the first call).
    pub(crate) async fn is_cluster(&self) -> bool {
        matches!(&*self.link.read().await, Some(Link::Cluster(_)))
    }

    /// The shared link, creating a lazy standalone one (without dialling) when there is none.
    async fn link(&self) -> Result<Link, RedisError> {
        if let Some(link) = self.link.read().await.as_ref() {
            return Ok(link.clone());
        }
        let mut slot = self.link.write().await;
        if let Some(link) = slot.as_ref() {
            return Ok(link.clone());
        }
        let link = Link::Single(ConnectionManager::new_lazy_with_config(
            self.client.clone(),
            self.connection_config.clone(),
        )?);
        *slot = Some(link.clone());
        Ok(link)
    }

    /// Replaces the link with a cluster client seeded with the configured node (once: calls
    /// that got `MOVED` at the same time share the first one's client).
    async fn switch_to_cluster(&self) -> Result<Link, RedisError> {
        let mut slot = self.link.write().await;
        if let Some(link @ Link::Cluster(_)) = slot.as_ref() {
            return Ok(link.clone());
        }
        let cluster = ClusterClient::builder(vec![self.client.get_connection_info().clone()])
            .connection_timeout(CONNECT_TIMEOUT.min(self.deadline))
            .response_timeout(self.deadline)
            .retries(1)
            .build()?;
        let link = Link::Cluster(cluster.get_async_connection().await?);
        *slot = Some(link.clone());
        tracing::info!(
            event = crate::events::MAIL_RATE_LIMIT_CLUSTER,
            "the limiter's Redis is a cluster node; following the cluster from now on"
        );
        Ok(link)
    }

    /// Runs `call` on the link within the deadline, keeping count of timeouts in a row. A
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
            Err(e) if e.is_timeout() => self.note_timeout().await,
            // A refused or reset connection is redialled by the client itself; any answer at
            // all proves the socket alive.
            Err(e) if e.is_connectivity() => {}
            _ => self.timeouts_in_a_row.store(0, Ordering::Relaxed),
        }
        outcome
    }

    async fn note_timeout(&self) {
        if self.timeouts_in_a_row.fetch_add(1, Ordering::Relaxed) + 1 >= TIMEOUTS_BEFORE_REDIAL {
            self.timeouts_in_a_row.store(0, Ordering::Relaxed);
            // Calls in flight keep their clone of the old link and fail on their own; the next
            // call dials a fresh one.
            *self.link.write().await = None;
        }
    }

    /// One `PING` within the deadline.
    pub(crate) async fn ping(&self) -> Result<(), RedisCallError> {
        self.bounded(
            |mut link| async move { redis::cmd("PING").query_async::<()>(&mut link).await },
        )
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

#[cfg(test)]
mod tests {
    use super::*;

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
