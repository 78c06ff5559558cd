//! Local validation of an [`OutgoingMail`] before any HTTP call or limiter reservation, so a
//! message Graph would refuse costs no request and no budget. Every refusal is
//! [`MailError::Permanent`] with one of the `code`s below and never a full recipient address;
//! each message names the rule and its limit.

use crate::domain::{Header, MailboxAddress, OutgoingMail, Recipient, mask_address};

use super::MailError;

/// The most recipients (To + Cc + Bcc) one message may have: Exchange Online's default
/// per-message recipient limit, 500.
/// Source: <https://learn.microsoft.com/office365/servicedescriptions/exchange-online-service-description/exchange-online-limits#recipient-and-sender-limits>.
pub(crate) const MAX_RECIPIENTS: u32 = 500;

/// The most attachment bytes (before base64) one message may carry inline: 3 MB
/// (3,145,728 bytes). Graph refuses requests over 4 MB and base64 adds a third; larger files
/// need an upload session.
/// Source: <https://learn.microsoft.com/graph/outlook-large-attachments>.
pub(crate) const MAX_INLINE_ATTACHMENT_BYTES: usize = 3 * 1024 * 1024;

/// The largest `sendMail` JSON request body Graph accepts: 4 MB (4,194,304 bytes), body,
/// recipients, headers and base64 attachments included ("the total request size … cannot
/// exceed 4 MB").
/// Sources: <https://learn.microsoft.com/graph/api/user-sendmail>,
/// <https://learn.microsoft.com/graph/outlook-large-attachments>.
pub const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

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

/// `Permanent.code` of a recipient whose address does not parse.
pub(crate) const CODE_INVALID_RECIPIENT: &str = "InvalidRecipient";
/// `Permanent.code` of a message with no recipients at all.
pub(crate) const CODE_NO_RECIPIENTS: &str = "NoRecipients";
/// `Permanent.code` of a message with more than [`MAX_RECIPIENTS`] recipients.
pub(crate) const CODE_TOO_MANY_RECIPIENTS: &str = "TooManyRecipients";
/// `Permanent.code` of a custom header whose name does not start with `x-`, is not RFC 5322
/// text, or whose value holds a control character (Graph's own code).
pub(crate) const CODE_INVALID_HEADER: &str = "InvalidInternetMessageHeader";
/// `Permanent.code` of more than [`MAX_HEADERS`] headers or more than [`MAX_HEADER_BYTES`]
/// (Graph's own code).
pub(crate) const CODE_INVALID_HEADER_COLLECTION: &str = "InvalidInternetMessageHeaderCollection";
/// `Permanent.code` of attachments over [`MAX_INLINE_ATTACHMENT_BYTES`].
pub(crate) const CODE_ATTACHMENTS_TOO_LARGE: &str = "AttachmentsTooLarge";
/// `Permanent.code` of a `sendMail` request over [`MAX_REQUEST_BYTES`].
pub(crate) const CODE_REQUEST_TOO_LARGE: &str = "RequestTooLarge";
/// `Permanent.code` of a CR, LF or other control character in the subject or a display name.
pub(crate) const CODE_CONTROL_CHARACTER: &str = "ControlCharacter";

/// Checks `mail` against the rules Graph enforces, in this order: every To/Cc/Bcc address
/// parses as one ASCII address (`"a@example.org; b@example.org"` is refused, not split; a
/// Unicode domain must be punycode, which `enqueue` does) and its display name has no control
/// character, 1 to [`MAX_RECIPIENTS`] recipients, the subject has no control character, at
/// most [`MAX_HEADERS`] custom headers whose names are RFC 5322 field names starting with `x-`
/// (any case), whose values have no control character, each line at most [`MAX_HEADER_LINE`]
/// and all together at most [`MAX_HEADER_BYTES`], attachments total at most
/// [`MAX_INLINE_ATTACHMENT_BYTES`], and the whole `sendMail` JSON at most [`MAX_REQUEST_BYTES`].
///
/// "Control character": U+0000–U+001F but TAB, U+007F–U+009F, U+2028 and U+2029 — CR/LF would
/// split a header (`x-a\r\nBcc: …`).
///
/// # Errors
/// The first rule broken, as [`MailError::Permanent`]; addresses in the message are masked.
pub fn validate(mail: &OutgoingMail) -> Result<(), MailError> {
    validate_with_attachment_limit(mail, MAX_INLINE_ATTACHMENT_BYTES)
}

