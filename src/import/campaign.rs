//! A campaign file: one JSON message per line (the format of
//! `shared/data/campaign-invitations.jsonl`; every field and refusal is listed in
//! `docs/file-formats.md`):
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
//! The file is read **line by line as bytes**: one bad line never costs another. A line that
//! cannot become a message is reported with its line number (and its id when one can be read)
//! and skipped: not UTF-8, not JSON, not a message, a bad id, an unknown or ambiguous sender, no
//! recipients, a bad body type, bad base64, a bad `scheduledOn`, a NUL character anywhere
//! (PostgreSQL cannot store one), or a size Graph certainly refuses. Recipient addresses and
//! header names are *not* judged here: a message Graph would refuse is stored and ends `ERROR`
//! with the reason when sent, never silently dropped. Recipient domains written in Unicode are
//! converted to punycode (IDNA, UTS #46) so the stored address is what Graph is sent.

use std::collections::HashMap;

use base64::Engine;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use sqlx::PgPool;
use uuid::Uuid;

use super::BadEntry;
use crate::{
    domain::{Attachment, BodyContentType, Header, MailboxAddress, Recipient},
    mailer::validate::{MAX_INLINE_ATTACHMENT_BYTES, MAX_REQUEST_BYTES},
    store::{
        StoreError,
        messages::{self, NewMessage, SenderRef},
    },
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

/// Every string field of a line with its JSON path, for the NUL check.
fn string_fields(line: &Line) -> Vec<(String, &str)> {
    let mut fields: Vec<(String, &str)> = vec![("id".into(), &line.id)];
    if let Some(t) = &line.tenant {
        fields.push(("tenant".into(), t));
    }
    if let Some(m) = &line.system_mailbox {
        fields.push(("systemMailbox".into(), m));
    }
    for (list, name) in [(&line.to, "to"), (&line.cc, "cc"), (&line.bcc, "bcc")] {
        for (i, r) in list.iter().enumerate() {
            fields.push((format!("{name}[{i}].address"), &r.address));
            if let Some(n) = &r.name {
                fields.push((format!("{name}[{i}].name"), n));
            }
        }
    }
    fields.push(("subject".into(), &line.subject));
    fields.push(("body.contentType".into(), &line.body.content_type));
    fields.push(("body.content".into(), &line.body.content));
    for (i, h) in line.headers.iter().enumerate() {
        fields.push((format!("headers[{i}].name"), &h.name));
        fields.push((format!("headers[{i}].value"), &h.value));
    }
    for (i, a) in line.attachments.iter().enumerate() {
        fields.push((format!("attachments[{i}].name"), &a.name));
        if let Some(c) = &a.content_type {
            fields.push((format!("attachments[{i}].contentType"), c));
        }
        fields.push((format!("attachments[{i}].contentBase64"), &a.content_base64));
    }
    if let Some(s) = &line.scheduled_on {
        fields.push(("scheduledOn".into(), s));
    }
    fields
}

/// `local@Bücher.example` → `local@xn--bcher-kva.example`. An ASCII address, or one whose
/// domain IDNA cannot convert, is returned unchanged (send-time validation judges it).
fn punycode_domain(address: &str) -> String {
    let trimmed = address.trim();
    match trimmed.rsplit_once('@') {
        Some((local, domain)) if !domain.is_ascii() => match idna::domain_to_ascii(domain) {
            Ok(ascii) if !ascii.is_empty() => format!("{local}@{ascii}"),
            _ => address.to_owned(),
        },
        _ => address.to_owned(),
    }
}

/// ` (id <uuid>)` when the line's id could be read, for the end of a reason.
fn id_suffix(id: Option<Uuid>) -> String {
    id.map(|id| format!(" (id {id})")).unwrap_or_default()
}

/// The id of a line that is not a message, when its `id` is a UUID (for the report).
fn readable_id(text: &str) -> Option<Uuid> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    Uuid::parse_str(value.get("id")?.as_str()?.trim()).ok()
}

