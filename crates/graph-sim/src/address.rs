//! graph-sim's own address check, written from the RFCs rather than taken from the product (a
//! shared parser would share its bugs instead of catching them): an `addr-spec`
//! (`local-part@domain`, RFC 5322 §3.4.1) in the dot-atom form, at most 64 octets before the
//! `@` and 254 in all (RFC 5321 §4.5.3.1), a domain of at least two LDH labels of 1–63 octets
//! (RFC 1035 §2.3.1; an internationalised domain must come as punycode). Quoted local parts and
//! domain literals are refused: Exchange Online's recipients are SMTP addresses of accepted or
//! public domains, so the stricter reading is taken.

use std::fmt;

/// A mailbox address that passed [`is_smtp_address`], lower-cased.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Address(String);

impl Address {
    /// `raw` trimmed and lower-cased when it is an SMTP address.
    ///
    /// # Errors
    /// The text, naming the rule, when it is not.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let trimmed = raw.trim();
        if is_smtp_address(trimmed) {
            Ok(Self(trimmed.to_ascii_lowercase()))
        } else {
            Err(format!(
                "{raw:?} is not an SMTP address (local-part@domain, ASCII, a dotted domain)"
            ))
        }
    }

    /// The lower-cased address.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `atext` of RFC 5322 §3.2.3.
fn is_atext(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-/=?^_`{|}~".contains(c)
}

/// Whether `text` (untrimmed) is one SMTP address (module doc).
pub fn is_smtp_address(text: &str) -> bool {
    let Some((local, domain)) = text.split_once('@') else {
        return false;
    };
    let local_ok = (1..=64).contains(&local.len())
        && local
            .split('.')
            .all(|atom| !atom.is_empty() && atom.chars().all(is_atext));
    let labels: Vec<&str> = domain.split('.').collect();
    let domain_ok = domain.len() <= 253
        && labels.len() >= 2
        && labels.iter().all(|l| {
            (1..=63).contains(&l.len())
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        });
    text.len() <= 254 && local_ok && domain_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_addresses_pass_and_are_lower_cased() {
        for ok in [
            "a@b.example",
            "lotte.jansen+tag@Example.COM",
            "o'brien@xn--bcher-kva.example",
        ] {
            assert!(is_smtp_address(ok), "{ok}");
        }
        assert_eq!(
            Address::parse(" Events@Contoso.Example ").unwrap().as_str(),
            "events@contoso.example"
        );
    }

    #[test]
    fn what_is_not_one_smtp_address_is_refused() {
        for bad in [
            "",
            "no-at-sign",
            "a@b@c.example",
            "a@example.org; b@example.org",
            "<a@b.example>",
            "a b@c.example",
            ".a@b.example",
            "a..b@c.example",
            "a@localhost",
            "a@-b.example",
            "a@b..example",
            "jürgen@b.example",
            "a@bücher.example",
            "\"quoted\"@b.example",
            "a@[192.0.2.1]",
            " a@b.example",
        ] {
            assert!(!is_smtp_address(bad), "{bad:?}");
        }
        let long_local = format!("{}@b.example", "a".repeat(65));
        assert!(!is_smtp_address(&long_local));
        assert!(
            Address::parse("a@b@c")
                .unwrap_err()
                .contains("not an SMTP address")
        );
    }
}
