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
    /// Marks `mailbox`'s (Graph tenant `tenant`) day budget of `per_day` recipients used up now
    /// (`whole_day`: for 24 h) and cools it down until then; returns when it may send again.
    /// `None` with `fixed-window` (it keeps no rolling window) or when the mailbox has no state
    /// in Redis (its seed re-applies the pause from PostgreSQL).
    ///
    /// # Errors
    /// A Redis failure.
    pub(crate) async fn mailbox_used_up(
        &self,
        tenant: &str,
        mailbox: &MailboxAddress,
        (per_day, whole_day): (u32, bool),
        now: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>, RedisCallError> {
        let Engine::Paced(paced) = &self.engine else {
            return Ok(None);
        };
        let keys = PacedKeys::new(&self.key_prefix, tenant, mailbox);
        let marked = paced
            .mailbox_used_up(&self.redis, &keys, (per_day, whole_day), now)
            .await?;
        if let Some((_, free_at)) = marked {
            self.local.cooldown(mailbox, free_at);
        }
        Ok(marked.and_then(|(_, free_at)| DateTime::from_timestamp_millis(free_at)))
    }

    /// Marks Graph tenant `tenant`'s external budget (`per_day` recipients per rolling 24 h)
    /// used up now (`whole_day`: for 24 h); returns when its first external recipient fits
    /// again. `None` with `fixed-window` (it keeps no tenant budget).
    ///
    /// # Errors
    /// A Redis failure.
    pub(crate) async fn tenant_used_up(
        &self,
        tenant: &str,
        mailbox: &MailboxAddress,
        (per_day, whole_day): (u32, bool),
        now: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>, RedisCallError> {
        let Engine::Paced(paced) = &self.engine else {
            return Ok(None);
        };
        let keys = PacedKeys::new(&self.key_prefix, tenant, mailbox);
        let (_added, free_at) = paced
            .tenant_used_up(&self.redis, &keys, (per_day, whole_day), now)
            .await?;
        Ok(DateTime::from_timestamp_millis(free_at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(minutes: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap() + chrono::Duration::minutes(minutes)
    }

    #[test]
    fn a_window_pause_refills_what_our_history_did_not_count() {
        let history = [(at(-2_000), 7), (at(-30), 3), (at(-10), 2), (at(5), 4)];
        let pause = LimitPause {
            at: at(0),
            until: at(24 * 60),
            whole_day: false,
        };
        // 3 + 2 before the pause in its 24 h (the first is older, the last after it).
        assert_eq!(
            pause_fillers(&[pause], 100, &history, at(60)),
            [(at(0), 95)]
        );
        let whole = LimitPause {
            whole_day: true,
            ..pause
        };
        assert_eq!(
            pause_fillers(&[whole], 100, &history, at(60)),
            [(at(0), 100)]
        );
        // Ended, or older than the window: nothing.
        assert!(pause_fillers(&[pause], 100, &history, at(24 * 60)).is_empty());
        let old = LimitPause {
            at: at(-25 * 60),
            until: at(60),
            whole_day: true,
        };
        assert!(pause_fillers(&[old], 100, &history, at(0)).is_empty());
    }
}
