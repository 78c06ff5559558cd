//! `GRAPH_SEND_MODE=draft`: the draft flow and the checks that make it exactly once.
//!
//! A first attempt: create the draft (`POST /users/{mailbox}/messages` with our deterministic
//! `internetMessageId` and `Prefer: IdType="ImmutableId"`,
//! <https://learn.microsoft.com/graph/api/user-post-messages>,
//! <https://learn.microsoft.com/graph/outlook-immutable-id>), add the attachments that are not
//! in it, each by its own size (`plan.rs`: under 3 MB a `POST …/attachments`, 3 MB and more an
//! upload session, <https://learn.microsoft.com/graph/outlook-large-attachments>), note
//! the draft's id and the send attempt ([`crate::mailer::SendJournal::send_attempted`], written
//! with the attempt's outcome), then
//! `POST /users/{mailbox}/messages/{id}/send` (<https://learn.microsoft.com/graph/api/message-send>).
//!
//! A later attempt (a retry after an unknown outcome, or lease recovery after a crash) decides
//! from what the row says, before anything could deliver a second time:
//!
//! | row                                   | check                                   | then |
//! | ------------------------------------- | --------------------------------------- | ---- |
//! | draft id, no send attempt             | `GET` the draft                         | `isDraft: true` → send *that* draft (no second draft); gone → create anew |
//! | draft id, send attempted              | `GET` the draft by its immutable id     | `isDraft: false` → it went: `SENT`, nothing resent |
//! |                                       |                                         | `isDraft: true` within `GRAPH_SEND_SETTLE` of the attempt → [`MailError::Unconfirmed`] (check again later) |
//! |                                       |                                         | `isDraft: true` after it, and no Sent Items copy by `internetMessageId` → send the same draft |
//! |                                       |                                         | gone (`404`) → a sent copy by `internetMessageId` (Sent Items, then every folder) → `SENT`; none within `GRAPH_SEND_SETTLE` → [`MailError::Unconfirmed`]; none after it → `ERROR` "outcome unknown", never resent |
//! | no draft id, earlier attempts         | look up by `internetMessageId`          | sent → `SENT`, nothing resent; an unsent draft, or nothing, within `GRAPH_SEND_SETTLE` of a possible send → [`MailError::Unconfirmed`]; after it, an unsent draft whose attachments were all in its create request → reuse it; one with attachments added after → delete it, create; none → create |
//!
//! A row with no draft id but a send attempt is what a crash leaves: the draft's id and the
//! attempt are written with the attempt's outcome (one row write fewer per send), so a worker
//! that died mid-send left neither, and lease recovery stamps `send_attempted_at` = the recovery
//! time (the latest a request could have been written); the look-up by our `internetMessageId`
//! then finds what it did.
//!
//! Why the settle time: Graph is eventually consistent — right after a send the item may still
//! read `isDraft: true`, or be found nowhere (`404` by its immutable id: it left Drafts and its
//! Sent Items copy is not created yet, <https://learn.microsoft.com/graph/outlook-immutable-id>),
//! and Sent Items may not list it yet. Microsoft documents no bound, so the safe reading is
//! taken: "still a draft" or "not found" is trusted only `GRAPH_SEND_SETTLE` after the send
//! was written (default 2 minutes); until then the message is [`MailError::Unconfirmed`].
//!
//! Only the send step may deliver; a failed create, look-up or upload is
//! [`MailError::Transient`] (nothing was sent, the limiter gives the budget back).

use uuid::Uuid;

use crate::{
    domain::OutgoingMail,
    mailer::{MailError, SendAttempt, SendReceipt},
};

use super::{MicrosoftGraphMailer, internet_message_id, lookup::FoundItem, segments};

/// A receipt for a message an earlier attempt delivered.
pub(crate) fn already_sent(item_id: &str, note: &str) -> SendReceipt {
    SendReceipt {
        provider_id: Some(item_id.to_owned()),
        already_sent: true,
        note: Some(note.to_owned()),
    }
}

