//! The adaptive actions in force on a mailbox and its tenant, in words, for `mailbox usage`
//! and the admin UI's mailbox page (docs/adaptive-rules.md).

use crate::domain::adaptive::ActionInForce;

/// The actions in force at `now` on a mailbox and on its Graph tenant (`actions`, as
/// `UsageReader::adaptive` reads them), in words.
pub(crate) fn actions_in_words(
    actions: &[Option<ActionInForce>; 2],
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<String> {
    ["mailbox", "tenant (external mail)"]
        .into_iter()
        .zip(actions)
        .filter_map(|(scope, action)| {
            // A `resume` mark or a recovered action holds nothing.
            let action = action
                .as_ref()
                .filter(|a| a.permille_at(now.timestamp_millis()) < 1000)?;
            Some(describe_action(scope, action, now))
        })
        .collect()
}

/// An adaptive action in words: "mailbox: mailbox-concurrency holds 25 % of the budget until
/// 09:13:00 UTC, whole again by 09:18:00 UTC".
fn describe_action(
    scope: &str,
    action: &crate::domain::adaptive::ActionInForce,
    now: chrono::DateTime<chrono::Utc>,
) -> String {
    let at = |ms| {
        chrono::DateTime::from_timestamp_millis(ms).map_or_else(
            || "-".to_owned(),
            |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        )
    };
    let now_ms = now.timestamp_millis();
    let permille = action.permille_at(now_ms);
    let what = if permille == 0 {
        "suspends it".to_owned()
    } else {
        format!(
            "holds {} % of its budget ({})",
            permille / 10,
            action.budgets
        )
    };
    let reason = action
        .reason
        .as_deref()
        .map(|r| format!(" ({r})"))
        .unwrap_or_default();
    format!(
        "{scope}: {}{reason} {what}; held until {}, whole again by {}",
        action.rule,
        at(action.held_until_ms),
        at(action.ends_at_ms())
    )
}
