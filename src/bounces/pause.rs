//! The pauses a failure starts — told by an NDR or by the message trace; which codes:
//! [`crate::domain::action_of`], the one table of both: the budget is marked used up in the
//! limiter's Redis (every replica's `check_and_reserve` denies on it) and kept in PostgreSQL
//! (`limit_pauses`: a Redis that comes back empty re-applies it when it re-seeds).
//! docs/decisions/0032-quota-ndrs-pause.md.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use sqlx::PgPool;

use crate::{
    domain::{LimitFinding, MailboxAddress},
    log_events,
    mailer::factory::GraphMailbox,
    rate_limit::{LimitPause, MailRateLimiter, PauseScope, RedisCallError},
    store::limit_pauses::{self, NewPause},
};

/// The longest a pause lasts: the rolling 24 h, plus the minute bucket its start is counted in.
/// What PostgreSQL keeps as its end when the limiter could not say (`fixed-window`, a mailbox
/// with no state in Redis yet, a Redis failure).
const LONGEST: chrono::Duration = chrono::Duration::minutes(24 * 60 + 1);

/// Who told the failure (its log line names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Told {
    /// A non-delivery report in the sender's Inbox.
    Ndr,
    /// The message trace's detail events.
    Trace,
}

/// What a failure said, for its pause.
#[derive(Debug)]
pub(crate) struct Found<'a> {
    pub finding: LimitFinding,
    pub told: Told,
    pub code: &'a str,
    /// The NDR's text, scrubbed.
    pub text: &'a str,
    pub message_id: Uuid,
}

/// Where pauses are kept and marked: PostgreSQL and the limiter, at `now`.
pub(crate) struct Pauses<'a> {
    pub pool: &'a PgPool,
    pub limiter: &'a MailRateLimiter,
    pub now: DateTime<Utc>,
}

impl Pauses<'_> {
    /// Pauses what `found` names: the mailbox's day budget (`5.1.90`, `5.2.2` submission
    /// quota), or the tenant's external budget (`5.7.233`: until its window frees; `5.7.705` /
    /// `5.7.708` / `5.7.501`: 24 h). A tenant with no external budget configured cannot have
    /// its external mail told apart: the mailbox is paused whole for 24 h instead.
    pub(crate) async fn pause(
        &self,
        mailbox: &GraphMailbox,
        address: &MailboxAddress,
        found: &Found<'_>,
    ) {
        let now = self.now;
        let (scope, key, per_day, whole_day) = match (found.finding, &mailbox.budget) {
            (LimitFinding::MailboxQuota, _) => (
                PauseScope::Mailbox,
                address.as_str(),
                mailbox.limits.recipients_per_day.get(),
                false,
            ),
            (LimitFinding::TenantLimit | LimitFinding::TenantBlocked, Some(budget)) => (
                PauseScope::Tenant,
                mailbox.tenant.as_str(),
                budget.external_recipients_per_day.get(),
                found.finding.whole_day(),
            ),
            // Without accepted domains nothing tells external recipients from internal
            // ones: the safe reading holds all of this mailbox's mail for 24 h.
            (LimitFinding::TenantLimit | LimitFinding::TenantBlocked, None) => (
                PauseScope::Mailbox,
                address.as_str(),
                mailbox.limits.recipients_per_day.get(),
                true,
            ),
        };
        let marked = self
            .limiter
            .used_up(scope, (&mailbox.tenant, address), (per_day, whole_day), now)
            .await;
        self.keep(scope, key, found, (now, whole_day), marked).await;
        // The adaptive rules count it too (docs/decisions/0048-adaptive-rules.md): the pause
        // above holds the budget Exchange named; a rule may act beyond it.
        if let Some(signal) = crate::domain::adaptive::Signal::of_ndr(found.code) {
            let on = crate::rate_limit::Signalled {
                tenant: &mailbox.tenant,
                mailbox: address,
            };
            self.limiter.adaptive_signal(signal, on, now).await;
        }
    }

    /// Keeps the pause in PostgreSQL and logs it: `marked` is what the limiter answered.
    async fn keep(
        &self,
        scope: PauseScope,
        key: &str,
        found: &Found<'_>,
        (at, whole_day): (DateTime<Utc>, bool),
        marked: Result<Option<DateTime<Utc>>, RedisCallError>,
    ) {
        let longest = at + LONGEST;
        let (until, held) = match &marked {
            Ok(Some(until)) => ((*until).min(longest), true),
            Ok(None) => (longest, false),
            Err(_) => (longest, false),
        };
        let pause = LimitPause {
            at,
            until,
            whole_day,
        };
        let kept = limit_pauses::record(
            self.pool,
            &NewPause {
                scope,
                key,
                code: found.code,
                pause,
                reason: found.text,
            },
        )
        .await;
        let unkept = |e: &dyn std::fmt::Display, what: String| {
            tracing::warn!(
                event = log_events::MAIL_BOUNCE_READ_FAILED,
                mailbox = %key,
                error = %e,
                "{what}"
            );
        };
        if let Err(e) = &marked {
            unkept(
                e,
                format!(
                    "the limiter's Redis did not take the pause of a failure {}; kept in PostgreSQL, it holds once Redis re-seeds",
                    found.code
                ),
            );
        }
        if let Err(e) = &kept {
            unkept(
                e,
                format!(
                    "PostgreSQL did not keep the pause of a failure {}: a limiter Redis that comes back empty would lift it",
                    found.code
                ),
            );
        }
        let until = until.to_rfc3339();
        let what = match found.finding {
            LimitFinding::MailboxQuota => {
                "the mailbox's recipients per rolling 24 h are used up (Exchange counts more than we do: a person or another app sent from it); all its mail waits until its window frees"
            }
            LimitFinding::TenantLimit if scope == PauseScope::Tenant => {
                "the tenant is over Exchange's tenant external recipient rate limit; its external budget is marked used up and its external mail waits until its rolling 24 h window frees"
            }
            LimitFinding::TenantBlocked if scope == PauseScope::Tenant => {
                "the tenant is blocked from sending or its sending IPs are not trusted yet (Microsoft gives no end; a support case lifts it); its external mail waits 24 h"
            }
            LimitFinding::TenantLimit | LimitFinding::TenantBlocked => {
                "the tenant's external mail is refused, but it has no external budget configured (externalRecipientsPerDay, acceptedDomains in the senders file) to tell external recipients apart: all of this mailbox's mail waits 24 h; configure one"
            }
        };
        // The log line names the key by its scope's field, so each scope has its own.
        macro_rules! paused {
            ($event:expr, $field:ident) => {
                tracing::warn!(
                    event = $event,
                    $field = %key,
                    code = found.code,
                    until = %until,
                    limiter = held,
                    message.id = %found.message_id,
                    reason = found.text,
                    "{} {}: {what}",
                    found.told.name(),
                    found.code
                )
            };
        }
        match scope {
            PauseScope::Mailbox => paused!(log_events::MAIL_BOUNCE_MAILBOX_PAUSED, mailbox),
            PauseScope::Tenant => paused!(log_events::MAIL_BOUNCE_TENANT_PAUSED, tenant),
        }
    }
}

impl Told {
    fn name(self) -> &'static str {
        match self {
            Self::Ndr => "NDR",
            Self::Trace => "message trace",
        }
    }
}
