//! Adaptive rules' shared state (docs/decisions/0048-adaptive-rules.md): per scope, the
//! signals a rule counts in its window and the action in force, in the limiter's Redis, so
//! every replica counts and obeys the same. The rules are pure ([`crate::domain::adaptive`]);
//! here their keys, the read on the limiter's path ([`Adaptive::in_force`], one `MGET` per
//! mailbox, cached 1 s in process), the one function that turns an action into the limits of
//! an [`Ask`] ([`RateLimits::shrunk`]), the signals (`signal.rs`) and the operator's
//! suspensions (`operator.rs`).
//!
//! Keys (`<tenant>` is the Cluster hash tag the `paced` keys use):
//!
//! ```text
//! <prefix>:{<tenant>}:<mailbox>:adaptive       string (JSON ActionInForce), PX until recovered
//! <prefix>:{<tenant>}:tenant:adaptive          the tenant's (its external mail)
//! <prefix>:{campaign:<id>}:adaptive            a campaign's (an operator's suspension)
//! <key>:sig:<rule>                             zset: the rule's signals in its window
//! ```

mod operator;
mod signal;

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};

pub use operator::{KeptSuspension, ScopeKey};
pub use signal::Signalled;

use super::{Ask, RateLimits, paced::keys::PacedKeys};
use crate::{
    domain::{
        MailboxAddress,
        adaptive::{ActionInForce, Budgets, RuleTable, WHOLE},
    },
    log_events,
};

/// How long a read of a mailbox's actions serves this process: 1 s. Another replica's new
/// action is obeyed within it; this process's own (a signal it counted, `suspend` through it)
/// at once.
const CACHE_FOR: Duration = Duration::from_secs(1);

/// The rules and this process's view of the actions in force.
#[derive(Debug)]
pub(crate) struct Adaptive {
    pub rules: RuleTable,
    cache: Mutex<HashMap<String, (Instant, Option<ActionInForce>)>>,
    /// The last factor this process saw per action key: a rise to the whole budget is logged
    /// once (`mail.adaptive.recovered`).
    seen: Mutex<HashMap<String, (String, u16)>>,
}

/// What the actions in force make of one ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing in force.
    Free,
    /// Held until then by the named rule (or `operator`): nothing goes.
    Suspended { until: DateTime<Utc>, rule: String },
    /// The limits to decide by.
    Shrunk {
        limits: RateLimits,
        tenant_per_day: Option<std::num::NonZeroU32>,
    },
}

/// The key of a mailbox's action.
pub(crate) fn mailbox_key(prefix: &str, tenant: &str, mailbox: &MailboxAddress) -> String {
    format!(
        "{}:adaptive",
        PacedKeys::new(prefix, tenant, mailbox).state()
    )
}

/// The key of a tenant's action (its external mail).
pub(crate) fn tenant_key(prefix: &str, tenant: &str) -> String {
    format!("{}:adaptive", PacedKeys::tenant_state(prefix, tenant))
}

/// The key of a campaign's action.
pub(crate) fn campaign_key(prefix: &str, campaign: &str) -> String {
    let tag: String = campaign
        .chars()
        .filter(|c| *c != '{' && *c != '}')
        .collect();
    format!("{prefix}:{{campaign:{tag}}}:adaptive")
}

