//! graph-sim's configuration: apps, mailboxes and their limits, built in code or read from JSON.
//!
//! # JSON file format
//!
//! ```json
//! {
//!   "listen": "127.0.0.1:8025",
//!   "token_lifetime_s": 3599,
//!   "max_request_bytes": 4194304,
//!   "apps": [
//!     { "tenant_id": "contoso.example", "client_id": "app-1", "client_secret": "s3cret" }
//!   ],
//!   "mailboxes": [
//!     {
//!       "address": "events@contoso.example",
//!       "tenant_id": "contoso.example",
//!       "id": "2f9a4f61-3c6b-4d1e-9a57-6c1f0e0b7d11",
//!       "apps": ["app-1"],
//!       "limits": {
//!         "concurrent_requests": 4,
//!         "messages_per_minute": 30,
//!         "recipients_per_day": 10000,
//!         "requests_per_10_minutes": 10000,
//!         "recipients_per_message": 500,
//!         "minute_overflow": "refuse"
//!       }
//!     }
//!   ]
//! }
//! ```
//!
//! Every field except `apps[*]` and `mailboxes[*].address` / `tenant_id` is optional and
//! defaults to the value shown. `id` defaults to a fresh UUID; `apps` (client ids allowed to send
//! for the mailbox) defaults to every app of the mailbox's tenant; `limits` fields default one by
//! one. `minute_overflow` is `refuse` (answer 429) or `accept_delayed` (answer 202 and count the
//! message as delayed, as Exchange would queue it). See [`CONFIG_FILE_HELP`] for the same text
//! as printed by `graph-sim --help`, and `config/graph-sim.example.json` for a full example.

use std::{net::SocketAddr, path::Path, sync::Arc, time::Duration};

use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::SimError;
use crate::clock::Clock;

mod bounces;
mod resolve;
mod trace;
pub use bounces::{NdrLayout, QuotaExceeded, SimBounces, UnknownRecipients};
pub(crate) use resolve::ResolvedMailbox;
pub use trace::{SimTrace, TRACE_REQUESTS_PER_5_MINUTES, TraceRule};

