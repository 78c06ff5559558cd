//! What makes graph-sim return a non-delivery report (NDR) to the sending mailbox's Inbox
//! ([`SimBounces`]): recipients configured as unknown, and a tenant over its external recipient
//! limit (its [`super::SimTenant`] budget), each after `delay_ms`.

use serde::{Deserialize, Serialize};

/// NDR cases (`"bounces"` in the config file).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimBounces {
    /// How long after the accepted send its NDR appears in the Inbox (ms; default 0). Exchange
    /// Online's NDRs come seconds to minutes after the `202`; Microsoft documents no bound.
    pub delay_ms: u64,
    /// Recipients that do not exist: each accepted message to one of them gets an NDR.
    pub unknown_recipients: Vec<UnknownRecipients>,
}

/// Addresses that bounce, and with which DSN code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnknownRecipients {
    /// `user@domain` (one address) or `*@domain` (every user at the domain); no case.
    pub address: String,
    /// The enhanced status code: `5.1.1` (default: the user does not exist at a remote domain)
    /// or `5.1.10` (an Exchange Online recipient that was not found).
    #[serde(default = "default_code")]
    pub code: String,
}

fn default_code() -> String {
    "5.1.1".to_owned()
}

impl UnknownRecipients {
    /// Every user at `domain` bounces with `code`.
    pub fn domain(domain: &str, code: &str) -> Self {
        Self {
            address: format!("*@{domain}"),
            code: code.to_owned(),
        }
    }

    /// Whether `recipient` matches.
    pub(crate) fn matches(&self, recipient: &str) -> bool {
        match self.address.strip_prefix("*@") {
            Some(domain) => recipient
                .rsplit_once('@')
                .is_some_and(|(_, d)| d.eq_ignore_ascii_case(domain)),
            None => recipient.eq_ignore_ascii_case(&self.address),
        }
    }

    /// `5.x.y` with numbers, as DSN codes are (RFC 3463).
    pub(crate) fn code_is_permanent(&self) -> bool {
        let parts: Vec<&str> = self.code.split('.').collect();
        parts.len() == 3
            && parts[0] == "5"
            && parts[1..]
                .iter()
                .all(|p| !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()))
    }
}

impl SimBounces {
    /// The code `recipient` bounces with, if it is unknown.
    pub(crate) fn unknown(&self, recipient: &str) -> Option<&str> {
        self.unknown_recipients
            .iter()
            .find(|u| u.matches(recipient))
            .map(|u| u.code.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_domain_pattern_matches_every_user_there_and_an_address_only_itself() {
        let b = SimBounces {
            delay_ms: 0,
            unknown_recipients: vec![
                UnknownRecipients::domain("nowhere.example", "5.1.10"),
                UnknownRecipients {
                    address: "Gone@Fabrikam.example".into(),
                    code: default_code(),
                },
            ],
        };
        assert_eq!(b.unknown("a@NOWHERE.example"), Some("5.1.10"));
        assert_eq!(b.unknown("gone@fabrikam.example"), Some("5.1.1"));
        assert_eq!(b.unknown("here@fabrikam.example"), None);
        assert_eq!(b.unknown("a@sub.nowhere.example"), None);
        assert!(b.unknown_recipients[0].code_is_permanent());
        assert!(!UnknownRecipients::domain("x", "4.4.7").code_is_permanent());
        assert!(!UnknownRecipients::domain("x", "5.1").code_is_permanent());
    }
}
