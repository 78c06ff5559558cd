//! What graph-sim recorded: every accepted message, every throttling refusal and per-mailbox
//! statistics, served by `GET /_sim/messages`, `GET /_sim/refusals` and `GET /_sim/stats` and
//! returned in process. All types are serde round-trippable, so clients can read the admin
//! API's JSON back into them.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// One message graph-sim accepted (answered `202`, or a scripted delivering answer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedMessage {
    /// graph-sim's id for the record.
    pub id: Uuid,
    /// The `request-id` header of the answer.
    pub request_id: String,
    /// The request's `client-request-id` header, if the client sent one (mail-worker sends its
    /// `messages.id` there, so duplicates can be found by message id).
    pub client_request_id: Option<String>,
    /// The sending mailbox (lower-case address).
    pub mailbox: String,
    /// The sending mailbox's Graph user id.
    pub mailbox_id: Uuid,
    /// The app whose token sent it.
    pub client_id: String,
    /// When it was received, by the sim's clock: after any added latency, when the limits were
    /// checked and the message accepted (the time `max_in_utc_minute` and the rolling windows
    /// count).
    pub received_at: DateTime<Utc>,
    /// The same in ms since the Unix epoch.
    pub received_at_ms: i64,
    /// When the request reached sendMail, by the sim's clock, in ms since the Unix epoch: before
    /// the added latency, so it is the moment the client sent (minus transit). `received_at_ms
    /// - arrived_at_ms` is the simulated processing time.
    #[serde(default)]
    pub arrived_at_ms: i64,
    /// `message.subject`, if any.
    pub subject: Option<String>,
    /// `toRecipients` addresses, as sent.
    pub to: Vec<String>,
    /// `ccRecipients` addresses, as sent.
    pub cc: Vec<String>,
    /// `bccRecipients` addresses, as sent.
    pub bcc: Vec<String>,
    /// To + Cc + Bcc.
    pub recipient_count: u32,
    /// `internetMessageHeaders`, in order.
    pub headers: Vec<RecordedHeader>,
    /// `message.body.contentType`, normalised to `text` or `html`.
    pub body_content_type: String,
    /// Bytes of `message.body.content` (UTF-8).
    pub body_bytes: usize,
    /// Bytes of the whole request body.
    pub request_bytes: usize,
    /// Number of file attachments.
    pub attachment_count: u32,
    /// Decoded bytes of all attachments.
    pub attachment_bytes: usize,
    /// `saveToSentItems` (default `true`).
    pub save_to_sent_items: bool,
    /// Accepted beyond the per-minute limit in `accept_delayed` mode (Exchange would queue it).
    pub delayed: bool,
    /// The HTTP status answered (202, or a scripted delivering answer such as 504).
    pub answered_status: u16,
    /// `message.internetMessageId` as the client set it (sendMail or the draft), if any.
    pub internet_message_id: Option<String>,
    /// How it was sent: `sendMail`, or `draft` (`POST /messages/{id}/send`).
    #[serde(default)]
    pub via: String,
    /// The draft's id, for a draft send.
    pub draft_id: Option<String>,
    /// The fault injected after the message was accepted: `None`, or `status <n>`, `reset`,
    /// `late <ms> ms` (a scripted delivering answer).
    pub fault: Option<String>,
    /// Every file attachment (inline or uploaded through an upload session), in order.
    #[serde(default)]
    pub attachments: Vec<RecordedAttachment>,
}

/// One file attachment as graph-sim received it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedAttachment {
    /// Its `name`.
    pub name: String,
    /// Decoded bytes.
    pub bytes: usize,
    /// SHA-256 of the decoded bytes, lower-case hex.
    pub sha256: String,
}

impl RecordedAttachment {
    /// The record of `content` named `name`.
    pub fn of(name: impl Into<String>, content: &[u8]) -> Self {
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(content);
        Self {
            name: name.into(),
            bytes: content.len(),
            sha256: digest.iter().map(|b| format!("{b:02x}")).collect(),
        }
    }
}

