//! The message trace's budget per Graph tenant (`crate::delivery`): Exchange takes 100 trace
//! requests per tenant per rolling 5 minutes, shared by every caller
//! (<https://learn.microsoft.com/powershell/module/exchange/get-messagetracedetailv2>); every
//! replica counts its requests in one Redis sorted set per tenant (`lua/trace/budget.lua`) and
//! stays [`TRACE_MARGIN`] under it for other callers; a `429` cools the tenant's trace down
//! until its `Retry-After`.

use std::{sync::LazyLock, time::Duration};

use chrono::{DateTime, Utc};
use redis::{Script, Value};

use super::{Engine, MailRateLimiter};
use crate::rate_limit::RedisCallError;

/// Exchange's trace requests per tenant per rolling 5 minutes.
pub(crate) const TRACE_LIMIT: u32 = 100;
/// Left for other callers of the tenant (admin scripts, a SIEM).
pub(crate) const TRACE_MARGIN: u32 = 10;
/// What we use: [`TRACE_LIMIT`] − [`TRACE_MARGIN`] per [`TRACE_WINDOW`].
pub(crate) const TRACE_BUDGET: u32 = TRACE_LIMIT - TRACE_MARGIN;
/// The rolling window.
pub(crate) const TRACE_WINDOW: Duration = Duration::from_secs(300);

static SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/trace/budget.lua")));

impl MailRateLimiter {
    fn trace_keys(&self, tenant: &str) -> [String; 2] {
        let base = format!("{}:trace:{{{}}}", self.key_prefix, tenant.to_lowercase());
        [format!("{base}:requests"), format!("{base}:cool")]
    }

    fn trace_now(&self, now: DateTime<Utc>) -> String {
        match &self.engine {
            Engine::Paced(paced) => paced.now_arg(now),
            _ => "TIME".to_owned(),
        }
    }

    /// Counts one trace request of `tenant` if it fits: `Ok(Ok(()))`, or `Ok(Err(wait))`.
    ///
    /// # Errors
    /// A Redis failure (the caller skips its round: nothing fails open here).
    pub(crate) async fn trace_request(
        &self,
        tenant: &str,
        now: DateTime<Utc>,
    ) -> Result<Result<(), Duration>, RedisCallError> {
        let keys = self.trace_keys(tenant);
        let args = [
            self.trace_now(now),
            "take".to_owned(),
            TRACE_BUDGET.to_string(),
            TRACE_WINDOW.as_millis().to_string(),
            uuid::Uuid::new_v4().to_string(),
        ];
        let reply = self
            .redis
            .eval(&SCRIPT, &[&keys[0], &keys[1]], &args)
            .await?;
        if let Value::Array(items) = &reply {
            match items.as_slice() {
                [Value::Int(1), Value::Int(_)] => return Ok(Ok(())),
                [Value::Int(0), Value::Int(wait)] => {
                    return Ok(Err(Duration::from_millis(
                        u64::try_from(*wait).unwrap_or(1_000),
                    )));
                }
                _ => {}
            }
        }
        Err(RedisCallError::unexpected("trace/budget.lua", &reply))
    }

    /// No trace request of `tenant` before `until` (a `429`'s `Retry-After`).
    ///
    /// # Errors
    /// A Redis failure.
    pub(crate) async fn trace_cooldown(
        &self,
        tenant: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<(), RedisCallError> {
        let keys = self.trace_keys(tenant);
        let args = [
            self.trace_now(now),
            "cool".to_owned(),
            until.timestamp_millis().to_string(),
        ];
        self.redis
            .eval(&SCRIPT, &[&keys[0], &keys[1]], &args)
            .await?;
        Ok(())
    }
}
