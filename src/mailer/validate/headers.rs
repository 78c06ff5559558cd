//! The custom-header rules of [`super::validate`]: names, values, count and size of
//! `internetMessageHeaders`.

use crate::{domain::Header, mailer::MailError};

use super::refuse_control;

/// The most custom `internetMessageHeaders` one message may have: 5. Graph answers more with
/// `400 InvalidInternetMessageHeaderCollection` ("Maximum number of headers in one message
/// should be less than or equal to 5").
/// Sources: <https://learn.microsoft.com/graph/api/resources/message> (`internetMessageHeaders`),
/// <https://learn.microsoft.com/answers/questions/762243/is-there-a-way-to-bypass-the-limit-of-internetmess>.
pub const MAX_HEADERS: usize = 5;

/// The most bytes all custom header names and values may take together: 3,616. Microsoft's
/// pages do not state a byte limit for `internetMessageHeaders` that we could confirm; this is
/// the safe reading (far above any campaign's headers, far below where Exchange's own header
/// quota bites: <https://learn.microsoft.com/javascript/api/outlook/office.internetheaders>).
pub(crate) const MAX_HEADER_BYTES: usize = 3_616;

/// The longest one header line may be, `name: value` without CRLF: 998 characters
/// (RFC 5322 §2.1.1, <https://www.rfc-editor.org/rfc/rfc5322#section-2.1.1>).
pub(crate) const MAX_HEADER_LINE: usize = 998;

/// `Permanent.code` of a custom header whose name does not start with `x-`, is not RFC 5322
/// text, or whose value holds a control character (Graph's own code).
pub(crate) const CODE_INVALID_HEADER: &str = "InvalidInternetMessageHeader";
/// `Permanent.code` of more than [`MAX_HEADERS`] headers or more than [`MAX_HEADER_BYTES`]
/// (Graph's own code).
pub(crate) const CODE_INVALID_HEADER_COLLECTION: &str = "InvalidInternetMessageHeaderCollection";
/// RFC 5322 §3.6.8 `field-name`: printable US-ASCII (33–126) except `:`.
fn is_field_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| (33..=126).contains(&b) && b != b':')
}

pub(super) fn check_headers(headers: &[Header]) -> Result<(), MailError> {
    if headers.len() > MAX_HEADERS {
        return Err(MailError::permanent(
            CODE_INVALID_HEADER_COLLECTION,
            format!(
                "the message has {} custom headers; Graph accepts at most {MAX_HEADERS} internetMessageHeaders",
                headers.len()
            ),
        ));
    }
    let mut total = 0;
    for (index, header) in headers.iter().enumerate() {
        // The name is sent as written: judge it untrimmed (`"x-a\r"` must not pass as `x-a`).
        let name = header.name.as_str();
        if !is_field_name(name) {
            return Err(MailError::permanent(
                CODE_INVALID_HEADER,
                format!(
                    "headers[{index}].name {name:?} is refused: a header name is printable ASCII without spaces, colons or line breaks (RFC 5322 §3.6.8)"
                ),
            ));
        }
        if !name.to_ascii_lowercase().starts_with("x-") || name.len() <= 2 {
            return Err(MailError::permanent(
                CODE_INVALID_HEADER,
                format!(
                    "custom header {name:?} is refused: Graph accepts only internet message headers whose names start with x-"
                ),
            ));
        }
        let what = format!("headers[{index}] ({name}) value");
        refuse_control(&header.value, CODE_INVALID_HEADER, &what, "a header")?;
        let line = name.len() + 2 + header.value.len();
        if line > MAX_HEADER_LINE {
            return Err(MailError::permanent(
                CODE_INVALID_HEADER,
                format!(
                    "headers[{index}] ({name}) is {line} characters long; a header line may be at most {MAX_HEADER_LINE} (RFC 5322 §2.1.1)"
                ),
            ));
        }
        total += name.len() + header.value.len();
    }
    if total > MAX_HEADER_BYTES {
        return Err(MailError::permanent(
            CODE_INVALID_HEADER_COLLECTION,
            format!(
                "custom header names and values take {total} bytes; at most {MAX_HEADER_BYTES} are sent"
            ),
        ));
    }
    Ok(())
}