/// Parses one line's bytes (1-based `number`, without its line break) into a message. A line
/// that is not UTF-8 is refused naming the first bad byte's column; see [`parse_line`].
///
/// # Errors
/// [`BadEntry`] naming the line, the id when one can be read, and the field.
pub fn parse_line_bytes(
    number: usize,
    bytes: &[u8],
    senders: &SenderDirectory,
) -> Result<NewMessage, BadEntry> {
    match std::str::from_utf8(bytes) {
        Ok(text) => parse_line(number, text, senders),
        Err(e) => {
            let id = readable_id(&String::from_utf8_lossy(bytes));
            Err(BadEntry {
                location: format!("line {number}"),
                reason: format!(
                    "is not valid UTF-8 (invalid byte 0x{:02X} at column {}); the line was skipped{}",
                    bytes[e.valid_up_to()],
                    e.valid_up_to() + 1,
                    id_suffix(id)
                ),
            })
        }
    }
}

/// Parses one line (1-based `number`) into a message.
///
/// # Errors
/// [`BadEntry`] naming the line, the id when one can be read, and the field.
pub(crate) fn parse_line(
    number: usize,
    text: &str,
    senders: &SenderDirectory,
) -> Result<NewMessage, BadEntry> {
    let location = format!("line {number}");
    // serde quotes offending values, which may be addresses: mask them.
    let line: Line = serde_json::from_str(text).map_err(|e| BadEntry {
        location: location.clone(),
        reason: format!(
            "not a message: {}{}",
            crate::mailer::redact::scrub_provider_text(&e.to_string()),
            id_suffix(readable_id(text))
        ),
    })?;
    let id = Uuid::parse_str(line.id.trim()).ok();
    let bad = |reason: String| BadEntry {
        location: location.clone(),
        reason: format!("{reason}{}", id_suffix(id)),
    };
    // PostgreSQL stores neither a NUL in text nor \u0000 in jsonb: refuse the line, not the batch.
    if let Some((field, _)) = string_fields(&line)
        .into_iter()
        .find(|(_, value)| value.contains('\0'))
    {
        return Err(bad(format!(
            "{field} contains a NUL character (\\u0000), which PostgreSQL cannot store; remove it"
        )));
    }
    let Some(id) = id else {
        let e = Uuid::parse_str(line.id.trim()).unwrap_err();
        return Err(bad(format!("id {:?} is not a UUID: {e}", line.id)));
    };
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
    // A lower bound of the sendMail JSON: the body, the subject and the base64 of every
    // attachment appear in it at least once. Over MAX_REQUEST_BYTES, Graph certainly refuses.
    let least_request_bytes = line.body.content.len()
        + line.subject.len()
        + line
            .attachments
            .iter()
            .map(|a| a.content_base64.trim().len())
            .sum::<usize>();
    if least_request_bytes > MAX_REQUEST_BYTES {
        return Err(bad(format!(
            "body, subject and attachments take {least_request_bytes} bytes; Graph refuses sendMail requests over {MAX_REQUEST_BYTES} bytes (4 MB, https://learn.microsoft.com/graph/api/user-sendmail)"
        )));
    }
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
    let attachment_bytes: usize = attachments.iter().map(|a| a.content.len()).sum();
    if attachment_bytes > MAX_INLINE_ATTACHMENT_BYTES {
        return Err(bad(format!(
            "attachments total {attachment_bytes} bytes; at most {MAX_INLINE_ATTACHMENT_BYTES} bytes (3 MB) can be sent inline (https://learn.microsoft.com/graph/outlook-large-attachments)"
        )));
    }
    let scheduled_on = line
        .scheduled_on
        .map(|raw| {
            DateTime::parse_from_rfc3339(raw.trim())
                .map(|t| t.with_timezone(&Utc))
                .map_err(|e| bad(format!("scheduledOn {raw:?} is not an RFC 3339 time: {e}")))
        })
        .transpose()?;
    let ascii = |list: Vec<Recipient>| -> Vec<Recipient> {
        list.into_iter()
            .map(|r| Recipient {
                address: punycode_domain(&r.address),
                name: r.name,
            })
            .collect()
    };
    Ok(NewMessage {
        id,
        sender,
        to: ascii(line.to),
        cc: ascii(line.cc),
        bcc: ascii(line.bcc),
        subject: line.subject,
        body_content_type,
        body: line.body.content,
        headers: line.headers,
        attachments,
        scheduled_on,
    })
}

