//! The message trace's records and moving parts (in [`crate::state::Inner`]), fed by what
//! graph-sim delivered ([`feed`]) and served by [`crate::trace`].

use std::collections::VecDeque;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{config::SimTrace, validate::ParsedMessage};

/// One recipient of one traced message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceRecord {
    /// The message trace id (one per message, shared by its recipients).
    pub id: Uuid,
    /// The sender's tenant (lower case).
    pub tenant: String,
    /// The `Message-ID` (`internetMessageId`).
    pub message_id: String,
    /// When Exchange received it.
    pub received: DateTime<Utc>,
    /// When the record appears in the trace (ms since the epoch).
    pub visible_at_ms: i64,
    /// The sender's address (lower case).
    pub sender: String,
    /// The recipient's address, as sent.
    pub recipient: String,
    /// `Delivered`, `Failed`, `FilteredAsSpam`, `Quarantined`, …
    pub status: String,
    /// The subject.
    pub subject: String,
    /// Bytes.
    pub size: u64,
    /// For `Failed`: the SMTP reply, enhanced code and text.
    pub failure: Option<(String, String, String)>,
}

impl TraceRecord {
    /// The `exchangeMessageTrace` JSON.
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.id.to_string(),
            "messageId": self.message_id,
            "receivedDateTime": self.received.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
            "recipientAddress": self.recipient,
            "senderAddress": self.sender,
            "size": self.size,
            "status": self.status,
            "subject": self.subject,
            "fromIP": "2a01:111:f400::1",
            "toIP": serde_json::Value::Null,
        })
    }

    /// The `exchangeMessageTraceDetail` events of this recipient.
    pub(crate) fn details(&self) -> Vec<serde_json::Value> {
        let at = self.received.format("%Y-%m-%dT%H:%M:%SZ").to_string();
        let event = |n: u32, event: &str, action: &str, description: String| {
            serde_json::json!({
                "id": format!("{}-{n}", self.id),
                "messageId": self.message_id,
                "dateTime": at,
                "event": event,
                "action": action,
                "description": description,
                "data": "",
            })
        };
        let mut out = vec![event(
            0,
            "Receive",
            "",
            format!("Message received by: {}", self.sender),
        )];
        out.push(match (&self.failure, self.status.as_str()) {
            (Some((reply, code, text)), _) => event(
                1,
                "Fail",
                "",
                format!(
                    "Reason: [{{LED={reply} {code} {text}}};{{MSG=}};{{FQDN=}};{{IP=}};{{LRT=}}]. OutboundProxyTargetIP: . OutboundProxyTargetHostName: "
                ),
            ),
            (None, "Quarantined") => {
                event(1, "Quarantine", "", "The message was quarantined.".to_owned())
            }
            (None, "FilteredAsSpam") => event(
                1,
                "Deliver",
                "MoveToJmf",
                "The message was delivered to the Junk Email folder.".to_owned(),
            ),
            (None, _) => event(
                1,
                "Deliver",
                "",
                "The message was successfully delivered.".to_owned(),
            ),
        });
        out
    }
}

/// What the trace endpoint answered, for tests and the benchmark.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceStats {
    /// Requests answered (any status).
    pub requests: u64,
    /// `429`s (over the tenant's budget).
    pub throttled: u64,
    /// `401`s for an unprovisioned tenant.
    pub unprovisioned: u64,
    /// The most requests of one tenant in any rolling 5 minutes.
    pub max_in_5_minutes: u64,
}

/// The trace's moving parts (in [`crate::state::Inner`]).
#[derive(Debug, Default)]
pub(crate) struct TraceRuntime {
    pub records: Vec<TraceRecord>,
    /// Tenants (lower case) answered `401`.
    pub unprovisioned: std::collections::HashSet<String>,
    /// Accepted requests per tenant, ms, oldest first (the last 5 minutes).
    pub windows: std::collections::HashMap<String, VecDeque<i64>>,
    pub stats: TraceStats,
}

/// The rolling window of the trace budget.
pub(crate) const WINDOW_MS: i64 = 5 * 60 * 1000;

impl TraceRuntime {
    /// Counts a request of `tenant` at `now_ms`; `Err(retry_after_s)` when it is over `limit`.
    pub(crate) fn admit(&mut self, tenant: &str, now_ms: i64, limit: u32) -> Result<(), u64> {
        let window = self.windows.entry(tenant.to_owned()).or_default();
        while window.front().is_some_and(|t| *t <= now_ms - WINDOW_MS) {
            window.pop_front();
        }
        if window.len() >= limit as usize {
            let oldest = window.front().copied().unwrap_or(now_ms);
            let wait_ms = (oldest + WINDOW_MS - now_ms).max(1000);
            self.stats.throttled += 1;
            return Err(u64::try_from(wait_ms).unwrap_or(1000).div_ceil(1000));
        }
        window.push_back(now_ms);
        self.stats.max_in_5_minutes = self.stats.max_in_5_minutes.max(window.len() as u64);
        Ok(())
    }
}

/// A failed recipient's SMTP reply, enhanced status code and text.
pub(crate) type Failed = (String, String, String);

/// Records the trace of `message` (sent by `sender` of `tenant`, accepted at `now`): each
/// recipient `failed` names `Failed` with its (reply, code, text), each one a
/// [`crate::config::TraceRule`] of `config` matches filtered, the others `Delivered`.
pub(crate) fn feed(
    runtime: &mut TraceRuntime,
    config: &SimTrace,
    (sender, tenant): (&str, &str),
    message: &ParsedMessage,
    failed: &dyn Fn(&str) -> Option<Failed>,
    now: DateTime<Utc>,
) {
    let id = Uuid::new_v4();
    let message_id = message
        .internet_message_id
        .clone()
        .unwrap_or_else(|| format!("<{}@graph-sim.example>", id.simple()));
    let lag = i64::try_from(config.lag_ms).unwrap_or(i64::MAX / 2);
    let visible_at_ms = now.timestamp_millis().saturating_add(lag);
    for recipient in message.to.iter().chain(&message.cc).chain(&message.bcc) {
        let failure = failed(recipient);
        let status = match failure {
            Some(_) => "Failed",
            None => config.filtered(recipient).unwrap_or("Delivered"),
        };
        runtime.records.push(TraceRecord {
            id,
            tenant: tenant.to_lowercase(),
            message_id: message_id.clone(),
            received: now,
            visible_at_ms,
            sender: sender.to_owned(),
            recipient: recipient.clone(),
            status: status.to_owned(),
            subject: message.subject.clone().unwrap_or_default(),
            size: message.body_bytes as u64,
            failure,
        });
    }
}
