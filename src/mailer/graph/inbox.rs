//! The Inbox requests of bounce reading (`crate::bounces`), app-only with `Mail.Read` (listing)
//! and `Mail.ReadWrite` (marking read or moving the NDR):
//! - `GET /users/{mailbox}/mailFolders/inbox/messages?$filter=…&$select=…&$top=…`, then each
//!   `@odata.nextLink` (<https://learn.microsoft.com/graph/api/mailfolder-list-messages>,
//!   <https://learn.microsoft.com/graph/paging>): NDRs only, by their message class
//!   `REPORT.IPM.Note.NDR` through the extended property `String 0x001A`
//!   (<https://learn.microsoft.com/graph/api/singlevaluelegacyextendedproperty-get>), unread
//!   ones only when they are marked read afterwards; the text body (`Prefer:
//!   outlook.body-content-type="text"`, sent with every `GET`);
//! - `GET /users/{mailbox}/messages/{id}/$value`: the NDR's MIME, what `crate::bounces` reads
//!   (<https://learn.microsoft.com/graph/outlook-get-mime-message>);
//! - `PATCH /users/{mailbox}/messages/{id}` `{"isRead": true}`
//!   (<https://learn.microsoft.com/graph/api/message-update>);
//! - `POST /users/{mailbox}/messages/{id}/move` `{"destinationId": …}`
//!   (<https://learn.microsoft.com/graph/api/message-move>).

use reqwest::Method;
use serde::Deserialize;
use url::Url;
use uuid::Uuid;

use super::{MicrosoftGraphMailer, lookup::parse, segments};
use crate::mailer::MailError;

/// The `$filter` of NDRs: their message class through `PidTagMessageClass` (`String 0x001A`).
pub(crate) const NDR_FILTER: &str = "singleValueExtendedProperties/any(ep:ep/id eq 'String 0x001A' and ep/value eq 'REPORT.IPM.Note.NDR')";

/// What a listing selects of each NDR.
const SELECT: &str = "id,body,internetMessageHeaders";

/// A property Graph may send as `null` (it does for absent values,
/// <https://learn.microsoft.com/graph/api/resources/message>: every property but `id` is
/// nullable in the v1.0 model) read as its default, as a missing one is.
fn nullable<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// One page of a listing.
#[derive(Debug, Deserialize)]
pub(crate) struct ReportPage {
    #[serde(default, deserialize_with = "nullable")]
    pub value: Vec<ReportMessage>,
    #[serde(rename = "@odata.nextLink")]
    pub next_link: Option<String>,
}

/// An NDR as listed.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReportMessage {
    pub id: String,
    #[serde(default)]
    pub body: Option<ItemBody>,
    #[serde(default, deserialize_with = "nullable")]
    pub internet_message_headers: Vec<MessageHeader>,
}

/// A message body.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ItemBody {
    #[serde(default, deserialize_with = "nullable")]
    pub content_type: String,
    #[serde(default, deserialize_with = "nullable")]
    pub content: String,
}

/// One of `internetMessageHeaders`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct MessageHeader {
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub value: String,
}

impl MicrosoftGraphMailer {
    /// The first page's URL: NDRs in the Inbox (unread ones only with `unread_only`), `top` a
    /// page.
    pub(crate) fn reports_url(&self, unread_only: bool, top: u32) -> Url {
        let mut url = segments(&self.user_url, &["mailFolders", "inbox", "messages"]);
        let filter = if unread_only {
            format!("{NDR_FILTER} and isRead eq false")
        } else {
            NDR_FILTER.to_owned()
        };
        url.query_pairs_mut()
            .append_pair("$filter", &filter)
            .append_pair("$select", SELECT)
            .append_pair("$top", &top.to_string());
        url
    }

    /// `next`, an `@odata.nextLink`, when it stays on Graph's origin (our token goes to it).
    ///
    /// # Errors
    /// [`MailErrorKind::Transient`](crate::mailer::MailErrorKind::Transient) for a link elsewhere (or no URL).
    pub(crate) fn next_reports_url(&self, next: &str) -> Result<Url, MailError> {
        Url::parse(next)
            .ok()
            .filter(|u| u.origin() == self.user_url.origin())
            .ok_or_else(|| {
                MailError::transient(
                    "list NDRs: @odata.nextLink leaves GRAPH_API_BASE_URL's origin; not followed"
                        .to_owned(),
                )
            })
    }

