//! A campaign file's pooled lines in the forecast (docs/decisions/0046-sender-pools.md): each
//! given to a member as the placement would ([`forecast::spread`]: the earliest next slot among
//! the unpaused members with day room), so a pool forecasts at its members' summed budgets,
//! less what already waits or is booked on each; a line the pool's overflow rule gives to its
//! overflow sender (`forecastMisses`: its `by` before every member's slot) is forecast there.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::{ReportError, held_by, limits_of, sender_state, suspensions_of, tenant_budget};
use crate::{
    config::Config,
    domain::{OverflowWhen, Sender},
    forecast::{self, MemberSlot, NewSend},
    rate_limit::{Algorithm, usage::UsageReader},
    store::{campaigns, limit_pauses, pool_views},
};

/// One pool of a campaign file, as the forecast spread it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PoolForecast {
    /// `senderPool`.
    pub pool: String,
    /// Its file's messages.
    pub messages: u64,
    /// The members they are forecast on (unpaused), with how many each.
    pub members: Vec<MemberShare>,
    /// The members skipped: paused by a quota or reputation NDR (`limit_pauses` in force).
    pub paused: Vec<String>,
    /// The pool's overflow rule (`budgetsSpent` | `forecastMisses`), if it has an overflow
    /// sender.
    pub overflow: Option<&'static str>,
    /// Its lines forecast on the overflow sender by that rule.
    pub overflowed: u64,
}

/// A campaign file's pooled line, for [`spread_pooled`].
pub(super) struct Line<'a> {
    /// Its `senderPool`.
    pub pool: Uuid,
    /// What it sends.
    pub send: NewSend,
    /// The member it would wait under until placed.
    pub stand_in: Uuid,
    /// Its recipients' addresses (for `externalOnly`).
    pub recipients: Vec<&'a str>,
}

/// One unpaused member's share of a pool's lines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemberShare {
    /// The member's mailbox (lower case).
    pub mailbox: String,
    /// The lines forecast on it.
    pub messages: u64,
}

/// The sender each of `lines` is forecast on, in their order (a member, or the pool's overflow
/// sender), and each pool's [`PoolForecast`]. A pool with no unpaused member keeps its
/// lines on their stand-ins (nothing sends them until one resumes; the forecast then says
/// the members' finish).
///
/// # Errors
/// Database errors; a limiter that cannot be read counts its member as idle.
pub(super) async fn spread_pooled(
    config: &Config,
    pool: &sqlx::PgPool,
    senders: &HashMap<Uuid, Sender>,
    lines: &[Line<'_>],
    now: DateTime<Utc>,
) -> Result<(Vec<Uuid>, Vec<PoolForecast>), ReportError> {
    let mut to: Vec<Uuid> = lines.iter().map(|l| l.stand_in).collect();
    if lines.is_empty() {
        return Ok((to, Vec::new()));
    }
    let members = pool_views::members(pool).await?;
    let overflows = pool_views::overflows(pool).await?;
    let paused: HashSet<String> = limit_pauses::in_force(pool)
        .await?
        .into_iter()
        .filter(|(scope, _, _)| scope == "mailbox")
        .map(|(_, key, _)| key)
        .collect();
    let booking = config.rate_limit.algorithm == Algorithm::Paced;
    let waiting = campaigns::waiting_by_sender(pool, booking).await?;
    let mut reader = UsageReader::new(&config.rate_limit);
    let mut pool_ids: Vec<Uuid> = lines.iter().map(|l| l.pool).collect();
    pool_ids.sort_unstable();
    pool_ids.dedup();
    let mut out = Vec::new();
    for pool_id in pool_ids {
        let of_pool: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].pool == pool_id)
            .collect();
        let overflow = overflows.get(&pool_id).copied();
        let mut report = PoolForecast {
            pool: String::new(),
            messages: of_pool.len() as u64,
            members: Vec::new(),
            paused: Vec::new(),
            overflow: overflow.map(|(_, when, _)| when.as_str()),
            overflowed: 0,
        };
        let mut slots = Vec::new();
        for m in members.iter().filter(|m| m.pool_id == pool_id) {
            report.pool.clone_from(&m.pool);
            let Some(sender) = senders.get(&m.sender_id) else {
                continue;
            };
            if paused.contains(&m.mailbox) {
                report.paused.push(m.mailbox.clone());
                continue;
            }
            let (_, _, tenant, limits) = limits_of(sender, config);
            let Some(tenant) = tenant else {
                continue;
            };
            let usage = reader
                .read(&tenant.to_lowercase(), sender.mailbox(), now)
                .await
                .ok();
            let backlog = waiting.get(&m.sender_id).copied().unwrap_or_default();
            let mut state = sender_state(config, &limits, usage.as_ref(), backlog, now);
            // A suspended member's next slot is its suspension's end, as the placement sees it.
            let suspensions =
                suspensions_of(&mut reader, &tenant.to_lowercase(), sender.mailbox(), now).await;
            held_by(&suspensions, &mut state);
            slots.push((m.sender_id, m.mailbox.clone(), MemberSlot::of(&state)));
        }
        // The service's `externalOnly`: a recipient outside some member's accepted domains.
        let external = |line: &Line<'_>| {
            members.iter().filter(|m| m.pool_id == pool_id).any(|m| {
                senders
                    .get(&m.sender_id)
                    .and_then(tenant_budget)
                    .is_some_and(|b| b.external_count(line.recipients.iter().copied()) > 0)
            })
        };
        let sends: Vec<(NewSend, Option<OverflowWhen>)> = of_pool
            .iter()
            .map(|&i| {
                let rule = overflow
                    .filter(|(_, _, external_only)| !external_only || external(&lines[i]))
                    .map(|(_, when, _)| when);
                (lines[i].send, rule)
            })
            .collect();
        let member_slots: Vec<MemberSlot> = slots.iter().map(|(_, _, s)| *s).collect();
        let given = forecast::spread(&member_slots, &sends, now);
        let mut counts = vec![0_u64; slots.len()];
        for (&i, k) in of_pool.iter().zip(given) {
            match (k, overflow) {
                (Some(k), _) => {
                    to[i] = slots[k].0;
                    counts[k] += 1;
                }
                (None, Some((sender, _, _))) => {
                    to[i] = sender;
                    report.overflowed += 1;
                }
                (None, None) => {}
            }
        }
        report.members = slots
            .iter()
            .zip(counts)
            .map(|((_, mailbox, _), messages)| MemberShare {
                mailbox: mailbox.clone(),
                messages,
            })
            .collect();
        out.push(report);
    }
    out.sort_by(|a, b| a.pool.cmp(&b.pool));
    Ok((to, out))
}
