//! The JSON body of Graph's `POST /users/{mailbox}/sendMail`.
//! Shape: <https://learn.microsoft.com/graph/api/user-sendmail>.

use base64::Engine as _;
use serde::Serialize;

use crate::domain::{BodyContentType, Header, OutgoingMail, Recipient};

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SendMail<'a> {
    message: Message<'a>,
    save_to_sent_items: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Message<'a> {
    subject: &'a str,
    body: ItemBody<'a>,
    to_recipients: Vec<GraphRecipient<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    cc_recipients: Vec<GraphRecipient<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    bcc_recipients: Vec<GraphRecipient<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    internet_message_headers: Vec<&'a Header>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    attachments: Vec<FileAttachment<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ItemBody<'a> {
    content_type: &'static str,
    content: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct GraphRecipient<'a> {
    email_address: EmailAddress<'a>,
}

#[derive(Serialize)]
struct EmailAddress<'a> {
    address: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FileAttachment<'a> {
    #[serde(rename = "@odata.type")]
    odata_type: &'static str,
    name: &'a str,
    content_type: &'a str,
    content_bytes: String,
}

fn recipients(list: &[Recipient]) -> Vec<GraphRecipient<'_>> {
    list.iter()
        .map(|r| GraphRecipient {
            email_address: EmailAddress {
                address: r.address.trim(),
                name: r.name.as_deref().filter(|n| !n.trim().is_empty()),
            },
        })
        .collect()
}

/// `{"message":{subject, body{contentType Text|HTML, content}, toRecipients, ccRecipients,
/// bccRecipients, internetMessageHeaders, attachments}, "saveToSentItems": …}` as bytes; empty
/// Cc, Bcc, header and attachment lists are left out. Serialised once per send, so a resend
/// after a 401 carries a byte-identical body.
pub fn send_mail_body(mail: &OutgoingMail, save_to_sent_items: bool) -> Vec<u8> {
    let body = SendMail {
        message: Message {
            subject: &mail.subject,
            body: ItemBody {
                content_type: match mail.body_content_type {
                    BodyContentType::Text => "Text",
                    BodyContentType::Html => "HTML",
                },
                content: &mail.body,
            },
            to_recipients: recipients(&mail.to),
            cc_recipients: recipients(&mail.cc),
            bcc_recipients: recipients(&mail.bcc),
            internet_message_headers: mail.headers.iter().collect(),
            attachments: mail
                .attachments
                .iter()
                .map(|a| FileAttachment {
                    odata_type: "#microsoft.graph.fileAttachment",
                    name: &a.name,
                    content_type: &a.content_type,
                    content_bytes: base64::engine::general_purpose::STANDARD.encode(&a.content),
                })
                .collect(),
        },
        save_to_sent_items,
    };
    // Serialising plain strings, bools and vectors into memory cannot fail.
    serde_json::to_vec(&body).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Attachment;
    use crate::mailer::validate::tests::mail;

    #[test]
    fn the_body_has_graphs_exact_shape() {
        let mut m = mail();
        m.body_content_type = BodyContentType::Html;
        m.body = "<p>Hi</p>".into();
        m.cc = vec![Recipient {
            address: " c@example.org ".into(),
            name: None,
        }];
        m.headers = vec![Header {
            name: "x-campaign-id".into(),
            value: "42".into(),
        }];
        m.attachments = vec![Attachment {
            name: "a.txt".into(),
            content_type: "text/plain".into(),
            content: b"hello".to_vec(),
        }];
        let json: serde_json::Value = serde_json::from_slice(&send_mail_body(&m, false)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "message": {
                    "subject": "Hello",
                    "body": {"contentType": "HTML", "content": "<p>Hi</p>"},
                    "toRecipients": [{"emailAddress": {"address": "lotte.jansen@example.com", "name": "Lotte"}}],
                    "ccRecipients": [{"emailAddress": {"address": "c@example.org"}}],
                    "internetMessageHeaders": [{"name": "x-campaign-id", "value": "42"}],
                    "attachments": [{
                        "@odata.type": "#microsoft.graph.fileAttachment",
                        "name": "a.txt",
                        "contentType": "text/plain",
                        "contentBytes": "aGVsbG8="
                    }]
                },
                "saveToSentItems": false
            })
        );
    }

    #[test]
    fn a_text_body_is_named_text_and_empty_lists_are_left_out() {
        let json: serde_json::Value =
            serde_json::from_slice(&send_mail_body(&mail(), true)).unwrap();
        assert_eq!(json["message"]["body"]["contentType"], "Text");
        assert_eq!(json["saveToSentItems"], true);
        let message = json["message"].as_object().unwrap();
        let mut keys: Vec<&str> = message.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["body", "subject", "toRecipients"]);
    }
}
