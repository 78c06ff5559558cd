//! Domain types shared by every layer: addresses, messages, senders, statuses, secrets (and
//! the redaction of passwords in URLs, which config and the limiter both print).
//!
//! Types here hold data as producers wrote it (a recipient address is not validated on the way
//! in: a bad one must end as `ERROR` with a reason, not be dropped). Validation against Graph's
//! rules happens in [`crate::mailer::validate`].

pub mod adaptive;
mod event;
mod failure;
pub(crate) mod keyword;
mod mailbox;
mod message;
mod pool;
mod priority;
mod redact;
mod secret;
mod sender;
mod status;
mod suppression;
mod warm_up;

pub use event::EventKind;
pub use failure::{FailureAction, LimitFinding, action_of, classify};
pub(crate) use mailbox::punycode_domain;
pub use mailbox::{InvalidMailbox, MailboxAddress, mask_address};
pub use message::{Attachment, BodyContentType, Header, MessageContent, OutgoingMail, Recipient};
pub use pool::{MembersFree, OverflowWhen, PoolOverflow};
pub use priority::Priority;
pub(crate) use redact::{redact_raw, redact_url};
pub use secret::{SECRET_FILE_TTL, SecretError, SecretFiles, SecretRef};
pub use sender::{
    GraphCredentials, MailProvider, Sender, SystemMailbox, Tenant, TenantBudget, TenantTransport,
};
pub(crate) use status::MessageStatus;
pub(crate) use status::{sql_finished, sql_status};
pub use suppression::{ALL_SUPPRESSED, HardBounce, SuppressionSource};
pub(crate) use suppression::{match_key, suppressed_address};
pub use warm_up::{DayOutcome, REPUTATION_CODES, Verdict, WarmUp, WarmUpGate, WarmUpStep};

/// For the checks' tests: `check` accepts every one of `good` and refuses every one of `bad`.
#[cfg(test)]
fn assert_sorts<T, E>(check: impl Fn(&str) -> Result<T, E>, good: &[&str], bad: &[&str]) {
    for g in good {
        assert!(check(g).is_ok(), "{g:?} should be accepted");
    }
    for b in bad {
        assert!(check(b).is_err(), "{b:?} should be refused");
    }
}
