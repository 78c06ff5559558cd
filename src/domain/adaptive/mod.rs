//! Adaptive rules (issue 43 point 4, docs/decisions/0048-adaptive-rules.md): a Graph or
//! Exchange signal seen `threshold` times within `window` for one mailbox, tenant or campaign
//! starts an action on it — its budgets shrunk by a factor, or its mail suspended — for
//! `duration`, after which the factor steps back up (doubling every `recover_every`) until the
//! whole budget is back. The table ([`RuleTable`]): the defaults here, or the file
//! `ADAPTIVE_RULES_FILE` names (`parse.rs`). Pure: the shared state is the limiter's
//! (`crate::rate_limit::adaptive`).

mod action;
mod parse;

use std::time::Duration;

pub use action::{ActionInForce, OPERATOR, shrink};
pub use parse::{RulesFileError, parse_rules};

/// A signal a rule counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Signal {
    /// Graph's `429 ApplicationThrottled` "Application is over its MailboxConcurrency limit."
    /// (<https://learn.microsoft.com/graph/throttling-limits#outlook-service-limits>).
    MailboxConcurrency,
    /// Graph's `429 ApplicationThrottled` "Application is over its IncomingBytes limit."
    /// (same page: 150 MB uploaded per 5 minutes per app and mailbox).
    IncomingBytes,
    /// NDR `5.7.233`: the tenant's external recipient rate limit.
    Ndr5_7_233,
    /// NDR `5.7.705`: "tenant has exceeded threshold".
    Ndr5_7_705,
    /// NDR `5.7.708`: "traffic not accepted from this IP" (a new tenant).
    Ndr5_7_708,
    /// NDR `5.7.501`: "spam abuse detected".
    Ndr5_7_501,
    /// NDR `5.1.90`: the mailbox's recipients per day used up.
    Ndr5_1_90,
    /// NDR `5.2.2` with a submission quota.
    Ndr5_2_2,
    /// A `503`/`504` answer from Graph (a run of them is a rule's threshold).
    ServerErrors,
}

crate::domain::keyword::keywords!(Signal {
    MailboxConcurrency => "429:MailboxConcurrency",
    IncomingBytes => "429:IncomingBytes",
    Ndr5_7_233 => "5.7.233",
    Ndr5_7_705 => "5.7.705",
    Ndr5_7_708 => "5.7.708",
    Ndr5_7_501 => "5.7.501",
    Ndr5_1_90 => "5.1.90",
    Ndr5_2_2 => "5.2.2",
    ServerErrors => "5xx",
});

impl Signal {
    /// The NDR signal of an enhanced status code (alone or first in a status text: `550
    /// 5.7.705 …`), if a rule may count it.
    pub fn of_ndr(code: &str) -> Option<Self> {
        super::failure::enhanced_code(code)?
            .parse()
            .ok()
            .filter(|s: &Self| s.is_ndr())
    }

    /// The signal of a Graph throttling answer's error message (`None`: another limit).
    pub fn of_throttle_message(message: &str) -> Option<Self> {
        if message.contains("MailboxConcurrency") {
            Some(Self::MailboxConcurrency)
        } else if message.contains("IncomingBytes") {
            Some(Self::IncomingBytes)
        } else {
            None
        }
    }

    /// Whether Exchange tells it in a non-delivery report (read after the send, so it names
    /// no campaign: a campaign-scoped rule cannot count it).
    pub fn is_ndr(self) -> bool {
        !matches!(
            self,
            Self::MailboxConcurrency | Self::IncomingBytes | Self::ServerErrors
        )
    }
}

/// Whose budget a rule's action holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// The sending mailbox: all its mail.
    Mailbox,
    /// The Graph tenant: its *external* mail (the tenant's reputation is about mail leaving
    /// it; internal mail goes on).
    Tenant,
    /// One campaign (`messages.campaign_id`): its messages wait, on every sender.
    Campaign,
}

crate::domain::keyword::keywords!(Scope {
    Mailbox => "mailbox",
    Tenant => "tenant",
    Campaign => "campaign",
});

/// Which budgets a shrink lowers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Budgets {
    /// The per-minute budget only.
    PerMinute,
    /// The day budget only (a tenant's: its external recipients per day).
    PerDay,
    /// Both (default).
    #[default]
    Both,
}

crate::domain::keyword::keywords!(Budgets {
    PerMinute => "perMinute",
    PerDay => "perDay",
    Both => "both",
});

/// What a rule does when it fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// The budgets times `factor` (per mille, 1 to 999) while it holds.
    Shrink {
        /// ‰ of the budget left.
        permille: u16,
        /// Which budgets.
        budgets: Budgets,
    },
    /// Nothing goes while it holds.
    Suspend,
}

impl Action {
    /// `shrink` or `suspend`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Shrink { .. } => "shrink",
            Self::Suspend => "suspend",
        }
    }
}