/// The config file format, as printed by `graph-sim --help`.
pub const CONFIG_FILE_HELP: &str = r#"CONFIG FILE (--config FILE), JSON:
  {
    "listen": "127.0.0.1:8025",          optional; --listen wins; default 127.0.0.1:8025
    "token_lifetime_s": 3599,            optional; expires_in of issued tokens (s)
    "max_request_bytes": 4194304,        optional; larger sendMail bodies get 413 (bytes)
    "sent_visibility_delay_ms": 0,       optional; a sent copy is visible only this much later
    "sent_in_transit": "not_found",      optional; a sent draft until then: GET by id 404 and
                                         listed nowhere, or "draft" (still reads isDraft true)
    "apps": [                            Entra ID app registrations (client credentials)
      { "tenant_id": "contoso.example", "client_id": "app-1", "client_secret": "s3cret",
        "client_certificate": "-----BEGIN CERTIFICATE-----…",   optional: accept a
                                         client_assertion signed by this certificate's key
        "roles": ["Mail.Send", "Mail.ReadWrite", "Mail.Read"],  optional; granted application
                                         permissions (tokens' roles claim); default these three
        "mailbox_scope": ["events@contoso.example"] }   optional; RBAC for Applications /
    ],                                   access policy: other mailboxes get 403; default all
    "mailboxes": [
      { "address": "events@contoso.example",   case-insensitive userPrincipalName
        "tenant_id": "contoso.example",        the tenant owning the mailbox
        "id": "2f9a4f61-...",                  optional; default a random UUID
        "apps": ["app-1"],                     optional; default every app of the tenant
        "licensed": true,                      optional; false: 404 MailboxNotEnabledForRESTAPI
        "limits": {                            optional, field by field; defaults:
          "concurrent_requests": 4,            in flight per app and mailbox
          "messages_per_minute": 30,           in any rolling 60 s
          "recipients_per_day": 10000,         To+Cc+Bcc in any rolling 24 h
          "requests_per_10_minutes": 10000,    per app and mailbox, rolling 10 min
          "recipients_per_message": 500,       To+Cc+Bcc of one message
          "minute_overflow": "accept_delayed", 202, counted delayed (Exchange), or "refuse" (429)
          "retry_after_holds": true            a 429's Retry-After holds the mailbox
        } }
    ],
    "tenants": [                         optional; a tenant's external recipient limit:
      { "tenant_id": "contoso.example",      over it the message gets 202 but bounces
        "external_recipients_per_day": 500,  (a tenant_external_limit finding, not accepted)
        "accepted_domains": ["contoso.example"],
        "new_tenant": { "external_per_day": 20,   optional: a new tenant; past 20 external
                        "code": "5.7.708" } }    recipients a day, 202 + NDR 5.7.708 (or 5.7.705)
    ],
    "bounces": {                         optional; non-delivery reports into the sender's Inbox:
      "delay_ms": 0,                       how long after the send the NDR appears
      "unknown_recipients": [              accepted, then bounced (an NDR, not a refusal):
        { "address": "*@nowhere.example", "code": "5.1.1" } ],   or one "user@domain";
      "layout": "postmaster_dsn",          or postmaster_text, plain, outlook_com
      "quota_exceeded": "ndr" }            over recipients_per_day: 202 + NDR 5.1.90; or "refuse" (429)
  }                                      code 5.1.1 (default) or 5.1.10; a tenant over its
                                         external budget gets an NDR with 550 5.7.233
A 429 with Retry-After holds the mailbox (retry_after_holds): every request to it before
then gets 429 again (a retry_after_ignored finding).
Defaults are Microsoft's: https://learn.microsoft.com/graph/throttling-limits#outlook-service-limits
and https://learn.microsoft.com/office365/servicedescriptions/exchange-online-service-description/exchange-online-limits#sending-limits
"#;

/// The default token lifetime: 3599 s, what Entra ID answers for client credentials
/// (<https://learn.microsoft.com/entra/identity-platform/v2-oauth2-client-creds-grant-flow>).
pub const DEFAULT_TOKEN_LIFETIME_S: u64 = 3599;

/// The largest sendMail request body Graph takes: 4 MB (4,194,304 bytes); larger attachments
/// need an upload session (<https://learn.microsoft.com/graph/api/user-sendmail>,
/// <https://learn.microsoft.com/graph/outlook-large-attachments>).
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// What a sent draft looks like during `sent_visibility_delay_ms`, before its Sent Items copy
/// is visible. Microsoft: "retrieving the message from Sent Items might not succeed immediately
/// after sending it: the copy isn't created until the message is sent, which can take time"
/// (<https://learn.microsoft.com/graph/outlook-immutable-id>, "Immutable ID with sending mail");
/// whether the draft still reads meanwhile is not documented, so both readings are offered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SentInTransit {
    /// Gone from Drafts, not in Sent Items yet: `GET` by id answers `404 ErrorItemNotFound`
    /// and no listing has it (default: what the page above describes).
    #[default]
    NotFound,
    /// Still the unsent draft: `GET` by id shows `isDraft: true`, the every-folder listing has
    /// it as a draft.
    Draft,
}

