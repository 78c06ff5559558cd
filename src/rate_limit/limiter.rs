//! [`MailRateLimiter`]: the Redis-backed [`RateLimiter`] — one Lua round trip per check, its own
//! short-timeout connection, a deadline around every call, and fail-open with bounded logs.
//!
//! Why its own connection: the redis crate's default `ConnectionManager` takes about 9.5 s per
//! call to fail while Redis is stopped (six reconnect attempts with exponential backoff) and
//! 500 ms while Redis is frozen (its default response timeout) — measured on the build machine
//! with redis 1.8. A send must not wait that long for a brake that fails open anyway, so this
//! connection dials with a 100 ms connect timeout and at most one retry, and every call is
//! bounded by `MAIL_RATE_LIMIT_REDIS_TIMEOUT_MS`. The job queue's connection wants the opposite
//! (patient reconnects), so the two are never shared.

use std::{
    sync::{
        PoisonError, RwLock,
        atomic::{AtomicU32, Ordering},
    },
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use redis::{
    ErrorKind, RedisError, Script, Value,
    aio::{ConnectionManager, ConnectionManagerConfig},
};

use super::{
    Decision, DenyReason, RateLimitError, RateLimiter, RateLimits, Reservation, keys,
    log_throttle::LogThrottle,
};
use crate::{config::RateLimitConfig, domain::MailboxAddress, events};

/// `lua/check_and_reserve.lua`: the atomic check-and-reserve (contract in its header).
pub const CHECK_AND_RESERVE_LUA: &str = include_str!("../../lua/check_and_reserve.lua");
/// `lua/release.lua`: gives one reservation back (contract in its header).
pub const RELEASE_LUA: &str = include_str!("../../lua/release.lua");

/// The longest one connection attempt may take (TCP connect plus the client's set-up
/// commands), capped at the call deadline: 100 ms.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(100);
/// Connection attempts after the first failed one, per (re)connect: 1.
const CONNECT_RETRIES: usize = 1;
/// Backoff before that retry: a random delay below 10 ms (jittered, capped at 50 ms).
const RETRY_MIN_DELAY: Duration = Duration::from_millis(10);
const RETRY_MAX_DELAY: Duration = Duration::from_millis(50);
/// The redis crate does not redial after a response timeout (the socket may be fine and the
/// server merely slow), so a connection that is silently dead — a vanished host, a
/// blackholed route — would stay in use until the kernel gives up, minutes later. After this
/// many calls in a row timed out, the limiter drops its connection and dials a fresh one: 3.
const TIMEOUTS_BEFORE_REDIAL: u32 = 3;
/// At most one `mail.rateLimit.redisError` and one `mail.rateLimit.scriptError` line per this
/// interval per limiter (one limiter per process): 1 s.
const LOG_INTERVAL: Duration = Duration::from_secs(1);

/// The limiter cannot be built from its configuration.
#[derive(Debug, thiserror::Error)]
pub enum RateLimitSetupError {
    /// `MAIL_RATE_LIMIT_REDIS_URL` (or `REDIS_URL`) is not usable by the Redis client, e.g. a
    /// `rediss://` URL while this build has no TLS support for Redis.
    #[error("MAIL_RATE_LIMIT_REDIS_URL cannot be used by the Redis client: {0}")]
    RedisUrl(#[source] RedisError),
}

/// One Redis call that did not produce a usable answer. The limiter turns every one of these
/// into fail-open (`check_and_reserve`) or a skipped release; [`MailRateLimiter::ping`]
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
        /// `check_and_reserve.lua` or `release.lua`.
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
    pub fn is_connectivity(&self) -> bool {
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
    pub fn kind(&self) -> String {
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

/// The distributed per-mailbox rate limiter (see the module docs of [`crate::rate_limit`]).
///
/// One per process, shared by every Graph mailer through an `Arc`. It holds one multiplexed
/// Redis connection of its own, dialled lazily on first use and redialled by itself, so
/// building it never waits for Redis and a Redis that comes back is used again without a
/// restart. Every call is bounded by the configured deadline; past it, or on any Redis error,
/// `check_and_reserve` fails open: [`Decision::Allowed`] with an uncounted [`Reservation`].
pub struct MailRateLimiter {
    client: redis::Client,
    connection_config: ConnectionManagerConfig,
    connection: RwLock<Option<ConnectionManager>>,
    key_prefix: String,
    deadline: Duration,
    check_script: Script,
    release_script: Script,
    timeouts_in_a_row: AtomicU32,
    redis_error_log: LogThrottle,
    script_error_log: LogThrottle,
}

impl std::fmt::Debug for MailRateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The client is left out: its connection info may carry a password.
        f.debug_struct("MailRateLimiter")
            .field("key_prefix", &self.key_prefix)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

impl MailRateLimiter {
    /// A limiter on `config.redis_url` with keys under `config.key_prefix` and
    /// `config.redis_timeout` (ms) as the deadline of every call. Does not touch the network:
    /// it succeeds (and stays usable) while Redis is down.
    ///
    /// # Errors
    /// [`RateLimitSetupError::RedisUrl`] when the URL cannot be used by the Redis client.
    pub fn new(config: &RateLimitConfig) -> Result<Self, RateLimitSetupError> {
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
            connection: RwLock::new(None),
            key_prefix: config.key_prefix.clone(),
            deadline,
            check_script: Script::new(CHECK_AND_RESERVE_LUA),
            release_script: Script::new(RELEASE_LUA),
            timeouts_in_a_row: AtomicU32::new(0),
            redis_error_log: LogThrottle::new(LOG_INTERVAL),
            script_error_log: LogThrottle::new(LOG_INTERVAL),
        })
    }

    /// The key prefix (`MAIL_RATE_LIMIT_KEY_PREFIX`), for [`keys::minute_key`] and
    /// [`keys::day_key`].
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }

    /// The deadline of one call (`MAIL_RATE_LIMIT_REDIS_TIMEOUT_MS`).
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// One `PING` within the deadline; returns its round-trip time. For readiness checks and
    /// to dial the connection before the first send. Logs nothing.
    ///
    /// # Errors
    /// The [`RedisCallError`] that `check_and_reserve` would have failed open on.
    pub async fn ping(&self) -> Result<Duration, RedisCallError> {
        let started = Instant::now();
        self.bounded(async {
            let mut connection = self.connection()?;
            redis::cmd("PING").query_async::<()>(&mut connection).await
        })
        .await?;
        Ok(started.elapsed())
    }

    /// The shared connection handle, creating it (without dialling) when there is none.
    fn connection(&self) -> Result<ConnectionManager, RedisError> {
        if let Some(connection) = self
            .connection
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            return Ok(connection.clone());
        }
        let mut slot = self
            .connection
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(connection) = slot.as_ref() {
            return Ok(connection.clone());
        }
        let connection = ConnectionManager::new_lazy_with_config(
            self.client.clone(),
            self.connection_config.clone(),
        )?;
        *slot = Some(connection.clone());
        Ok(connection)
    }

    /// Runs `call` within the deadline, keeping count of timeouts in a row.
    async fn bounded<T>(
        &self,
        call: impl Future<Output = Result<T, RedisError>>,
    ) -> Result<T, RedisCallError> {
        let outcome = match tokio::time::timeout(self.deadline, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(RedisCallError::Redis(e)),
            Err(_) => Err(RedisCallError::Deadline {
                after: self.deadline,
            }),
        };
        match &outcome {
            Err(e) if e.is_timeout() => self.note_timeout(),
            // A refused or reset connection is redialled by the ConnectionManager itself; any
            // answer at all proves the socket alive.
            Err(e) if e.is_connectivity() => {}
            _ => self.timeouts_in_a_row.store(0, Ordering::Relaxed),
        }
        outcome
    }

    fn note_timeout(&self) {
        if self.timeouts_in_a_row.fetch_add(1, Ordering::Relaxed) + 1 >= TIMEOUTS_BEFORE_REDIAL {
            self.timeouts_in_a_row.store(0, Ordering::Relaxed);
            // Calls in flight keep their clone of the old connection and fail on their own;
            // the next call dials a fresh one.
            *self
                .connection
                .write()
                .unwrap_or_else(PoisonError::into_inner) = None;
        }
    }

    async fn eval(
        &self,
        script: &Script,
        (minute_key, day_key): (&str, &str),
        args: &[u64],
    ) -> Result<Value, RedisCallError> {
        let mut invocation = script.prepare_invoke();
        invocation.key(minute_key).key(day_key);
        for arg in args {
            invocation.arg(*arg);
        }
        self.bounded(async {
            let mut connection = self.connection()?;
            // EVALSHA; on NOSCRIPT (script cache flushed) the crate loads the script and retries.
            invocation.invoke_async::<Value>(&mut connection).await
        })
        .await
    }

    /// Writes the bounded `redisError` (warn) or `scriptError` (error) line for a failed call.
    /// Fields: `operation` (`check_and_reserve` | `release`), `mailbox`, `error.kind` (see
    /// [`RedisCallError::kind`]), `error.message` (with its causes), `deadline_ms` (warn only)
    /// and `suppressed`: lines of the same event left unwritten since the previous one (at most
    /// one line per second per limiter).
    fn log_failure(
        &self,
        operation: &'static str,
        mailbox: &MailboxAddress,
        error: &RedisCallError,
    ) {
        let message = error_chain(error);
        let kind = error.kind();
        let deadline_ms = u64::try_from(self.deadline.as_millis()).unwrap_or(u64::MAX);
        if error.is_connectivity() {
            if let Some(suppressed) = self.redis_error_log.admit(Instant::now()) {
                tracing::warn!(
                    event = events::MAIL_RATE_LIMIT_REDIS_ERROR,
                    operation,
                    mailbox = %mailbox,
                    error.kind = %kind,
                    error.message = %message,
                    deadline_ms,
                    suppressed,
                    "rate limiter's Redis failed; sending without a reservation (fail-open)"
                );
            }
        } else if let Some(suppressed) = self.script_error_log.admit(Instant::now()) {
            tracing::error!(
                event = events::MAIL_RATE_LIMIT_SCRIPT_ERROR,
                operation,
                mailbox = %mailbox,
                error.kind = %kind,
                error.message = %message,
                suppressed,
                "rate limiter's script failed (a bug to fix); sending without a reservation (fail-open)"
            );
        }
    }
}