/// One rule of the table.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rule {
    /// Its name: in log lines, metrics (`rule`) and `mailbox usage`.
    pub name: String,
    /// What it counts.
    pub signal: Signal,
    /// How many signals within `window` fire it.
    pub threshold: u32,
    /// The rolling window the signals are counted in.
    pub window: Duration,
    /// Whose budget it holds.
    pub scope: Scope,
    /// What it does.
    pub action: Action,
    /// How long the action holds at its full strength.
    pub duration: Duration,
    /// After `duration`, the factor doubles every this long until the whole budget is back.
    pub recover_every: Duration,
    /// The factor (‰) a suspension recovers from: the first step after `duration`.
    pub recover_from_permille: u16,
}

/// The rule table in force.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RuleTable {
    /// In file order; every rule whose signal and scope match counts a signal.
    pub rules: Vec<Rule>,
}

/// ‰ of a whole budget.
pub const WHOLE: u16 = 1000;

/// The default recovery start of a suspension: a quarter of the budget.
pub const DEFAULT_RECOVER_FROM_PERMILLE: u16 = 250;

impl RuleTable {
    /// The built-in rules (docs/adaptive-rules.md):
    /// - `mailbox-concurrency`: 3 `429 MailboxConcurrency` in 10 min → the mailbox's
    ///   per-minute budget at a quarter for 10 min, then a half for 5 min, then whole. Graph allows 4
    ///   concurrent requests per app and mailbox
    ///   (<https://learn.microsoft.com/graph/throttling-limits#outlook-service-limits>):
    ///   repeated refusals mean another app shares the mailbox, so we slow down;
    /// - `incoming-bytes`: 3 `429 IncomingBytes` in 10 min → the same;
    /// - `tenant-reputation-705` / `-708` / `-501`: 1 NDR → the tenant's external mail
    ///   suspended for 24 h, then a quarter of its budget doubling every 6 h. Microsoft gives
    ///   no end to these blocks (a support case lifts them,
    ///   <https://learn.microsoft.com/exchange/mail-flow-best-practices/non-delivery-reports-in-exchange-online/fix-error-code-5-7-700-through-5-7-750>):
    ///   the safe reading stops at the first one;
    /// - `server-errors`: 5 `503`/`504` in 5 min → the mailbox's per-minute budget at a
    ///   quarter for 5 min, then a half for 5 min, then whole.
    ///
    /// The quota NDRs (`5.1.90`, `5.2.2`, `5.7.233`) keep their limit pauses (ADR 0032) and
    /// have no default rule; a file may add some.
    pub fn defaults() -> Self {
        let minutes = |m: u64| Duration::from_secs(m * 60);
        let quarter = Action::Shrink {
            permille: 250,
            budgets: Budgets::PerMinute,
        };
        let slow_down = |name: &str, signal, threshold, window| Rule {
            name: name.to_owned(),
            signal,
            threshold,
            window,
            scope: Scope::Mailbox,
            action: quarter,
            duration: window,
            recover_every: minutes(5),
            recover_from_permille: DEFAULT_RECOVER_FROM_PERMILLE,
        };
        let reputation = |name: &str, signal| Rule {
            name: name.to_owned(),
            signal,
            threshold: 1,
            window: minutes(60),
            scope: Scope::Tenant,
            action: Action::Suspend,
            duration: minutes(24 * 60),
            recover_every: minutes(6 * 60),
            recover_from_permille: DEFAULT_RECOVER_FROM_PERMILLE,
        };
        Self {
            rules: vec![
                slow_down(
                    "mailbox-concurrency",
                    Signal::MailboxConcurrency,
                    3,
                    minutes(10),
                ),
                slow_down("incoming-bytes", Signal::IncomingBytes, 3, minutes(10)),
                reputation("tenant-reputation-705", Signal::Ndr5_7_705),
                reputation("tenant-reputation-708", Signal::Ndr5_7_708),
                reputation("tenant-reputation-501", Signal::Ndr5_7_501),
                slow_down("server-errors", Signal::ServerErrors, 5, minutes(5)),
            ],
        }
    }

    /// The rules that count `signal` for `scope`.
    pub fn counting(&self, signal: Signal) -> impl Iterator<Item = &Rule> {
        self.rules.iter().filter(move |r| r.signal == signal)
    }

    /// The rule named `name`.
    pub fn named(&self, name: &str) -> Option<&Rule> {
        self.rules.iter().find(|r| r.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_parse_by_their_table_names() {
        assert_eq!(
            "429:MailboxConcurrency".parse(),
            Ok(Signal::MailboxConcurrency)
        );
        assert_eq!("5xx".parse(), Ok(Signal::ServerErrors));
        assert_eq!(Signal::of_ndr("5.7.705"), Some(Signal::Ndr5_7_705));
        assert_eq!(Signal::of_ndr("5xx"), None);
        assert_eq!(Signal::of_ndr("5.1.1"), None);
        assert_eq!(
            Signal::of_throttle_message("Application is over its IncomingBytes limit."),
            Some(Signal::IncomingBytes)
        );
    }
}
