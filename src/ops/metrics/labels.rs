//! The label sets of the daemon's metrics ([`super::Metrics`]) and their fixed values: a
//! label's values are a contract (dashboards and alerts key on them).

use prometheus_client::encoding::EncodeLabelSet;

/// `provider` label values.
pub(crate) const PROVIDER_GRAPH: &str = "graph";
/// `provider` label value of SendGrid.
pub(crate) const PROVIDER_SENDGRID: &str = "sendgrid";

/// The message statuses the `mail_worker_messages` gauge always reports (0 when none).
pub(crate) const STATUSES: [&str; 6] = crate::domain::MessageStatus::ALL_NAMES;

/// Declares label sets: each a struct of `pub(super)` fields with the derives a
/// [`prometheus_client`] `Family` key needs.
macro_rules! label_sets {
    ($($name:ident { $($field:ident: $ty:ty),+ })+) => {$(
        #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
        pub(in crate::ops) struct $name {
            $(pub(super) $field: $ty,)+
        }
    )+};
}

label_sets! {
    SendLabels { provider: &'static str, outcome: &'static str }
    CodeClassLabels { code_class: &'static str }
    DecisionLabels { decision: &'static str }
    ProviderStatusLabels { provider: &'static str, status: &'static str }
    ProviderLabels { provider: &'static str }
    BudgetLabels { mailbox: String, window: &'static str }
    TenantLabels { tenant: String }
    ReasonLabels { reason: &'static str }
    StatusLabels { status: String }
    StageLabels { stage: &'static str }
    MailboxLabels { mailbox: String }
    OverflowLabels { pool: String, reason: &'static str }
    LimitPauseLabels { scope: String, key: String, code: String }
    AdaptiveLabels { rule: String, scope: &'static str, tenant: String, mailbox: String }
    RecipientOutcomeLabels { mailbox: String, outcome: &'static str }
}

/// `stage` of `mail_worker_recipients_suppressed_total`: dropped from a new message.
pub(crate) const STAGE_INTAKE: &str = "intake";
/// `stage` of `mail_worker_recipients_suppressed_total`: dropped just before the send.
pub(crate) const STAGE_SEND: &str = "send";

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
