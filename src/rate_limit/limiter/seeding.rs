//! Budgets rebuilt from the send history: a `paced` decision first seeds what the limiter's
//! Redis has forgotten (a restart without persistence), from what PostgreSQL knows was sent.

use std::{sync::atomic::Ordering, time::Instant};

use chrono::{DateTime, Utc};

use super::{
    LiveLease, MailRateLimiter,
    pauses::{LimitPause, PauseScope, pause_fillers},
};
use crate::{
    domain::MailboxAddress,
    log_events,
    rate_limit::{
        Ask, Decision, RedisCallError, epoch_ms,
        paced::{BOOKING_GRACE, BookedRow, Checked, Paced, keys::PacedKeys},
    },
};

/// How far back the send history is read when a budget is rebuilt: the rolling 24 h.
pub(super) const DAY: chrono::Duration = chrono::Duration::hours(24);

/// One message a mailbox sent: when, and to how many recipients (To + Cc + Bcc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentRecord {
    /// `messages.sent_at`.
    pub sent_at: DateTime<Utc>,
    /// Its recipients.
    pub recipients: u32,
}

/// What PostgreSQL knows was sent, so a limiter Redis that comes back empty (a restart without
/// persistence) rebuilds a mailbox's 24 h budget before its first decision instead of handing
/// out a fresh one. Implemented by the store.
#[async_trait::async_trait]
pub trait SendHistory: Send + Sync + 'static {
    /// The messages `mailbox` sent since `since`.
    ///
    /// # Errors
    /// A description of the database trouble; the limiter then fails open for that call.
    async fn sent_since(
        &self,
        mailbox: &MailboxAddress,
        since: DateTime<Utc>,
    ) -> Result<Vec<SentRecord>, String>;

    /// The recipients `mailbox` sent to since `since` (the sum of [`Self::sent_since`]'s):
    /// what a fail-open decision reads, one row rather than a day of messages.
    ///
    /// # Errors
    /// As [`Self::sent_since`].
    async fn recipients_since(
        &self,
        mailbox: &MailboxAddress,
        since: DateTime<Utc>,
    ) -> Result<u32, String> {
        Ok(self
            .sent_since(mailbox, since)
            .await?
            .iter()
            .fold(0u32, |sum, r| sum.saturating_add(r.recipients)))
    }

    /// The messages every mailbox of Graph tenant `graph_tenant` sent since `since`, each with
    /// its recipients outside the tenant's accepted domains (`recipients` = external ones; the
    /// messages without any left out). The default knows none (test doubles).
    ///
    /// # Errors
    /// As [`Self::sent_since`].
    async fn external_sent_since(
        &self,
        graph_tenant: &str,
        since: DateTime<Utc>,
    ) -> Result<Vec<SentRecord>, String> {
        let _ = (graph_tenant, since);
        Ok(Vec::new())
    }

    /// The booked backlog of `mailbox` (Graph tenant `graph_tenant`, whose accepted domains
    /// tell its external recipients): its `SCHEDULED` rows a booking deferred, slot after
    /// `since`, in slot order. The default knows none (test doubles).
    ///
    /// # Errors
    /// As [`Self::sent_since`].
    async fn booked_since(
        &self,
        mailbox: &MailboxAddress,
        graph_tenant: &str,
        since: DateTime<Utc>,
    ) -> Result<Vec<BookedRow>, String> {
        let _ = (mailbox, graph_tenant, since);
        Ok(Vec::new())
    }

    /// The limit pauses of `key` (a mailbox address, or a Graph tenant in lower case, by
    /// `scope`) still in force at `now` (`limit_pauses`): a seed adds their recipients back.
    /// The default knows none (test doubles).
    ///
    /// # Errors
    /// As [`Self::sent_since`].
    async fn pauses(
        &self,
        scope: PauseScope,
        key: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<LimitPause>, String> {
        let _ = (scope, key, now);
        Ok(Vec::new())
    }
}

