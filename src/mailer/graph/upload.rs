//! The draft's creation: `POST /users/{mailbox}/messages`, then an upload session for each
//! attachment too large to go inline (<https://learn.microsoft.com/graph/outlook-large-attachments>).

use reqwest::Method;
use serde::Deserialize;
use uuid::Uuid;

use crate::{
    domain::{Attachment, OutgoingMail},
    mailer::{MailError, http::describe_transport_error},
};

use super::{
    MicrosoftGraphMailer, draft_body,
    lookup::{FoundItem, parse},
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
    pub(super) fn has_uploads<'a>(&self, mail: &'a OutgoingMail) -> Vec<&'a Attachment> {
        draft_body(mail, "").1
    }

    /// Creates the draft and uploads what does not fit inline; returns its immutable id.
    pub(super) async fn create_draft(
        &self,
        mail: &OutgoingMail,
        imid: &str,
    ) -> Result<String, MailError> {
        let (body, large) = draft_body(mail, imid);
        let url = segments(&self.user_url, &["messages"]);
        let answer = self
            .step(Method::POST, &url, Some(&body), mail.id, "create the draft")
            .await?;
        let item: FoundItem = parse(&answer, "create the draft")?;
        for attachment in large {
            self.upload(mail.id, &item.id, attachment).await?;
        }
        Ok(item.id)
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
                    MailError::Transient(describe_transport_error(
                        &format!("uploading attachment {:?}", attachment.name),
                        &e,
                    ))
                })?;
            let status = response.status().as_u16();
            if !(200..300).contains(&status) {
                return Err(MailError::Transient(format!(
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
