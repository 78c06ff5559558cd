//! Exchange Online's per-mailbox sending limits, and the one warning given for a limit set
//! above them (by env, `mailbox set-limits` or the senders import).

/// Exchange Online's per-mailbox limits the default budgets must stay under: 30 messages per
/// minute and 10,000 recipients per rolling 24 h
/// (<https://learn.microsoft.com/office365/servicedescriptions/exchange-online-service-description/exchange-online-limits#sending-limits>).
pub(crate) const EXCHANGE_MESSAGES_PER_MINUTE: u32 = 30;
/// See [`EXCHANGE_MESSAGES_PER_MINUTE`].
pub(crate) const EXCHANGE_RECIPIENTS_PER_DAY: u32 = 10_000;
/// Where Microsoft documents both.
pub const EXCHANGE_LIMITS_PAGE: &str = "https://learn.microsoft.com/office365/servicedescriptions/exchange-online-service-description/exchange-online-limits#sending-limits";

/// A warning for each limit above Exchange Online's: `per_minute` and `per_day` are
/// `(where it was set, value)`, e.g. `("--per-minute", 40)`. The env, `mailbox set-limits` and
/// the senders import all warn through this one function.
pub(crate) fn above_exchange(
    per_minute: Option<(&str, u32)>,
    per_day: Option<(&str, u32)>,
) -> Vec<String> {
    let mut found = Vec::new();
    if let Some((name, value)) = per_minute.filter(|(_, v)| *v > EXCHANGE_MESSAGES_PER_MINUTE) {
        found.push(format!(
            "{name}={value} is above Exchange Online's {EXCHANGE_MESSAGES_PER_MINUTE} messages per mailbox per minute: Graph will throttle the excess with 429s ({EXCHANGE_LIMITS_PAGE})"
        ));
    }
    if let Some((name, value)) = per_day.filter(|(_, v)| *v > EXCHANGE_RECIPIENTS_PER_DAY) {
        found.push(format!(
            "{name}={value} is above Exchange Online's {EXCHANGE_RECIPIENTS_PER_DAY} recipients per mailbox per rolling 24 h: Exchange blocks a mailbox that exceeds it, and its mail bounces after Graph accepted it ({EXCHANGE_LIMITS_PAGE})"
        ));
    }
    found
}