impl MicrosoftGraphMailer {
    /// The draft flow (module doc).
    pub(super) async fn send_draft(
        &self,
        mail: &OutgoingMail,
        attempt: &SendAttempt<'_>,
    ) -> Result<SendReceipt, MailError> {
        let imid = internet_message_id(mail.id, &self.mailbox);
        let prior = attempt.prior;
        let mut note = None;
        let mut draft_id = None;
        if let Some(id) = prior.graph_draft_id.as_deref() {
            match self.get_item(mail.id, id).await? {
                Some(item) if !item.is_draft => {
                    return Ok(already_sent(
                        &item.id,
                        "outcome unknown; the check found it sent (isDraft false), not resent",
                    ));
                }
                Some(item) => {
                    if let Some(attempted_at) = prior.send_attempted_at {
                        self.settled(attempted_at, "the draft still reads isDraft true")?;
                        if let Some(sent) = self
                            .find_by_internet_message_id(mail.id, &imid, true)
                            .await?
                        {
                            return Ok(already_sent(
                                &sent.id,
                                "outcome unknown; found in Sent Items by internetMessageId, not resent",
                            ));
                        }
                        note = Some(format!(
                            "outcome unknown; still a draft {} s after the send; sent the same draft again",
                            self.settle.as_secs()
                        ));
                    }
                    draft_id = Some(item.id);
                }
                None => {
                    if let Some(attempted_at) = prior.send_attempted_at {
                        return self.vanished(mail.id, id, &imid, attempted_at).await;
                    }
                }
            }
        } else if prior.earlier_attempts > 0 {
            // A create with an unknown outcome may have left a draft, and a crash (lease
            // recovery: the row knows no draft id) may have sent one: look it up.
            let found = self
                .find_by_internet_message_id(mail.id, &imid, false)
                .await?;
            if found.is_none()
                && let Some(attempted_at) = prior.send_attempted_at
            {
                // A draft sent just before the crash is in no folder until its copy is visible.
                self.settled(attempted_at, "nothing has its internetMessageId yet")?;
                note = Some(format!(
                    "outcome unknown; nothing had its internetMessageId {} s after the attempt; sent",
                    self.settle.as_secs()
                ));
            }
            if let Some(item) = found {
                if !item.is_draft {
                    return Ok(already_sent(
                        &item.id,
                        "outcome unknown; found sent by internetMessageId, not resent",
                    ));
                }
                if let Some(attempted_at) = prior.send_attempted_at {
                    self.settled(
                        attempted_at,
                        "the draft found by internetMessageId still reads isDraft true",
                    )?;
                    note = Some(format!(
                        "outcome unknown; still a draft {} s after the attempt; sent it",
                        self.settle.as_secs()
                    ));
                }
                // A draft whose attachments are added after its creation may lack some:
                // delete it and make it anew.
                if Self::adds_attachments(mail) {
                    self.delete_draft(mail.id, &item.id).await;
                } else {
                    draft_id = Some(item.id);
                }
            }
        }
        let draft_id = match draft_id {
            Some(id) => id,
            None => self.create_draft(mail, &imid).await?,
        };
        // The draft's id and the send attempt, written with this attempt's outcome.
        let new_draft = (prior.graph_draft_id.as_deref() != Some(draft_id.as_str()))
            .then_some(draft_id.as_str());
        attempt.journal.send_attempted(new_draft);
        let url = segments(&self.user_url, &["messages", &draft_id, "send"]);
        let mut receipt = self.deliver(&url, None, mail.id).await?;
        receipt.note = note;
        Ok(receipt)
    }

    /// The draft `draft_id` of a send with an unknown outcome answered `404`: it left Drafts,
    /// sent (its Sent Items copy may not be visible yet: "retrieving the message from Sent
    /// Items might not succeed immediately after sending", <https://learn.microsoft.com/graph/outlook-immutable-id>)
    /// or deleted. A sent copy by our `internetMessageId` → `SENT`, not resent; none within
    /// `GRAPH_SEND_SETTLE` of the send → [`MailError::Unconfirmed`]; none after it → `ERROR`
    /// for a person, never resent: Graph may have delivered it and Microsoft documents no bound
    /// on the delay, so the safe reading is taken (docs/decisions/0001-unconfirmed-sends.md).
    async fn vanished(
        &self,
        message_id: Uuid,
        draft_id: &str,
        imid: &str,
        attempted_at: chrono::DateTime<chrono::Utc>,
    ) -> Result<SendReceipt, MailError> {
        if let Some(sent) = self.find_sent_copy(message_id, imid).await? {
            return Ok(already_sent(
                &sent.id,
                "outcome unknown; the draft was gone, a sent copy was found by internetMessageId, not resent",
            ));
        }
        self.settled(
            attempted_at,
            "the draft is gone (404) and no sent copy has its internetMessageId yet",
        )?;
        Err(MailError::Permanent {
            code: "DraftVanished".into(),
            message: format!(
                "outcome unknown after {} s: the draft {draft_id} is gone and no sent copy has internetMessageId {imid}; not resent: check Sent Items (and Deleted Items) before retrying",
                self.settle.as_secs()
            ),
        })
    }

    /// A sent copy with our `internetMessageId`: in Sent Items, else in any folder (moved or
    /// deleted after it went). Unsent drafts do not count.
    async fn find_sent_copy(
        &self,
        message_id: Uuid,
        imid: &str,
    ) -> Result<Option<FoundItem>, MailError> {
        for sent_only in [true, false] {
            let found = self
                .find_by_internet_message_id(message_id, imid, sent_only)
                .await?;
            if let Some(item) = found.filter(|i| !i.is_draft) {
                return Ok(Some(item));
            }
        }
        Ok(None)
    }
}
