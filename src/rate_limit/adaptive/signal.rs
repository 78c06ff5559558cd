//! A signal counted for each rule that counts it (`lua/adaptive/signal.lua`: one round trip per
//! rule, the window and the action in one slot), and the read of the actions in force on the
//! limiter's path.

use chrono::{DateTime, Utc};
use redis::Script;

use super::{Verdict, decode, mailbox_key, tenant_key};
use crate::{
    domain::{
        MailboxAddress,
        adaptive::{ActionInForce, RuleTable, Scope, Signal},
    },
    log_events,
    rate_limit::{
        AdaptiveOn, Ask, Decision, DenyReason, MailRateLimiter, RedisCallError, connection::replies,
    },
};

/// `lua/adaptive/signal.lua`.
const SIGNAL_LUA: &str = include_str!("../../../lua/adaptive/signal.lua");

/// Whose signal it is: the sending mailbox and its Graph tenant.
#[derive(Debug, Clone, Copy)]
pub struct Signalled<'a> {
    /// The Graph tenant (lower case or not).
    pub tenant: &'a str,
    /// The sending mailbox.
    pub mailbox: &'a MailboxAddress,
}

/// A slack past the end of an action's recovery before its key goes: 1 min.
const KEEP_AFTER_MS: i64 = 60_000;

impl MailRateLimiter {
    /// Counts signals by `rules` (the built-in table or `ADAPTIVE_RULES_FILE`'s); without it
    /// no rule fires (an operator's suspension still holds).
    #[must_use]
    pub fn with_adaptive_rules(mut self, rules: RuleTable) -> Self {
        self.adaptive = super::Adaptive::new(rules);
        self
    }

    /// The adaptive rules it counts by.
    pub fn adaptive_rules(&self) -> &RuleTable {
        &self.adaptive.rules
    }

    /// Counts `signal` for every rule of the table that counts it, in the scope the rule
    /// names, and starts the rule's action at its threshold (`mail.adaptive.fired`,
    /// `mail_worker_adaptive_actions_total`). Redis trouble is logged, never returned: a signal
    /// missed costs a slower reaction, not a send.
    pub async fn adaptive_signal(&self, signal: Signal, on: Signalled<'_>, now: DateTime<Utc>) {
        let now_ms = now.timestamp_millis();
        let rules: Vec<_> = self.adaptive.rules.counting(signal).cloned().collect();
        for rule in rules {
            let key = match rule.scope {
                Scope::Mailbox => mailbox_key(&self.key_prefix, on.tenant, on.mailbox),
                Scope::Tenant => tenant_key(&self.key_prefix, on.tenant),
                Scope::Campaign => continue,
            };
            let action = ActionInForce::of_rule(&rule, now_ms);
            let ttl = action.ends_at_ms() - now_ms + KEEP_AFTER_MS;
            let args = [
                now_ms.to_string(),
                rule.window.as_millis().to_string(),
                rule.threshold.to_string(),
                uuid::Uuid::new_v4().to_string(),
                serde_json::to_string(&action).unwrap_or_default(),
                ttl.to_string(),
                action.held_permille.to_string(),
            ];
            let signals = format!("{key}:sig:{}", rule.name);
            let script = Script::new(SIGNAL_LUA);
            let answer = self
                .redis
                .eval(&script, &[signals.as_str(), key.as_str()], &args)
                .await
                .and_then(|reply| replies::int_pair(&reply, "adaptive_signal"));
            match answer {
                Ok((1, count)) => {
                    self.adaptive.remember(&key, Some(action.clone()));
                    if let Some(metrics) = &self.metrics {
                        let scope = rule.scope.as_str();
                        let on = AdaptiveOn::of(scope, on.tenant, on.mailbox.as_str());
                        metrics.adaptive_fired(&rule.name, scope, on);
                    }
                    tracing::warn!(
                        event = log_events::MAIL_ADAPTIVE_FIRED,
                        rule = %rule.name,
                        signal = signal.as_str(),
                        scope = rule.scope.as_str(),
                        mailbox = %on.mailbox,
                        tenant = %on.tenant,
                        count,
                        action = rule.action.name(),
                        factor = f64::from(action.held_permille) / 1000.0,
                        until = %DateTime::from_timestamp_millis(action.held_until_ms).unwrap_or(now).to_rfc3339(),
                        "an adaptive rule fired: {} signals {} within {:?}",
                        count,
                        signal.as_str(),
                        rule.window
                    );
                }
                Ok((_, count)) => tracing::debug!(
                    rule = %rule.name,
                    signal = signal.as_str(),
                    mailbox = %on.mailbox,
                    count,
                    "adaptive signal counted"
                ),
                Err(error) => self.log_failure("adaptive_signal", on.mailbox, &error),
            }
        }
    }