impl Adaptive {
    pub(crate) fn new(rules: RuleTable) -> Self {
        Self {
            rules,
            cache: Mutex::new(HashMap::new()),
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// The cached action under `key`, if read within [`CACHE_FOR`].
    pub(crate) fn cached(&self, key: &str) -> Option<Option<ActionInForce>> {
        let cache = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        cache
            .get(key)
            .filter(|(at, _)| at.elapsed() < CACHE_FOR)
            .map(|(_, action)| action.clone())
    }

    /// Remembers what Redis holds under `key` (`None`: nothing).
    pub(crate) fn remember(&self, key: &str, action: Option<ActionInForce>) {
        let mut cache = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if cache.len() > 10_000 {
            cache.retain(|_, (at, _)| at.elapsed() < CACHE_FOR);
        }
        cache.insert(key.to_owned(), (Instant::now(), action));
    }

    /// The verdict of `mailbox` and `tenant` actions on `ask` at `now`: a suspension of the
    /// mailbox, or of the tenant when the ask has external recipients (or the tenant no
    /// external budget to tell them apart: the safe reading holds all its mail), denies;
    /// otherwise the lowest factor of each budget shrinks it.
    pub(crate) fn verdict(
        &self,
        ask: &Ask<'_>,
        (mailbox, tenant): (Option<&ActionInForce>, Option<&ActionInForce>),
        now: DateTime<Utc>,
    ) -> Verdict {
        let now_ms = now.timestamp_millis();
        let external = ask.tenant_budget.is_none_or(|(external, _)| external > 0);
        let tenant = tenant.filter(|_| external);
        for action in [mailbox, tenant].into_iter().flatten() {
            if action.suspends_at(now_ms) {
                return Verdict::Suspended {
                    until: DateTime::from_timestamp_millis(action.held_until_ms).unwrap_or(now),
                    rule: action.rule.clone(),
                };
            }
        }
        let factor = |action: Option<&ActionInForce>, day: bool| {
            action
                .filter(|a| match a.budgets() {
                    Budgets::Both => true,
                    Budgets::PerMinute => !day,
                    Budgets::PerDay => day,
                })
                .map_or(WHOLE, |a| a.permille_at(now_ms))
        };
        let minute = factor(mailbox, false);
        let day = factor(mailbox, true);
        let tenant_day = factor(tenant, true);
        if (minute, day, tenant_day) == (WHOLE, WHOLE, WHOLE) {
            return Verdict::Free;
        }
        Verdict::Shrunk {
            limits: ask.limits.shrunk((minute, day), ask.recipients),
            tenant_per_day: ask.tenant_budget.map(|(external, per_day)| {
                let shrunk = crate::domain::adaptive::shrink(per_day.get(), tenant_day);
                std::num::NonZeroU32::new(shrunk.max(external)).unwrap_or(per_day)
            }),
        }
    }

    /// Logs `mail.adaptive.recovered` once when the action under `key` is back at the whole
    /// budget, as this process saw it; returns what the factor gauge should show: the rule
    /// and its factor in force (‰) while one holds less than the whole budget, the ended rule
    /// at the whole budget once, `None` otherwise (no action, or a whole-budget mark such as
    /// `resume`'s: no series of its own).
    pub(crate) fn watch(
        &self,
        key: &str,
        action: Option<&ActionInForce>,
        now_ms: i64,
    ) -> Option<(String, u16)> {
        let permille = action.map_or(WHOLE, |a| a.permille_at(now_ms));
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match (seen.get(key), action) {
            (Some((rule, before)), _) if permille == WHOLE && *before < WHOLE => {
                tracing::info!(
                    event = log_events::MAIL_ADAPTIVE_RECOVERED,
                    rule = %rule,
                    scope = scope_of(key),
                    "an adaptive action ended: the whole budget is back"
                );
                let ended = rule.clone();
                seen.remove(key);
                Some((ended, WHOLE))
            }
            (_, Some(a)) if permille < WHOLE => {
                seen.insert(key.to_owned(), (a.rule.clone(), permille));
                Some((a.rule.clone(), permille))
            }
            _ => None,
        }
    }
}

/// `mailbox`, `tenant` or `campaign`, by the shape of an action key.
pub(crate) fn scope_of(key: &str) -> &'static str {
    if key.contains("{campaign:") {
        "campaign"
    } else if key.ends_with(":tenant:adaptive") {
        "tenant"
    } else {
        "mailbox"
    }
}

impl RateLimits {
    /// These limits with the per-minute budget at `minute`‰ and the day budget at `day`‰ (at
    /// least 1 message a minute, and at least the `recipients` of the message asking, so a
    /// shrink defers it rather than refusing it for good). The one place an adaptive action
    /// lowers the limits in force; a warm-up's day budget is decided before it.
    #[must_use]
    pub fn shrunk(self, (minute, day): (u16, u16), recipients: u32) -> Self {
        use crate::domain::adaptive::shrink;
        let nonzero = |n: u32, fallback| std::num::NonZeroU32::new(n).unwrap_or(fallback);
        Self {
            per_minute: nonzero(shrink(self.per_minute.get(), minute), self.per_minute),
            recipients_per_day: nonzero(
                shrink(self.recipients_per_day.get(), day).max(recipients),
                self.recipients_per_day,
            ),
            reserved_percent: self.reserved_percent,
        }
    }
}

/// The rule table in force: the file at `path` (`ADAPTIVE_RULES_FILE`) or, unset, the built-in
/// one.
///
/// # Errors
/// The file cannot be read or is refused: the text names the setting, the file, the rule and
/// the field.
pub fn load_rules(path: Option<&std::path::Path>) -> Result<RuleTable, AdaptiveRulesError> {
    let Some(path) = path else {
        return Ok(RuleTable::defaults());
    };
    let text = std::fs::read_to_string(path).map_err(|e| AdaptiveRulesError {
        path: path.display().to_string(),
        problem: format!("cannot be read: {e}"),
    })?;
    crate::domain::adaptive::parse_rules(&text).map_err(|e| AdaptiveRulesError {
        path: path.display().to_string(),
        problem: e.to_string(),
    })
}

/// A rules file [`load_rules`] refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ADAPTIVE_RULES_FILE ({path}): {problem}")]
pub struct AdaptiveRulesError {
    path: String,
    problem: String,
}

/// The action JSON under a key, as Redis holds it (`None`: nothing, or unreadable).
pub(crate) fn decode(raw: Option<&str>) -> Option<ActionInForce> {
    raw.and_then(|text| serde_json::from_str(text).ok())
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;
    use crate::domain::{Priority, adaptive::RuleTable};

    fn ask(mailbox: &MailboxAddress, external: Option<u32>) -> Ask<'_> {
        Ask {
            message_id: uuid::Uuid::nil(),
            mailbox,
            tenant: "contoso.example",
            recipients: 1,
            limits: RateLimits {
                per_minute: NonZeroU32::new(30).unwrap(),
                recipients_per_day: NonZeroU32::new(10_000).unwrap(),
                reserved_percent: 0,
            },
            tenant_budget: external.map(|e| (e, NonZeroU32::new(1_000).unwrap())),
            priority: Priority::Normal,
        }
    }