/// The whole simulator configuration. Build it in code ([`SimConfig::new`] and the `with_*`
/// methods) or read it from JSON ([`SimConfig::from_json_file`]; format in the module doc).
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimConfig {
    /// Where to listen; `None` = `127.0.0.1:0` in process (a free port).
    pub listen: Option<SocketAddr>,
    /// `expires_in` of issued tokens, in seconds (default 3599).
    #[serde(default = "default_token_lifetime_s")]
    pub token_lifetime_s: u64,
    /// The largest sendMail body accepted, in bytes (default 4 MB); larger ones get 413.
    #[serde(default = "default_max_request_bytes")]
    pub max_request_bytes: usize,
    /// How long after a send its copy becomes visible as sent (`GET` by id shows
    /// `isDraft: false`, Sent Items lists it), in ms; default 0. Graph is eventually consistent
    /// here and Microsoft documents no bound.
    #[serde(default)]
    pub sent_visibility_delay_ms: u64,
    /// What a sent draft looks like until then (default [`SentInTransit::NotFound`]).
    #[serde(default)]
    pub sent_in_transit: SentInTransit,
    /// App registrations that may get tokens.
    #[serde(default)]
    pub apps: Vec<SimApp>,
    /// Mailboxes that may be sent from.
    #[serde(default)]
    pub mailboxes: Vec<SimMailbox>,
    /// Tenants' external-recipient budgets (none = no tenant limit).
    #[serde(default)]
    pub tenants: Vec<SimTenant>,
    /// Non-delivery reports: unknown recipients, their delay ([`SimBounces`]).
    #[serde(default)]
    pub bounces: SimBounces,
    /// The message trace: its lag, unprovisioned tenants, spam rules ([`SimTrace`]).
    #[serde(default)]
    pub trace: SimTrace,
    /// The clock of every window and token expiry; `None` = the system clock.
    #[serde(skip)]
    pub clock: Option<Arc<dyn Clock>>,
}

fn default_token_lifetime_s() -> u64 {
    DEFAULT_TOKEN_LIFETIME_S
}

fn default_max_request_bytes() -> usize {
    DEFAULT_MAX_REQUEST_BYTES
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            listen: None,
            token_lifetime_s: DEFAULT_TOKEN_LIFETIME_S,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            sent_visibility_delay_ms: 0,
            sent_in_transit: SentInTransit::default(),
            apps: Vec::new(),
            mailboxes: Vec::new(),
            tenants: Vec::new(),
            bounces: SimBounces::default(),
            trace: SimTrace::default(),
            clock: None,
        }
    }
}

impl std::fmt::Debug for SimConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimConfig")
            .field("listen", &self.listen)
            .field("token_lifetime_s", &self.token_lifetime_s)
            .field("max_request_bytes", &self.max_request_bytes)
            .field("apps", &self.apps)
            .field("mailboxes", &self.mailboxes)
            .field("tenants", &self.tenants)
            .field("bounces", &self.bounces)
            .field("trace", &self.trace)
            .field("clock", &self.clock.as_ref().map(|_| "custom"))
            .finish()
    }
}

impl SimConfig {
    /// An empty configuration: no apps, no mailboxes, default lifetime and body limit.
    pub fn new() -> Self {
        Self::default()
    }

    /// Gives a tenant an external-recipient budget.
    #[must_use]
    pub fn with_tenant(mut self, tenant: SimTenant) -> Self {
        self.tenants.push(tenant);
        self
    }

    /// Every accepted message to one of `recipients` gets a non-delivery report in the sending
    /// mailbox's Inbox.
    #[must_use]
    pub fn with_unknown_recipients(mut self, recipients: UnknownRecipients) -> Self {
        self.bounces.unknown_recipients.push(recipients);
        self
    }

    /// The message trace's settings ([`SimTrace`]).
    #[must_use]
    pub fn with_trace(mut self, trace: SimTrace) -> Self {
        self.trace = trace;
        self
    }

