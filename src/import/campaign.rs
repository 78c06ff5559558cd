//! A campaign file: one JSON message per line (the format of
//! `shared/data/campaign-invitations.jsonl`):
//!
//! ```json
//! {"id": "<uuid>", "systemMailbox": "events@contoso.example" | "tenant": "northwind",
//!  "to": [{"address": "…", "name": "…"}], "cc": […], "bcc": […], "subject": "…",
//!  "body": {"contentType": "html" | "text", "content": "…"},
//!  "headers": [{"name": "x-campaign-id", "value": "…"}],
//!  "attachments": [{"name": "invite.ics", "contentType": "text/calendar", "contentBase64": "…"}],
//!  "scheduledOn": "2026-12-01T15:55:00Z"}
//! ```
//!
//! A line that cannot become a message (bad JSON, bad id, unknown or ambiguous sender, no
//! recipients, bad body type, bad base64, bad `scheduledOn`) is reported with its line number.
//! Recipient addresses and header names are *not* judged here: a message Graph would refuse
//! is stored and ends `ERROR` with Graph's reason when sent, never silently dropped.

use std::collections::HashMap;

use base64::Engine;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use uuid::Uuid;

use super::BadEntry;
use crate::{
    domain::{Attachment, BodyContentType, Header, MailboxAddress, Recipient},
    store::messages::{NewMessage, SenderRef},
};

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Line {
    id: String,
    #[serde(default)]
    tenant: Option<String>,
    #[serde(default)]
    system_mailbox: Option<String>,
    #[serde(default)]
    to: Vec<Recipient>,
    #[serde(default)]
    cc: Vec<Recipient>,
    #[serde(default)]
    bcc: Vec<Recipient>,
    #[serde(default)]
    subject: String,
    body: Body,
    #[serde(default)]
    headers: Vec<Header>,
    #[serde(default)]
    attachments: Vec<LineAttachment>,
    #[serde(default)]
    scheduled_on: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Body {
    content_type: String,
    content: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LineAttachment {
    name: String,
    #[serde(default)]
    content_type: Option<String>,
    content_base64: String,
}

/// Known senders: tenant name → id, system mailbox address (lower-case) → id.
#[derive(Debug, Clone, Default)]
pub struct SenderDirectory {
    /// Tenants by name.
    pub tenants: HashMap<String, Uuid>,
    /// System mailboxes by lower-case address.
    pub system_mailboxes: HashMap<String, Uuid>,
}

/// Parses one line (1-based `number`) into a message.
///
/// # Errors
/// [`BadEntry`] naming the line and the field.
pub fn parse_line(
    number: usize,
    text: &str,
    senders: &SenderDirectory,
) -> Result<NewMessage, BadEntry> {
    let bad = |reason: String| BadEntry {
        location: format!("line {number}"),
        reason,
    };
    // serde quotes offending values, which may be addresses: mask them.
    let line: Line = serde_json::from_str(text).map_err(|e| {
        bad(format!(
            "not a message: {}",
            crate::mailer::redact::scrub_provider_text(&e.to_string())
        ))
    })?;
    let id = Uuid::parse_str(line.id.trim())
        .map_err(|e| bad(format!("id {:?} is not a UUID: {e}", line.id)))?;
    let sender = match (&line.tenant, &line.system_mailbox) {
        (Some(t), None) => SenderRef::Tenant(*senders.tenants.get(t.trim()).ok_or_else(|| {
            bad(format!(
                "tenant {t:?} is unknown (import it with `mail-worker senders import`)"
            ))
        })?),
        (None, Some(m)) => {
            let address =
                MailboxAddress::parse(m).map_err(|e| bad(format!("systemMailbox: {e}")))?;
            SenderRef::SystemMailbox(*senders.system_mailboxes.get(address.as_str()).ok_or_else(|| {
                bad(format!("systemMailbox {address} is unknown (import it with `mail-worker senders import`)"))
            })?)
        }
        (Some(_), Some(_)) => {
            return Err(bad(
                "has both tenant and systemMailbox; give exactly one".into()
            ));
        }
        (None, None) => {
            return Err(bad(
                "has neither tenant nor systemMailbox; give exactly one".into(),
            ));
        }
    };
    if line.to.len() + line.cc.len() + line.bcc.len() == 0 {
        return Err(bad(
            "has no recipients (to, cc and bcc are all empty)".into()
        ));
    }
    let body_content_type = BodyContentType::parse(&line.body.content_type).ok_or_else(|| {
        bad(format!(
            "body.contentType {:?} must be text or html",
            line.body.content_type
        ))
    })?;
    let attachments = line
        .attachments
        .into_iter()
        .enumerate()
        .map(|(i, a)| {
            let content = base64::engine::general_purpose::STANDARD
                .decode(a.content_base64.trim())
                .map_err(|e| bad(format!("attachments[{i}].contentBase64 is not base64: {e}")))?;
            Ok(Attachment {
                name: a.name,
                content_type: a
                    .content_type
                    .unwrap_or_else(|| "application/octet-stream".into()),
                content,
            })
        })
        .collect::<Result<Vec<_>, BadEntry>>()?;
    let scheduled_on = line
        .scheduled_on
        .map(|raw| {
            DateTime::parse_from_rfc3339(raw.trim())
                .map(|t| t.with_timezone(&Utc))
                .map_err(|e| bad(format!("scheduledOn {raw:?} is not an RFC 3339 time: {e}")))
        })
        .transpose()?;
    Ok(NewMessage {
        id,
        sender,
        to: line.to,
        cc: line.cc,
        bcc: line.bcc,
        subject: line.subject,
        body_content_type,
        body: line.body.content,
        headers: line.headers,
        attachments,
        scheduled_on,
    })
}

/// Parses a whole file: the good messages, and every bad line. Blank lines are skipped; an id
/// repeated within the file is a bad line (the first one wins).
pub fn parse(text: &str, senders: &SenderDirectory) -> (Vec<NewMessage>, Vec<BadEntry>) {
    let mut good: Vec<NewMessage> = Vec::new();
    let mut bad = Vec::new();
    let mut seen = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match parse_line(i + 1, line, senders) {
            Ok(m) => {
                if let Some(first) = seen.insert(m.id, i + 1) {
                    seen.insert(m.id, first);
                    bad.push(BadEntry {
                        location: format!("line {}", i + 1),
                        reason: format!("id {} repeats line {first}", m.id),
                    });
                } else {
                    good.push(m);
                }
            }
            Err(e) => bad.push(e),
        }
    }
    (good, bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn directory() -> SenderDirectory {
        SenderDirectory {
            tenants: [("northwind".to_string(), Uuid::from_u128(1))].into(),
            system_mailboxes: [("events@contoso.example".to_string(), Uuid::from_u128(2))].into(),
        }
    }

    #[test]
    fn good_lines_become_messages_and_bad_lines_are_all_reported() {
        let text = [
            r#"{"id":"6f1c2a9e-3b4d-4e5f-8a7b-9c0d1e2f3a4b","systemMailbox":"Events@Contoso.example","to":[{"address":"a@example.org","name":"A"}],"subject":"s","body":{"contentType":"HTML","content":"<p>x</p>"},"headers":[{"name":"Campaign-Id","value":"c"}],"attachments":[{"name":"i.ics","contentType":"text/calendar","contentBase64":"QkVHSU4="}],"scheduledOn":"2026-12-01T15:55:00Z"}"#,
            "",
            "not json",
            r#"{"id":"00000000-0000-0000-0000-000000000009","tenant":"northwind","to":"jane.private@customer.example","body":{"contentType":"text","content":"x"}}"#,
            r#"{"id":"nope","tenant":"northwind","to":[{"address":"a@example.org"}],"body":{"contentType":"text","content":"x"}}"#,
            r#"{"id":"00000000-0000-0000-0000-000000000001","tenant":"contoso","to":[{"address":"a@example.org"}],"body":{"contentType":"text","content":"x"}}"#,
            r#"{"id":"00000000-0000-0000-0000-000000000002","tenant":"northwind","to":[],"body":{"contentType":"text","content":"x"}}"#,
            r#"{"id":"00000000-0000-0000-0000-000000000003","tenant":"northwind","to":[{"address":"a b@example.org"}],"body":{"contentType":"markdown","content":"x"}}"#,
            r#"{"id":"00000000-0000-0000-0000-000000000004","tenant":"northwind","systemMailbox":"events@contoso.example","to":[{"address":"a@example.org"}],"body":{"contentType":"text","content":"x"}}"#,
            r#"{"id":"6f1c2a9e-3b4d-4e5f-8a7b-9c0d1e2f3a4b","tenant":"northwind","to":[{"address":"first;last@example.org"}],"body":{"contentType":"text","content":"x"}}"#,
        ]
        .join("\n");
        let (good, bad) = parse(&text, &directory());
        assert_eq!(good.len(), 1);
        let m = &good[0];
        assert_eq!(m.sender, SenderRef::SystemMailbox(Uuid::from_u128(2)));
        assert_eq!(m.body_content_type, BodyContentType::Html);
        assert_eq!(
            m.headers[0].name, "Campaign-Id",
            "header names are judged at send time"
        );
        assert_eq!(m.attachments[0].content, b"BEGIN");
        assert_eq!(
            m.scheduled_on.unwrap().to_rfc3339(),
            "2026-12-01T15:55:00+00:00"
        );
        let lines: Vec<&str> = bad.iter().map(|b| b.location.as_str()).collect();
        assert_eq!(
            lines,
            [
                "line 3", "line 4", "line 5", "line 6", "line 7", "line 8", "line 9", "line 10"
            ]
        );
        assert!(
            bad[1].reason.contains("j***@customer.example"),
            "{}",
            bad[1]
        );
        assert!(!bad[1].reason.contains("jane.private"), "{}", bad[1]);
        let bad: Vec<_> = bad.into_iter().filter(|b| b.location != "line 4").collect();
        assert!(bad[1].reason.contains("not a UUID"), "{}", bad[1]);
        assert!(
            bad[2].reason.contains("tenant \"contoso\" is unknown"),
            "{}",
            bad[2]
        );
        assert!(bad[3].reason.contains("no recipients"), "{}", bad[3]);
        assert!(bad[4].reason.contains("markdown"), "{}", bad[4]);
        assert!(bad[5].reason.contains("both"), "{}", bad[5]);
        assert!(bad[6].reason.contains("repeats line 1"), "{}", bad[6]);
    }
}
