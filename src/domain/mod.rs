//! Domain types shared by every layer: addresses, messages, senders, statuses, secrets (and
//! the redaction of passwords in URLs, which config and the limiter both print).
//!
//! Types here hold data as producers wrote it (a recipient address is not validated on the way
//! in: a bad one must end as `ERROR` with a reason, not be dropped). Validation against Graph's
//! rules happens in [`crate::mailer::validate`].

mod mailbox;
mod message;
mod redact;
mod secret;
mod sender;
mod status;

pub use mailbox::{InvalidMailbox, MailboxAddress, mask_address};
pub use message::{Attachment, BodyContentType, Header, OutgoingMail, Recipient};
pub(crate) use redact::{redact_raw, redact_url};
pub use secret::{SECRET_FILE_TTL, SecretError, SecretFiles, SecretRef};
pub use sender::{
    GraphCredentials, MailProvider, Sender, SystemMailbox, Tenant, TenantBudget, TenantTransport,
};
pub(crate) use status::MessageStatus;
pub(crate) use status::sql_status;
