//! The JSON bodies of Graph's `POST /users/{mailbox}/sendMail`
//! (<https://learn.microsoft.com/graph/api/user-sendmail>), of a draft
//! (`POST /users/{mailbox}/messages`, the message itself:
//! <https://learn.microsoft.com/graph/api/user-post-messages>), of one attachment added to a
//! draft (<https://learn.microsoft.com/graph/api/message-post-attachments>) and of an attachment
//! upload session (<https://learn.microsoft.com/graph/api/attachment-createuploadsession>).
//! Which attachment goes where in `draft` mode: `plan.rs`.

use base64::Engine as _;
use serde::Serialize;

use crate::domain::{Attachment, BodyContentType, Header, OutgoingMail, Recipient};

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SendMail<'a> {
    message: Message<'a>,
    save_to_sent_items: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Message<'a> {
    subject: &'a str,
    body: ItemBody<'a>,
    to_recipients: Vec<GraphRecipient<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    cc_recipients: Vec<GraphRecipient<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    bcc_recipients: Vec<GraphRecipient<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    internet_message_headers: Vec<&'a Header>,
    #[serde(skip_serializing_if = "Option::is_none")]
    internet_message_id: Option<&'a str>,
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

pub(super) fn message<'a>(
    mail: &'a OutgoingMail,
    internet_message_id: Option<&'a str>,
    inline: &[&'a Attachment],
) -> Message<'a> {
    Message {
        subject: &mail.content.subject,
        body: ItemBody {
            content_type: match mail.content.body_content_type {
                BodyContentType::Text => "Text",
                BodyContentType::Html => "HTML",
            },
            content: &mail.content.body,
        },
        to_recipients: recipients(&mail.content.to),
        cc_recipients: recipients(&mail.content.cc),
        bcc_recipients: recipients(&mail.content.bcc),
        internet_message_headers: mail.content.headers.iter().collect(),
        internet_message_id,
        attachments: inline.iter().map(|a| file_attachment(a)).collect(),
    }
}

fn file_attachment(a: &Attachment) -> FileAttachment<'_> {
    FileAttachment {
        odata_type: "#microsoft.graph.fileAttachment",
        name: &a.name,
        content_type: &a.content_type,
        content_bytes: base64::engine::general_purpose::STANDARD.encode(&a.content),
    }
}

/// One `fileAttachment` as the body of `POST /users/{mailbox}/messages/{id}/attachments`
/// (<https://learn.microsoft.com/graph/api/message-post-attachments>): `{"@odata.type":
/// "#microsoft.graph.fileAttachment", "name", "contentType", "contentBytes"}`.
pub fn attachment_body(attachment: &Attachment) -> Vec<u8> {
    serde_json::to_vec(&file_attachment(attachment)).unwrap_or_default()
}

/// `{"message":{subject, body{contentType Text|HTML, content}, toRecipients, ccRecipients,
/// bccRecipients, internetMessageHeaders, attachments}, "saveToSentItems": …}` as bytes; empty
/// Cc, Bcc, header and attachment lists are left out. Serialised once per send, so a resend
/// after a 401 carries a byte-identical body.
pub fn send_mail_body(mail: &OutgoingMail, save_to_sent_items: bool) -> Vec<u8> {
    send_mail_body_with_id(mail, save_to_sent_items, None)
}

/// [`send_mail_body`] with `message.internetMessageId` set (the Sent Items look-up after an
/// unknown outcome finds the copy by it).
pub fn send_mail_body_with_id(
    mail: &OutgoingMail,
    save_to_sent_items: bool,
    internet_message_id: Option<&str>,
) -> Vec<u8> {
    let all: Vec<&Attachment> = mail.content.attachments.iter().collect();
    let body = SendMail {
        message: message(mail, internet_message_id, &all),
        save_to_sent_items,
    };
    // Serialising plain strings, bools and vectors into memory cannot fail.
    serde_json::to_vec(&body).unwrap_or_default()
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct UploadItem<'a> {
    attachment_type: &'static str,
    name: &'a str,
    size: usize,
    content_type: &'a str,
}

/// `{"AttachmentItem": {"attachmentType": "file", "name", "size", "contentType"}}`.
pub fn upload_session_body(attachment: &Attachment) -> Vec<u8> {
    let body = serde_json::json!({
        "AttachmentItem": UploadItem {
            attachment_type: "file",
            name: &attachment.name,
            size: attachment.content.len(),
            content_type: &attachment.content_type,
        }
    });
    serde_json::to_vec(&body).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mailer::validate::tests::{attachment, header, mail, rcpt};

    #[test]
    fn the_body_has_graphs_exact_shape() {
        let mut m = mail();
        m.content.body_content_type = BodyContentType::Html;
        m.content.body = "<p>Hi</p>".into();
        m.content.cc = vec![rcpt(" c@example.org ")];
        m.content.headers = vec![header("x-campaign-id", "42")];
        m.content.attachments = vec![attachment("a.txt", "text/plain", b"hello".to_vec())];
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