impl MailRateLimiter {
    /// A `paced` decision, seeding first what Redis has forgotten: the mailbox's budgets, then
    /// its tenant's (at most one of each, then the decision).
    pub(super) async fn paced_decision(
        &self,
        paced: &Paced,
        ask: &Ask<'_>,
        now: DateTime<Utc>,
    ) -> Result<Decision, RedisCallError> {
        let keys = PacedKeys::new(&self.key_prefix, ask.tenant, ask.mailbox);
        self.record_fail_open(paced, &keys, ask, now).await?;
        let mut seeded = (false, false);
        loop {
            match paced.check(&self.redis, &keys, ask, now).await? {
                Checked::Decided(decision, seen) => {
                    self.clock_offset_ms
                        .store(seen.now_ms - epoch_ms(now), Ordering::Relaxed);
                    let allowed = matches!(decision, Decision::Allowed(_));
                    self.local
                        .saw(ask.mailbox, seen.total, allowed.then_some(seen.now_ms));
                    if let Decision::Allowed(reservation) = &decision {
                        self.live_leases().insert(
                            (ask.message_id, seen.now_ms),
                            LiveLease::new(reservation.clone()),
                        );
                    }
                    return Ok(decision);
                }
                Checked::NeedsSeed if !seeded.0 => {
                    seeded.0 = true;
                    let mut records = self
                        .history(|h| h.sent_since(ask.mailbox, now - DAY))
                        .await?;
                    let per_day = ask.limits.recipients_per_day.get();
                    records.extend(
                        self.pause_fillers(
                            PauseScope::Mailbox,
                            ask.mailbox.as_str(),
                            per_day,
                            &records,
                            now,
                        )
                        .await?,
                    );
                    let bookings = self.bookings_to_restore(ask, now).await?;
                    let started = Instant::now();
                    if paced
                        .seed(&self.redis, &keys, &ask.limits, (&records, &bookings), now)
                        .await?
                    {
                        tracing::info!(
                            event = log_events::MAIL_RATE_LIMIT_SEEDED,
                            mailbox = %ask.mailbox,
                            sent_in_24h = records.len(),
                            bookings_restored = bookings.len(),
                            took_ms = started.elapsed().as_millis() as u64,
                            recipients_in_24h = records.iter().map(|r| u64::from(r.1)).sum::<u64>(),
                            "rate-limit budgets rebuilt from the send history"
                        );
                    }
                }
                Checked::NeedsTenantSeed if !seeded.1 => {
                    seeded.1 = true;
                    let mut records = self
                        .history(|h| h.external_sent_since(ask.tenant, now - DAY))
                        .await?;
                    if let Some((_, per_day)) = ask.tenant_budget {
                        let tenant = ask.tenant.to_lowercase();
                        records.extend(
                            self.pause_fillers(
                                PauseScope::Tenant,
                                &tenant,
                                per_day.get(),
                                &records,
                                now,
                            )
                            .await?,
                        );
                    }
                    if paced.seed_tenant(&self.redis, &keys, &records, now).await? {
                        tracing::info!(
                            event = log_events::MAIL_RATE_LIMIT_SEEDED,
                            mailbox = %ask.mailbox,
                            graph_tenant = ask.tenant,
                            sent_in_24h = records.len(),
                            external_recipients_in_24h =
                                records.iter().map(|r| u64::from(r.1)).sum::<u64>(),
                            "tenant external-recipient budget rebuilt from the send history"
                        );
                    }
                }
                Checked::NeedsSeed | Checked::NeedsTenantSeed => {
                    return Err(RedisCallError::UnexpectedReply {
                        script: "paced/check_and_reserve.lua",
                        reply: "asked for a seed right after seeding".into(),
                    });
                }
            }
        }
    }

