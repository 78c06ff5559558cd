//! Exchange Online's message trace as graph-sim serves it (`"trace"` in the config file,
//! [`SimTrace`]): how long after a send its records appear, which tenants have not provisioned
//! the message-trace app's service principal yet, which recipients' mail is filtered as spam or
//! quarantined, and the tenant's request budget.
//! Sources: <https://learn.microsoft.com/graph/api/messagetracingroot-list-messagetraces>,
//! <https://learn.microsoft.com/exchange/monitoring/trace-an-email-message/graph-api-message-trace>.

use serde::{Deserialize, Serialize};

/// Microsoft's message trace budget: "For a tenant, a maximum of 100 query message trace
/// requests will be accepted within a 5-minute running window", message trace and detail
/// sharing it
/// (<https://techcommunity.microsoft.com/blog/Exchange/message-trace-support-using-graph-api-is-now-in-public-preview/4488587>,
/// <https://learn.microsoft.com/powershell/module/exchange/get-messagetracedetailv2>).
pub const TRACE_REQUESTS_PER_5_MINUTES: u32 = 100;

/// The message trace's settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimTrace {
    /// How long after graph-sim accepted a message its trace records appear (ms; default 0).
    /// Exchange's trace lags the send by minutes; Microsoft documents no bound.
    pub lag_ms: u64,
    /// Tenants (ids, any case) whose service principal of the message-trace app is not
    /// provisioned: every trace request of theirs is answered `401` until
    /// `GraphSim::set_trace_provisioned` provisions it.
    pub unprovisioned_tenants: Vec<String>,
    /// Recipients whose mail Exchange filters instead of delivering (first match wins).
    pub filtered: Vec<TraceRule>,
    /// Requests per tenant per rolling 5 minutes (default 100).
    pub requests_per_5_minutes: u32,
}

impl Default for SimTrace {
    fn default() -> Self {
        Self {
            lag_ms: 0,
            unprovisioned_tenants: Vec::new(),
            filtered: Vec::new(),
            requests_per_5_minutes: TRACE_REQUESTS_PER_5_MINUTES,
        }
    }
}

/// What happens to the mail of the recipients `address` matches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceRule {
    /// `user@domain` or `*@domain`; no case.
    pub address: String,
    /// The trace status: `FilteredAsSpam` or `Quarantined`.
    pub status: String,
}

impl TraceRule {
    /// Every recipient at `domain` gets `status`.
    pub fn domain(domain: &str, status: &str) -> Self {
        Self {
            address: format!("*@{domain}"),
            status: status.to_owned(),
        }
    }

    pub(crate) fn matches(&self, recipient: &str) -> bool {
        match self.address.strip_prefix("*@") {
            Some(domain) => recipient
                .rsplit_once('@')
                .is_some_and(|(_, d)| d.eq_ignore_ascii_case(domain)),
            None => recipient.eq_ignore_ascii_case(&self.address),
        }
    }
}

impl SimTrace {
    /// The status a rule gives `recipient`'s mail, if any.
    pub(crate) fn filtered(&self, recipient: &str) -> Option<&str> {
        self.filtered
            .iter()
            .find(|r| r.matches(recipient))
            .map(|r| r.status.as_str())
    }
}