    #[test]
    fn the_factor_shown_follows_the_action_back_to_the_whole_budget_once() {
        let adaptive = Adaptive::new(RuleTable::defaults());
        let key = "mw:rl:{contoso.example}:news@contoso.example:adaptive";
        let held = ActionInForce::operator(0, 60_000, None);
        assert_eq!(
            adaptive.watch(key, Some(&held), 1_000),
            Some(("operator".to_owned(), 0))
        );
        // Resumed (the key gone) or expired: the rule's series back at the whole budget, once.
        assert_eq!(
            adaptive.watch(key, None, 2_000),
            Some(("operator".to_owned(), WHOLE))
        );
        assert_eq!(adaptive.watch(key, None, 3_000), None);
        assert_eq!(adaptive.watch(key, Some(&held), 61_000), None, "expired");
    }

    #[test]
    fn a_tenant_suspension_holds_external_mail_only_and_a_mailbox_shrink_its_minute() {
        let adaptive = Adaptive::new(RuleTable::defaults());
        let mailbox = MailboxAddress::parse("news@contoso.example").unwrap();
        let rules = RuleTable::defaults();
        let suspend = ActionInForce::of_rule(rules.named("tenant-reputation-705").unwrap(), 0);
        let shrink = ActionInForce::of_rule(rules.named("mailbox-concurrency").unwrap(), 0);
        let now = DateTime::from_timestamp_millis(60_000).unwrap();
        assert!(matches!(
            adaptive.verdict(&ask(&mailbox, Some(1)), (None, Some(&suspend)), now),
            Verdict::Suspended { .. }
        ));
        assert_eq!(
            adaptive.verdict(&ask(&mailbox, Some(0)), (None, Some(&suspend)), now),
            Verdict::Free
        );
        let Verdict::Shrunk { limits, .. } =
            adaptive.verdict(&ask(&mailbox, Some(0)), (Some(&shrink), None), now)
        else {
            panic!("a shrink")
        };
        assert_eq!(
            (limits.per_minute.get(), limits.recipients_per_day.get()),
            (7, 10_000)
        );
    }

    #[test]
    fn keys_share_the_paced_hash_tag() {
        let mailbox = MailboxAddress::parse("news@contoso.example").unwrap();
        assert_eq!(
            mailbox_key("mail:rl", "Contoso.example", &mailbox),
            "mail:rl:{contoso.example}:news@contoso.example:adaptive"
        );
        assert_eq!(
            tenant_key("mail:rl", "contoso.example"),
            "mail:rl:{contoso.example}:tenant:adaptive"
        );
        assert_eq!(
            campaign_key("mail:rl", "spring"),
            "mail:rl:{campaign:spring}:adaptive"
        );
        assert_eq!(scope_of(&tenant_key("p", "t")), "tenant");
    }
}
