//! The draft's creation: `POST /users/{mailbox}/messages`, then each attachment that is not in
//! it by its own size (`plan.rs`): under 3 MB a `POST …/attachments`
//! (<https://learn.microsoft.com/graph/api/message-post-attachments>), 3 MB and over an upload
//! session (<https://learn.microsoft.com/graph/outlook-large-attachments>). A draft whose
//! attachments could not all be added is deleted (`DELETE /users/{mailbox}/messages/{id}`,
//! <https://learn.microsoft.com/graph/api/message-delete>), so a failed attempt leaves nothing
//! in Drafts.

use reqwest::Method;
use serde::Deserialize;
use uuid::Uuid;

use crate::{
    domain::{Attachment, OutgoingMail},
    mailer::{MailError, http::transport_failure},
};

use super::{
    MicrosoftGraphMailer, attachment_body, draft_plan,
    lookup::{FoundItem, parse},
    plan::DraftPlan,
    segments, upload_session_body,
};

/// Bytes per `PUT` to an upload URL: 10 × 320 KiB (3,276,800), a multiple of 320 KiB and under
/// the 4 MB a chunk may carry (<https://learn.microsoft.com/graph/outlook-large-attachments>).
pub(crate) const UPLOAD_CHUNK_BYTES: usize = 10 * 320 * 1024;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct UploadSession {
    upload_url: String,
}

impl MicrosoftGraphMailer {
    /// Whether `mail`'s draft gets attachments after its creation (so a draft found after a
    /// failed attempt may lack some).
    pub(super) fn adds_attachments(mail: &OutgoingMail) -> bool {
        draft_plan(mail, "").adds_attachments()
    }

    /// Creates the draft and adds the attachments that are not in it; returns its immutable id.
    /// When an attachment cannot be added the draft is deleted and the error says so.
    pub(super) async fn create_draft(
        &self,
        mail: &OutgoingMail,
        imid: &str,
    ) -> Result<String, MailError> {
        let plan = draft_plan(mail, imid);
        let url = segments(&self.user_url, &["messages"]);
        let answer = self
            .step(
                Method::POST,
                &url,
                Some(&plan.body),
                mail.id,
                "create the draft",
            )
            .await?;
        if answer.status == 404 {
            return Err(MailError::transient(
                "create the draft: Graph answered HTTP 404; nothing was sent",
            ));
        }
        let item: FoundItem = parse(&answer, "create the draft")?;
        if let Err(error) = self.add_attachments(mail.id, &item.id, &plan).await {
            let outcome = self.delete_draft(mail.id, &item.id).await;
            return Err(error.map_text(|t| format!("{t}; {outcome}")));
        }
        Ok(item.id)
    }

    async fn add_attachments(
        &self,
        message_id: Uuid,
        draft_id: &str,
        plan: &DraftPlan<'_>,
    ) -> Result<(), MailError> {
        for attachment in &plan.posted {
            self.post_attachment(message_id, draft_id, attachment)
                .await?;
        }
        for attachment in &plan.uploaded {
            self.upload(message_id, draft_id, attachment).await?;
        }
        Ok(())
    }

    /// `DELETE /users/{mailbox}/messages/{id}` of a draft never sent; says what became of it
    /// (for the attempt's error text).
    pub(super) async fn delete_draft(&self, message_id: Uuid, draft_id: &str) -> String {
        let url = segments(&self.user_url, &["messages", draft_id]);
        match self
            .step(Method::DELETE, &url, None, message_id, "delete the draft")
            .await
        {
            Ok(answer) if (200..300).contains(&answer.status) || answer.status == 404 => {
                "its draft was deleted".to_owned()
            }
            Ok(answer) => format!(
                "its draft could not be deleted (HTTP {}); the next attempt deletes it",
                answer.status
            ),
            Err(e) => format!("its draft could not be deleted ({e}); the next attempt deletes it"),
        }
    }

    /// One attachment under 3 MB: `POST /users/{mailbox}/messages/{id}/attachments`.
    async fn post_attachment(
        &self,
        message_id: Uuid,
        draft_id: &str,
        attachment: &Attachment,
    ) -> Result<(), MailError> {
        let url = segments(&self.user_url, &["messages", draft_id, "attachments"]);
        let what = format!("attach {:?}", attachment.name);
        let body = attachment_body(attachment);
        let answer = self
            .step(Method::POST, &url, Some(&body), message_id, &what)
            .await?;
        if (200..300).contains(&answer.status) {
            Ok(())
        } else {
            Err(MailError::transient(format!(
                "{what}: Graph answered HTTP {} (the draft is gone); nothing was sent",
                answer.status
            )))
        }
    }

    /// One upload session: `createUploadSession`, then `PUT` chunks to its URL without our
    /// token (the URL carries its own credential; Graph refuses an `Authorization` header
    /// there).
    async fn upload(
        &self,
        message_id: Uuid,
        draft_id: &str,
        attachment: &Attachment,
    ) -> Result<(), MailError> {
        let url = segments(
            &self.user_url,
            &["messages", draft_id, "attachments", "createUploadSession"],
        );
        let body = upload_session_body(attachment);
        let answer = self
            .step(
                Method::POST,
                &url,
                Some(&body),
                message_id,
                "open an upload session",
            )
            .await?;
        let session: UploadSession = parse(&answer, "open an upload session")?;
        let total = attachment.content.len();
        let mut start = 0;
        while start < total {
            let end = (start + UPLOAD_CHUNK_BYTES).min(total);
            crate::mailer::request_start::mark(self.clock.now());
            let response = self
                .http
                .put(&session.upload_url)
                .header(
                    reqwest::header::CONTENT_RANGE,
                    format!("bytes {start}-{}/{total}", end - 1),
                )
                .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                .body(attachment.content[start..end].to_vec())
                .send()
                .await
                .map_err(|e| {
                    transport_failure(&format!("uploading attachment {:?}", attachment.name), e)
                })?;
            let status = response.status().as_u16();
            if !(200..300).contains(&status) {
                return Err(MailError::transient(format!(
                    "uploading attachment {:?} (bytes {start}-{}) answered HTTP {status}; nothing was sent",
                    attachment.name,
                    end - 1
                )));
            }
            start = end;
        }
        Ok(())
    }
}
