//! `MicrosoftGraphMailer`: sends one message as one mailbox through Graph, in one of two modes
//! ([`GraphSendMode`], `GRAPH_SEND_MODE`), with an app-only token:
//! - `sendmail`: one `POST /users/{mailbox}/sendMail`
//!   (<https://learn.microsoft.com/graph/api/user-sendmail>);
//! - `draft`: create a draft with our own `internetMessageId`, upload big attachments, send it;
//!   after an unknown outcome the next attempt checks the draft before anything is resent
//!   (`draft.rs`).
//!
//! Beside it: `token/` (OAuth2 client credentials, shared cache), `assertion.rs` (the
//! certificate credential), `request.rs` (JSON bodies), `plan.rs` (which request carries each
//! attachment), `size.rs` (Graph's request-size rule), `draft.rs` (the draft flow), `upload.rs`
//! (creating a draft, its attachments, upload sessions, deleting it), `lookup.rs`
//! (requests that cannot deliver), `inbox.rs` (the Inbox's NDRs, for bounce reading),
//! `answer.rs` (the ONE status → [`MailError`] mapping),
//! `retry_after.rs`.

mod answer;
pub mod assertion;
mod draft;
pub(crate) mod inbox;
mod lookup;
pub(crate) mod permissions;
mod plan;
mod request;
pub mod retry_after;
mod size;
pub(crate) mod token;
pub(crate) mod trace;
mod upload;
pub(crate) mod verify;

use std::{sync::Arc, time::Duration};

use reqwest::{
    Method,
    header::{CONTENT_TYPE, RETRY_AFTER},
};
use url::Url;
use uuid::Uuid;

use crate::{
    clock::Clock,
    domain::{MailboxAddress, OutgoingMail},
    mailer::{
        MailError, MailResult, Mailer, SendAttempt, SendReceipt,
        http::endpoint_url,
        validate::{MAX_INLINE_ATTACHMENT_BYTES, check_sender, validate_with_attachment_limit},
    },
};

/// The most attachment bytes one message may carry in `draft` mode: 150 MB, the largest file an
/// upload session takes (<https://learn.microsoft.com/graph/outlook-large-attachments>).
pub const MAX_UPLOAD_ATTACHMENT_BYTES: usize = 150 * 1024 * 1024;

#[cfg(feature = "fuzzing")]
pub use answer::fuzz_graph_answer;
use answer::{HttpAnswer, Verdict, interpret};
pub use plan::{DraftPlan, draft_plan};
pub use request::{attachment_body, send_mail_body, send_mail_body_with_id, upload_session_body};
pub use retry_after::parse_retry_after;
pub use size::{check_draft_sizes, check_request_size};
pub(crate) use token::{AccessToken, GraphApp, GraphTokenCache, TokenSource, graph_scope};

/// How a message goes through Graph (`GRAPH_SEND_MODE`; docs/delivery.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GraphSendMode {
    /// `sendmail`: one `sendMail` request per message. After an unknown outcome the Sent Items
    /// copy is looked up by `internetMessageId` (with `GRAPH_SAVE_TO_SENT_ITEMS=true`) before a
    /// resend; at-least-once when that cannot tell.
    SendMail,
    /// `draft` (default): create a draft, send it; every later attempt checks the draft first.
    #[default]
    Draft,
}

crate::domain::keyword::keywords!(GraphSendMode {
    SendMail => "sendmail",
    Draft => "draft",
});

/// The `internetMessageId` of message `id` sent from `mailbox`: `<{id}@{mailbox's domain}>`,
/// the same for every attempt, so a copy in the mailbox can be found by it.
pub(crate) fn internet_message_id(id: Uuid, mailbox: &MailboxAddress) -> String {
    let domain = mailbox
        .as_str()
        .rsplit('@')
        .next()
        .unwrap_or("mail-worker.invalid");
    format!("<{id}@{domain}>")
}

/// Sends as one mailbox with one app's token.
///
/// Each Graph request is made at most twice: the second only after a `401`, with a freshly
/// fetched token and the byte-identical body. Never a second `sendMail`/`send` after a `202`.
#[derive(Debug)]
pub struct MicrosoftGraphMailer {
    http: reqwest::Client,
    /// `{api}/users/{mailbox}`.
    user_url: Url,
    send_url: Url,
    mailbox: MailboxAddress,
    save_to_sent_items: bool,
    mode: GraphSendMode,
    settle: Duration,
    /// `GRAPH_READ_BOUNCES=on`: its tokens also need the bounce reader's permissions.
    read_bounces: bool,
    tokens: Arc<TokenSource>,
    clock: Arc<dyn Clock>,
}