/// [`validate`] with attachments up to `max_attachment_bytes` in total (the Graph mailer in
/// `draft` mode uploads large ones: up to 150 MB).
///
/// # Errors
/// As [`validate`].
pub(crate) fn validate_with_attachment_limit(
    mail: &OutgoingMail,
    max_attachment_bytes: usize,
) -> Result<(), MailError> {
    for (field, list) in [("to", &mail.to), ("cc", &mail.cc), ("bcc", &mail.bcc)] {
        for (index, recipient) in list.iter().enumerate() {
            check_recipient(field, index, recipient)?;
        }
    }
    let recipients = mail.recipient_count();
    if recipients == 0 {
        return Err(permanent(
            CODE_NO_RECIPIENTS,
            "the message has no To, Cc or Bcc recipients".to_owned(),
        ));
    }
    if recipients > MAX_RECIPIENTS {
        return Err(permanent(
            CODE_TOO_MANY_RECIPIENTS,
            format!(
                "the message has {recipients} recipients (To + Cc + Bcc); Exchange Online accepts at most {MAX_RECIPIENTS} per message"
            ),
        ));
    }
    if let Some(at) = control_character(&mail.subject) {
        return Err(permanent(
            CODE_CONTROL_CHARACTER,
            format!(
                "the subject contains the control character {at}; CR, LF and other control characters are refused in a header"
            ),
        ));
    }
    check_headers(&mail.headers)?;
    let bytes = mail.attachment_bytes();
    if bytes > max_attachment_bytes && max_attachment_bytes != MAX_INLINE_ATTACHMENT_BYTES {
        return Err(permanent(
            CODE_ATTACHMENTS_TOO_LARGE,
            format!(
                "attachments total {bytes} bytes; at most {max_attachment_bytes} bytes can be sent through Graph upload sessions"
            ),
        ));
    }
    if bytes > max_attachment_bytes {
        return Err(permanent(
            CODE_ATTACHMENTS_TOO_LARGE,
            format!(
                "attachments total {bytes} bytes; at most {MAX_INLINE_ATTACHMENT_BYTES} bytes (3 MB) can be sent inline because Graph refuses requests over 4 MB and base64 adds a third; larger attachments go through upload sessions in GRAPH_SEND_MODE=draft"
            ),
        ));
    }
    // Attachments beyond the inline limit are uploaded separately (draft mode): the request
    // that carries the message then holds only its body and headers.
    if bytes <= MAX_INLINE_ATTACHMENT_BYTES && most_request_bytes(mail) > MAX_REQUEST_BYTES {
        let size = crate::mailer::graph::send_mail_body(mail, true).len();
        if size > MAX_REQUEST_BYTES {
            return Err(permanent(
                CODE_REQUEST_TOO_LARGE,
                format!(
                    "the sendMail request would be {size} bytes; Graph refuses JSON requests over {MAX_REQUEST_BYTES} bytes (4 MB, https://learn.microsoft.com/graph/api/user-sendmail)"
                ),
            ));
        }
    }
    Ok(())
}

/// An upper bound of the `sendMail` JSON's size without serialising it: every string byte may
/// be escaped to six (`\u001f`), attachments become base64, plus room for the fixed shape.
fn most_request_bytes(mail: &OutgoingMail) -> usize {
    let recipients: usize = mail
        .to
        .iter()
        .chain(&mail.cc)
        .chain(&mail.bcc)
        .map(|r| r.address.len() + r.name.as_deref().map_or(0, str::len) + 64)
        .sum();
    let headers: usize = mail
        .headers
        .iter()
        .map(|h| h.name.len() + h.value.len() + 32)
        .sum();
    let attachments: usize = mail
        .attachments
        .iter()
        .map(|a| a.content.len().div_ceil(3) * 4 + 6 * (a.name.len() + a.content_type.len()) + 128)
        .sum();
    6 * (mail.subject.len() + mail.body.len() + recipients + headers) + attachments + 256
}

