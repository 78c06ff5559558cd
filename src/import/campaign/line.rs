//! One campaign line: its JSON shape and what makes it a [`NewMessage`] or a refusal naming
//! the line, the id and the field.

use base64::Engine;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use uuid::Uuid;

use super::{SenderDirectory, campaign_id::campaign_of};
use crate::{
    domain::{
        Attachment, BodyContentType, Header, MailboxAddress, MessageContent, Priority, Recipient,
        punycode_domain,
    },
    import::BadEntry,
    mailer::validate::{MAX_INLINE_ATTACHMENT_BYTES, MAX_REQUEST_BYTES},
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
    sender_pool: Option<String>,
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
    #[serde(default)]
    by: Option<String>,
    #[serde(default)]
    priority: Option<String>,
    #[serde(default)]
    campaign_id: Option<String>,
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

/// Every string field of a line with its JSON path, for the NUL check.
fn string_fields(line: &Line) -> Vec<(String, &str)> {
    let mut fields: Vec<(String, &str)> = vec![("id".into(), &line.id)];
    if let Some(t) = &line.tenant {
        fields.push(("tenant".into(), t));
    }
    if let Some(m) = &line.system_mailbox {
        fields.push(("systemMailbox".into(), m));
    }
    if let Some(p) = &line.sender_pool {
        fields.push(("senderPool".into(), p));
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
    if let Some(b) = &line.by {
        fields.push(("by".into(), b));
    }
    if let Some(p) = &line.priority {
        fields.push(("priority".into(), p));
    }
    if let Some(c) = &line.campaign_id {
        fields.push(("campaignId".into(), c));
    }
    fields
}

/// A line's JSON read as a [`Line`]; a refusal comes with the path of the field it is in
/// (`by`, `to[0].address`), `None` when it is not in one (a syntax error, trailing text).
fn line_of(text: &str) -> Result<Line, (Option<String>, serde_json::Error)> {
    let mut de = serde_json::Deserializer::from_str(text);
    let line: Line = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let e = e.into_inner();
        let in_field = e.classify() == serde_json::error::Category::Data;
        (Some(path).filter(|p| in_field && p != "." && p != "?"), e)
    })?;
    de.end().map_err(|e| (None, e))?;
    Ok(line)
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
    // An array, a string or a CSV row: say what a line must be, not serde's "invalid type".
    if let Some(first) = text.trim_start().chars().next().filter(|c| *c != '{') {
        return Err(BadEntry {
            location,
            reason: format!(
                "not a message: each line is one JSON object `{{…}}` (this one starts with `{first}`)"
            ),
        });
    }
    // serde quotes offending values, which may be addresses: mask them. Its "line 1" is of
    // this line's text alone: say the column only. The field's path leads (`by: invalid type`).
    let line: Line = line_of(text).map_err(|(path, e)| {
        let what = match path {
            Some(path) => format!("{path}: {e}"),
            None => e.to_string(),
        };
        let at = format!(" at line {} column {}", e.line(), e.column());
        let what = what
            .strip_suffix(&at)
            .map_or_else(|| what.clone(), |w| format!("{w} at column {}", e.column()));
        BadEntry {
            location: location.clone(),
            reason: format!(
                "not a message: {}{}",
                crate::mailer::redact::scrub_provider_text(&what),
                id_suffix(readable_id(text))
            ),
        }
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
    let mut sender_pool = None;
    let sender = match (&line.tenant, &line.system_mailbox, &line.sender_pool) {
        (None, None, Some(p)) => {
            let pool = senders.pools.get(p.trim()).ok_or_else(|| {
                bad(format!(
                    "senderPool {p:?} is unknown (give it in the senders file's senderPools and import it with `mail-worker senders import`)"
                ))
            })?;
            sender_pool = Some(pool.id);
            pool.stand_in(id)
                .ok_or_else(|| bad(format!("senderPool {p:?} has no members")))?
        }
        (Some(t), None, None) => {
            SenderRef::Tenant(*senders.tenants.get(t.trim()).ok_or_else(|| {
                bad(format!(
                    "tenant {t:?} is unknown (import it with `mail-worker senders import`)"
                ))
            })?)
        }
        (None, Some(m), None) => {
            let address =
                MailboxAddress::parse(m).map_err(|e| bad(format!("systemMailbox: {e}")))?;
            SenderRef::SystemMailbox(*senders.system_mailboxes.get(address.as_str()).ok_or_else(|| {
                bad(format!("systemMailbox {address} is unknown (import it with `mail-worker senders import`)"))
            })?)
        }
        (None, None, None) => {
            return Err(bad(
                "has none of tenant, systemMailbox and senderPool; give exactly one".into(),
            ));
        }
        (t, m, p) => {
            let given: Vec<&str> = [("tenant", t), ("systemMailbox", m), ("senderPool", p)]
                .into_iter()
                .filter_map(|(name, v)| v.as_ref().map(|_| name))
                .collect();
            let both = if given.len() == 2 { "both " } else { "" };
            return Err(bad(format!(
                "has {both}{}; give exactly one of tenant, systemMailbox and senderPool",
                given.join(" and ")
            )));
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
    let scheduled_on = time_field("scheduledOn", line.scheduled_on).map_err(bad)?;
    let send_by = time_field("by", line.by).map_err(bad)?;
    if let (Some(at), Some(by)) = (scheduled_on, send_by)
        && by < at
    {
        return Err(bad(format!(
            "by {} is before scheduledOn {}: the message could never be sent by then",
            by.to_rfc3339(),
            at.to_rfc3339()
        )));
    }
    let priority = line
        .priority
        .map(|raw| {
            raw.trim()
                .parse::<Priority>()
                .map_err(|e| bad(format!("priority {raw:?} {e}")))
        })
        .transpose()?;
    let campaign_id = campaign_of(line.campaign_id.as_deref(), &line.headers).map_err(bad)?;
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
        sender_pool,
        content: MessageContent {
            to: ascii(line.to),
            cc: ascii(line.cc),
            bcc: ascii(line.bcc),
            subject: line.subject,
            body_content_type,
            body: line.body.content,
            headers: line.headers,
            attachments,
        },
        scheduled_on,
        send_by,
        priority,
        campaign_id,
    })
}

/// A time field's RFC 3339 text (`scheduledOn`, `by`) as UTC; `None` when not given.
///
/// # Errors
/// A sentence naming the field.
fn time_field(field: &str, raw: Option<String>) -> Result<Option<DateTime<Utc>>, String> {
    raw.map(|raw| {
        DateTime::parse_from_rfc3339(raw.trim())
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| format!("{field} {raw:?} is not an RFC 3339 time: {e}"))
    })
    .transpose()
}