    /// What the actions in force on `ask`'s mailbox and tenant make of it at `now`: one `MGET`
    /// (both keys share the tenant's hash tag), cached [`super::CACHE_FOR`].
    ///
    /// # Errors
    /// The Redis failure (the decision then fails open).
    pub(crate) async fn adaptive_verdict(
        &self,
        ask: &Ask<'_>,
        now: DateTime<Utc>,
    ) -> Result<Verdict, RedisCallError> {
        let keys = [
            mailbox_key(&self.key_prefix, ask.tenant, ask.mailbox),
            tenant_key(&self.key_prefix, ask.tenant),
        ];
        let actions = match (
            self.adaptive.cached(&keys[0]),
            self.adaptive.cached(&keys[1]),
        ) {
            (Some(mailbox), Some(tenant)) => [mailbox, tenant],
            _ => match self.read_actions(&keys).await {
                Ok(read) => {
                    for (key, action) in keys.iter().zip(&read) {
                        self.adaptive.remember(key, action.clone());
                    }
                    read
                }
                Err(error) => return Err(error),
            },
        };
        let now_ms = now.timestamp_millis();
        for (key, action) in keys.iter().zip(&actions) {
            // The gauge follows the action: its factor while it holds, 1 once it ended (a
            // trial found it left at 0 after a resume or an expiry).
            let shown = self.adaptive.watch(key, action.as_ref(), now_ms);
            if let (Some(metrics), Some((rule, permille))) = (&self.metrics, shown) {
                let scope = super::scope_of(key);
                let on = AdaptiveOn::of(scope, ask.tenant, ask.mailbox.as_str());
                metrics.adaptive_factor(&rule, scope, on, permille);
            }
        }
        Ok(self
            .adaptive
            .verdict(ask, (actions[0].as_ref(), actions[1].as_ref()), now))
    }

    /// `ask` as the actions in force leave it at `now`: the same, or with lower limits (a
    /// shrink), or `Err` with the decision already made: the denial of a suspension
    /// (`suspended`, until it ends), or the fail-open of a Redis that did not answer the read
    /// (counted in the decisions' metric since `started`).
    pub(crate) async fn adapted<'a>(
        &self,
        ask: &Ask<'a>,
        now: DateTime<Utc>,
        started: std::time::Instant,
    ) -> Result<Ask<'a>, Decision> {
        let verdict = match self.adaptive_verdict(ask, now).await {
            Ok(verdict) => verdict,
            Err(error) => {
                if let Some(metrics) = &self.metrics {
                    metrics.rate_limit_decision("fail_open", started.elapsed());
                }
                return Err(self.fail_open(ask, now, &error).await);
            }
        };
        match verdict {
            Verdict::Free => Ok(*ask),
            Verdict::Suspended { until, rule } => {
                if let Some(metrics) = &self.metrics {
                    metrics.rate_limit_decision("suspended", started.elapsed());
                }
                tracing::debug!(mailbox = %ask.mailbox, rule = %rule, "suspended by an adaptive action");
                Err(Decision::Denied {
                    reason: DenyReason::Suspended,
                    retry_after: (until - now).to_std().unwrap_or_default(),
                    booked: false,
                })
            }
            Verdict::Shrunk {
                limits,
                tenant_per_day,
            } => Ok(Ask {
                limits,
                tenant_budget: ask
                    .tenant_budget
                    .zip(tenant_per_day)
                    .map(|((external, _), per_day)| (external, per_day)),
                ..*ask
            }),
        }
    }

    /// The actions under `keys` (one slot), in their order.
    pub(crate) async fn read_actions<const N: usize>(
        &self,
        keys: &[String; N],
    ) -> Result<[Option<ActionInForce>; N], RedisCallError> {
        let mut pipe = redis::pipe();
        let get = pipe.cmd("MGET");
        for key in keys {
            get.arg(key);
        }
        let (raw,): (Vec<Option<String>>,) = self.redis.query(&pipe).await?;
        Ok(std::array::from_fn(|i| {
            decode(raw.get(i).and_then(Option::as_deref))
        }))
    }
}
