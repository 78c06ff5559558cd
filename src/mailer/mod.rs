//! The `Mailer` trait and its implementations: Microsoft Graph (`graph/`), SendGrid
//! (`sendgrid/`), the rate-limited and metered decorators (`rate_limited/`, `metered.rs`), the
//! config-hash factory (`factory/`), the [`MailerSource`] the service draws from and
//! [`MailError`] (`error.rs`). Callers see only [`Mailer`] and [`MailError`]; never HTTP.

mod error;
pub(crate) mod factory;
pub mod graph;
pub(crate) mod http;
pub(crate) mod metered;
pub(crate) mod rate_limited;
pub(crate) mod redact;
pub(crate) mod request_start;
pub mod sendgrid;
mod settings;
pub mod source;
pub mod validate;

use chrono::{DateTime, Utc};

use crate::domain::OutgoingMail;

pub use error::{MailError, MailErrorKind, MailErrorSource};
pub use factory::MailerFactory;
pub use graph::MicrosoftGraphMailer;
pub use rate_limited::RateLimitedGraphMailer;
pub use sendgrid::SendGridMailer;
pub use settings::{GraphConfig, MailerSettings};
pub use source::{MailerSource, MemberRoom};

/// Sends one message through one provider for one sender. Used as `Arc<dyn Mailer>`.
///
/// Shaped like lettre's `AsyncTransport`: an implementation writes the one low-level method,
/// [`Self::send_with`]; [`Self::send`] (a first attempt) is provided on top of it.
#[async_trait::async_trait]
pub trait Mailer: Send + Sync + std::fmt::Debug {
    /// Sends `mail` knowing what earlier attempts left behind (`attempt.prior`) and noting,
    /// before each step that could deliver, what a later attempt must know
    /// (`attempt.journal`). Never retries after the provider accepted it. Mailers without
    /// steps (SendGrid, test doubles) ignore `attempt`.
    ///
    /// # Errors
    /// A [`MailError`] that says what to do next.
    async fn send_with(&self, mail: &OutgoingMail, attempt: &SendAttempt<'_>) -> MailResult;

    /// Sends `mail` once, as a first attempt with nothing to remember.
    ///
    /// # Errors
    /// As [`Self::send_with`].
    async fn send(&self, mail: &OutgoingMail) -> MailResult {
        self.send_with(mail, &SendAttempt::first()).await
    }

    /// The local checks this mailer makes before any request, so a message the provider
    /// would refuse costs no request; a decorator that spends budget runs them first, so it
    /// costs no budget either. Default: the provider-neutral [`validate::validate`].
    ///
    /// # Errors
    /// The first rule broken, as [`MailErrorKind::Permanent`](crate::mailer::MailErrorKind::Permanent).
    fn check(&self, mail: &OutgoingMail) -> Result<(), MailError> {
        validate::validate(mail)
    }
}

/// What one send came to: the provider's receipt or what to do next.
pub type MailResult<T = SendReceipt> = Result<T, MailError>;

/// What earlier attempts of one message left on its row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PriorAttempt {
    /// Attempts before this one (`attempts - 1`).
    pub earlier_attempts: u32,
    /// `messages.graph_draft_id`: the immutable id of the draft created for it.
    pub graph_draft_id: Option<String>,
    /// `messages.send_attempted_at`: when a request that could deliver it (sendMail, or the
    /// draft's `send`) was last written. Set means: an earlier attempt may have delivered it.
    pub send_attempted_at: Option<DateTime<Utc>>,
}

/// Where a mailer notes what a later attempt must know. The service keeps the notes in memory
/// and writes them with the attempt's outcome (no row write of their own); a row a crash left
/// `SENDING` has no outcome, so lease recovery marks it as possibly sent instead
/// ([`crate::store::messages::recover_stale_sending`]).
pub trait SendJournal: Send + Sync {
    /// A request that may deliver the message is about to be written; in the draft flow it
    /// sends the draft `draft_id` (`None` when the row already holds it).
    fn send_attempted(&self, draft_id: Option<&str>);
}

/// A journal that keeps nothing (a first attempt without a row, tests).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NoJournal;

impl SendJournal for NoJournal {
    fn send_attempted(&self, _draft_id: Option<&str>) {}
}

/// One attempt's context for [`Mailer::send_with`].
#[derive(Clone, Copy)]
pub struct SendAttempt<'a> {
    /// What earlier attempts left behind.
    pub prior: &'a PriorAttempt,
    /// Where to write down what the next attempt must know.
    pub journal: &'a dyn SendJournal,
}

impl std::fmt::Debug for SendAttempt<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendAttempt")
            .field("prior", self.prior)
            .finish_non_exhaustive()
    }
}

/// A first attempt with nothing to remember (what [`Mailer::send`] means).
pub(crate) static FIRST_ATTEMPT: PriorAttempt = PriorAttempt {
    earlier_attempts: 0,
    graph_draft_id: None,
    send_attempted_at: None,
};

impl SendAttempt<'static> {
    /// A first attempt with nothing to remember.
    pub(crate) fn first() -> Self {
        Self {
            prior: &FIRST_ATTEMPT,
            journal: &NoJournal,
        }
    }
}

/// What the provider told us about an accepted message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendReceipt {
    /// The provider's id for the message or request (Graph `request-id`, SendGrid
    /// `X-Message-Id`), for support tickets.
    pub provider_id: Option<String>,
    /// An earlier attempt had delivered it (found by the check after an unknown outcome): this
    /// attempt sent nothing, so its limiter reservation is given back.
    pub already_sent: bool,
    /// What the row's `last_error` should say although it is `SENT` (e.g. `outcome unknown;
    /// resent`), when the delivery may have been doubled or was confirmed by a check.
    pub note: Option<String>,
}
