//! How building the connection or one call on it fails, and which failures are Redis's
//! trouble (connectivity) rather than a script's bug.

use std::time::Duration;

use redis::{ErrorKind, RedisError, Value};

/// The limiter cannot be built from its configuration.
#[derive(Debug, thiserror::Error)]
pub enum RateLimitSetupError {
    /// `MAIL_RATE_LIMIT_REDIS_URL` (or `REDIS_URL`) is not usable by the Redis client, e.g. a
    /// `rediss://` URL while this build has no TLS support for Redis.
    #[error("MAIL_RATE_LIMIT_REDIS_URL cannot be used by the Redis client: {0}")]
    RedisUrl(#[source] RedisError),
}

/// One Redis call that did not produce a usable answer. The limiter turns every one of these
/// into fail-open (`check_and_reserve`) or a skipped release;
/// [`crate::rate_limit::MailRateLimiter::ping`] returns them.
#[derive(Debug, thiserror::Error)]
pub enum RedisCallError {
    /// No answer within the deadline (`MAIL_RATE_LIMIT_REDIS_TIMEOUT`).
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
    /// `script` answered `reply`, outside its contract.
    pub(crate) fn unexpected(script: &'static str, reply: &Value) -> Self {
        Self::UnexpectedReply {
            script,
            reply: format!("{reply:?}"),
        }
    }

    /// Whether this is Redis being unreachable, refusing, dropping the connection, slow,
    /// loading, busy or failing over (`MOVED`/`ASK` the cluster client could not follow within
    /// its retries: a redirection to a master that just died) — trouble that fixes itself or an operator fixes in Redis
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
                                | "MOVED"
                                | "ASK"
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

    pub(super) fn is_timeout(&self) -> bool {
        match self {
            Self::Deadline { .. } => true,
            Self::Redis(e) => e.is_timeout(),
            Self::UnexpectedReply { .. } => false,
        }
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
        // A failover's redirection to the dead master is Redis's trouble, not a script's bug.
        assert!(server("MOVED 3999 127.0.0.1:6381").is_connectivity());
        assert!(server("ASK 3999 127.0.0.1:6381").is_connectivity());
        assert_eq!(server("MOVED 3999 127.0.0.1:6381").kind(), "MOVED");
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
