//! What the mailers are built from: the providers' endpoints, the HTTP deadline and the default
//! limits ([`MailerSettings`], read from the environment by `config`).

use std::time::Duration;

use url::Url;

use crate::rate_limit::RateLimits;

/// Microsoft Graph endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphConfig {
    /// `GRAPH_API_BASE_URL`, default `https://graph.microsoft.com/v1.0`.
    pub api_base_url: Url,
    /// `GRAPH_LOGIN_BASE_URL`, default `https://login.microsoftonline.com`.
    pub login_base_url: Url,
    /// `GRAPH_SAVE_TO_SENT_ITEMS`, default `true`.
    pub save_to_sent_items: bool,
    /// `GRAPH_SEND_MODE`, `draft` (default) or `sendmail` (docs/delivery.md).
    pub send_mode: super::graph::GraphSendMode,
    /// `GRAPH_SEND_SETTLE_MS`, default 120000 ms: after a send with an unknown outcome, how
    /// long a check that finds the message still a draft (or not in Sent Items) is not trusted
    /// to mean "not sent" (Graph is eventually consistent; Microsoft documents no bound).
    pub send_settle: Duration,
}

/// Everything [`super::MailerFactory`] needs from the configuration (`From<&Config>`).
#[derive(Debug, Clone)]
pub struct MailerSettings {
    /// Microsoft Graph endpoints and send mode.
    pub graph: GraphConfig,
    /// `SENDGRID_API_BASE_URL`.
    pub sendgrid_api_base_url: Url,
    /// `HTTP_TIMEOUT_MS`: the whole-request deadline of every provider call.
    pub http_timeout: Duration,
    /// `MAIL_RATE_LIMIT_PER_MINUTE` / `MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY`: a mailbox's limits
    /// unless it overrides them.
    pub defaults: RateLimits,
}
