//! An NDR read from its MIME (Graph's `GET /users/{id}/messages/{id}/$value`,
//! <https://learn.microsoft.com/graph/outlook-get-mime-message>), parsed by `mail-parser`.
//! Every real Exchange NDR in `tests/fixtures/ndr/` but one is `multipart/report;
//! report-type=delivery-status` (RFC 6522) with, nearly always, a `message/delivery-status` part
//! (RFC 3464: per recipient `Final-Recipient`, `Action`, `Status`, `Diagnostic-Code`) and the
//! original returned as `message/rfc822` or `text/rfc822-headers`. Read in this order:
//! - failures: the DSN's recipients whose `Action` is `failed` (or absent); without a DSN part,
//!   the text's layouts ([`super::text`]);
//! - the original's `Message-ID`: the returned original's, then the NDR's own `In-Reply-To`,
//!   then `References` (an NDR from a tenant's own postmaster carries neither:
//!   exchange-online-01..03, exchange-2007-01..03), then a `Message-ID:` quoted in the text.

use mail_parser::{MessageParser, MimeHeaders, PartType};

use super::{Failure, Report, first_angle, is_code, text};

/// Reads `raw`, an NDR's MIME. Anything mail-parser cannot read as a message is read as text.
pub(super) fn read(raw: &[u8]) -> Report {
    let Some(message) = MessageParser::default().parse(raw) else {
        let body = String::from_utf8_lossy(raw);
        return Report {
            original: text::quoted_message_id(&body),
            failures: text::failures(&body),
        };
    };
    let mut dsn = Vec::new();
    let mut returned = None;
    let mut plain = String::new();
    let mut html = String::new();
    for part in &message.parts {
        let (ctype, subtype) = part.content_type().map_or_else(
            || ("text".to_owned(), "plain".to_owned()),
            |ct| {
                (
                    ct.ctype().to_ascii_lowercase(),
                    ct.subtype().unwrap_or_default().to_ascii_lowercase(),
                )
            },
        );
        match (ctype.as_str(), subtype.as_str(), &part.body) {
            ("message", "delivery-status" | "global-delivery-status", _) => {
                dsn.extend(delivery_status(&String::from_utf8_lossy(part.contents())));
            }
            (_, _, PartType::Message(original)) => {
                returned = returned.or_else(|| original.message_id().map(|id| format!("<{id}>")));
            }
            ("text", "rfc822-headers", _) => {
                let headers = String::from_utf8_lossy(part.contents());
                returned = returned.or_else(|| text::quoted_message_id(&headers));
            }
            (_, _, PartType::Text(t)) => {
                plain.push_str(t);
                plain.push('\n');
            }
            (_, _, PartType::Html(h)) => {
                html.push_str(&text::strip_html(h));
                html.push('\n');
            }
            _ => {}
        }
    }
    let body = if plain.trim().is_empty() { html } else { plain };
    let header = |name: &str| message.header_raw(name).and_then(first_angle);
    let original = returned
        .or_else(|| header("In-Reply-To"))
        .or_else(|| header("References"))
        .or_else(|| text::quoted_message_id(&body));
    let failures = if dsn.is_empty() {
        text::failures(&body)
    } else {
        dsn
    };
    Report { original, failures }
}

/// The failed recipients of a `message/delivery-status` body: its per-message block, then one
/// block per recipient (RFC 3464 §2.1), each block's fields read by mail-parser as headers.
fn delivery_status(body: &str) -> Vec<Failure> {
    let normalized = body.replace("\r\n", "\n");
    normalized
        .split("\n\n")
        .filter_map(|block| {
            let fields = MessageParser::default().parse_headers(block.as_bytes())?;
            let field = |name: &str| {
                fields
                    .header_raw(name)
                    .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
            };
            let recipient = field("Final-Recipient").or_else(|| field("Original-Recipient"))?;
            let action = field("Action").unwrap_or_default();
            if !action.is_empty() && !action.eq_ignore_ascii_case("failed") {
                return None;
            }
            // `rfc822;a@b.example`: the address after the type (RFC 3464 §2.3.2).
            let recipient = recipient
                .split_once(';')
                .map_or(recipient.as_str(), |(_, a)| a)
                .trim()
                .trim_start_matches('<')
                .trim_end_matches('>')
                .to_owned();
            // `smtp;550 5.1.1 text` (RFC 3464 §2.3.6).
            let diagnostic = field("Diagnostic-Code").unwrap_or_default();
            let diagnostic = diagnostic
                .split_once(';')
                .map_or(diagnostic.as_str(), |(_, d)| d)
                .trim();
            let status = field("Status").unwrap_or_default();
            let status = status.split_whitespace().next().unwrap_or_default();
            let words: Vec<&str> = diagnostic.split_whitespace().take(2).collect();
            let code = if is_code(status) {
                status.to_owned()
            } else {
                words.iter().find(|w| is_code(w))?.to_string()
            };
            let text = diagnostic
                .find(code.as_str())
                .map_or(diagnostic, |at| diagnostic[at + code.len()..].trim());
            Some(Failure {
                recipient,
                code,
                text: text.to_owned(),
            })
        })
        .collect()
}
