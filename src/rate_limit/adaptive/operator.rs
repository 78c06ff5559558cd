//! Actions set and lifted by hand (`mail-worker suspend` / `resume`) and read for the reports:
//! the same keys the rules write. The operator's suspensions are kept in PostgreSQL too
//! (`adaptive_suspensions`), and the daemon writes those in force back every tick
//! ([`MailRateLimiter::reapply_suspensions`]), so a Redis flush lifts none for long.

use chrono::{DateTime, Utc};

use super::{campaign_key, mailbox_key, tenant_key};
use crate::{
    domain::{MailboxAddress, adaptive::ActionInForce},
    rate_limit::{MailRateLimiter, RedisCallError},
};

/// The scope of an action, with what names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScopeKey {
    /// A sending mailbox of a Graph tenant.
    Mailbox {
        /// Its Graph tenant.
        tenant: String,
        /// The mailbox.
        mailbox: MailboxAddress,
    },
    /// A Graph tenant's external mail.
    Tenant(String),
    /// A campaign (`messages.campaign_id`).
    Campaign(String),
}

impl ScopeKey {
    /// `mailbox`, `tenant` or `campaign`.
    pub fn scope(&self) -> &'static str {
        match self {
            Self::Mailbox { .. } => "mailbox",
            Self::Tenant(_) => "tenant",
            Self::Campaign(_) => "campaign",
        }
    }

    /// What names it: the mailbox address, the tenant or the campaign id.
    pub fn name(&self) -> &str {
        match self {
            Self::Mailbox { mailbox, .. } => mailbox.as_str(),
            Self::Tenant(t) | Self::Campaign(t) => t,
        }
    }

    fn key(&self, prefix: &str) -> String {
        match self {
            Self::Mailbox { tenant, mailbox } => mailbox_key(prefix, tenant, mailbox),
            Self::Tenant(tenant) => tenant_key(prefix, tenant),
            Self::Campaign(id) => campaign_key(prefix, id),
        }
    }
}

/// The rule name of `resume`'s mark.
pub const RESUMED: &str = "resumed";

/// How long `resume`'s mark stays: 30 s, three of the daemon's write-back ticks.
pub const RESUMED_MARK: std::time::Duration = std::time::Duration::from_secs(30);

/// An operator's suspension as PostgreSQL keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptSuspension {
    /// What it holds.
    pub scope: ScopeKey,
    /// When it started.
    pub at: DateTime<Utc>,
    /// When it ends.
    pub until: DateTime<Utc>,
    /// The operator's reason.
    pub reason: Option<String>,
}

impl MailRateLimiter {
    /// Sets `action` on `scope` until its recovery ends (replacing what was in force).
    ///
    /// # Errors
    /// A Redis failure.
    pub async fn set_adaptive(
        &self,
        scope: &ScopeKey,
        action: &ActionInForce,
        now: DateTime<Utc>,
    ) -> Result<(), RedisCallError> {
        let key = scope.key(&self.key_prefix);
        let ttl = (action.ends_at_ms() - now.timestamp_millis()).max(1);
        let mut pipe = redis::pipe();
        pipe.cmd("SET")
            .arg(&key)
            .arg(serde_json::to_string(action).unwrap_or_default())
            .arg("PX")
            .arg(ttl)
            .ignore();
        self.redis.query::<()>(&pipe).await?;
        self.adaptive.remember(&key, Some(action.clone()));
        Ok(())
    }

    /// Lifts whatever is in force on `scope` (a rule's action or an operator's suspension):
    /// leaves a `resumed` mark holding nothing for [`RESUMED_MARK`], so a daemon's write-back
    /// that read the suspension from PostgreSQL just before `resume` deleted it (`SET NX`)
    /// cannot put it back; a rule may replace the mark at once.
    ///
    /// # Errors
    /// A Redis failure.
    pub async fn clear_adaptive(
        &self,
        scope: &ScopeKey,
        now: DateTime<Utc>,
    ) -> Result<(), RedisCallError> {
        let key = scope.key(&self.key_prefix);
        let now_ms = now.timestamp_millis();
        let mut mark = ActionInForce::operator(now_ms, now_ms, None);
        mark.rule = RESUMED.to_owned();
        let mut pipe = redis::pipe();
        pipe.cmd("SET")
            .arg(&key)
            .arg(serde_json::to_string(&mark).unwrap_or_default())
            .arg("PX")
            .arg(RESUMED_MARK.as_millis().to_string())
            .ignore();
        self.redis.query::<()>(&pipe).await?;
        self.adaptive.remember(&key, None);
        Ok(())
    }

    /// The action in force on `scope`, read now (not cached).
    ///
    /// # Errors
    /// A Redis failure.
    pub async fn adaptive_of(
        &self,
        scope: &ScopeKey,
    ) -> Result<Option<ActionInForce>, RedisCallError> {
        let [action] = self.read_actions(&[scope.key(&self.key_prefix)]).await?;
        Ok(action)
    }

    /// When `campaign`'s messages may go again, if it is suspended at `now` (cached 1 s). A
    /// Redis failure reads as not suspended.
    pub async fn campaign_suspension(
        &self,
        campaign: &str,
        now: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        let key = campaign_key(&self.key_prefix, campaign);
        let action = match self.adaptive.cached(&key) {
            Some(action) => action,
            None => {
                let [action] = self.read_actions(std::array::from_ref(&key)).await.ok()?;
                self.adaptive.remember(&key, action.clone());
                action
            }
        };
        action
            .filter(|a| a.suspends_at(now.timestamp_millis()))
            .and_then(|a| DateTime::from_timestamp_millis(a.held_until_ms))
    }

    /// Writes the operator's suspensions PostgreSQL keeps (`suspensions`: scope, until, reason)
    /// back into Redis where they are missing (a flush, a new Redis). Returns how many it
    /// wrote.
    ///
    /// # Errors
    /// A Redis failure.
    pub async fn reapply_suspensions(
        &self,
        suspensions: &[KeptSuspension],
        now: DateTime<Utc>,
    ) -> Result<usize, RedisCallError> {
        let mut written = 0;
        for KeptSuspension {
            scope,
            at,
            until,
            reason,
        } in suspensions
        {
            if *until <= now {
                continue;
            }
            let key = scope.key(&self.key_prefix);
            let action = ActionInForce::operator(
                at.timestamp_millis(),
                until.timestamp_millis(),
                reason.clone(),
            );
            let ttl = (until.timestamp_millis() - now.timestamp_millis()).max(1);
            let mut pipe = redis::pipe();
            pipe.cmd("SET")
                .arg(&key)
                .arg(serde_json::to_string(&action).unwrap_or_default())
                .arg("PX")
                .arg(ttl)
                .arg("NX");
            let (set,): (Option<String>,) = self.redis.query(&pipe).await?;
            if set.is_some() {
                written += 1;
            }
        }
        Ok(written)
    }
}
