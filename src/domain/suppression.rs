//! The suppression list's vocabulary: where an entry came from, the address as it is matched,
//! and which delivery status codes (DSN, RFC 3463) are hard bounces that suppress the address.
//! The table and its sources: `docs/suppressions.md`.

use super::{MailboxAddress, mask_address, punycode_domain};

/// `last_error` of a message whose every recipient is suppressed, at intake or at send: `ERROR`,
/// never sent, never retried.
pub const ALL_SUPPRESSED: &str = "all recipients suppressed";

/// `suppressions.source`: how an address came onto the list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SuppressionSource {
    /// A hard bounce (a non-delivery report read back from the mailbox).
    Bounce,
    /// An operator: `mail-worker suppressions add`, the admin UI.
    Manual,
    /// `mail-worker suppressions import FILE.csv`.
    Import,
}

super::keyword::keywords!(SuppressionSource {
    Bounce => "bounce",
    Manual => "manual",
    Import => "import",
});

/// The form in which a recipient is compared with the list: trimmed, the domain in punycode
/// (as the campaign import stores it), lower case. Any text has one (a recipient is not
/// validated on the way in); [`suppressed_address`] is the checked form for the list itself.
pub(crate) fn match_key(address: &str) -> String {
    punycode_domain(address.trim()).to_lowercase()
}

/// An address as the list stores it: [`match_key`] of a syntactically valid mailbox address.
///
/// # Errors
/// The address is not `local@domain`; the text masks it (it may reach a log).
pub(crate) fn suppressed_address(raw: &str) -> Result<String, String> {
    let key = match_key(raw);
    MailboxAddress::parse(&key)
        .map(|a| a.as_str().to_owned())
        .map_err(|_| {
            format!(
                "{} is not a mailbox address (expected local@domain)",
                mask_address(raw)
            )
        })
}

/// A delivery status code that suppresses its recipient: the address itself is permanently
/// undeliverable, so sending to it again can only bounce again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HardBounce {
    /// The enhanced status code as found, e.g. `5.1.1`.
    pub code: String,
    /// What it means, e.g. `recipient address unknown`.
    pub meaning: &'static str,
}

impl HardBounce {
    /// The `reason` a bounce's entry is stored with: `5.1.1 recipient address unknown`.
    pub fn reason(&self) -> String {
        format!("{} {}", self.code, self.meaning)
    }
}

/// The hard enhanced status codes (class 5) and their meaning. Everything else is not: 4.x.x is
/// transient by definition, and the other 5.x.x codes name the sender, the tenant, the message
/// or a policy (5.1.7, 5.1.8, 5.1.90, 5.2.2, 5.2.3, 5.7.x …), not a recipient that does not
/// exist. Sources and the codes left out on purpose: `docs/suppressions.md`.
/// - RFC 3463 §3.2 (subject 1, addressing; subject 2, mailbox):
///   <https://www.rfc-editor.org/rfc/rfc3463#section-3.2>
/// - Exchange Online's NDRs 5.1.1 to 5.1.20 (5.1.10: recipient not found by SMTP address lookup):
///   <https://learn.microsoft.com/exchange/troubleshoot/email-delivery/ndr/fix-error-code-550-5-1-1-through-5-1-20-in-exchange-online>
/// - 5.4.1, directory-based edge blocking: the recipient's address does not exist in the
///   recipient's Microsoft 365 tenant:
///   <https://support.microsoft.com/topic/c0e98a8e-81db-49c2-9bf1-32a1734d3e77>
const HARD: &[(&str, &str)] = &[
    ("5.1.1", "recipient address unknown"),
    ("5.1.2", "recipient domain does not exist"),
    ("5.1.3", "recipient address syntax invalid"),
    ("5.1.6", "recipient mailbox moved, no forwarding address"),
    ("5.1.10", "recipient not found by SMTP address lookup"),
    ("5.2.1", "recipient mailbox disabled"),
    (
        "5.4.1",
        "recipient address rejected (not in the recipient's tenant)",
    ),
];

/// Whether the delivery status in `dsn_code` is a hard bounce. `dsn_code` is an enhanced status
/// code (`5.1.1`), alone or inside the status text a report carries (`550 5.1.1 RESOLVER.ADR…`,
/// `#550 5.4.1 …##`): its first `class.subject.detail` token counts. Pure; no code → `None`.
pub fn classify(dsn_code: &str) -> Option<HardBounce> {
    let code = dsn_code
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map(|t| t.trim_matches('.'))
        .find(|t| is_enhanced_code(t))?;
    HARD.iter()
        .find(|(hard, _)| *hard == code)
        .map(|(hard, meaning)| HardBounce {
            code: (*hard).to_owned(),
            meaning,
        })
}

/// `class.subject.detail`: class 2, 4 or 5, subject up to 3 digits, detail up to 3 digits
/// (RFC 3463 §2).
fn is_enhanced_code(token: &str) -> bool {
    let parts: Vec<&str> = token.split('.').collect();
    matches!(parts.as_slice(), [class, subject, detail]
        if matches!(*class, "2" | "4" | "5")
            && [subject, detail].iter().all(|p| (1..=3).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_recipients_and_dbeb_rejections_are_hard() {
        for (given, code) in [
            ("5.1.1", "5.1.1"),
            ("550 5.1.1 RESOLVER.ADR.RecipNotFound; not found", "5.1.1"),
            (
                "#550 5.1.10 RESOLVER.ADR.RecipientNotFound; Recipient not found by SMTP address lookup ##",
                "5.1.10",
            ),
            (
                "550 5.4.1 Recipient address rejected: Access denied.",
                "5.4.1",
            ),
            (" 5.1.2 ", "5.1.2"),
            ("5.2.1.", "5.2.1"),
        ] {
            assert_eq!(
                classify(given).map(|h| h.code),
                Some(code.to_owned()),
                "{given}"
            );
        }
        assert_eq!(
            classify("5.1.1").unwrap().reason(),
            "5.1.1 recipient address unknown"
        );
    }

    #[test]
    fn sender_tenant_message_and_transient_codes_are_not() {
        for given in [
            "5.1.8",  // our mailbox is blocked for outbound spam
            "5.1.90", // our mailbox's daily recipient limit
            "5.1.7",  // invalid sender address
            "550 5.7.233 tenant external recipient limit",
            "5.7.1", // delivery not authorized (policy)
            "5.2.2", // mailbox full
            "5.2.3", // message too large
            "5.4.4", // unable to route
            "4.1.1", // transient class
            "4.4.7",
            "2.0.0",
            "",
            "550",
            "5.1",
            "5.1.1.1",
            "15.1.1",
            "5.1.1000",
        ] {
            assert_eq!(classify(given), None, "{given}");
        }
    }

    #[test]
    fn the_list_stores_trimmed_lower_case_punycode_addresses() {
        assert_eq!(
            suppressed_address("  Lotte.Jansen@Bücher.Example "),
            Ok("lotte.jansen@xn--bcher-kva.example".into())
        );
        assert_eq!(match_key(" A@B.example"), "a@b.example");
        let err = suppressed_address("lotte.jansen at example.com").unwrap_err();
        assert!(!err.contains("jansen"), "{err}");
        assert!(suppressed_address("").is_err());
    }

    #[test]
    fn sources_are_keywords() {
        assert_eq!("import".parse(), Ok(SuppressionSource::Import));
        assert_eq!(SuppressionSource::Bounce.as_str(), "bounce");
        assert!("Manual".parse::<SuppressionSource>().is_err());
    }
}
