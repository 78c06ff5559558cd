//! Scrubs provider-supplied text before it becomes part of a [`super::MailError`]: credentials
//! a provider echoes (a JWT access token, `Bearer …`, `client_secret=…`, a SendGrid `SG.` key,
//! and any exact secret the mailer knows) become `***`, recipient addresses are masked
//! (`l***@example.com`) and the text is capped, so an error stored in `messages.last_error` or
//! logged never carries a credential or a full address.

use crate::domain::mask_address;

/// The longest provider message kept in an error, in characters.
pub(crate) const MAX_PROVIDER_TEXT_CHARS: usize = 400;

/// `text` with every `local@domain` masked by [`mask_address`], control characters turned into
/// spaces, and cut to [`MAX_PROVIDER_TEXT_CHARS`] characters (an ellipsis marks a cut).
pub(crate) fn scrub_provider_text(text: &str) -> String {
    let text = redact_credentials(text);
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

/// `text` with each of `secrets` and every credential-shaped word ([`redact_credentials`])
/// replaced by `***`, nothing else changed (our own text around a provider's: the sending
/// mailbox stays readable).
pub(crate) fn redact_secrets(text: &str, secrets: &[&str]) -> String {
    let mut text = text.to_owned();
    for secret in secrets.iter().filter(|s| s.len() >= 4) {
        text = text.replace(secret, "***");
    }
    redact_credentials(&text)
}

/// Key names whose value is a credential (`name=value`, `name: value`, `"name":"value"`).
const SECRET_KEYS: &[&str] = &[
    "client_secret",
    "client_assertion",
    "access_token",
    "refresh_token",
    "id_token",
    "api_key",
    "apikey",
    "password",
    "secret",
    "token",
    "authorization",
];

/// Whether `word` (lower case) names a credential: one of [`SECRET_KEYS`], alone or as the last
/// part of a compound (`graph_client_secret`, `x-api_key`); `InvalidAuthenticationToken` is not.
fn is_secret_key(word: &str) -> bool {
    SECRET_KEYS.iter().any(|k| {
        word == *k
            || word
                .strip_suffix(k)
                .is_some_and(|head| head.ends_with(['_', '-', '.']))
    })
}

fn is_credential_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-_.~+/=".contains(c)
}

/// Replaces credential-shaped words with `***`: a JWT (`eyJ…` with two dots), a SendGrid key
/// (`SG.…`), the word after `Bearer `, and the value after a credential key name
/// (`client_secret`, `access_token`, `api_key`, `password`, `token`, …).
pub(crate) fn redact_credentials(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let mut redact_next = false;
    while i < chars.len() {
        if !is_credential_char(chars[i]) {
            // Only blanks and quotes may stand between a key and its value.
            if !" \t\"'".contains(chars[i]) {
                redact_next = false;
            }
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && is_credential_char(chars[i]) {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        let scheme = word.eq_ignore_ascii_case("bearer") || word.eq_ignore_ascii_case("basic");
        if redact_next && scheme {
            // `Authorization: Bearer <token>`: the scheme stays, the token goes.
            out.push_str(&word);
            continue;
        }
        let jwt = word.starts_with("eyJ") && word.matches('.').count() >= 2 && word.len() > 20;
        let sendgrid = word.starts_with("SG.") && word.len() > 20;
        if redact_next || jwt || sendgrid {
            out.push_str("***");
            redact_next = false;
            continue;
        }
        let lower = word.to_ascii_lowercase();
        // `key=value` inside one word.
        if let Some((key, value)) = lower.split_once('=')
            && !value.is_empty()
            && is_secret_key(key)
        {
            out.push_str(&word[..key.len() + 1]);
            out.push_str("***");
            continue;
        }
        out.push_str(&word);
        if lower == "bearer" {
            redact_next = true;
        } else if is_secret_key(&lower) {
            // `key: value`, `"key":"value"`, `key = value`: the next word, if only separators
            // stand between.
            let mut j = i;
            while j < chars.len() && " \t\"':=".contains(chars[j]) {
                j += 1;
            }
            let separated = chars[i..j].iter().any(|c| *c == ':' || *c == '=');
            if separated {
                out.extend(chars[i..j].iter());
                i = j;
                redact_next = true;
            }
        }
    }
    out
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
    fn echoed_credentials_become_stars() {
        let jwt =
            "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.eyJhdWQiOiJodHRwczovL2dyYXBoIn0.c2lnbmF0dXJl";
        assert_eq!(
            scrub_provider_text(&format!(
                "Token {jwt} is expired; header was Bearer abc123def"
            )),
            "Token *** is expired; header was Bearer ***"
        );
        assert_eq!(
            scrub_provider_text(
                r#"bad request {"client_secret":"hunter2-hunter2","x":1} client_secret=s3cr3t&scope=a"#
            ),
            r#"bad request {"client_secret":"***","x":1} client_secret=***&scope=a"#
        );
        assert_eq!(
            scrub_provider_text(
                "key SG.abcdefghijklmnop.qrstuvwxyz0123456789 refused; password: pw1"
            ),
            "key *** refused; password: ***"
        );
        assert_eq!(
            scrub_provider_text(&redact_secrets(
                "echo: my-plain-secret!",
                &["my-plain-secret"]
            )),
            "echo: ***!"
        );
        assert_eq!(
            scrub_provider_text("The token is expired. Item AAMk1 not found."),
            "The token is expired. Item AAMk1 not found.",
            "prose around the word token stays"
        );
        assert_eq!(
            scrub_provider_text("InvalidAuthenticationToken: Access token validation failure."),
            "InvalidAuthenticationToken: Access token validation failure.",
            "an error code ending in Token is not a key"
        );
        let once = scrub_provider_text("Authorization: Bearer abc.def; next word stays");
        assert_eq!(once, "Authorization: Bearer ***; next word stays");
        assert_eq!(
            scrub_provider_text(&once),
            once,
            "scrubbing twice changes nothing"
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