impl RateLimiter for MailRateLimiter {
    /// See [`RateLimiter::check_and_reserve`]. Validates before any Redis call: `recipients`
    /// of 0 is [`RateLimitError::NoRecipients`] (Graph refuses such a message, and the script's
    /// contract requires at least 1); more than `limits.recipients_per_day` is
    /// [`RateLimitError::RecipientsExceedDayLimit`].
    ///
    /// On a deadline the script may still have run in Redis after we stopped waiting: that
    /// reservation stays counted although the caller got an uncounted one (over-counting by one
    /// message, the safe side), and it expires with the bucket's TTL.
    async fn check_and_reserve(
        &self,
        mailbox: &MailboxAddress,
        recipients: u32,
        limits: RateLimits,
        now: DateTime<Utc>,
    ) -> Result<Decision, RateLimitError> {
        if recipients == 0 {
            return Err(RateLimitError::NoRecipients {
                mailbox: mailbox.clone(),
            });
        }
        if recipients > limits.recipients_per_day.get() {
            return Err(RateLimitError::RecipientsExceedDayLimit {
                mailbox: mailbox.clone(),
                recipients,
                recipients_per_day: limits.recipients_per_day.get(),
            });
        }
        let minute_key = keys::minute_key(&self.key_prefix, mailbox, now);
        let day_key = keys::day_key(&self.key_prefix, mailbox, now);
        let reply = self
            .eval(
                &self.check_script,
                (&minute_key, &day_key),
                &[
                    u64::from(limits.per_minute.get()),
                    u64::from(limits.recipients_per_day.get()),
                    u64::from(recipients),
                    keys::ms_left_in_minute(now),
                    keys::ms_left_in_day(now),
                ],
            )
            .await
            .and_then(|value| decode_check_reply(&value));
        match reply {
            Ok(None) => Ok(Decision::Allowed(Reservation {
                mailbox: mailbox.clone(),
                recipients,
                keys: Some((minute_key, day_key)),
            })),
            Ok(Some((reason, retry_after))) => Ok(Decision::Denied {
                reason,
                retry_after,
            }),
            Err(error) => {
                self.log_failure("check_and_reserve", mailbox, &error);
                Ok(Decision::Allowed(Reservation::uncounted(
                    mailbox.clone(),
                    recipients,
                )))
            }
        }
    }

