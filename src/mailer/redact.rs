//! Scrubs provider-supplied text before it becomes part of a [`super::MailError`]: recipient
//! addresses are masked (`l***@example.com`) and the text is capped, so an error stored in
//! `messages.error` or logged never carries a full address.

use crate::domain::mask_address;

/// The longest provider message kept in an error, in characters.
pub const MAX_PROVIDER_TEXT_CHARS: usize = 400;

/// `text` with every `local@domain` masked by [`mask_address`], control characters turned into
/// spaces, and cut to [`MAX_PROVIDER_TEXT_CHARS`] characters (an ellipsis marks a cut).
pub fn scrub_provider_text(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len().min(MAX_PROVIDER_TEXT_CHARS * 4));
    let mut i = 0;
    let mut written_until = 0; // index into `chars` up to which output was produced
    while i < chars.len() {
        if chars[i] != '@' {
            i += 1;
            continue;
        }
        let mut start = i;
        while start > written_until && is_local_char(chars[start - 1]) {
            start -= 1;
        }
        let mut end = i + 1;
        while end < chars.len() && is_domain_char(chars[end]) {
            end += 1;
        }
        // A trailing dot belongs to the sentence, not the domain.
        while end > i + 1 && chars[end - 1] == '.' {
            end -= 1;
        }
        if start < i && end > i + 1 {
            out.extend(chars[written_until..start].iter());
            let address: String = chars[start..end].iter().collect();
            out.push_str(&mask_address(&address));
            written_until = end;
            i = end;
        } else {
            i += 1;
        }
    }
    out.extend(chars[written_until..].iter());
    let cleaned: String = out
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let cleaned = cleaned.trim();
    if cleaned.chars().count() > MAX_PROVIDER_TEXT_CHARS {
        let mut cut: String = cleaned.chars().take(MAX_PROVIDER_TEXT_CHARS).collect();
        cut.push('…');
        cut
    } else {
        cleaned.to_owned()
    }
}

fn is_local_char(c: char) -> bool {
    // Quotes and brackets are left out: providers wrap addresses in them ('a@b', <a@b>).
    c.is_alphanumeric() || "._%+-!#$&*/=?^~".contains(c)
}

fn is_domain_char(c: char) -> bool {
    c.is_alphanumeric() || c == '.' || c == '-'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_inside_provider_messages_are_masked() {
        let text = "At least one recipient is not valid., Recipient 'lotte.jansen@example.com' is not resolved. Also bob+x@mail.example.org.";
        assert_eq!(
            scrub_provider_text(text),
            "At least one recipient is not valid., Recipient 'l***@example.com' is not resolved. Also b***@mail.example.org."
        );
    }

    #[test]
    fn text_without_addresses_is_kept_and_long_text_is_cut() {
        assert_eq!(scrub_provider_text("a @ b, @x, y@"), "a @ b, @x, y@");
        assert_eq!(scrub_provider_text("line\r\nbreak"), "line  break");
        let long = "x".repeat(1000);
        let cut = scrub_provider_text(&long);
        assert_eq!(cut.chars().count(), MAX_PROVIDER_TEXT_CHARS + 1);
        assert!(cut.ends_with('…'));
    }
}