    /// Non-delivery reports appear `delay` after the send (default at once).
    #[must_use]
    pub fn with_ndr_delay(mut self, delay: Duration) -> Self {
        self.bounces.delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// Adds an app registration of `tenant_id` with `client_id` / `client_secret`.
    pub fn with_app(
        self,
        tenant_id: impl Into<String>,
        client_id: impl Into<String>,
        client_secret: impl Into<String>,
    ) -> Self {
        self.with_app_registration(SimApp::new(tenant_id, client_id, client_secret))
    }

    /// Adds an app registration, e.g. one with a certificate ([`SimApp::with_certificate`]).
    #[must_use]
    pub fn with_app_registration(mut self, app: SimApp) -> Self {
        self.apps.push(app);
        self
    }

    /// Adds a mailbox.
    pub fn with_mailbox(mut self, mailbox: SimMailbox) -> Self {
        self.mailboxes.push(mailbox);
        self
    }

    /// Sets the lifetime of issued tokens (whole seconds; default 3599 s).
    pub fn with_token_lifetime(mut self, lifetime: Duration) -> Self {
        self.token_lifetime_s = lifetime.as_secs();
        self
    }

    /// Sets the listen address (default `127.0.0.1:0`).
    pub fn with_listen(mut self, addr: SocketAddr) -> Self {
        self.listen = Some(addr);
        self
    }

    /// Uses `clock` for every window and token expiry (tests pass a
    /// [`crate::clock::ManualClock`], or an adapter over their own virtual clock).
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Sets how long a sent message stays invisible as sent (eventual consistency).
    pub fn with_sent_visibility_delay(mut self, delay: Duration) -> Self {
        self.sent_visibility_delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// Sets what a sent draft looks like before its copy is visible.
    pub fn with_sent_in_transit(mut self, in_transit: SentInTransit) -> Self {
        self.sent_in_transit = in_transit;
        self
    }

    /// Sets the largest accepted sendMail body (bytes).
    pub fn with_max_request_bytes(mut self, bytes: usize) -> Self {
        self.max_request_bytes = bytes;
        self
    }

    /// Parses the JSON format of the module doc.
    ///
    /// # Errors
    /// [`SimError::Config`] when the JSON does not match the format.
    pub fn from_json_str(json: &str) -> Result<Self, SimError> {
        serde_json::from_str(json).map_err(|e| SimError::Config(format!("bad config JSON: {e}")))
    }

    /// Reads and parses a JSON config file.
    ///
    /// # Errors
    /// [`SimError::ReadConfig`] when the file cannot be read, [`SimError::Config`] when its
    /// content does not match the format.
    pub fn from_json_file(path: impl AsRef<Path>) -> Result<Self, SimError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| SimError::ReadConfig {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_json_str(&text).map_err(|e| SimError::Config(format!("{}: {e}", path.display())))
    }
}

/// An Entra ID app registration allowed to get tokens (client credentials with a secret).
/// Its `Debug` shows the secret as `[REDACTED]` ([`SecretString`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimApp {
    /// Its tenant (directory) id or domain, as used in the token URL; compared
    /// case-insensitively.
    pub tenant_id: String,
    /// Application (client) id.
    pub client_id: String,
    /// The secret's value (empty for an app with only a certificate).
    #[serde(default = "empty_secret")]
    pub client_secret: SecretString,
    /// The app's certificate (PEM): a `client_assertion` signed by its key, with its
    /// `x5t#S256`, is accepted instead of the secret.
    pub client_certificate: Option<String>,
    /// The application permissions granted to it (admin-consented), carried in its tokens'
    /// `roles` claim; default [`DEFAULT_ROLES`]. See [`crate::permissions`].
    #[serde(default = "default_roles")]
    pub roles: Vec<String>,
    /// The mailboxes its RBAC for Applications scope / application access policy allows
    /// (addresses, case-insensitive); `None` (default) = every mailbox of its tenant.
    #[serde(default)]
    pub mailbox_scope: Option<Vec<String>>,
}

/// What an app is granted unless configured otherwise: every mail permission the worker can
/// use (Mail.Send, Mail.ReadWrite, Mail.Read), so a test that does not look at permissions
/// passes them.
pub const DEFAULT_ROLES: [&str; 3] = ["Mail.Send", "Mail.ReadWrite", "Mail.Read"];

fn default_roles() -> Vec<String> {
    DEFAULT_ROLES.iter().map(|r| (*r).to_owned()).collect()
}

fn empty_secret() -> SecretString {
    SecretString::from(String::new())
}

impl SimApp {
    /// Registers `certificate_pem` for the app (certificate credentials).
    #[must_use]
    pub fn with_certificate(mut self, certificate_pem: impl Into<String>) -> Self {
        self.client_certificate = Some(certificate_pem.into());
        self
    }

    /// Grants exactly these application permissions (replacing [`DEFAULT_ROLES`]).
    #[must_use]
    pub fn with_roles<I, S>(mut self, roles: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.roles = roles.into_iter().map(Into::into).collect();
        self
    }