/// The first control character of `text` as `U+000D at character 12`, if any (TAB allowed).
fn control_character(text: &str) -> Option<String> {
    text.chars()
        .enumerate()
        .find(|(_, c)| (c.is_control() && *c != '\t') || matches!(c, '\u{2028}' | '\u{2029}'))
        .map(|(i, c)| format!("U+{:04X} at character {}", c as u32, i + 1))
}

/// RFC 5322 §3.6.8 `field-name`: printable US-ASCII (33–126) except `:`.
fn is_field_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| (33..=126).contains(&b) && b != b':')
}

fn check_headers(headers: &[Header]) -> Result<(), MailError> {
    if headers.len() > MAX_HEADERS {
        return Err(permanent(
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
            return Err(permanent(
                CODE_INVALID_HEADER,
                format!(
                    "headers[{index}].name {name:?} is refused: a header name is printable ASCII without spaces, colons or line breaks (RFC 5322 §3.6.8)"
                ),
            ));
        }
        if !name.to_ascii_lowercase().starts_with("x-") || name.len() <= 2 {
            return Err(permanent(
                CODE_INVALID_HEADER,
                format!(
                    "custom header {name:?} is refused: Graph accepts only internet message headers whose names start with x-"
                ),
            ));
        }
        if let Some(at) = control_character(&header.value) {
            return Err(permanent(
                CODE_INVALID_HEADER,
                format!(
                    "headers[{index}] ({name}) value contains the control character {at}; CR, LF and other control characters are refused in a header"
                ),
            ));
        }
        let line = name.len() + 2 + header.value.len();
        if line > MAX_HEADER_LINE {
            return Err(permanent(
                CODE_INVALID_HEADER,
                format!(
                    "headers[{index}] ({name}) is {line} characters long; a header line may be at most {MAX_HEADER_LINE} (RFC 5322 §2.1.1)"
                ),
            ));
        }
        total += name.len() + header.value.len();
    }
    if total > MAX_HEADER_BYTES {
        return Err(permanent(
            CODE_INVALID_HEADER_COLLECTION,
            format!(
                "custom header names and values take {total} bytes; at most {MAX_HEADER_BYTES} are sent"
            ),
        ));
    }
    Ok(())
}

/// Checks that `mail` is sent from `mailbox`, the sender this mailer was built for (the limiter
/// counts `mail.from`, the provider sends as `mailbox`: they must be the same).
///
/// # Errors
/// [`MailError::Misconfigured`] naming both mailboxes.
pub(crate) fn check_sender(mail: &OutgoingMail, mailbox: &MailboxAddress) -> Result<(), MailError> {
    if &mail.from == mailbox {
        Ok(())
    } else {
        Err(MailError::Misconfigured(format!(
            "message is from {} but this mailer sends as {mailbox}",
            mail.from
        )))
    }
}

fn check_recipient(field: &str, index: usize, recipient: &Recipient) -> Result<(), MailError> {
    let raw = recipient.address.trim();
    let single = !raw.contains([',', ';']);
    if single && !raw.is_ascii() {
        return Err(permanent(
            CODE_INVALID_RECIPIENT,
            format!(
                "{field}[{index}] ({}) has non-ASCII characters: write the domain in punycode (`mail-worker enqueue` converts it) and the local part in ASCII (we do not send SMTPUTF8 addresses)",
                mask_each(raw)
            ),
        ));
    }
    if !(single && MailboxAddress::parse(raw).is_ok()) {
        return Err(permanent(
            CODE_INVALID_RECIPIENT,
            format!(
                "{field}[{index}] ({}) is not one valid email address{}",
                mask_each(raw),
                if single {
                    ""
                } else {
                    "; put each recipient in its own entry"
                }
            ),
        ));
    }
    if let Some(at) = recipient.name.as_deref().and_then(control_character) {
        return Err(permanent(
            CODE_CONTROL_CHARACTER,
            format!(
                "{field}[{index}].name contains the control character {at}; CR, LF and other control characters are refused in a display name"
            ),
        ));
    }
    Ok(())
}

/// Masks every `,`/`;`-separated part of `raw` on its own, so no address of a multi-address
/// entry reaches `last_error` or a log in full.
fn mask_each(raw: &str) -> String {
    raw.split([',', ';'])
        .map(mask_address)
        .collect::<Vec<_>>()
        .join("; ")
}

fn permanent(code: &str, message: String) -> MailError {
    MailError::Permanent {
        code: code.to_owned(),
        message,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::domain::{Attachment, BodyContentType, Header};

    /// A valid message from `events@contoso.example` to one recipient.
    pub(crate) fn mail() -> OutgoingMail {
        OutgoingMail {
            id: uuid::Uuid::new_v4(),
            from: MailboxAddress::parse("events@contoso.example").unwrap(),
            to: vec![Recipient {
                address: "lotte.jansen@example.com".into(),
                name: Some("Lotte".into()),
            }],
            cc: vec![],
            bcc: vec![],
            subject: "Hello".into(),
            body_content_type: BodyContentType::Text,
            body: "Hi".into(),
            headers: vec![],
            attachments: vec![],
        }
    }

    /// A recipient without a display name.
    pub(crate) fn rcpt(address: &str) -> Recipient {
        Recipient {
            address: address.into(),
            name: None,
        }
    }

    fn code(result: Result<(), MailError>) -> String {
        match result {
            Err(MailError::Permanent { code, .. }) => code,
            other => panic!("expected Permanent, got {other:?}"),
        }
    }

    #[test]
    fn a_plain_message_passes() {
        assert_eq!(validate(&mail()), Ok(()));
    }

    #[test]
    fn two_addresses_in_one_entry_are_refused_not_split() {
        for raw in [
            "a@example.org; b@example.org",
            "a@example.org;b@example.org",
            "a@example.org, b@example.org",
            "a@example.org,b@example.org",
        ] {
            let mut m = mail();
            m.to = vec![rcpt(raw)];
            let err = validate(&m).unwrap_err();
            let MailError::Permanent { code, message } = &err else {
                panic!("{err:?}")
            };
            assert_eq!(code, CODE_INVALID_RECIPIENT);
            assert!(message.contains("own entry"), "{message}");
            assert!(!message.contains("a@example.org"), "{message}");
            assert!(!message.contains("b@example.org"), "{message}");
        }
    }

    #[test]
    fn every_address_of_a_multi_address_entry_is_masked() {
        // Line 312 of the shared campaign: the second address used to reach last_error and the
        // mail.failed log in full.
        let mut m = mail();
        m.to = vec![rcpt(
            "ylmaz3679@EXAMPLE.COM; oconnor.bakker1470@sub.dept.example.net",
        )];
        let err = validate(&m).unwrap_err();
        assert_eq!(
            err,
            MailError::Permanent {
                code: CODE_INVALID_RECIPIENT.into(),
                message: "to[0] (y***@EXAMPLE.COM; o***@sub.dept.example.net) is not one valid email address; put each recipient in its own entry".into()
            }
        );
    }

    #[test]
    fn unparsable_addresses_are_refused_with_the_field_and_a_masked_address() {
        let mut m = mail();
        m.bcc = vec![rcpt("ok@example.org"), rcpt("lotte.jansen@@example.com")];
        let err = validate(&m).unwrap_err();
        assert_eq!(
            err,
            MailError::Permanent {
                code: CODE_INVALID_RECIPIENT.into(),
                message: "bcc[1] (l***@example.com) is not one valid email address".into()
            }
        );
        for raw in ["", "nobody", "<a@b.example>", "a b@example.org"] {
            let mut m = mail();
            m.cc = vec![rcpt(raw)];
            assert_eq!(code(validate(&m)), CODE_INVALID_RECIPIENT, "{raw:?}");
        }
    }

    #[test]
    fn recipient_count_must_be_between_one_and_five_hundred() {
        let mut m = mail();
        m.to.clear();
        assert_eq!(code(validate(&m)), CODE_NO_RECIPIENTS);

        m.to = (0..200)
            .map(|i| rcpt(&format!("t{i}@example.org")))
            .collect();
        m.cc = (0..200)
            .map(|i| rcpt(&format!("c{i}@example.org")))
            .collect();
        m.bcc = (0..100)
            .map(|i| rcpt(&format!("b{i}@example.org")))
            .collect();
        assert_eq!(validate(&m), Ok(()), "exactly 500 is allowed");
        m.bcc.push(rcpt("one-more@example.org"));
        let err = validate(&m).unwrap_err();
        assert_eq!(code(Err(err.clone())), CODE_TOO_MANY_RECIPIENTS);
        assert!(err.to_string().contains("501 recipients"), "{err}");
    }

    #[test]
    fn custom_headers_must_start_with_x_dash() {
        let mut m = mail();
        m.headers = vec![header("X-Campaign-Id", "42")];
        assert_eq!(validate(&m), Ok(()));
        for name in ["Campaign-Id", "Reply-To", "x-", "xcampaign"] {
            m.headers = vec![header(name, "42")];
            assert_eq!(code(validate(&m)), CODE_INVALID_HEADER, "{name}");
        }
    }

    #[test]
    fn attachments_over_three_megabytes_are_refused_naming_upload_sessions() {
        let mut m = mail();
        let binary = "application/octet-stream";
        m.attachments = vec![
            attachment("a.bin", binary, vec![0; MAX_INLINE_ATTACHMENT_BYTES - 10]),
            attachment("b.bin", binary, vec![0; 10]),
        ];
        // Exactly 3 MB passes the attachment rule, but its base64 alone is 4 MB, so the whole
        // sendMail request is over Graph's 4 MB (issue 16 changed this assertion from Ok).
        assert_eq!(
            code(validate(&m)),
            CODE_REQUEST_TOO_LARGE,
            "exactly 3 MB of attachments makes a request over 4 MB"
        );
        m.attachments[0]
            .content
            .truncate(MAX_INLINE_ATTACHMENT_BYTES - 64 * 1024);
        assert_eq!(validate(&m), Ok(()), "3 MB less 64 KiB fits in 4 MB");
        m.attachments[0]
            .content
            .resize(MAX_INLINE_ATTACHMENT_BYTES - 10, 0);
        m.attachments[1].content.push(0);
        let err = validate(&m).unwrap_err();
        assert_eq!(code(Err(err.clone())), CODE_ATTACHMENTS_TOO_LARGE);
        assert!(err.to_string().contains("3145729 bytes"), "{err}");
        assert!(
            err.to_string()
                .contains("upload sessions in GRAPH_SEND_MODE=draft"),
            "{err}"
        );
    }

    /// A custom header.
    pub(crate) fn header(name: &str, value: &str) -> Header {
        Header {
            name: name.into(),
            value: value.into(),
        }
    }

    /// A file attachment.
    pub(crate) fn attachment(name: &str, content_type: &str, content: Vec<u8>) -> Attachment {
        Attachment {
            name: name.into(),
            content_type: content_type.into(),
            content,
        }
    }

    #[test]
    fn cr_lf_and_control_characters_are_refused_where_they_would_split_a_header() {
        for subject in [
            "Hi\r\nBcc: x@example.org",
            "Hi\nthere",
            "a\u{0}b",
            "a\u{7f}",
            "a\u{2028}b",
        ] {
            let mut m = mail();
            m.subject = subject.into();
            assert_eq!(code(validate(&m)), CODE_CONTROL_CHARACTER, "{subject:?}");
        }
        let mut m = mail();
        m.subject = "Tab\tis fine, and so is ünïcødé 🎉".into();
        assert_eq!(validate(&m), Ok(()));
        let mut m = mail();
        m.to[0].name = Some("Lotte\r\nBcc: x@example.org".into());
        let err = validate(&m).unwrap_err();
        assert_eq!(code(Err(err.clone())), CODE_CONTROL_CHARACTER);
        assert!(err.to_string().contains("to[0].name"), "{err}");
        assert!(err.to_string().contains("U+000D"), "{err}");
        for (name, value) in [
            ("x-a\r\nBcc", "v"),
            ("x-a b", "v"),
            ("x-a:b", "v"),
            ("x-\u{e9}", "v"),
            ("x-a", "v\r\nBcc: x@example.org"),
            ("x-a", "v\u{0}"),
        ] {
            let mut m = mail();
            m.headers = vec![header(name, value)];
            assert_eq!(
                code(validate(&m)),
                CODE_INVALID_HEADER,
                "{name:?}: {value:?}"
            );
        }
    }

    #[test]
    fn at_most_five_headers_within_the_length_limits() {
        let mut m = mail();
        m.headers = (0..MAX_HEADERS)
            .map(|i| header(&format!("x-h{i}"), "v"))
            .collect();
        assert_eq!(validate(&m), Ok(()), "exactly 5 is allowed");
        m.headers.push(header("x-h5", "v"));
        let err = validate(&m).unwrap_err();
        assert_eq!(code(Err(err.clone())), CODE_INVALID_HEADER_COLLECTION);
        assert!(err.to_string().contains("at most 5"), "{err}");

        let mut m = mail();
        m.headers = vec![header("x-long", &"v".repeat(MAX_HEADER_LINE - 8))];
        assert_eq!(validate(&m), Ok(()), "a 998-character line is allowed");
        m.headers[0].value.push('v');
        assert!(validate(&m).unwrap_err().to_string().contains("998"));

        let mut m = mail();
        m.headers = (0..4)
            .map(|i| header(&format!("x-h{i}"), &"v".repeat(900)))
            .collect();
        assert_eq!(validate(&m), Ok(()), "4 × 904 = 3,616 bytes is allowed");
        m.headers[0].value.push('v');
        let err = validate(&m).unwrap_err();
        assert_eq!(code(Err(err.clone())), CODE_INVALID_HEADER_COLLECTION);
        assert!(err.to_string().contains("3617 bytes"), "{err}");
    }

    #[test]
    fn a_request_over_four_megabytes_is_refused_before_any_request() {
        let mut m = mail();
        m.body = "a".repeat(MAX_REQUEST_BYTES);
        let err = validate(&m).unwrap_err();
        assert_eq!(code(Err(err.clone())), CODE_REQUEST_TOO_LARGE);
        assert!(err.to_string().contains("4194304"), "{err}");
        assert!(err.to_string().contains("user-sendmail"), "{err}");
        // Escaping counts: 700,000 control-free quotes are 1.4 MB of JSON, fine.
        m.body = "\"".repeat(700_000);
        assert_eq!(validate(&m), Ok(()));
        // A body that fits only before escaping does not.
        m.body = "\u{1}".repeat(MAX_REQUEST_BYTES / 6 + 1);
        assert_eq!(code(validate(&m)), CODE_REQUEST_TOO_LARGE);
    }

    #[test]
    fn non_ascii_addresses_are_refused_naming_punycode() {
        let mut m = mail();
        m.to = vec![rcpt("jos\u{e9}@b\u{fc}cher.example")];
        let err = validate(&m).unwrap_err();
        assert_eq!(code(Err(err.clone())), CODE_INVALID_RECIPIENT);
        assert!(err.to_string().contains("punycode"), "{err}");
        assert!(!err.to_string().contains("jos\u{e9}"), "{err}");
        m.to = vec![rcpt("jose@xn--bcher-kva.example")];
        assert_eq!(validate(&m), Ok(()));
    }

    proptest::proptest! {
        /// Whatever the subject, header and display name, a message validate() passes has no
        /// CR or LF in any of them.
        #[test]
        fn a_passed_message_has_no_line_break_in_a_header(
            subject in "\\PC{0,20}[\r\n]?\\PC{0,5}",
            name in "x-[!-~]{0,5}[\r\n ]?[!-~]{0,5}",
            value in "\\PC{0,10}[\r\n]?",
            display in "\\PC{0,10}[\r\n]?",
        ) {
            let mut m = mail();
            m.subject = subject;
            m.headers = vec![header(&name, &value)];
            m.to[0].name = Some(display);
            if validate(&m).is_ok() {
                let crlf = |s: &str| s.contains(['\r', '\n']);
                proptest::prop_assert!(!crlf(&m.subject));
                proptest::prop_assert!(!crlf(&m.headers[0].name) && !crlf(&m.headers[0].value));
                proptest::prop_assert!(!crlf(m.to[0].name.as_deref().unwrap_or_default()));
            }
        }
    }
}
