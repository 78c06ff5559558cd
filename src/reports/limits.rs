//! The limits in force for a sender and where each comes from (its override or the default),
//! its provider and its tenant budget: what `mailbox usage`, the campaign forecast and the
//! budget gauges all start from.

use serde::Serialize;

use crate::{
    config::Config,
    domain::{Sender, TenantTransport},
};

/// A mailbox's limits and where each comes from.
#[derive(Debug, Clone, Serialize)]
pub struct EffectiveLimits {
    /// Messages per minute.
    pub per_minute: u32,
    /// `override` (the mailbox's own) or `default` (`MAIL_RATE_LIMIT_PER_MINUTE`).
    pub per_minute_source: &'static str,
    /// Recipients per day.
    pub recipients_per_day: u32,
    /// `override`, `default` (`MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY`) or `warm-up` (the
    /// sender's warm-up step's budget, lower than the others: ADR 0047).
    pub recipients_per_day_source: &'static str,
    /// Percent of each budget only `high` messages may use (`paced`; `fixed-window` ignores it).
    pub reserved_percent: u8,
    /// `override` or `default` (`MAIL_RATE_LIMIT_RESERVED_PERCENT`).
    pub reserved_percent_source: &'static str,
    /// Its warm-up, for the forecast's day budgets ahead (`mailbox usage` shows it apart).
    #[serde(skip)]
    pub warm_up: Option<crate::forecast::Ramp>,
}

/// `graph` for a sender with a Graph tenant, `sendgrid` for one without.
pub(crate) fn provider(tenant: Option<&str>) -> &'static str {
    if tenant.is_some() {
        "graph"
    } else {
        "sendgrid"
    }
}

/// A sender's kind (`system mailbox` / `tenant <name>`), id, Graph tenant (`None`: SendGrid)
/// and limits in force.
pub(crate) fn limits_of(
    sender: &Sender,
    config: &Config,
) -> (String, uuid::Uuid, Option<String>, EffectiveLimits) {
    let inforce = config.rate_limit.defaults.for_sender(sender);
    let source = |o: bool| if o { "override" } else { "default" };
    let (own_minute, own_day, own_reserved, warm_up) = match sender {
        Sender::SystemMailbox(m) => (
            m.rate_limit_per_minute.is_some(),
            m.rate_limit_recipients_per_day.is_some(),
            m.rate_limit_reserved_percent.is_some(),
            m.warm_up.map(crate::domain::WarmUpStep::day_budget),
        ),
        Sender::Tenant(t) => (
            false,
            false,
            false,
            t.warm_up.map(crate::domain::WarmUpStep::day_budget),
        ),
    };
    // The forecast's ramp: the step's budgets ahead, under the sender's own day budget.
    let ramp = sender.warm_up().map(|step| {
        let mut own = sender.clone();
        match &mut own {
            Sender::SystemMailbox(m) => m.warm_up = None,
            Sender::Tenant(t) => t.warm_up = None,
        }
        crate::forecast::Ramp {
            step,
            own_per_day: config
                .rate_limit
                .defaults
                .for_sender(&own)
                .recipients_per_day
                .get(),
        }
    });
    let limits = EffectiveLimits {
        per_minute: inforce.per_minute.get(),
        per_minute_source: source(own_minute),
        recipients_per_day: inforce.recipients_per_day.get(),
        recipients_per_day_source: if warm_up == Some(inforce.recipients_per_day) {
            "warm-up"
        } else {
            source(own_day)
        },
        reserved_percent: inforce.reserved_percent,
        reserved_percent_source: source(own_reserved),
        warm_up: ramp,
    };
    match sender {
        Sender::SystemMailbox(m) => (
            "system mailbox".to_owned(),
            m.id,
            Some(m.graph.graph_tenant_id.clone()),
            limits,
        ),
        Sender::Tenant(t) => (
            format!("tenant {}", t.name),
            t.id,
            match &t.transport {
                TenantTransport::Graph(c) => Some(c.graph_tenant_id.clone()),
                TenantTransport::SendGrid { .. } => None,
            },
            limits,
        ),
    }
}

/// The tenant budget `sender` sends under (`None`: none, or SendGrid).
pub(crate) fn tenant_budget(sender: &Sender) -> Option<&crate::domain::TenantBudget> {
    match sender {
        Sender::SystemMailbox(m) => m.graph.tenant_budget.as_ref(),
        Sender::Tenant(t) => match &t.transport {
            TenantTransport::Graph(g) => g.tenant_budget.as_ref(),
            TenantTransport::SendGrid { .. } => None,
        },
    }
}