    /// Limits the app to these mailboxes (RBAC for Applications / application access policy).
    #[must_use]
    pub fn with_mailbox_scope<I, S>(mut self, mailboxes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.mailbox_scope = Some(mailboxes.into_iter().map(Into::into).collect());
        self
    }

    /// An app of `tenant_id`.
    pub fn new(
        tenant_id: impl Into<String>,
        client_id: impl Into<String>,
        client_secret: impl Into<String>,
    ) -> Self {
        Self {
            tenant_id: tenant_id.into(),
            client_id: client_id.into(),
            client_secret: SecretString::from(client_secret.into()),
            client_certificate: None,
            roles: default_roles(),
            mailbox_scope: None,
        }
    }
}

/// A mailbox that may be sent from, and its limits.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimMailbox {
    /// Its SMTP address / userPrincipalName (case-insensitive).
    pub address: String,
    /// The tenant that owns it; only tokens of this tenant may send.
    pub tenant_id: String,
    /// Its Graph user id; `None` = a random UUID at start.
    pub id: Option<Uuid>,
    /// Client ids allowed to send for it; empty = every app of its tenant.
    #[serde(default)]
    pub apps: Vec<String>,
    /// Its limits (Microsoft's defaults).
    #[serde(default)]
    pub limits: MailboxLimits,
    /// Whether it has an Exchange Online licence (default `true`); an unlicensed or
    /// on-premises mailbox answers `404 MailboxNotEnabledForRESTAPI`.
    #[serde(default = "licensed")]
    pub licensed: bool,
}

fn licensed() -> bool {
    true
}

impl SimMailbox {
    /// A mailbox of `tenant_id` with Microsoft's default limits.
    pub fn new(address: impl Into<String>, tenant_id: impl Into<String>) -> Self {
        Self {
            address: address.into(),
            tenant_id: tenant_id.into(),
            id: None,
            apps: Vec::new(),
            limits: MailboxLimits::default(),
            licensed: true,
        }
    }

    /// Without an Exchange Online licence: every request to it gets `404
    /// MailboxNotEnabledForRESTAPI`.
    #[must_use]
    pub fn unlicensed(mut self) -> Self {
        self.licensed = false;
        self
    }

    /// Sets its limits.
    pub fn with_limits(mut self, limits: MailboxLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets its Graph user id.
    pub fn with_id(mut self, id: Uuid) -> Self {
        self.id = Some(id);
        self
    }

    /// Restricts sending to these client ids.
    pub fn with_apps<I, S>(mut self, client_ids: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.apps = client_ids.into_iter().map(Into::into).collect();
        self
    }
}

/// A tenant's external recipient rate limit (TERRL): recipients outside `accepted_domains` per
/// rolling 24 h for all of the tenant's mailboxes together. Exchange Online, over it, blocks
/// the tenant's external mail: Graph still answers `202` and the message bounces afterwards
/// (<https://learn.microsoft.com/office365/servicedescriptions/exchange-online-service-description/exchange-online-limits#sending-limits>).
/// graph-sim answers `202`, records the message as a `tenant_external_limit` finding and does
/// not count it as accepted. Domains compare without case; a subdomain is external unless listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimTenant {
    /// The tenant, as the mailboxes' `tenant_id` (case-insensitive).
    pub tenant_id: String,
    /// External recipients (To+Cc+Bcc) per rolling 24 h.
    pub external_recipients_per_day: u64,
    /// The tenant's own domains.
    pub accepted_domains: Vec<String>,
    /// A new tenant whose reputation Exchange does not know yet (`"new_tenant"`): unset for an
    /// established tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_tenant: Option<NewTenant>,
}

