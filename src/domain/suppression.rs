//! The suppression list's vocabulary: where an entry came from, the address as it is matched,
//! and what a hard bounce that suppresses the address is (which codes are: `failure.rs`, the one
//! table of both failure sources).
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

#[cfg(test)]
mod tests {
    use super::*;

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