    /// See [`RateLimiter::release`]. An uncounted reservation touches nothing. Counters never
    /// go below 0 (so a second release of the same reservation is harmless to an otherwise
    /// empty bucket, but does give back another reservation's share if the bucket has one:
    /// release each reservation once).
    async fn release(&self, reservation: &Reservation) {
        let Some((minute_key, day_key)) = &reservation.keys else {
            return;
        };
        let outcome = self
            .eval(
                &self.release_script,
                (minute_key, day_key),
                &[u64::from(reservation.recipients)],
            )
            .await
            .and_then(|value| decode_release_reply(&value));
        match outcome {
            Ok((minute, day)) => tracing::debug!(
                event = events::MAIL_RATE_LIMIT_RELEASED,
                mailbox = %reservation.mailbox,
                recipients = reservation.recipients,
                counters.minute = minute,
                counters.day = day,
                "rate-limit reservation given back"
            ),
            Err(error) => self.log_failure("release", &reservation.mailbox, &error),
        }
    }
}

/// `{1, 0, "ok"}` → `None` (reserved); `{0, ms, "minute" | "day"}` → the denial.
fn decode_check_reply(value: &Value) -> Result<Option<(DenyReason, Duration)>, RedisCallError> {
    let unexpected = || RedisCallError::UnexpectedReply {
        script: "check_and_reserve.lua",
        reply: format!("{value:?}"),
    };
    let Value::Array(items) = value else {
        return Err(unexpected());
    };
    match items.as_slice() {
        [Value::Int(1), Value::Int(0), reason] if text(reason) == Some("ok") => Ok(None),
        [Value::Int(0), Value::Int(ms), reason] => {
            let reason = match text(reason) {
                Some("minute") => DenyReason::Minute,
                Some("day") => DenyReason::Day,
                _ => return Err(unexpected()),
            };
            let ms = u64::try_from(*ms).map_err(|_| unexpected())?;
            Ok(Some((reason, Duration::from_millis(ms))))
        }
        _ => Err(unexpected()),
    }
}

