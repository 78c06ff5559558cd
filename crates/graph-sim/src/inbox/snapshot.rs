//! The Inbox as a test sees and fills it ([`crate::GraphSim::inbox`],
//! [`crate::GraphSim::deliver_to_inbox`]).

use super::INBOX;
use crate::{ndr::NOTE_CLASS, records::InboxItem, state::SimState, wire::new_item_id};

/// One item of a mailbox's folders as a test sees it ([`crate::GraphSim::inbox`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SimInboxItem {
    /// Its current id.
    pub id: String,
    /// `inbox`, or the folder it was moved to.
    pub folder: String,
    /// `REPORT.IPM.Note.NDR` for an NDR, `IPM.Note` for a delivered message.
    pub message_class: String,
    /// Its subject.
    pub subject: String,
    /// Whether it was marked read.
    pub is_read: bool,
    /// Whether its delay has passed (listings show it).
    pub visible: bool,
    /// Its text body.
    pub body: String,
}

impl SimState {
    /// Every item of mailbox `idx`'s folders, oldest first.
    pub(crate) fn inbox_of(&self, idx: usize) -> Vec<SimInboxItem> {
        let now_ms = self.now().timestamp_millis();
        self.lock()
            .inbox
            .iter()
            .filter(|i| i.idx == idx)
            .map(|i| SimInboxItem {
                id: i.id.clone(),
                folder: i.folder.clone(),
                message_class: i.message_class.to_owned(),
                subject: i.subject.clone(),
                is_read: i.is_read,
                visible: now_ms >= i.visible_at_ms,
                body: i.body.clone(),
            })
            .collect()
    }

    /// Delivers an ordinary message (`IPM.Note`) from `from` into mailbox `idx`'s Inbox.
    pub(crate) fn deliver_note(&self, idx: usize, from: &str, subject: &str, body: &str) {
        let now = self.now();
        let internet_message_id = format!("<{}@graph-sim.example>", uuid::Uuid::new_v4().simple());
        let to = self.mailboxes[idx].address.to_string();
        let mime = format!(
            "From: <{from}>\r\nTo: <{to}>\r\nSubject: {subject}\r\nDate: {date}\r\nMessage-ID: {internet_message_id}\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=\"utf-8\"\r\n\r\n{body}",
            date = now.to_rfc2822(),
        );
        let item = InboxItem {
            idx,
            id: new_item_id(),
            folder: INBOX.to_owned(),
            visible_at_ms: now.timestamp_millis(),
            received_at: now,
            is_read: false,
            message_class: NOTE_CLASS,
            subject: subject.to_owned(),
            from_name: from.to_owned(),
            from_address: from.to_owned(),
            to,
            body: body.to_owned(),
            internet_message_id,
            headers: Vec::new(),
            mime,
        };
        self.lock().inbox.push(item);
    }
}
