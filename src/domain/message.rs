//! An outgoing message as the mailers see it.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::MailboxAddress;

/// One recipient as the producer wrote it: `{"address": "...", "name": "..."}`. The address is
/// not validated here (see [`crate::mailer::validate`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recipient {
    /// The SMTP address.
    pub address: String,
    /// The display name, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `messages.body_content_type`: `text` or `html` (Graph's `Text` / `HTML`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BodyContentType {
    /// Plain text.
    Text,
    /// HTML.
    Html,
}

impl BodyContentType {
    /// The column value, `text` or `html`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Html => "html",
        }
    }

    /// Parses `text` / `html`, case-insensitively; `None` for anything else.
    pub(crate) fn parse(raw: &str) -> Option<Self> {
        match raw.trim().to_ascii_lowercase().as_str() {
            "text" => Some(Self::Text),
            "html" => Some(Self::Html),
            _ => None,
        }
    }
}

/// A custom internet message header, `{"name": "x-campaign-id", "value": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// Header name; Graph accepts only names starting with `x-` / `X-`.
    pub name: String,
    /// Header value.
    pub value: String,
}

/// An inline file attachment.
#[derive(Clone, PartialEq, Eq)]
pub struct Attachment {
    /// File name, e.g. `invite.ics`.
    pub name: String,
    /// MIME type, e.g. `text/calendar`.
    pub content_type: String,
    /// The raw bytes (not base64).
    pub content: Vec<u8>,
}

impl std::fmt::Debug for Attachment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attachment")
            .field("name", &self.name)
            .field("content_type", &self.content_type)
            .field("bytes", &self.content.len())
            .finish()
    }
}

/// What a message says and to whom: the part a producer writes, the store keeps and a mailer
/// sends, the same in each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageContent {
    /// `To` recipients.
    pub to: Vec<Recipient>,
    /// `Cc` recipients.
    pub cc: Vec<Recipient>,
    /// `Bcc` recipients.
    pub bcc: Vec<Recipient>,
    /// Subject line.
    pub subject: String,
    /// Body format.
    pub body_content_type: BodyContentType,
    /// Body content.
    pub body: String,
    /// Custom headers.
    pub headers: Vec<Header>,
    /// Inline attachments.
    pub attachments: Vec<Attachment>,
}

impl MessageContent {
    /// Recipients as Exchange counts them: To + Cc + Bcc, every address, repeats included.
    pub(crate) fn recipient_count(&self) -> u32 {
        (self.to.len() + self.cc.len() + self.bcc.len()) as u32
    }

    /// Every recipient's address in the form the suppression list matches
    /// ([`super::match_key`]), To, Cc, Bcc.
    pub(crate) fn recipient_keys(&self) -> impl Iterator<Item = String> + '_ {
        self.to
            .iter()
            .chain(&self.cc)
            .chain(&self.bcc)
            .map(|r| super::match_key(&r.address))
    }

    /// Drops every recipient whose match key `suppressed` says is on the list; returns how many.
    pub(crate) fn drop_recipients(&mut self, suppressed: impl Fn(&str) -> bool) -> u32 {
        let before = self.recipient_count();
        for list in [&mut self.to, &mut self.cc, &mut self.bcc] {
            list.retain(|r| !suppressed(&super::match_key(&r.address)));
        }
        before - self.recipient_count()
    }

    /// Total attachment bytes before base64 encoding.
    pub(crate) fn attachment_bytes(&self) -> usize {
        self.attachments.iter().map(|a| a.content.len()).sum()
    }
}

/// A message ready for a [`crate::mailer::Mailer`]: who sends it, to whom, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingMail {
    /// `messages.id`; sent to Graph as `client-request-id`.
    pub id: Uuid,
    /// The sending mailbox.
    pub from: MailboxAddress,
    /// Recipients, subject, body, headers and attachments.
    pub content: MessageContent,
    /// `messages.priority`: `high` may use the `paced` limiter's reserved headroom.
    pub priority: super::Priority,
}