/// A new Microsoft 365 tenant's reputation: past `external_per_day` external recipients in a
/// rolling 24 h its external mail is answered `202` and then bounced with an NDR `550 5.7.705`
/// ("Access denied, tenant has exceeded threshold") or `550 5.7.708` ("Access denied, traffic
/// not accepted from this IP"): Microsoft's page on NDRs 5.7.700 through 5.7.750 says these
/// come when "the majority of traffic from your tenant has been detected as suspicious" (705)
/// and for new tenants whose "reputation … isn't established yet" (708), lifted by a support
/// case or as the tenant's sending history grows
/// (<https://learn.microsoft.com/exchange/mail-flow-best-practices/non-delivery-reports-in-exchange-online/fix-error-code-5-7-700-through-5-7-750>).
/// Microsoft publishes no count: the threshold is a test's choice, not Microsoft's number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewTenant {
    /// External recipients (To+Cc+Bcc outside the accepted domains) per rolling 24 h that go
    /// through before the rest bounce.
    pub external_per_day: u64,
    /// The enhanced status code of the bounce: `5.7.705`, `5.7.708` (default) or `5.7.501`.
    #[serde(default = "default_reputation_code")]
    pub code: String,
}

fn default_reputation_code() -> String {
    "5.7.708".to_owned()
}

/// The reputation codes a [`NewTenant`] may bounce with.
pub(crate) const REPUTATION_CODES: [&str; 3] = ["5.7.705", "5.7.708", "5.7.501"];

impl SimTenant {
    /// A budget of `per_day` external recipients for `tenant_id`, whose own domains are
    /// `accepted_domains`.
    pub fn new<I, S>(tenant_id: impl Into<String>, per_day: u64, accepted_domains: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            tenant_id: tenant_id.into(),
            external_recipients_per_day: per_day,
            accepted_domains: accepted_domains.into_iter().map(Into::into).collect(),
            new_tenant: None,
        }
    }

    /// The same tenant as a new one: past `external_per_day` external recipients per rolling
    /// 24 h its external mail bounces with `code` (`5.7.705`, `5.7.708` or `5.7.501`).
    #[must_use]
    pub fn with_new_tenant(mut self, external_per_day: u64, code: &str) -> Self {
        self.new_tenant = Some(NewTenant {
            external_per_day,
            code: code.to_owned(),
        });
        self
    }

    /// How many of `addresses` are outside the accepted domains.
    pub(crate) fn external<'a>(&self, addresses: impl IntoIterator<Item = &'a String>) -> u32 {
        let n = addresses.into_iter().filter(|a| !self.accepts(a)).count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Whether `address`'s domain is one of the accepted domains (case-insensitive).
    pub(crate) fn accepts(&self, address: &str) -> bool {
        let domain = address.rsplit('@').next().unwrap_or_default();
        self.accepted_domains
            .iter()
            .any(|d| d.eq_ignore_ascii_case(domain))
    }
}

/// What graph-sim does with a message beyond the per-minute limit.
///
/// Microsoft documents the 30 messages a minute as a rate Exchange enforces by delaying, not
/// refusing: messages over it are "throttled and successively carried over to the following
/// minutes" (Exchange Online limits, sending limits,
/// <https://learn.microsoft.com/office365/servicedescriptions/exchange-online-service-description/exchange-online-limits#sending-limits>),
/// and Graph's Outlook service limits have no per-minute message limit at all, only requests,
/// concurrency and upload bytes (<https://learn.microsoft.com/graph/throttling-limits#outlook-service-limits>).
/// So the default accepts and delays; refusing is kept as an option for tests and the demo,
/// where a loud `429` shows a client's overshoot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MinuteOverflow {
    /// Answer `429` with `Retry-After`, so overshoot is visible (an option: not Microsoft's
    /// documented behaviour).
    Refuse,
    /// Answer `202` and count the message as delayed: Exchange queues the excess and delivers it
    /// later (default).
    #[default]
    AcceptDelayed,
}