    /// One page of NDRs at `url`; an empty page for a `404` that says there is no such folder
    /// ([`no_such_folder`]).
    ///
    /// # Errors
    /// As every Graph request ([`MailErrorKind::Throttled`](crate::mailer::MailErrorKind::Throttled) with its `Retry-After`, …); a `404`
    /// about the sender (`ErrorInvalidUser`, `MailboxNotEnabledForRESTAPI`) is
    /// [`MailErrorKind::Misconfigured`](crate::mailer::MailErrorKind::Misconfigured) naming the fix, any other `404` [`MailErrorKind::Transient`](crate::mailer::MailErrorKind::Transient)
    /// naming its code.
    pub(crate) async fn report_page(&self, url: &Url) -> Result<ReportPage, MailError> {
        let answer = self
            .step(Method::GET, url, None, Uuid::new_v4(), "list NDRs")
            .await?;
        if answer.status == 404 {
            let code = super::answer::graph_code(&answer.body);
            if no_such_folder(code.as_deref()) {
                return Ok(ReportPage {
                    value: Vec::new(),
                    next_link: None,
                });
            }
            return Err(MailError::transient(format!(
                "list NDRs: Graph answered 404 {} for mailbox {}; not read as an empty Inbox",
                code.as_deref().unwrap_or("without an error code"),
                self.mailbox
            )));
        }
        parse(&answer, "list NDRs")
    }

    /// The raw MIME of message `id` (`GET …/messages/{id}/$value`); `None` when it is gone
    /// (`404`).
    ///
    /// # Errors
    /// As every Graph request.
    pub(crate) async fn report_mime(&self, id: &str) -> Result<Option<Vec<u8>>, MailError> {
        let url = segments(&self.user_url, &["messages", id, "$value"]);
        let answer = self
            .step(
                Method::GET,
                &url,
                None,
                Uuid::new_v4(),
                "read the NDR's MIME",
            )
            .await?;
        Ok((answer.status != 404).then_some(answer.body))
    }

    /// Marks message `id` read; `Ok` also when it is gone (`404`).
    ///
    /// # Errors
    /// As every Graph request.
    pub(crate) async fn mark_read(&self, id: &str) -> Result<(), MailError> {
        let url = segments(&self.user_url, &["messages", id]);
        self.step(
            Method::PATCH,
            &url,
            Some(br#"{"isRead":true}"#),
            Uuid::new_v4(),
            "mark the NDR read",
        )
        .await
        .map(drop)
    }

    /// Moves message `id` to `destination` (a well-known folder name or a folder id); `Ok`
    /// also when it is gone (`404`).
    ///
    /// # Errors
    /// As every Graph request.
    pub(crate) async fn move_message(&self, id: &str, destination: &str) -> Result<(), MailError> {
        let url = segments(&self.user_url, &["messages", id, "move"]);
        let body = serde_json::json!({ "destinationId": destination }).to_string();
        self.step(
            Method::POST,
            &url,
            Some(body.as_bytes()),
            Uuid::new_v4(),
            "move the NDR",
        )
        .await
        .map(drop)
    }
}

/// Whether a listing's `404` with Graph code `code` means the folder does not exist (an empty
/// Inbox): `ErrorItemNotFound` / `ErrorFolderNotFound`. Not a sender fault (`ErrorInvalidUser`,
/// `MailboxNotEnabledForRESTAPI`: the mailbox itself is missing or cannot use Graph), nor a
/// `404` without Graph's error body (a proxy's, a wrong `GRAPH_API_BASE_URL`).
/// <https://learn.microsoft.com/graph/errors>
fn no_such_folder(code: Option<&str>) -> bool {
    matches!(code, Some("ErrorItemNotFound" | "ErrorFolderNotFound"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_missing_folder_reads_as_an_empty_inbox() {
        let code = |body: &str| super::super::answer::graph_code(body.as_bytes());
        let missing = code(
            r#"{"error":{"code":"ErrorItemNotFound","message":"The specified object was not found in the store."}}"#,
        );
        assert!(no_such_folder(missing.as_deref()));
        assert!(no_such_folder(Some("ErrorFolderNotFound")));
        for sender in ["ErrorInvalidUser", "MailboxNotEnabledForRESTAPI"] {
            let body = format!(r#"{{"error":{{"code":"{sender}","message":"x"}}}}"#);
            assert!(!no_such_folder(code(&body).as_deref()), "{sender}");
        }
        assert!(!no_such_folder(code("<html>Not Found</html>").as_deref()));
    }

    #[test]
    fn a_listing_with_nulls_is_read() {
        // Graph sends `null` for absent values; one of them failed the whole page before
        // ("invalid type: null, expected a sequence").
        let page: ReportPage = serde_json::from_str(
            r#"{"@odata.nextLink": null, "value": [
                {"id": "AAMk1", "body": null, "internetMessageHeaders": null},
                {"id": "AAMk2", "body": {"contentType": null, "content": null},
                 "internetMessageHeaders": [{"name": "In-Reply-To", "value": null}]},
                {"id": "AAMk3"}
            ]}"#,
        )
        .unwrap();
        let ids: Vec<&str> = page.value.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["AAMk1", "AAMk2", "AAMk3"]);
        assert!(page.next_link.is_none());
        assert!(page.value[0].body.is_none());
        assert!(page.value[0].internet_message_headers.is_empty());
        let body = page.value[1].body.as_ref().unwrap();
        assert_eq!(
            (body.content_type.as_str(), body.content.as_str()),
            ("", "")
        );
        assert_eq!(page.value[1].internet_message_headers[0].value, "");
        let empty: ReportPage = serde_json::from_str(r#"{"value": null}"#).unwrap();
        assert!(empty.value.is_empty());
    }
}
