//! The send's own look at the suppression list: an address may be suppressed after its message
//! was stored (a hard bounce of an earlier message, an operator), so each send drops the
//! recipients on its sender's list just before it goes out: one indexed lookup.

use super::MailProviderService;
use crate::{
    domain::MessageContent,
    log_events,
    ops::metrics::STAGE_SEND,
    store::{StoreError, messages::StoredMessage, suppressions},
};

impl MailProviderService {
    /// Drops from `content` (of `message`) the recipients on its sender's suppression list;
    /// returns how many.
    ///
    /// # Errors
    /// PostgreSQL errors.
    pub(super) async fn drop_suppressed(
        &self,
        message: &StoredMessage,
        content: &mut MessageContent,
    ) -> Result<u32, StoreError> {
        let keys: Vec<String> = content.recipient_keys().collect();
        let listed = suppressions::suppressed_of(&self.pool, message.sender.id(), &keys).await?;
        if listed.is_empty() {
            return Ok(0);
        }
        let dropped = content.drop_recipients(|key| listed.contains(key));
        self.metrics
            .recipients_suppressed(STAGE_SEND, u64::from(dropped));
        tracing::info!(
            event = log_events::RECIPIENTS_SUPPRESSED,
            stage = STAGE_SEND,
            message.id = %message.id,
            recipients = dropped,
            messages_failed = u32::from(content.recipient_count() == 0),
            "suppressed recipients dropped before the send"
        );
        Ok(dropped)
    }
}

/// `last_error` of a `SENT` message: the mailer's note, and how many recipients it was not sent
/// to as suppressed.
pub(super) fn sent_note(note: Option<&str>, suppressed: u32) -> Option<String> {
    let dropped = (suppressed > 0).then(|| {
        format!(
            "{} suppressed: not sent to {}",
            crate::plural::counted(u64::from(suppressed), "recipient", "recipients"),
            if suppressed == 1 { "it" } else { "them" }
        )
    });
    match (note, dropped) {
        (Some(note), Some(dropped)) => Some(format!("{note}; {dropped}")),
        (note, dropped) => dropped.or_else(|| note.map(str::to_owned)),
    }
}

#[cfg(test)]
mod tests {
    use super::sent_note;

    #[test]
    fn the_sent_note_says_how_many_were_suppressed() {
        assert_eq!(sent_note(None, 0), None);
        assert_eq!(
            sent_note(Some("already sent"), 0).as_deref(),
            Some("already sent")
        );
        assert_eq!(
            sent_note(None, 2).as_deref(),
            Some("2 recipients suppressed: not sent to them")
        );
        assert_eq!(
            sent_note(Some("already sent"), 1).as_deref(),
            Some("already sent; 1 recipient suppressed: not sent to it")
        );
    }
}
