//! The `Idempotency-Key` header of `POST /v1/messages`, as the IETF draft defines it
//! (draft-ietf-httpapi-idempotency-key-header-06, section 2: "an Item Structured Header
//! [RFC 8941]. Its value MUST be a String"; <https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/>):
//!
//! - **quoted**, the draft's form: an RFC 8941 `sf-string` (section 3.3.3): `"` … `"` holding
//!   printable ASCII (0x20–0x7E, so a space too), `\"` and `\\` the only escapes, nothing after
//!   the closing quote (parameters are not taken);
//! - **bare**, what most clients send (Stripe's form): visible ASCII (0x21–0x7E) except `"`,
//!   `\` and `,` — no space, no tab: a bare key with a space is ambiguous (a proxy folding two
//!   headers joins them with `, `), so it is refused, naming the quoted form.
//!
//! The key is the string's content: `"batch-7"` and `batch-7` are one key. 1 to
//! [`MAX_KEY_CHARS`] characters. Anything else is a 400 naming what is wrong and where.

use axum::http::{HeaderMap, HeaderValue};

/// The longest key taken, in characters.
pub(crate) const MAX_KEY_CHARS: usize = 255;

/// The request's key: `None` without the header; `Err` (the 400's text) for a malformed one.
pub(crate) fn from_headers(headers: &HeaderMap) -> Result<Option<String>, String> {
    let mut values = headers.get_all("idempotency-key").iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(
            "send one Idempotency-Key header (the draft: a client MUST NOT send more than one)"
                .into(),
        );
    }
    parse(value).map(Some)
}

fn parse(value: &HeaderValue) -> Result<String, String> {
    // HTTP strips the field value's surrounding whitespace (RFC 9110 section 5.5).
    let text = value.as_bytes().trim_ascii();
    if let Some(position) = text.iter().position(|b| !b.is_ascii()) {
        return Err(format!(
            "Idempotency-Key: byte {} is not ASCII; a key is ASCII text",
            position + 1
        ));
    }
    let key = match text.strip_prefix(b"\"") {
        Some(rest) => quoted(rest)?,
        None => bare(text)?,
    };
    let chars = key.chars().count();
    if chars == 0 || chars > MAX_KEY_CHARS {
        return Err(format!(
            "Idempotency-Key must be 1 to {MAX_KEY_CHARS} characters, not {chars}"
        ));
    }
    Ok(key)
}

/// The content of an `sf-string` whose opening quote was `rest`'s first byte.
fn quoted(rest: &[u8]) -> Result<String, String> {
    let mut key = String::with_capacity(rest.len());
    let mut bytes = rest.iter().enumerate();
    while let Some((i, &b)) = bytes.next() {
        let at = i + 2;
        match b {
            b'\\' => match bytes.next() {
                Some((_, &e)) if e == b'"' || e == b'\\' => key.push(char::from(e)),
                _ => {
                    return Err(format!(
                        "Idempotency-Key: the `\\` at character {at} escapes neither `\"` nor `\\` (RFC 8941 sf-string)"
                    ));
                }
            },
            b'"' if i + 1 == rest.len() => return Ok(key),
            b'"' => {
                return Err(format!(
                    "Idempotency-Key: text after the closing quote at character {at}: send one quoted string, without parameters"
                ));
            }
            0x20..=0x7E => key.push(char::from(b)),
            _ => {
                return Err(format!(
                    "Idempotency-Key: character {at} is a control character (0x{b:02X}); a quoted key holds printable ASCII"
                ));
            }
        }
    }
    Err("Idempotency-Key: the quoted string has no closing `\"`".into())
}

/// A key written without quotes.
fn bare(text: &[u8]) -> Result<String, String> {
    for (i, &b) in text.iter().enumerate() {
        let what = match b {
            b' ' => "a space",
            b'\t' => "a tab",
            b',' => "a comma",
            b'\\' => "a backslash",
            b'"' => "a quote",
            0x21..=0x7E => continue,
            _ => "a control character",
        };
        return Err(format!(
            "Idempotency-Key: character {} is {what}; an unquoted key takes visible ASCII but `\"`, `\\` and `,`: \
             quote a key holding spaces as the IETF draft's string (Idempotency-Key: \"batch 7\")",
            i + 1
        ));
    }
    Ok(String::from_utf8_lossy(text).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(raw: &[u8]) -> Result<Option<String>, String> {
        let mut headers = HeaderMap::new();
        headers.insert("idempotency-key", HeaderValue::from_bytes(raw).unwrap());
        from_headers(&headers)
    }

    #[test]
    fn bare_and_quoted_forms_name_the_same_key() {
        let uuid = "8e03978e-40d5-43e8-bc93-6894a57f9324";
        assert_eq!(key(uuid.as_bytes()), Ok(Some(uuid.to_owned())));
        assert_eq!(
            key(format!("\"{uuid}\"").as_bytes()),
            Ok(Some(uuid.to_owned()))
        );
        assert_eq!(key(b"  batch-7 "), Ok(Some("batch-7".into())));
        assert_eq!(key(b"a:b/c=d@e+f~g"), Ok(Some("a:b/c=d@e+f~g".into())));
        assert_eq!(key(b"\"batch 7\""), Ok(Some("batch 7".into())));
        assert_eq!(
            key(br#""say \"hi\" \\o/""#),
            Ok(Some(r#"say "hi" \o/"#.into()))
        );
        assert_eq!(from_headers(&HeaderMap::new()), Ok(None));
    }

    #[test]
    fn a_space_or_a_bad_character_is_refused_naming_it_and_its_place() {
        let err = key(b"batch 7").unwrap_err();
        assert!(err.contains("character 6 is a space"), "{err}");
        assert!(err.contains("\"batch 7\""), "{err}");
        assert!(key(b"a\tb").unwrap_err().contains("character 2 is a tab"));
        assert!(key(b"a,b").unwrap_err().contains("character 2 is a comma"));
        assert!(key(b"a\"b").unwrap_err().contains("is a quote"));
        assert!(key(b"a\\b").unwrap_err().contains("is a backslash"));
        assert!(key(b"\"open").unwrap_err().contains("no closing"));
        assert!(
            key(b"\"a\";p=1")
                .unwrap_err()
                .contains("after the closing quote")
        );
        assert!(key(br#""a\n""#).unwrap_err().contains("escapes neither"));
        assert!(
            key(b"\"a\tb\"")
                .unwrap_err()
                .contains("control character (0x09)")
        );
        assert!(
            key("clé".as_bytes())
                .unwrap_err()
                .contains("byte 3 is not ASCII")
        );
    }

    #[test]
    fn a_key_is_1_to_255_characters_and_one_header() {
        assert!(
            key(b"\"\"")
                .unwrap_err()
                .contains("1 to 255 characters, not 0")
        );
        assert!(key(b"  ").unwrap_err().contains("not 0"));
        assert!(key("k".repeat(255).as_bytes()).is_ok());
        assert!(
            key("k".repeat(256).as_bytes())
                .unwrap_err()
                .contains("not 256")
        );
        let mut headers = HeaderMap::new();
        headers.append("idempotency-key", HeaderValue::from_static("a"));
        headers.append("idempotency-key", HeaderValue::from_static("b"));
        assert!(
            from_headers(&headers)
                .unwrap_err()
                .contains("one Idempotency-Key")
        );
    }
}