/// One mailbox's limits. Defaults are Microsoft's:
/// - `concurrent_requests` 4 and `requests_per_10_minutes` 10,000, per app ID and mailbox
///   (<https://learn.microsoft.com/graph/throttling-limits#outlook-service-limits>);
/// - `messages_per_minute` 30, `recipients_per_day` 10,000 and `recipients_per_message` 500,
///   per mailbox (Exchange Online sending limits,
///   <https://learn.microsoft.com/office365/servicedescriptions/exchange-online-service-description/exchange-online-limits#sending-limits>).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MailboxLimits {
    /// Requests in flight per app and mailbox (default 4); one more gets `429
    /// ApplicationThrottled` "Application is over its MailboxConcurrency limit.".
    pub concurrent_requests: u32,
    /// Messages in any rolling 60 s (default 30).
    pub messages_per_minute: u32,
    /// Recipients (To+Cc+Bcc) in any rolling 24 h (default 10,000).
    pub recipients_per_day: u64,
    /// Requests per app and mailbox in any rolling 10 min (default 10,000).
    pub requests_per_10_minutes: u32,
    /// Recipients (To+Cc+Bcc) of one message (default 500).
    pub recipients_per_message: u32,
    /// Accept and count as delayed (default, as Exchange does) or refuse beyond
    /// `messages_per_minute` ([`MinuteOverflow`]).
    pub minute_overflow: MinuteOverflow,
    /// Whether a 429 with `Retry-After` holds the mailbox until then (default `true`, as
    /// Exchange does): every request before it gets 429 again, a `retry_after_ignored`
    /// finding. `false` only for tests that probe one refusal after another.
    pub retry_after_holds: bool,
}

impl Default for MailboxLimits {
    fn default() -> Self {
        Self {
            concurrent_requests: 4,
            messages_per_minute: 30,
            recipients_per_day: 10_000,
            requests_per_10_minutes: 10_000,
            recipients_per_message: 500,
            minute_overflow: MinuteOverflow::AcceptDelayed,
            retry_after_holds: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_file_parses_with_microsofts_defaults_filled_in() {
        let config =
            SimConfig::from_json_str(include_str!("../../../../config/graph-sim.example.json"))
                .unwrap();
        assert_eq!(config.listen, Some("127.0.0.1:8025".parse().unwrap()));
        assert_eq!(config.token_lifetime_s, 3599);
        assert_eq!(config.sent_in_transit, SentInTransit::NotFound);
        assert_eq!(config.apps.len(), 3);
        let resolved = config.resolve().unwrap();
        assert_eq!(resolved.len(), 6);
        assert_eq!(resolved[0].address.as_str(), "events@contoso.example");
        assert_eq!(resolved[0].limits, MailboxLimits::default());
        assert_eq!(
            resolved[1].limits,
            MailboxLimits {
                minute_overflow: MinuteOverflow::Refuse,
                ..MailboxLimits::default()
            }
        );
        assert_eq!(resolved[4].address.as_str(), "hello@northwind.example");
        assert_eq!(resolved[4].limits.recipients_per_day, 10_000);
        assert_eq!(resolved[5].limits.messages_per_minute, 10);
        assert_eq!(
            resolved[5].limits.minute_overflow,
            MinuteOverflow::AcceptDelayed
        );
        assert_eq!(resolved[5].limits.recipients_per_day, 10_000);
    }

    #[test]
    fn a_partial_limits_object_keeps_the_other_defaults() {
        let config = SimConfig::from_json_str(
            r#"{"apps":[{"tenant_id":"t","client_id":"c","client_secret":"s"}],
                "mailboxes":[{"address":"A@B.example","tenant_id":"t","limits":{"messages_per_minute":5}}]}"#,
        )
        .unwrap();
        let mailbox = &config.resolve().unwrap()[0];
        assert_eq!(mailbox.address.as_str(), "a@b.example");
        assert_eq!(mailbox.limits.messages_per_minute, 5);
        assert_eq!(mailbox.limits.concurrent_requests, 4);
        assert_eq!(config.token_lifetime_s, 3599);
        assert_eq!(config.max_request_bytes, 4_194_304);
    }

    #[test]
    fn debug_never_prints_a_secret() {
        let config = SimConfig::new().with_app("t", "c", "very-secret-value");
        let printed = format!("{config:?}");
        assert!(!printed.contains("very-secret-value"), "{printed}");
        assert!(printed.contains("[REDACTED]"), "{printed}");
    }
}
