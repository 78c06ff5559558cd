//! The label sets of the daemon's metrics ([`super::Metrics`]) and their fixed values: a
//! label's values are a contract (dashboards and alerts key on them).

use prometheus_client::encoding::EncodeLabelSet;

/// `provider` label values.
pub(crate) const PROVIDER_GRAPH: &str = "graph";
/// `provider` label value of SendGrid.
pub(crate) const PROVIDER_SENDGRID: &str = "sendgrid";

/// The message statuses the `mail_worker_messages` gauge always reports (0 when none).
pub(crate) const STATUSES: [&str; 5] = crate::domain::MessageStatus::ALL_NAMES;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(in crate::ops) struct SendLabels {
    pub(super) provider: &'static str,
    pub(super) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(in crate::ops) struct CodeClassLabels {
    pub(super) code_class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(in crate::ops) struct DecisionLabels {
    pub(super) decision: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(in crate::ops) struct ProviderStatusLabels {
    pub(super) provider: &'static str,
    pub(super) status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(in crate::ops) struct ProviderLabels {
    pub(super) provider: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(in crate::ops) struct BudgetLabels {
    pub(super) mailbox: String,
    pub(super) window: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(in crate::ops) struct TenantLabels {
    pub(super) tenant: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(in crate::ops) struct ReasonLabels {
    pub(super) reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(in crate::ops) struct StatusLabels {
    pub(super) status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(in crate::ops) struct StageLabels {
    pub(super) stage: &'static str,
}

/// `stage` of `mail_worker_recipients_suppressed_total`: dropped from a new message.
pub(crate) const STAGE_INTAKE: &str = "intake";
/// `stage` of `mail_worker_recipients_suppressed_total`: dropped just before the send.
pub(crate) const STAGE_SEND: &str = "send";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(in crate::ops) struct MailboxLabels {
    pub(super) mailbox: String,
}

/// The `outcome` label of `mail_worker_sends_total`: what became of one send as the metric
/// counts it. Finer than the service's [`crate::service::SendOutcome`] (the row as written):
/// a deferral is told apart by its cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeLabel {
    /// `SENT`.
    Sent,
    /// Our limiter deferred it.
    Deferred,
    /// The provider throttled it (429/503/504): deferred by its `Retry-After`.
    Throttled,
    /// A transient failure: retried with backoff.
    Retried,
    /// `ERROR`.
    Failed,
    /// Its sender is paused (credentials missing or refused): deferred, not an attempt.
    Paused,
}

impl OutcomeLabel {
    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Sent => "sent",
            Self::Deferred => "deferred",
            Self::Throttled => "throttled",
            Self::Retried => "retried",
            Self::Failed => "failed",
            Self::Paused => "paused",
        }
    }
}