/// `{minute counter, day counter}` after the release.
fn decode_release_reply(value: &Value) -> Result<(i64, i64), RedisCallError> {
    if let Value::Array(items) = value
        && let [Value::Int(minute), Value::Int(day)] = items.as_slice()
    {
        return Ok((*minute, *day));
    }
    Err(RedisCallError::UnexpectedReply {
        script: "release.lua",
        reply: format!("{value:?}"),
    })
}

fn text(value: &Value) -> Option<&str> {
    match value {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

/// The error's message followed by its causes, `": "`-separated, without repeats.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn check_replies_decode_per_the_contract() {
        let ok = Value::Array(vec![Value::Int(1), Value::Int(0), bulk("ok")]);
        assert_eq!(decode_check_reply(&ok).unwrap(), None);
        let minute = Value::Array(vec![Value::Int(0), Value::Int(1), bulk("minute")]);
        assert_eq!(
            decode_check_reply(&minute).unwrap(),
            Some((DenyReason::Minute, Duration::from_millis(1)))
        );
        let day = Value::Array(vec![Value::Int(0), Value::Int(86_400_000), bulk("day")]);
        assert_eq!(
            decode_check_reply(&day).unwrap(),
            Some((DenyReason::Day, Duration::from_secs(86_400)))
        );
    }

    #[test]
    fn replies_outside_the_contract_are_script_errors() {
        for bad in [
            Value::Nil,
            Value::Array(vec![Value::Int(1), Value::Int(0)]),
            Value::Array(vec![Value::Int(0), Value::Int(5), bulk("hour")]),
            Value::Array(vec![Value::Int(0), Value::Int(-5), bulk("minute")]),
            Value::Array(vec![Value::Int(2), Value::Int(0), bulk("ok")]),
        ] {
            let err = decode_check_reply(&bad).unwrap_err();
            assert!(!err.is_connectivity(), "{err}");
            assert_eq!(err.kind(), "reply");
        }
        assert!(decode_release_reply(&Value::Int(3)).is_err());
        assert_eq!(
            decode_release_reply(&Value::Array(vec![Value::Int(2), Value::Int(40)])).unwrap(),
            (2, 40)
        );
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

    #[test]
    fn lua_files_open_with_the_contract_header() {
        for (lua, first) in [
            (
                CHECK_AND_RESERVE_LUA,
                "-- KEYS[1]  minute counter key      KEYS[2]  day counter key",
            ),
            (
                RELEASE_LUA,
                "-- KEYS[1]  minute counter key      KEYS[2]  day counter key",
            ),
        ] {
            let mut lines = lua.lines();
            assert_eq!(lines.next(), Some(first));
            assert!(lines.next().unwrap().starts_with("-- ARGV[1]"));
            assert!(lua.lines().take(8).any(|l| l.starts_with("-- Returns")));
        }
    }
}
