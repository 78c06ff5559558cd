//! What a sender pool asks of the limiter before it places a message
//! (docs/decisions/0046-sender-pools.md): each member's next free slot (an adaptive
//! suspension's end included: a suspended member is placed last, ADR 0048) and the recipients
//! its rolling 24 h counts, read from the `paced` state hash without changing anything — one
//! `HMGET` per member, one pipelined round trip per Graph tenant (a Cluster slot), not one
//! decision per member.

use std::collections::BTreeMap;

use super::{Engine, MailRateLimiter};
use crate::{domain::MailboxAddress, rate_limit::paced::keys::PacedKeys};

/// `tat`, `cool`, `held` and `total` of a member's state hash.
type State = (Option<i64>, Option<i64>, Option<i64>, Option<u64>);

/// One member as the limiter holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberSlot {
    /// When (ms since the epoch, Redis's clock) its next message could be booked at the
    /// earliest: the latest of Redis's now, the pacing's next free slot (`tat`), a
    /// `Retry-After` cooldown (`cool`) and a limit pause (`held`). Members free now tie.
    pub free_at_ms: i64,
    /// Recipients its rolling 24 h window counts, sent and booked (`total`).
    pub recipients_day: u64,
}

impl MailRateLimiter {
    /// The [`MemberSlot`] of each of `mailboxes` (Graph tenant, mailbox), in their order;
    /// `None` for all with `fixed-window` (it books no slots) or for a tenant whose Redis read
    /// failed (the pool then places by the message's id).
    pub(crate) async fn read_member_slots(
        &self,
        mailboxes: &[(String, MailboxAddress)],
    ) -> Vec<Option<MemberSlot>> {
        let mut slots = vec![None; mailboxes.len()];
        let Engine::Paced(_) = &self.engine else {
            return slots;
        };
        // One pipeline per Graph tenant: its keys share one hash tag, so one Cluster slot.
        let mut by_tenant: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, (tenant, _)) in mailboxes.iter().enumerate() {
            by_tenant.entry(tenant.to_lowercase()).or_default().push(i);
        }
        let reads = by_tenant.into_values().map(|indexes| async move {
            let mut pipe = redis::pipe();
            pipe.cmd("TIME");
            for &i in &indexes {
                let (tenant, mailbox) = &mailboxes[i];
                let keys = PacedKeys::new(&self.key_prefix, tenant, mailbox);
                pipe.cmd("HMGET")
                    .arg(keys.state())
                    .arg("tat")
                    .arg("cool")
                    .arg("held")
                    .arg("total");
                // An adaptive suspension (a rule's or an operator's) holds it like a pause.
                pipe.cmd("GET")
                    .arg(crate::rate_limit::adaptive::mailbox_key(
                        &self.key_prefix,
                        tenant,
                        mailbox,
                    ));
            }
            let answer = self.redis.query::<Vec<redis::Value>>(&pipe).await;
            (indexes, answer)
        });
        for (indexes, answer) in futures::future::join_all(reads).await {
            let Ok(answers) = answer else { continue };
            let Some((time, rows)) = answers.split_first() else {
                continue;
            };
            // TIME: seconds and microseconds, as two strings.
            let now_ms = redis::from_redis_value_ref::<(i64, i64)>(time)
                .map_or(0, |(s, us)| s * 1_000 + us / 1_000);
            for (i, pair) in indexes.into_iter().zip(rows.chunks(2)) {
                let [row, adaptive] = pair else { continue };
                let Ok((tat, cool, held, total)) = redis::from_redis_value_ref::<State>(row) else {
                    continue;
                };
                let raw = redis::from_redis_value_ref::<Option<String>>(adaptive)
                    .ok()
                    .flatten();
                let suspended = crate::rate_limit::adaptive::decode(raw.as_deref())
                    .filter(|a| a.suspends_at(now_ms))
                    .map(|a| a.held_until_ms);
                slots[i] = Some(MemberSlot {
                    free_at_ms: [tat, cool, held, suspended]
                        .into_iter()
                        .flatten()
                        .fold(now_ms, i64::max),
                    recipients_day: total.unwrap_or(0),
                });
            }
        }
        slots
    }
}