/// The lines of `bytes`: split at `\n`, a trailing `\r` removed, a leading UTF-8 byte-order
/// mark ignored; numbered from 1.
fn lines(bytes: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    bytes
        .split(|b| *b == b'\n')
        .enumerate()
        .map(|(i, line)| (i + 1, line.strip_suffix(b"\r").unwrap_or(line)))
}

/// Parses a whole file's bytes: the good messages with their line numbers, and every bad line.
/// Blank lines are skipped; an id repeated within the file is a bad line (the first one wins).
pub fn parse_bytes(
    bytes: &[u8],
    senders: &SenderDirectory,
) -> (Vec<(usize, NewMessage)>, Vec<BadEntry>) {
    let mut good: Vec<(usize, NewMessage)> = Vec::new();
    let mut bad = Vec::new();
    let mut seen = HashMap::new();
    for (number, line) in lines(bytes) {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match parse_line_bytes(number, line, senders) {
            Ok(m) => {
                if let Some(first) = seen.insert(m.id, number) {
                    seen.insert(m.id, first);
                    bad.push(BadEntry {
                        location: format!("line {number}"),
                        reason: format!("id {} repeats line {first}", m.id),
                    });
                } else {
                    good.push((number, m));
                }
            }
            Err(e) => bad.push(e),
        }
    }
    (good, bad)
}

/// What [`enqueue`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnqueueReport {
    /// Rows newly inserted.
    pub inserted: u64,
    /// Good lines stored now or already present (`inserted` ≤ `stored`).
    pub stored: usize,
    /// Every line not stored, by line number, in file order.
    pub bad: Vec<BadEntry>,
}

/// How many lines are inserted in one transaction.
pub(crate) const INSERT_CHUNK: usize = 500;

/// Parses `bytes` and inserts every good line, [`INSERT_CHUNK`] per transaction. A chunk that
/// PostgreSQL refuses is retried line by line, so only the line it refuses is lost, and named
/// (with its id); lines are validated before any insert, so this is a last resort.
///
/// # Errors
/// PostgreSQL trouble other than refusing a row (a lost connection, …).
pub async fn enqueue(
    pool: &PgPool,
    bytes: &[u8],
    senders: &SenderDirectory,
) -> Result<EnqueueReport, StoreError> {
    let (good, mut bad) = parse_bytes(bytes, senders);
    let mut report = EnqueueReport::default();
    for chunk in good.chunks(INSERT_CHUNK) {
        let messages: Vec<NewMessage> = chunk.iter().map(|(_, m)| m.clone()).collect();
        match messages::insert(pool, &messages).await {
            Ok(n) => {
                report.inserted += n;
                report.stored += chunk.len();
            }
            Err(StoreError::Database(sqlx::Error::Database(_))) => {
                for (number, m) in chunk {
                    match messages::insert(pool, std::slice::from_ref(m)).await {
                        Ok(n) => {
                            report.inserted += n;
                            report.stored += 1;
                        }
                        Err(StoreError::Database(sqlx::Error::Database(e))) => {
                            bad.push(BadEntry {
                                location: format!("line {number}"),
                                reason: format!(
                                    "PostgreSQL refused the row: {} (id {})",
                                    crate::mailer::redact::scrub_provider_text(e.message()),
                                    m.id
                                ),
                            });
                        }
                        Err(other) => return Err(other),
                    }
                }
            }
            Err(other) => return Err(other),
        }
    }
    bad.sort_by_key(|b| line_number(&b.location));
    report.bad = bad;
    Ok(report)
}