impl MicrosoftGraphMailer {
    /// A mailer for `mailbox` posting to `{api_base_url}/users/{mailbox}/sendMail` (the mailbox
    /// path-encoded), with `saveToSentItems` = `save_to_sent_items` (`GRAPH_SAVE_TO_SENT_ITEMS`),
    /// in `sendmail` mode until [`Self::with_mode`].
    /// `http` is the shared client (its timeout is `HTTP_TIMEOUT`); `tokens` is the app's
    /// shared token source; `clock` dates HTTP-date `Retry-After` values.
    ///
    /// # Errors
    /// [`MailError::Misconfigured`] when `api_base_url` cannot carry a path.
    pub(crate) fn new(
        http: reqwest::Client,
        api_base_url: &Url,
        mailbox: MailboxAddress,
        save_to_sent_items: bool,
        tokens: Arc<TokenSource>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, MailError> {
        let user_url = endpoint_url(
            api_base_url,
            "GRAPH_API_BASE_URL",
            &["users", mailbox.as_str()],
        )?;
        let send_url = segments(&user_url, &["sendMail"]);
        Ok(Self {
            http,
            user_url,
            send_url,
            mailbox,
            save_to_sent_items,
            mode: GraphSendMode::SendMail,
            settle: Duration::from_secs(120),
            read_bounces: false,
            tokens,
            clock,
        })
    }

    /// Sends in `mode`; `settle` is `GRAPH_SEND_SETTLE` (how long after a send with an unknown
    /// outcome a check that sees no sent copy is not trusted).
    #[must_use]
    pub(crate) fn with_mode(mut self, mode: GraphSendMode, settle: Duration) -> Self {
        self.mode = mode;
        self.settle = settle;
        self
    }

    /// Its tokens must also carry what bounce reading needs (`GRAPH_READ_BOUNCES=on`).
    #[must_use]
    pub(crate) fn with_bounce_reading(mut self, read_bounces: bool) -> Self {
        self.read_bounces = read_bounces;
        self
    }

    /// The app's token, if its `roles` carry what this mailer's mode and features need
    /// (`permissions.rs`). Else [`MailError::Misconfigured`] naming the missing role and the fix
    /// (the sender pauses), and the token is forgotten: the pause's probe fetches a new one,
    /// the first to carry a grant made meanwhile.
    async fn permitted_token(&self) -> Result<AccessToken, MailError> {
        let token = self.tokens.access_token().await?;
        let needs = permissions::needs(self.mode, self.save_to_sent_items, self.read_bounces);
        if let Some(roles) = token.roles()
            && let Some(why) = permissions::missing(&needs, roles, self.tokens.client_id())
        {
            self.tokens.invalidate(&token).await;
            return Err(MailError::Misconfigured(why));
        }
        Ok(token)
    }

    /// One Graph request with the app's token; a `401` refreshes the token once and repeats the
    /// byte-identical request. `Ok(Err(_))` is a transport failure, `Err` token trouble.
    async fn call(
        &self,
        method: Method,
        url: &Url,
        body: Option<&[u8]>,
        message_id: Uuid,
    ) -> Result<Result<HttpAnswer, reqwest::Error>, MailError> {
        let mut token = self.permitted_token().await?;
        let mut refreshed = false;
        loop {
            let outcome = self
                .request(method.clone(), url, &token, body, message_id)
                .await;
            match &outcome {
                Ok(answer) if answer.status == 401 && !refreshed => {
                    self.tokens.invalidate(&token).await;
                    token = self.permitted_token().await?;
                    refreshed = true;
                }
                _ => return Ok(outcome),
            }
        }
    }

    async fn request(
        &self,
        method: Method,
        url: &Url,
        token: &AccessToken,
        body: Option<&[u8]>,
        message_id: Uuid,
    ) -> Result<HttpAnswer, reqwest::Error> {
        let mut request = self
            .http
            .request(method.clone(), url.clone())
            .bearer_auth(token.bearer())
            .header("client-request-id", message_id.to_string());
        if let Some(prefer) = prefer(self.mode, &method) {
            request = request.header("Prefer", prefer);
        }
        request = match body {
            Some(bytes) => request
                .header(CONTENT_TYPE, "application/json")
                .body(bytes.to_vec()),
            None => request,
        };
        crate::mailer::request_start::mark(self.clock.now());
        let response = request.send().await?;
        let status = response.status().as_u16();
        let retry_after = crate::mailer::http::header(&response, RETRY_AFTER.as_str());
        let request_id = crate::mailer::http::header(&response, "request-id");
        let body = if (200..300).contains(&status) {
            response.bytes().await.map(|b| b.to_vec())?
        } else {
            crate::mailer::http::error_body(response).await
        };
        Ok(HttpAnswer {
            status,
            retry_after,
            request_id,
            body,
        })
    }

    /// A request that may deliver (sendMail, a draft's send), mapped by `answer.rs`.
    async fn deliver(
        &self,
        url: &Url,
        body: Option<&[u8]>,
        message_id: Uuid,
    ) -> Result<SendReceipt, MailError> {
        let outcome = self
            .call(
                Method::POST,
                url,
                Some(body.unwrap_or_default()),
                message_id,
            )
            .await?;
        match interpret(outcome, &self.mailbox, self.clock.now()) {
            Verdict::Sent(receipt) => Ok(receipt),
            Verdict::Failed(error) | Verdict::TokenRejected(error) => Err(error),
        }
    }

    /// `sendmail` mode: after an unknown outcome, look for the Sent Items copy first.
    async fn send_mail(
        &self,
        mail: &OutgoingMail,
        attempt: &SendAttempt<'_>,
    ) -> Result<SendReceipt, MailError> {
        let imid = internet_message_id(mail.id, &self.mailbox);
        let mut note = None;
        if let Some(attempted_at) = attempt.prior.send_attempted_at {
            if self.save_to_sent_items {
                if let Some(found) = self
                    .find_by_internet_message_id(mail.id, &imid, true)
                    .await?
                {
                    return Ok(draft::already_sent(
                        &found.id,
                        "outcome unknown; found in Sent Items by internetMessageId, not resent",
                    ));
                }
                self.settled(attempted_at, "no copy in Sent Items yet")?;
                note = Some(format!(
                    "outcome unknown; no copy in Sent Items {} s after the send; resent",
                    self.settle.as_secs()
                ));
            } else {
                note = Some(
                    "outcome unknown; resent (GRAPH_SAVE_TO_SENT_ITEMS=false: no copy to check)"
                        .to_owned(),
                );
            }
        }
        let body = send_mail_body_with_id(mail, self.save_to_sent_items, Some(&imid));
        attempt.journal.send_attempted(None);
        let mut receipt = self.deliver(&self.send_url, Some(&body), mail.id).await?;
        receipt.note = note;
        Ok(receipt)
    }

    /// `Ok` once the settle time after `attempted_at` has passed (a check that sees no sent
    /// copy can be trusted); before, [`MailError::Unconfirmed`] for the rest of it, saying `why`.
    fn settled(
        &self,
        attempted_at: chrono::DateTime<chrono::Utc>,
        why: &str,
    ) -> Result<(), MailError> {
        let elapsed = (self.clock.now() - attempted_at)
            .to_std()
            .unwrap_or_default();
        match self.settle.checked_sub(elapsed).filter(|d| !d.is_zero()) {
            Some(wait) => Err(MailError::Unconfirmed {
                retry_after: wait,
                why: why.to_owned(),
            }),
            None => Ok(()),
        }
    }
}

/// The one `Prefer` header of a request, its preferences joined by `, ` (RFC 7240 §2: a client
/// may send several in one field, and every Graph SDK does so; two `Prefer` fields were sent
/// before): in `draft` mode `IdType="ImmutableId"`, ids that survive the move from Drafts to
/// Sent Items (<https://learn.microsoft.com/graph/outlook-immutable-id>); on a `GET`
/// `outlook.body-content-type="text"`, text bodies: an NDR's codes are read from its text
/// (bounce reading, <https://learn.microsoft.com/graph/api/user-list-messages>).
fn prefer(mode: GraphSendMode, method: &Method) -> Option<String> {
    let mut preferences = Vec::new();
    if mode == GraphSendMode::Draft {
        preferences.push("IdType=\"ImmutableId\"");
    }
    if method == Method::GET {
        preferences.push("outlook.body-content-type=\"text\"");
    }
    (!preferences.is_empty()).then(|| preferences.join(", "))
}

fn segments(base: &Url, more: &[&str]) -> Url {
    let mut url = base.clone();
    if let Ok(mut path) = url.path_segments_mut() {
        path.extend(more);
    }
    url
}

#[async_trait::async_trait]
impl Mailer for MicrosoftGraphMailer {
    /// The neutral rules with this mode's attachment limit, then Graph's request size for this
    /// mode's requests (`sendmail`: the one `sendMail`; `draft`: the draft and each attachment's
    /// `POST`).
    fn check(&self, mail: &OutgoingMail) -> Result<(), MailError> {
        match self.mode {
            GraphSendMode::SendMail => {
                validate_with_attachment_limit(mail, MAX_INLINE_ATTACHMENT_BYTES)?;
                check_request_size(mail)
            }
            GraphSendMode::Draft => {
                validate_with_attachment_limit(mail, MAX_UPLOAD_ATTACHMENT_BYTES)?;
                check_draft_sizes(mail)
            }
        }
    }

    /// Validates locally, then sends in the configured mode; see `answer.rs` for the mapping of
    /// Graph's answers and `draft.rs` for the checks after an unknown outcome.
    async fn send_with(&self, mail: &OutgoingMail, attempt: &SendAttempt<'_>) -> MailResult {
        self.check(mail)?;
        check_sender(mail, &self.mailbox)?;
        let result = match self.mode {
            GraphSendMode::SendMail => self.send_mail(mail, attempt).await,
            GraphSendMode::Draft => self.send_draft(mail, attempt).await,
        };
        // Whatever Graph echoed (our secret, a token) never reaches `last_error` or a log line.
        result.map_err(|e| e.map_text(|t| self.tokens.scrub_known(t)))
    }
}
