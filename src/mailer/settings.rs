//! What the mailers are built from: the providers' endpoints, the HTTP deadline and the default
//! limits ([`MailerSettings`], read from the environment by `config`).

use std::time::Duration;

use url::Url;

use crate::{domain::redact_url, rate_limit::RateLimits};

/// Microsoft Graph endpoints (`Debug` hides a password in the URLs).
#[derive(Clone, PartialEq, Eq)]
pub struct GraphConfig {
    /// `GRAPH_API_BASE_URL`, default `https://graph.microsoft.com/v1.0`.
    pub api_base_url: Url,
    /// `GRAPH_LOGIN_BASE_URL`, default `https://login.microsoftonline.com`.
    pub login_base_url: Url,
    /// `GRAPH_SAVE_TO_SENT_ITEMS`, default `true`.
    pub save_to_sent_items: bool,
    /// `GRAPH_SEND_MODE`, `draft` (default) or `sendmail` (docs/delivery.md).
    pub send_mode: super::graph::GraphSendMode,
    /// `GRAPH_SEND_SETTLE`, default `2m`: after a send with an unknown outcome, how
    /// long a check that finds the message still a draft (or not in Sent Items) is not trusted
    /// to mean "not sent" (Graph is eventually consistent; Microsoft documents no bound).
    pub send_settle: Duration,
}

impl std::fmt::Debug for GraphConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphConfig")
            .field("api_base_url", &redact_url(&self.api_base_url))
            .field("login_base_url", &redact_url(&self.login_base_url))
            .field("save_to_sent_items", &self.save_to_sent_items)
            .field("send_mode", &self.send_mode)
            .field("send_settle", &self.send_settle)
            .finish()
    }
}

/// Everything [`super::MailerFactory`] needs from the configuration (`From<&Config>`;
/// `Debug` hides a password in the URLs).
#[derive(Clone)]
pub struct MailerSettings {
    /// Microsoft Graph endpoints and send mode.
    pub graph: GraphConfig,
    /// `SENDGRID_API_BASE_URL`.
    pub sendgrid_api_base_url: Url,
    /// `HTTP_TIMEOUT`: the whole-request deadline of every provider call.
    pub http_timeout: Duration,
    /// `MAIL_RATE_LIMIT_PER_MINUTE` / `MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY`: a mailbox's limits
    /// unless it overrides them.
    pub defaults: RateLimits,
    /// `GRAPH_READ_BOUNCES=on`: Graph tokens must also carry bounce reading's permissions.
    pub read_bounces: bool,
}

impl std::fmt::Debug for MailerSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MailerSettings")
            .field("graph", &self.graph)
            .field(
                "sendgrid_api_base_url",
                &redact_url(&self.sendgrid_api_base_url),
            )
            .field("http_timeout", &self.http_timeout)
            .field("defaults", &self.defaults)
            .field("read_bounces", &self.read_bounces)
            .finish()
    }
}