    /// The bookings a seed of `ask`'s mailbox restores: its booked rows whose slot is in the
    /// future or passed less than [`BOOKING_GRACE`] ago (older ones the script would drop as
    /// unused), but not those a limit pause in force holds (a mailbox pause: every booking
    /// before its end; a tenant pause: those with external recipients) — the pause's fillers
    /// fill their window, so they take a fresh decision and are booked behind it, as
    /// check_and_reserve.lua does with a booking made before a pause. External recipients count
    /// only with a tenant budget, as the script books them.
    async fn bookings_to_restore(
        &self,
        ask: &Ask<'_>,
        now: DateTime<Utc>,
    ) -> Result<Vec<BookedRow>, RedisCallError> {
        let Some(history) = &self.history else {
            return Ok(Vec::new());
        };
        let failed = |e| RedisCallError::UnexpectedReply {
            script: "paced seeding (reading the booked backlog)",
            reply: e,
        };
        let since = now - chrono::Duration::from_std(BOOKING_GRACE).unwrap_or(DAY);
        let mut rows = history
            .booked_since(ask.mailbox, ask.tenant, since)
            .await
            .map_err(failed)?;
        let pause_end = |scope, key: &str| {
            let history = history.clone();
            let key = key.to_owned();
            async move {
                let pauses = history.pauses(scope, &key, now).await?;
                Ok::<_, String>(
                    pauses
                        .iter()
                        .filter(|p| p.until > now)
                        .map(|p| p.until)
                        .max(),
                )
            }
        };
        let mailbox_held = pause_end(PauseScope::Mailbox, ask.mailbox.as_str())
            .await
            .map_err(failed)?;
        let tenant_held = match ask.tenant_budget {
            Some(_) => pause_end(PauseScope::Tenant, &ask.tenant.to_lowercase())
                .await
                .map_err(failed)?,
            None => None,
        };
        rows.retain_mut(|row| {
            if ask.tenant_budget.is_none() {
                row.external = 0;
            }
            let held_by_mailbox = mailbox_held.is_some_and(|until| row.slot < until);
            let held_by_tenant = row.external > 0 && tenant_held.is_some_and(|u| row.slot < u);
            !(held_by_mailbox || held_by_tenant)
        });
        Ok(rows)
    }

    /// The recipients a seed adds for `key`'s pauses in force (PostgreSQL's `limit_pauses`),
    /// as (at, count) beside the send history `records`; none without a history.
    async fn pause_fillers(
        &self,
        scope: PauseScope,
        key: &str,
        per_day: u32,
        records: &[(DateTime<Utc>, u32)],
        now: DateTime<Utc>,
    ) -> Result<Vec<(DateTime<Utc>, u32)>, RedisCallError> {
        let Some(history) = &self.history else {
            return Ok(Vec::new());
        };
        let pauses =
            history
                .pauses(scope, key, now)
                .await
                .map_err(|e| RedisCallError::UnexpectedReply {
                    script: "paced seeding (reading the limit pauses)",
                    reply: e,
                })?;
        let fillers = pause_fillers(&pauses, per_day, records, now);
        if !fillers.is_empty() {
            tracing::info!(
                event = log_events::MAIL_RATE_LIMIT_SEEDED,
                scope = scope.as_str(),
                pauses = fillers.len(),
                "a limit pause kept in PostgreSQL re-applied to the rebuilt budget"
            );
        }
        Ok(fillers)
    }

    /// What `read` finds in the send history, as (sent at, recipients); none without one.
    async fn history<'h, F, Fut>(
        &'h self,
        read: F,
    ) -> Result<Vec<(DateTime<Utc>, u32)>, RedisCallError>
    where
        F: FnOnce(&'h dyn SendHistory) -> Fut,
        Fut: Future<Output = Result<Vec<SentRecord>, String>>,
    {
        let Some(history) = &self.history else {
            return Ok(Vec::new());
        };
        let records =
            read(history.as_ref())
                .await
                .map_err(|e| RedisCallError::UnexpectedReply {
                    script: "paced seeding (reading the send history)",
                    reply: e,
                })?;
        Ok(records.iter().map(|r| (r.sent_at, r.recipients)).collect())
    }
}
