//! The message resource as Graph writes it: every default property of `microsoft.graph.message`
//! (<https://learn.microsoft.com/graph/api/resources/message>; the answers of
//! <https://learn.microsoft.com/graph/api/user-post-messages> and
//! <https://learn.microsoft.com/graph/api/message-move>, replayed from `tests/recordings/`),
//! with Graph's `null` where a value is absent. graph-sim keeps no body text of a draft: its
//! `body.content` and `bodyPreview` are empty.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

/// What graph-sim knows of one message, to be written as Graph writes it.
#[derive(Debug)]
pub(crate) struct MessageView<'a> {
    pub id: &'a str,
    pub is_draft: bool,
    pub is_read: bool,
    pub internet_message_id: Option<&'a str>,
    pub subject: Option<&'a str>,
    /// `text` or `html`.
    pub body_type: &'a str,
    pub body: &'a str,
    /// Sender's display name and address, when it has one (a draft's is set at send).
    pub from: Option<(&'a str, &'a str)>,
    pub to: &'a [String],
    pub cc: &'a [String],
    pub bcc: &'a [String],
    pub has_attachments: bool,
    /// The folder's well-known name (`drafts`, `inbox`, …).
    pub folder: &'a str,
    /// Created, received and sent (graph-sim does not tell them apart).
    pub at: DateTime<Utc>,
}

impl MessageView<'_> {
    /// Every default property.
    pub(crate) fn json(&self) -> Value {
        let time = self.at.format("%Y-%m-%dT%H:%M:%SZ").to_string();
        let tail = &self.id[self.id.len().saturating_sub(8)..];
        let recipients = |list: &[String]| -> Value {
            list.iter()
                .map(|a| json!({"emailAddress": {"name": a, "address": a}}))
                .collect()
        };
        let from = self.from.map_or(
            Value::Null,
            |(name, address)| json!({"emailAddress": {"name": name, "address": address}}),
        );
        json!({
            "@odata.etag": format!("W/\"CQAAABYAAAA{tail}\""),
            "id": self.id,
            "createdDateTime": time,
            "lastModifiedDateTime": time,
            "changeKey": format!("CQAAABYAAAA{tail}"),
            "categories": [],
            "receivedDateTime": time,
            "sentDateTime": time,
            "hasAttachments": self.has_attachments,
            "internetMessageId": self.internet_message_id,
            "subject": self.subject,
            "bodyPreview": self.body.chars().take(255).collect::<String>(),
            "importance": "normal",
            "parentFolderId": self.folder,
            "conversationId": format!("AAQkAD{tail}"),
            "conversationIndex": Value::Null,
            "isDeliveryReceiptRequested": false,
            "isReadReceiptRequested": false,
            "isRead": self.is_read,
            "isDraft": self.is_draft,
            "webLink": format!("https://outlook.office365.com/owa/?ItemID={}&exvsurl=1&viewmodel=ReadMessageItem", self.id.replace('=', "%3D")),
            "inferenceClassification": "focused",
            "body": {"contentType": self.body_type, "content": self.body},
            "sender": from.clone(),
            "from": from,
            "toRecipients": recipients(self.to),
            "ccRecipients": recipients(self.cc),
            "bccRecipients": recipients(self.bcc),
            "replyTo": [],
            "flag": {"flagStatus": "notFlagged"},
        })
    }
}