fn line_number(location: &str) -> usize {
    location
        .strip_prefix("line ")
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX)
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
        let (good, bad) = parse_bytes(text.as_bytes(), &directory());
        let good: Vec<NewMessage> = good.into_iter().map(|(_, m)| m).collect();
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

    fn line(id: u128, extra: &str) -> String {
        format!(
            r#"{{"id":"{}","tenant":"northwind","to":[{{"address":"a@example.org","name":"A"}}],"subject":"s","body":{{"contentType":"text","content":"x"}}{extra}}}"#,
            Uuid::from_u128(id)
        )
    }

    #[test]
    fn a_line_that_is_not_utf8_is_named_and_the_others_are_kept() {
        let mut bytes = Vec::new();
        for i in 1..=50u128 {
            bytes.extend_from_slice(line(i, "").as_bytes());
            bytes.push(b'\n');
            if i == 25 {
                let bad = line(999, "").replace("\"s\"", "\"caf\u{e9}\"");
                let mut bad = bad.into_bytes();
                // Latin-1 é instead of UTF-8: 0xE9 followed by a quote.
                let at = bad.windows(2).position(|w| w == [0xC3, 0xA9]).unwrap();
                bad.splice(at..at + 2, [0xE9]);
                bytes.extend_from_slice(&bad);
                bytes.extend_from_slice(b"\r\n");
            }
        }
        let (good, bad) = parse_bytes(&bytes, &directory());
        assert_eq!(good.len(), 50);
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert_eq!(bad[0].location, "line 26");
        assert!(bad[0].reason.contains("not valid UTF-8"), "{}", bad[0]);
        assert!(bad[0].reason.contains("0xE9"), "{}", bad[0]);
        assert!(
            bad[0].reason.contains(&Uuid::from_u128(999).to_string()),
            "the id is named when it can be read: {}",
            bad[0]
        );
        assert_eq!(good[25].0, 27, "line numbers count the bad line");
    }

    #[test]
    fn a_nul_in_any_string_field_refuses_that_line_naming_the_field() {
        for (extra, field) in [
            (
                r#","headers":[{"name":"x-a","value":"a\u0000b"}]"#,
                "headers[0].value",
            ),
            (
                r#","headers":[{"name":"x-\u0000","value":"v"}]"#,
                "headers[0].name",
            ),
            (
                r#","cc":[{"address":"b@example.org","name":"B\u0000"}]"#,
                "cc[0].name",
            ),
            (
                r#","attachments":[{"name":"a\u0000.txt","contentBase64":"QQ=="}]"#,
                "attachments[0].name",
            ),
            (r#","scheduledOn":"\u0000""#, "scheduledOn"),
        ] {
            let text = line(7, extra);
            let err = parse_line(3, &text, &directory()).unwrap_err();
            assert_eq!(err.location, "line 3");
            assert!(
                err.reason.contains(&format!("{field} contains a NUL")),
                "{field}: {err}"
            );
            assert!(
                err.reason.contains(&Uuid::from_u128(7).to_string()),
                "{err}"
            );
        }
        let text = line(7, "").replace("\"s\"", "\"s\\u0000\"");
        let err = parse_line(1, &text, &directory()).unwrap_err();
        assert!(err.reason.contains("subject contains a NUL"), "{err}");
        let text = line(7, "").replace("\"x\"", "\"x\\u0000\"");
        let err = parse_line(1, &text, &directory()).unwrap_err();
        assert!(err.reason.contains("body.content contains a NUL"), "{err}");
    }

    #[test]
    fn a_line_graph_certainly_refuses_for_size_is_refused_at_parse_time() {
        let big = "a".repeat(MAX_REQUEST_BYTES + 1);
        let text = line(8, "").replace("\"x\"", &format!("\"{big}\""));
        let err = parse_line(4, &text, &directory()).unwrap_err();
        assert!(err.reason.contains("4194304 bytes"), "{err}");
        assert!(err.reason.contains("learn.microsoft.com"), "{err}");
        // 3 MB + 1 of attachments decoded: refused too, naming the inline limit.
        let b64 =
            base64::engine::general_purpose::STANDARD
                .encode(vec![0u8; MAX_INLINE_ATTACHMENT_BYTES + 1]);
        let text = line(
            8,
            &format!(r#","attachments":[{{"name":"a.bin","contentBase64":"{b64}"}}]"#),
        );
        let err = parse_line(4, &text, &directory()).unwrap_err();
        assert!(
            err.reason.contains("3145729 bytes") || err.reason.contains("4194304 bytes"),
            "{err}"
        );
        // Just under: accepted (send-time validation measures the exact request).
        let text = line(8, "").replace("\"x\"", &format!("\"{}\"", "a".repeat(1_000_000)));
        assert!(parse_line(4, &text, &directory()).is_ok());
    }

    #[test]
    fn unicode_recipient_domains_are_stored_as_punycode() {
        let text = line(9, "").replace("a@example.org", "Jos\u{e9}@B\u{fc}cher.example");
        let m = parse_line(1, &text, &directory()).unwrap();
        assert_eq!(m.to[0].address, "Jos\u{e9}@xn--bcher-kva.example");
        let text = line(9, "").replace("a@example.org", "a@example.org ");
        let m = parse_line(1, &text, &directory()).unwrap();
        assert_eq!(
            m.to[0].address, "a@example.org ",
            "ASCII is kept as written"
        );
    }

    #[test]
    fn a_byte_order_mark_and_crlf_line_ends_are_accepted() {
        let text = format!("\u{feff}{}\r\n{}\r\n\r\n", line(1, ""), line(2, ""));
        let (good, bad) = parse_bytes(text.as_bytes(), &directory());
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(good.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [1, 2]);
    }

    proptest::proptest! {
        /// parse ∘ render = id: a message rendered as a campaign line parses back to itself.
        #[test]
        fn a_rendered_line_parses_back_to_the_same_message(
            id in proptest::num::u128::ANY,
            subject in "[^\u{0}]{0,40}",
            body in "[^\u{0}]{0,200}",
            name in proptest::option::of("[^\u{0}]{0,20}"),
            header_value in "[^\u{0}]{0,30}",
            html in proptest::bool::ANY,
            content in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
        ) {
            let rendered = serde_json::json!({
                "id": Uuid::from_u128(id).to_string(),
                "tenant": "northwind",
                "to": [{"address": "a@example.org", "name": name}],
                "subject": subject,
                "body": {"contentType": if html { "html" } else { "text" }, "content": body},
                "headers": [{"name": "x-campaign-id", "value": header_value}],
                "attachments": [{"name": "f.bin", "contentType": "application/pdf",
                                 "contentBase64": base64::engine::general_purpose::STANDARD.encode(&content)}],
            })
            .to_string();
            let m = parse_line(1, &rendered, &directory()).unwrap();
            proptest::prop_assert_eq!(m.id, Uuid::from_u128(id));
            proptest::prop_assert_eq!(&m.subject, &subject);
            proptest::prop_assert_eq!(&m.body, &body);
            proptest::prop_assert_eq!(&m.to[0].name, &name);
            proptest::prop_assert_eq!(&m.headers[0].value, &header_value);
            proptest::prop_assert_eq!(
                m.body_content_type,
                if html { BodyContentType::Html } else { BodyContentType::Text }
            );
            proptest::prop_assert_eq!(&m.attachments[0].content, &content);
        }

        /// Arbitrary bytes never panic the parser, and every non-blank line is either a good
        /// message or a bad entry, never both and never neither.
        #[test]
        fn every_line_is_either_good_or_named(
            lines in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..80), 0..8)
        ) {
            let lines: Vec<Vec<u8>> = lines
                .into_iter()
                .map(|l| l.into_iter().map(|b| if b == b'\n' { b' ' } else { b }).collect())
                .collect();
            let bytes = lines.join(&b'\n');
            let (good, bad) = parse_bytes(&bytes, &directory());
            let counted = lines
                .iter()
                .enumerate()
                .map(|(i, l)| if i == 0 { l.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(l) } else { l })
                .filter(|l| !l.strip_suffix(b"\r").unwrap_or(l).iter().all(u8::is_ascii_whitespace))
                .count();
            proptest::prop_assert_eq!(good.len() + bad.len(), counted);
        }
    }
}
