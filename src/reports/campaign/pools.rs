//! A running campaign's pooled messages by pool (`campaign status`, the admin UI's campaign
//! page; docs/decisions/0046-sender-pools.md): each member's sent and waiting rows, what waits
//! unplaced, and what overflowed, by reason.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::store::pool_views::{PoolMember, PooledRows};

/// One member's share of a campaign's pooled messages.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MemberCounts {
    /// The member's mailbox (lower case).
    pub mailbox: String,
    /// Sent (`SENT`, `DELIVERED`, `BOUNCED`).
    pub sent: i64,
    /// Placed on it and waiting (`SCHEDULED`, `SENDING`).
    pub waiting: i64,
    /// Ended in `ERROR` (failed or cancelled).
    pub failed: i64,
}

/// One pool's part of a campaign.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PoolStatus {
    /// `senderPool`.
    pub pool: String,
    /// Every member (the file's order), with zeros for one that has none of the campaign's.
    pub members: Vec<MemberCounts>,
    /// Waiting for their first attempt, not placed on a member yet.
    pub unplaced: i64,
    /// Given to the overflow sender, by sender mailbox, with counts.
    pub overflow: Vec<MemberCounts>,
    /// Overflowed messages by reason (`budgetsSpent`, `forecastMisses`).
    pub overflowed: BTreeMap<String, i64>,
}

/// The campaign's pools from its pooled `rows` ([`crate::store::pool_views::campaign_rows`])
/// and every pool's `members`.
pub(super) fn pool_statuses(rows: &[PooledRows], members: &[PoolMember]) -> Vec<PoolStatus> {
    let mut pools: BTreeMap<&str, PoolStatus> = BTreeMap::new();
    for row in rows {
        let status = pools.entry(&row.pool).or_insert_with(|| PoolStatus {
            pool: row.pool.clone(),
            members: members
                .iter()
                .filter(|m| m.pool == row.pool)
                .map(|m| MemberCounts {
                    mailbox: m.mailbox.clone(),
                    ..MemberCounts::default()
                })
                .collect(),
            unplaced: 0,
            overflow: Vec::new(),
            overflowed: BTreeMap::new(),
        });
        let Some(mailbox) = &row.mailbox else {
            status.unplaced += row.waiting;
            continue;
        };
        let list = match &row.overflow_reason {
            Some(reason) => {
                *status.overflowed.entry(reason.clone()).or_default() +=
                    row.sent + row.waiting + row.failed;
                &mut status.overflow
            }
            None => &mut status.members,
        };
        let at = match list.iter().position(|m| &m.mailbox == mailbox) {
            Some(at) => at,
            None => {
                // A member removed from the pool since (its rows stay its own).
                list.push(MemberCounts {
                    mailbox: mailbox.clone(),
                    ..MemberCounts::default()
                });
                list.len() - 1
            }
        };
        let counts = &mut list[at];
        counts.sent += row.sent;
        counts.waiting += row.waiting;
        counts.failed += row.failed;
    }
    pools.into_values().collect()
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::*;

    fn rows(pool: &str, mailbox: Option<&str>, reason: Option<&str>, n: [i64; 3]) -> PooledRows {
        PooledRows {
            pool: pool.into(),
            mailbox: mailbox.map(Into::into),
            overflow_reason: reason.map(Into::into),
            sent: n[0],
            waiting: n[1],
            failed: n[2],
        }
    }

    #[test]
    fn members_without_rows_show_zeros_and_overflow_is_counted_by_reason() {
        let members: Vec<PoolMember> = ["a@x.org", "b@x.org", "c@x.org"]
            .iter()
            .map(|m| PoolMember {
                pool: "invites".into(),
                pool_id: Uuid::nil(),
                sender_id: Uuid::new_v4(),
                mailbox: (*m).into(),
            })
            .collect();
        let status = pool_statuses(
            &[
                rows("invites", None, None, [0, 4, 0]),
                rows("invites", Some("a@x.org"), None, [5, 1, 0]),
                rows("invites", Some("c@x.org"), None, [3, 0, 1]),
                rows("invites", Some("sg@y.org"), Some("budgetsSpent"), [2, 1, 0]),
            ],
            &members,
        );
        assert_eq!(status.len(), 1);
        let s = &status[0];
        let counts: Vec<(&str, i64, i64, i64)> = s
            .members
            .iter()
            .map(|m| (m.mailbox.as_str(), m.sent, m.waiting, m.failed))
            .collect();
        assert_eq!(
            counts,
            [
                ("a@x.org", 5, 1, 0),
                ("b@x.org", 0, 0, 0),
                ("c@x.org", 3, 0, 1)
            ]
        );
        assert_eq!(s.unplaced, 4);
        assert_eq!(s.overflow.len(), 1);
        assert_eq!((s.overflow[0].sent, s.overflow[0].waiting), (2, 1));
        assert_eq!(s.overflowed.get("budgetsSpent"), Some(&3));
    }
}
