//! What makes graph-sim return a non-delivery report (NDR) to the sending mailbox's Inbox
//! ([`SimBounces`]): recipients configured as unknown, a tenant over its external recipient
//! limit (its [`super::SimTenant`] budget), a mailbox over its recipients per day (`5.1.90`,
//! unless `quota_exceeded` is `refuse`), each after `delay_ms`, written in `layout`.

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
    /// How the NDRs are written (default `postmaster_dsn`).
    pub layout: NdrLayout,
    /// What a send over the mailbox's `recipients_per_day` gets (default `ndr`).
    pub quota_exceeded: QuotaExceeded,
}

/// The layout of an NDR, each one a real Exchange NDR's (`tests/fixtures/ndr/` of the product,
/// from sisimai/set-of-emails): `multipart/report; report-type=delivery-status` (RFC 6522) but
/// `plain`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NdrLayout {
    /// From the tenant's postmaster, a `message/delivery-status` part, no returned original, no
    /// `In-Reply-To`/`References`: the original's `Message-ID` only in the quoted headers of the
    /// text, the remote server's name between the recipient and "Remote Server returned"
    /// (exchange-online-03). The default: the hardest to match of the tenant layouts.
    #[default]
    PostmasterDsn,
    /// From the tenant's postmaster, the text only (no DSN part, no original, no
    /// `In-Reply-To`), "Remote Server returned '…'" (exchange-online-01).
    PostmasterText,
    /// Not MIME at all: a plain message from `postmaster@<tenant>.onmicrosoft.com`
    /// (exchange-online-02).
    Plain,
    /// From `Microsoft Outlook <postmaster@outlook.com>`: text, `message/delivery-status`,
    /// the original returned as `message/rfc822`, `In-Reply-To` and `References`
    /// (exchange-online-04..08).
    OutlookCom,
}

/// What a send over the mailbox's recipients per day gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuotaExceeded {
    /// `202`, then an NDR `550 5.1.90` for every recipient, as Exchange Online does: "Your
    /// message can't be sent because you've reached your daily limit for message recipients"
    /// (<https://learn.microsoft.com/exchange/mail-flow-best-practices/non-delivery-reports-in-exchange-online/non-delivery-reports-in-exchange-online>;
    /// the limit: <https://learn.microsoft.com/office365/servicedescriptions/exchange-online-service-description/exchange-online-limits#sending-limits>).
    #[default]
    Ndr,
    /// `429 ErrorSubmissionQuotaExceeded` with `Retry-After` (graph-sim's earlier answer; not
    /// documented by Microsoft).
    Refuse,
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
            layout: NdrLayout::default(),
            quota_exceeded: QuotaExceeded::default(),
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
