//! The v3 `mail/send` JSON body.

use base64::Engine as _;
use serde::Serialize;

use crate::domain::{BodyContentType, MailboxAddress, OutgoingMail, Recipient};

#[derive(Serialize)]
struct MailSend<'a> {
    personalizations: [Personalization<'a>; 1],
    from: Address<'a>,
    subject: &'a str,
    content: [Content<'a>; 1],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    attachments: Vec<SgAttachment<'a>>,
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    headers: std::collections::BTreeMap<&'a str, &'a str>,
    custom_args: CustomArgs,
}

#[derive(Serialize)]
struct Personalization<'a> {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    to: Vec<Address<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    cc: Vec<Address<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    bcc: Vec<Address<'a>>,
}

#[derive(Serialize)]
struct Address<'a> {
    email: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
}

#[derive(Serialize)]
struct Content<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    value: &'a str,
}

#[derive(Serialize)]
struct SgAttachment<'a> {
    content: String,
    #[serde(rename = "type")]
    kind: &'a str,
    filename: &'a str,
    disposition: &'static str,
}

#[derive(Serialize)]
struct CustomArgs {
    /// Our `messages.id`, echoed in SendGrid's event webhooks.
    mail_worker_message_id: String,
}

fn addresses(list: &[Recipient]) -> Vec<Address<'_>> {
    list.iter()
        .map(|r| Address {
            email: r.address.trim(),
            name: r.name.as_deref().filter(|n| !n.trim().is_empty()),
        })
        .collect()
}

/// The v3 JSON body: one personalization with to/cc/bcc (empty lists left out), `from`,
/// `subject`, one `content` (`text/plain` or `text/html`), base64 `attachments`, custom
/// `headers`, and `custom_args.mail_worker_message_id`.
pub(crate) fn mail_send_body(mail: &OutgoingMail, from: &MailboxAddress) -> Vec<u8> {
    let body = MailSend {
        personalizations: [Personalization {
            to: addresses(&mail.content.to),
            cc: addresses(&mail.content.cc),
            bcc: addresses(&mail.content.bcc),
        }],
        from: Address {
            email: from.as_str(),
            name: None,
        },
        subject: &mail.content.subject,
        content: [Content {
            kind: match mail.content.body_content_type {
                BodyContentType::Text => "text/plain",
                BodyContentType::Html => "text/html",
            },
            value: &mail.content.body,
        }],
        attachments: mail
            .content
            .attachments
            .iter()
            .map(|a| SgAttachment {
                content: base64::engine::general_purpose::STANDARD.encode(&a.content),
                kind: &a.content_type,
                filename: &a.name,
                disposition: "attachment",
            })
            .collect(),
        headers: mail
            .content
            .headers
            .iter()
            .map(|h| (h.name.as_str(), h.value.as_str()))
            .collect(),
        custom_args: CustomArgs {
            mail_worker_message_id: mail.id.to_string(),
        },
    };
    // Serialising plain strings and vectors into memory cannot fail.
    serde_json::to_vec(&body).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mailer::validate::tests::{header, mail, rcpt};

    #[test]
    fn the_v3_body_has_personalizations_content_and_headers() {
        let mut m = mail();
        m.content.bcc = vec![rcpt("b@example.org")];
        m.content.headers = vec![header("X-Campaign", "7")];
        let from = m.from.clone();
        let json: serde_json::Value = serde_json::from_slice(&mail_send_body(&m, &from)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "personalizations": [{
                    "to": [{"email": "lotte.jansen@example.com", "name": "Lotte"}],
                    "bcc": [{"email": "b@example.org"}]
                }],
                "from": {"email": "events@contoso.example"},
                "subject": "Hello",
                "content": [{"type": "text/plain", "value": "Hi"}],
                "headers": {"X-Campaign": "7"},
                "custom_args": {"mail_worker_message_id": m.id.to_string()}
            })
        );
    }
}