/// One draft graph-sim holds (`POST /users/{id}/messages`), as [`crate::GraphSim::drafts`] shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimDraft {
    /// Its current id (immutable when created with `Prefer: IdType="ImmutableId"`; otherwise a
    /// new id once it moved to Sent Items).
    pub id: String,
    /// The mailbox (lower-case address).
    pub mailbox: String,
    /// Its `internetMessageId`.
    pub internet_message_id: String,
    /// Whether it was created with `Prefer: IdType="ImmutableId"`.
    pub immutable_id: bool,
    /// How many times `send` delivered it (more than 1 is a duplicate).
    pub sends: u32,
    /// Attachments added through upload sessions.
    pub uploaded_attachments: u32,
    /// Attachments added by `POST …/attachments`.
    pub posted_attachments: u32,
    /// Deleted (`DELETE`: moved to Deleted Items).
    pub deleted: bool,
}

impl RecordedMessage {
    /// The value of the first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value.as_str())
    }
}

/// One `internetMessageHeaders` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedHeader {
    /// Its name, as sent (starts with `x-` or `X-`).
    pub name: String,
    /// Its value.
    pub value: String,
}

/// Why graph-sim throttled a sendMail request (a `429`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalCause {
    /// Over `concurrent_requests` in flight for the app and mailbox.
    Concurrency,
    /// Over `requests_per_10_minutes` for the app and mailbox.
    RequestQuota,
    /// Over `recipients_per_day` in the rolling 24 h.
    Day,
    /// Over `messages_per_minute` in the rolling 60 s.
    Minute,
    /// A request before the `Retry-After` of an earlier 429 for the mailbox (answered 429
    /// again): the client ignored it.
    RetryAfterIgnored,
    /// Over the tenant's external recipients per rolling 24 h: answered 202, but the message
    /// bounces (Exchange blocks the tenant's external mail) and is not counted as accepted.
    TenantExternalLimit,
    /// A new tenant past its `new_tenant.external_per_day`: answered 202, but the message's
    /// external recipients bounce with a reputation NDR (`5.7.705`/`5.7.708`/`5.7.501`).
    TenantReputation,
}

impl RefusalCause {
    /// Its snake_case name, as in the JSON (`concurrency`, `request_quota`, `day`, `minute`,
    /// `retry_after_ignored`, `tenant_external_limit`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Concurrency => "concurrency",
            Self::RequestQuota => "request_quota",
            Self::Day => "day",
            Self::Minute => "minute",
            Self::RetryAfterIgnored => "retry_after_ignored",
            Self::TenantExternalLimit => "tenant_external_limit",
            Self::TenantReputation => "tenant_reputation",
        }
    }
}

/// One throttling refusal (`429`) graph-sim answered, or a message it accepted but bounced
/// (`tenant_external_limit`), served by `GET /_sim/refusals`: when, for which mailbox and
/// cause, and for which client request (mail-worker's message id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedRefusal {
    /// When it was refused, by the sim's clock.
    pub at: DateTime<Utc>,
    /// The same in ms since the Unix epoch.
    pub at_ms: i64,
    /// The mailbox (lower-case address).
    pub mailbox: String,
    /// The app whose token sent the request.
    pub client_id: String,
    /// The request's `client-request-id` header, if the client sent one.
    pub client_request_id: Option<String>,
    /// Why.
    pub cause: RefusalCause,
    /// The `Retry-After` answered, in whole seconds (`None` when none was given).
    pub retry_after_s: Option<u64>,
}

/// Requests refused, by cause.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedCounts {
    /// `429 ApplicationThrottled`: over the concurrent-requests limit.
    pub concurrency: u64,
    /// `429`: over the messages-per-rolling-60 s limit.
    pub minute: u64,
    /// Over the recipients-per-rolling-24 h limit: `202` then an NDR `5.1.90` (default), or
    /// `429 ErrorSubmissionQuotaExceeded` (`bounces.quota_exceeded: "refuse"`).
    pub day: u64,
    /// `429 ApplicationThrottled`: over the requests-per-10-minutes limit.
    pub request_quota: u64,
    /// `401`/`403`: a missing, unknown or expired token, or one of another tenant or app.
    pub auth: u64,
    /// `400`/`413`: the body failed validation.
    pub validation: u64,
    /// A scripted non-2xx answer given instead of processing the message.
    pub scripted: u64,
    /// `429`: a request before the `Retry-After` of an earlier 429 for the mailbox.
    #[serde(default)]
    pub retry_after_ignored: u64,
    /// Answered `202` but bounced: over the tenant's external recipients per rolling 24 h (not
    /// a refused request, so not in [`RefusedCounts::total`]; a finding all the same).
    #[serde(default)]
    pub tenant_external_limit: u64,
    /// Answered `202` but bounced with a reputation NDR: a new tenant past its trusted
    /// external recipients (not in [`RefusedCounts::total`] either).
    #[serde(default)]
    pub tenant_reputation: u64,
}

