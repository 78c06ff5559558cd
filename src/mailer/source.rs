//! [`MailerSource`]: where the service gets a sender's mailer.

use std::sync::Arc;

use crate::{
    domain::{Sender, SystemMailbox, Tenant},
    mailer::{MailError, Mailer},
};

/// A sender pool member's room as its limiter holds it (docs/decisions/0046-sender-pools.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberRoom {
    /// When its next message could be booked at the earliest (ms since the epoch, the
    /// limiter's clock; 0: now).
    pub free_at_ms: i64,
    /// Recipients a `normal` message may still book in its rolling 24 h (its day budget less
    /// the reserved share, less what is sent and booked; negative when over).
    pub day_left: i64,
}

/// Where the service gets a sender's mailer: the [`super::MailerFactory`] in production,
/// stubs in tests.
#[async_trait::async_trait]
pub trait MailerSource: Send + Sync {
    /// The mailer of a tenant's sender.
    ///
    /// # Errors
    /// [`MailErrorKind::Misconfigured`](crate::mailer::MailErrorKind::Misconfigured) when the tenant's settings cannot make a mailer.
    async fn mailer_for_tenant(&self, tenant: &Tenant) -> Result<Arc<dyn Mailer>, MailError>;
    /// The mailer of a system mailbox (rate-limited with its own limits).
    ///
    /// # Errors
    /// [`MailErrorKind::Misconfigured`](crate::mailer::MailErrorKind::Misconfigured) when the mailbox's settings cannot make a mailer.
    async fn mailer_for_system_mailbox(
        &self,
        mailbox: &SystemMailbox,
    ) -> Result<Arc<dyn Mailer>, MailError>;

    /// A fingerprint of everything that shapes the sender's mailer (the factory's config
    /// digest, or the reason it cannot be built): a paused sender resumes when it changes.
    /// The default (a constant) leaves resuming to the probes.
    async fn fingerprint(&self, _sender: &Sender) -> String {
        String::new()
    }

    /// Each of `members`' [`MemberRoom`], in their order; `None` where the limiter keeps no
    /// slots (the default: stubs, `fixed-window`).
    async fn member_rooms(&self, members: &[Sender]) -> Vec<Option<MemberRoom>> {
        vec![None; members.len()]
    }

    /// Drops the limiter's booking of `message` on `sender` (a pooled message that goes to
    /// another sender before its slot). The default (stubs) does nothing.
    async fn drop_booking(&self, sender: &Sender, message: uuid::Uuid) {
        let _ = (sender, message);
    }

    /// When `campaign`'s messages may go again, if an operator suspended it (`mail-worker
    /// suspend --campaign`) and it holds at `now`; `None` (the default: stubs) when it is free.
    async fn campaign_suspended_until(
        &self,
        campaign: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Option<chrono::DateTime<chrono::Utc>> {
        let _ = (campaign, now);
        None
    }

    /// The sender's mailer and its [`Self::fingerprint`] together, so a source can read the
    /// sender's configuration (and resolve its secrets) once per message, not twice.
    async fn mailer_and_fingerprint(
        &self,
        sender: &Sender,
    ) -> (String, Result<Arc<dyn Mailer>, MailError>) {
        let fingerprint = self.fingerprint(sender).await;
        let mailer = match sender {
            Sender::Tenant(t) => self.mailer_for_tenant(t).await,
            Sender::SystemMailbox(m) => self.mailer_for_system_mailbox(m).await,
        };
        (fingerprint, mailer)
    }
}
