//! Graph requests that cannot deliver: an item by id, a look-up by `internetMessageId`, and
//! how their answers map ([`MicrosoftGraphMailer::step`]).

use reqwest::Method;
use serde::Deserialize;
use uuid::Uuid;

use crate::mailer::{MailError, MailErrorKind};

use super::{
    MicrosoftGraphMailer,
    answer::{HttpAnswer, Verdict, interpret},
    segments,
};

/// An item found by id or by `internetMessageId`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FoundItem {
    pub id: String,
    #[serde(default)]
    pub is_draft: bool,
}

#[derive(Deserialize)]
struct ItemList {
    #[serde(default)]
    value: Vec<FoundItem>,
}

impl MicrosoftGraphMailer {
    /// `GET /users/{mailbox}/messages/{id}`; `None` for `404`.
    pub(super) async fn get_item(
        &self,
        message_id: Uuid,
        id: &str,
    ) -> Result<Option<FoundItem>, MailError> {
        let mut url = segments(&self.user_url, &["messages", id]);
        url.query_pairs_mut()
            .append_pair("$select", "id,isDraft,internetMessageId");
        self.get(&url, message_id, "check the draft").await
    }

    /// `GET /users/{mailbox}/mailFolders/sentitems/messages?$filter=internetMessageId eq '…'`
    /// (`sent_only`) or `GET /users/{mailbox}/messages?$filter=…` (every folder). A sent copy
    /// is preferred over a draft.
    pub(super) async fn find_by_internet_message_id(
        &self,
        message_id: Uuid,
        imid: &str,
        sent_only: bool,
    ) -> Result<Option<FoundItem>, MailError> {
        let mut url = if sent_only {
            segments(&self.user_url, &["mailFolders", "sentitems", "messages"])
        } else {
            segments(&self.user_url, &["messages"])
        };
        url.query_pairs_mut()
            .append_pair(
                "$filter",
                &format!("internetMessageId eq '{}'", imid.replace('\'', "''")),
            )
            .append_pair("$select", "id,isDraft");
        let Some(list) = self
            .get::<ItemList>(&url, message_id, "look the message up")
            .await?
        else {
            return Ok(None);
        };
        let mut items = list.value;
        items.sort_by_key(|i| i.is_draft);
        Ok(items.into_iter().next())
    }

    /// A `GET` [`Self::step`] whose JSON answer is read as `T`; `None` for `404`.
    async fn get<T: serde::de::DeserializeOwned>(
        &self,
        url: &url::Url,
        message_id: Uuid,
        what: &str,
    ) -> Result<Option<T>, MailError> {
        let answer = self.step(Method::GET, url, None, message_id, what).await?;
        if answer.status == 404 {
            return Ok(None);
        }
        parse(&answer, what).map(Some)
    }

    /// A request that cannot deliver: any 2xx or a `404` (but a sender's `404`, which
    /// `answer.rs` maps to a pause) is returned; a failure is mapped by
    /// `answer.rs`, except that an unknown outcome is [`MailErrorKind::Transient`](crate::mailer::MailErrorKind::Transient) here — nothing
    /// could have been sent.
    pub(super) async fn step(
        &self,
        method: Method,
        url: &url::Url,
        body: Option<&[u8]>,
        message_id: Uuid,
        what: &str,
    ) -> Result<HttpAnswer, MailError> {
        let outcome = self.call(method, url, body, message_id).await?;
        if let Ok(answer) = &outcome
            && ((200..300).contains(&answer.status)
                || (answer.status == 404 && !super::answer::is_sender_fault(answer)))
        {
            return Ok(outcome.unwrap_or_default());
        }
        match interpret(outcome, &self.mailbox, self.clock.now()) {
            Verdict::Failed(MailError {
                kind: MailErrorKind::OutcomeUnknown(text),
                ..
            }) => Err(MailError::transient(format!(
                "{what}: {text}; nothing was sent"
            ))),
            Verdict::Failed(error) | Verdict::TokenRejected(error) => Err(error),
            Verdict::Sent(_) => Err(MailError::transient(format!(
                "{what}: unexpected answer; nothing was sent"
            ))),
        }
    }
}

pub(crate) fn parse<T: serde::de::DeserializeOwned>(
    answer: &HttpAnswer,
    what: &str,
) -> Result<T, MailError> {
    serde_json::from_slice(&answer.body).map_err(|e| {
        MailError::transient(format!(
            "{what}: Graph answered HTTP {} with a body that is not the expected JSON ({e}); nothing was sent",
            answer.status
        ))
        .caused_by(e)
    })
}