impl RefusedCounts {
    /// Counts an accepted message its tenant's checks bounced, by `cause`.
    pub(crate) fn count_bounce(&mut self, cause: RefusalCause) {
        match cause {
            RefusalCause::TenantReputation => self.tenant_reputation += 1,
            _ => self.tenant_external_limit += 1,
        }
    }

    /// All refused requests (every non-2xx answer; bounces are counted apart).
    pub fn total(&self) -> u64 {
        self.retry_after_ignored
            + self.concurrency
            + self.minute
            + self.day
            + self.request_quota
            + self.auth
            + self.validation
            + self.scripted
    }
}

/// One mailbox's statistics since start (or the last reset).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MailboxStats {
    /// The mailbox (lower-case address).
    pub mailbox: String,
    /// Its Graph user id.
    pub mailbox_id: Uuid,
    /// Its tenant.
    pub tenant_id: String,
    /// Messages recorded (including delayed ones and scripted delivering answers).
    pub accepted: u64,
    /// Of those, accepted beyond the minute limit in `accept_delayed` mode.
    pub delayed: u64,
    /// Requests refused, by cause.
    pub refused: RefusedCounts,
    /// Scripted answers used (delivering or not).
    pub scripted_answers: u64,
    /// The most messages seen in any rolling 60 s.
    pub max_in_rolling_60s: u32,
    /// The most messages seen in one UTC minute.
    pub max_in_utc_minute: u32,
    /// The most sendMail requests seen in flight at once (all apps together).
    pub max_concurrent: u32,
    /// Messages in the last 60 s, at the time of the snapshot.
    pub messages_last_60s: u32,
    /// Recipients in the last 24 h, at the time of the snapshot.
    pub recipients_last_24h: u64,
}

/// A snapshot of every mailbox's statistics and the token endpoint's request counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimStats {
    /// When the snapshot was taken, by the sim's clock.
    pub at: DateTime<Utc>,
    /// One entry per configured mailbox, in config order.
    pub mailboxes: Vec<MailboxStats>,
    /// Token requests per client id (every request naming it, successful or not).
    pub token_requests: BTreeMap<String, u64>,
    /// sendMail requests for a mailbox that does not exist.
    pub unknown_mailbox_requests: u64,
    /// Graph requests by route (`sendMail`, `createDraft`, `send`, `getMessage`,
    /// `listMessages`, `createUploadSession`, `uploadChunk`), every answer counted.
    #[serde(default)]
    pub requests: BTreeMap<String, u64>,
}

impl SimStats {
    /// Requests refused over every mailbox (429s, 503s, …: each mailbox's `refused.total()`).
    pub fn refused_total(&self) -> u64 {
        self.mailboxes.iter().map(|m| m.refused.total()).sum()
    }

    /// The statistics of `address` (case-insensitive).
    pub fn mailbox(&self, address: &str) -> Option<&MailboxStats> {
        self.mailboxes
            .iter()
            .find(|m| m.mailbox.eq_ignore_ascii_case(address))
    }

    /// Graph requests of every route together.
    pub fn total_requests(&self) -> u64 {
        self.requests.values().sum()
    }

    /// Messages accepted across all mailboxes.
    pub fn total_accepted(&self) -> u64 {
        self.mailboxes.iter().map(|m| m.accepted).sum()
    }
}

/// One message in a mailbox folder other than Drafts and Sent Items.
#[derive(Debug, Clone)]
pub(crate) struct InboxItem {
    pub idx: usize,
    pub id: String,
    /// `inbox`, or the `destinationId` it was moved to (lower case).
    pub folder: String,
    pub visible_at_ms: i64,
    pub received_at: DateTime<Utc>,
    pub is_read: bool,
    pub message_class: &'static str,
    pub subject: String,
    pub from_name: String,
    pub from_address: String,
    pub to: String,
    /// The text body.
    pub body: String,
    pub internet_message_id: String,
    pub headers: Vec<(String, String)>,
    /// The raw MIME Graph serves at `$value` ([`crate::ndr`] writes an NDR's).
    pub mime: String,
}
