//! A sending mailbox's identity: its lower-cased SMTP address.

use std::fmt;

/// A sending mailbox, e.g. `events@contoso.example`, always lower-case.
///
/// Exchange's sending limits bind per mailbox, whichever app or tenant sends from it, so this
/// is also the limiter's key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct MailboxAddress(String);

/// A string that is not a usable mailbox address.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{value:?} is not a mailbox address (expected local@domain)")]
pub struct InvalidMailbox {
    /// What was given.
    pub value: String,
}

impl MailboxAddress {
    /// Parses and lower-cases `raw` (surrounding whitespace is trimmed).
    ///
    /// # Errors
    /// [`InvalidMailbox`] when `raw` is not a syntactically valid address.
    pub fn parse(raw: &str) -> Result<Self, InvalidMailbox> {
        let trimmed = raw.trim();
        if email_address::EmailAddress::is_valid(trimmed) && !trimmed.contains(['<', '>', ' ']) {
            Ok(Self(trimmed.to_lowercase()))
        } else {
            Err(InvalidMailbox {
                value: raw.to_owned(),
            })
        }
    }

    /// The lower-cased address.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for MailboxAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for MailboxAddress {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        Self::parse(&raw).map_err(serde::de::Error::custom)
    }
}

/// Masks a recipient address for logs: `lotte.jansen@example.com` → `l***@example.com`.
/// Only the part after the last `@` is kept; strings without `@` become `***`.
pub fn mask_address(address: &str) -> String {
    match address.trim().rsplit_once('@') {
        Some((local, domain)) => {
            let first: String = local.chars().take(1).collect();
            format!("{first}***@{domain}")
        }
        None => "***".to_owned(),
    }
}

/// `local@Bücher.example` → `local@xn--bcher-kva.example`. An ASCII address, or one whose
/// domain IDNA cannot convert, is returned unchanged (send-time validation judges it).
pub(crate) fn punycode_domain(address: &str) -> String {
    let trimmed = address.trim();
    match trimmed.rsplit_once('@') {
        Some((local, domain)) if !domain.is_ascii() => match idna::domain_to_ascii(domain) {
            Ok(ascii) if !ascii.is_empty() => format!("{local}@{ascii}"),
            _ => address.to_owned(),
        },
        _ => address.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mailbox_is_lower_cased_and_trimmed() {
        let m = MailboxAddress::parse("  Events@Contoso.Example ").unwrap();
        assert_eq!(m.as_str(), "events@contoso.example");
    }

    #[test]
    fn bad_mailboxes_are_rejected_by_name() {
        for raw in [
            "",
            "no-at-sign",
            "a@b@c",
            "a@example.org; b@example.org",
            "<a@b.c>",
        ] {
            let err = MailboxAddress::parse(raw).unwrap_err();
            assert_eq!(err.value, raw);
        }
    }

    #[test]
    fn masking_keeps_only_the_first_letter_and_domain() {
        assert_eq!(mask_address("lotte.jansen@example.com"), "l***@example.com");
        assert_eq!(mask_address("garbage"), "***");
        assert_eq!(mask_address("a@b@c@example.net"), "a***@example.net");
    }

    proptest::proptest! {
        /// Masking never reveals the local part: the output is the local part's first
        /// character, `***@`, and the part after the last `@` — nothing else of the local part.
        #[test]
        fn masking_never_reveals_the_local_part(
            local in "[^@\\s]{1,30}",
            domain in "[a-z0-9.-]{1,30}",
        ) {
            let masked = mask_address(&format!("{local}@{domain}"));
            let first: String = local.chars().take(1).collect();
            proptest::prop_assert_eq!(&masked, &format!("{first}***@{domain}"));
            let hidden: String = local.chars().skip(1).collect();
            if hidden.chars().count() >= 2 {
                proptest::prop_assert!(!masked[..masked.len() - domain.len()].contains(&hidden));
            }
        }

        /// Any text without `@` is fully hidden.
        #[test]
        fn text_without_an_at_sign_is_fully_hidden(text in "[^@]{0,40}") {
            proptest::prop_assert_eq!(mask_address(&text), "***");
        }

        /// parse ∘ display = id for a parsed address.
        #[test]
        fn a_displayed_mailbox_parses_back_to_itself(
            local in "[a-zA-Z0-9._%+-]{1,20}",
            domain in "[a-zA-Z0-9-]{1,15}\\.[a-z]{2,6}",
        ) {
            if let Ok(m) = MailboxAddress::parse(&format!("{local}@{domain}")) {
                proptest::prop_assert_eq!(MailboxAddress::parse(&m.to_string()), Ok(m));
            }
        }
    }
}
