//! Limit pauses: Exchange said, in a non-delivery report, that a budget is used up although
//! ours had room (`crate::bounces`: `5.1.90`, `5.2.2` submission quota, `5.7.233`, `5.7.705`,
//! `5.7.708`, `5.7.501`). The budget is marked used up in Redis, so every replica's
//! `check_and_reserve` denies on it, and the pause is kept in PostgreSQL (`limit_pauses`):
//! when the limiter's Redis comes back empty, the seed from the send history adds the pause's
//! recipients back ([`pause_fillers`]), so a flush never lifts it
//! (docs/decisions/0032-quota-ndrs-pause.md).

use chrono::{DateTime, Utc};

use super::{Engine, MailRateLimiter};
use crate::{
    domain::MailboxAddress,
    rate_limit::{RedisCallError, paced::keys::PacedKeys},
};

/// The rolling day a pause's recipients count in.
const DAY: chrono::Duration = chrono::Duration::hours(24);

/// Whose budget a pause holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseScope {
    /// One sending mailbox's recipients per rolling 24 h (all its mail).
    Mailbox,
    /// A Graph tenant's external recipients per rolling 24 h (its external mail).
    Tenant,
}

impl PauseScope {
    /// `limit_pauses.scope`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mailbox => "mailbox",
            Self::Tenant => "tenant",
        }
    }
}

/// One pause in force, as PostgreSQL keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitPause {
    /// When the NDR was read (the budget counted as used up from then).
    pub at: DateTime<Utc>,
    /// When it ends at the latest.
    pub until: DateTime<Utc>,
    /// `true`: the whole budget was added at `at` (nothing fits until `at` + 24 h); `false`:
    /// the window was filled up to the budget (it frees as our counted recipients leave).
    pub whole_day: bool,
}

/// The recipients to add to a seed's history for `pauses` (at, count) so the rebuilt window
/// holds them as the Redis that was lost did: the whole `per_day` at the pause's time, or the
/// budget less what `history` counted in the 24 h before it. Pauses ended or older than 24 h
/// add nothing.
pub(crate) fn pause_fillers(
    pauses: &[LimitPause],
    per_day: u32,
    history: &[(DateTime<Utc>, u32)],
    now: DateTime<Utc>,
) -> Vec<(DateTime<Utc>, u32)> {
    pauses
        .iter()
        .filter(|p| p.until > now && p.at > now - DAY)
        .filter_map(|p| {
            let count = if p.whole_day {
                per_day
            } else {
                let before: u32 = history
                    .iter()
                    .filter(|(at, _)| *at <= p.at && *at > p.at - DAY)
                    .fold(0u32, |sum, (_, n)| sum.saturating_add(*n));
                per_day.saturating_sub(before)
            };
            (count > 0).then_some((p.at, count))
        })
        .collect()
}

impl MailRateLimiter {
    /// Marks the budget `scope` names used up now (`whole_day`: for 24 h) and returns when it
    /// frees: [`PauseScope::Mailbox`], `mailbox`'s (Graph tenant `tenant`) day budget of
    /// `per_day` recipients, also cooled down until then; [`PauseScope::Tenant`], Graph tenant
    /// `tenant`'s external budget (`per_day` recipients per rolling 24 h), until its first
    /// external recipient fits again. `None` with `fixed-window` (it keeps no rolling window nor
    /// tenant budget) or, for a mailbox, when it has no state in Redis (its seed re-applies the
    /// pause from PostgreSQL).
    ///
    /// # Errors
    /// A Redis failure.
    pub(crate) async fn used_up(
        &self,
        scope: PauseScope,
        (tenant, mailbox): (&str, &MailboxAddress),
        budget: (u32, bool),
        now: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>, RedisCallError> {
        let Engine::Paced(paced) = &self.engine else {
            return Ok(None);
        };
        let keys = PacedKeys::new(&self.key_prefix, tenant, mailbox);
        let free_at = match scope {
            PauseScope::Mailbox => {
                let marked = paced
                    .mailbox_used_up(&self.redis, &keys, budget, now)
                    .await?;
                let Some((_, free_at)) = marked else {
                    return Ok(None);
                };
                self.local.cooldown(mailbox, free_at);
                free_at
            }
            PauseScope::Tenant => {
                let (_added, free_at) = paced
                    .tenant_used_up(&self.redis, &keys, budget, now)
                    .await?;
                free_at
            }
        };
        Ok(DateTime::from_timestamp_millis(free_at))
    }
}
