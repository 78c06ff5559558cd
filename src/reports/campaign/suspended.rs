//! Suspensions in the forecasts: an operator's `suspend` or an adaptive rule's suspension of a
//! mailbox (a cooldown to its end) or of its Graph tenant's external mail (a warning).

use chrono::{DateTime, Utc};

use crate::{
    domain::adaptive::ActionInForce,
    forecast::{self, SenderState},
    rate_limit::usage::UsageReader,
};

/// `state` held by the mailbox's suspension among `suspensions`: a cooldown to its end.
/// Whether there was one.
pub(in crate::reports) fn held_by(
    suspensions: &[forecast::Warning],
    state: &mut SenderState,
) -> bool {
    let mut held = false;
    for s in suspensions {
        if let forecast::Warning::Suspended {
            scope: "mailbox",
            until,
            ..
        } = s
        {
            state.cooldown_until = state.cooldown_until.max(Some(*until));
            held = true;
        }
    }
    held
}

/// The suspensions in force at `now` on `mailbox` and on its Graph `tenant`'s external mail
/// (an operator's or an adaptive rule's), as warnings; none when the limiter cannot be read
/// (the forecast says so apart).
pub(in crate::reports) async fn suspensions_of(
    reader: &mut UsageReader<'_>,
    tenant: &str,
    mailbox: &crate::domain::MailboxAddress,
    now: DateTime<Utc>,
) -> Vec<forecast::Warning> {
    match reader.adaptive(tenant, mailbox).await {
        Ok(actions) => suspensions_in(&actions, now),
        Err(_) => Vec::new(),
    }
}

/// The suspensions among `actions` (a mailbox's and its tenant's, as `UsageReader::adaptive`
/// reads them) in force at `now`, as warnings.
pub(in crate::reports) fn suspensions_in(
    actions: &[Option<ActionInForce>; 2],
    now: DateTime<Utc>,
) -> Vec<forecast::Warning> {
    let now_ms = now.timestamp_millis();
    ["mailbox", "tenant"]
        .into_iter()
        .zip(actions)
        .filter_map(|(scope, action)| {
            let action = action.as_ref().filter(|a| a.suspends_at(now_ms))?;
            Some(forecast::Warning::Suspended {
                scope,
                rule: action.rule.clone(),
                until: DateTime::from_timestamp_millis(action.held_until_ms)?,
            })
        })
        .collect()
}
