//! Tests of [`super::validate`], and the messages other mailer tests start from.

use super::{headers::*, *};
use crate::{
    domain::{Attachment, BodyContentType, Header, MessageContent},
    mailer::MailErrorKind,
};

/// A valid message from `events@contoso.example` to one recipient.
pub(crate) fn mail() -> OutgoingMail {
    OutgoingMail {
        id: uuid::Uuid::new_v4(),
        from: MailboxAddress::parse("events@contoso.example").unwrap(),
        content: MessageContent {
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
        },
        priority: Default::default(),
    }
}

/// The text of `result`'s refusal, after checking its `code` and that it says each of `says`.
pub(crate) fn refused(result: Result<(), MailError>, expected: &str, says: &[&str]) -> String {
    let text = result
        .as_ref()
        .map_or_else(ToString::to_string, |()| String::new());
    assert_eq!(code(result), expected);
    for part in says {
        assert!(text.contains(part), "{text:?} should say {part:?}");
    }
    text
}

/// A recipient without a display name.
pub(crate) fn rcpt(address: &str) -> Recipient {
    Recipient {
        address: address.into(),
        name: None,
    }
}

/// The `code` of a [`MailErrorKind::Permanent`](crate::mailer::MailErrorKind::Permanent); panics on anything else.
pub(crate) fn code(result: Result<(), MailError>) -> String {
    match result.map_err(|e| e.kind) {
        Err(MailErrorKind::Permanent { code, .. }) => code,
        other => panic!("expected Permanent, got {other:?}"),
    }
}

#[test]
fn a_plain_message_passes() {
    assert_eq!(validate(&mail()).map_err(|e| e.kind), Ok(()));
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
        m.content.to = vec![rcpt(raw)];
        let err = validate(&m).unwrap_err();
        let MailErrorKind::Permanent { code, message } = &err.kind else {
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
    // Not only the first: no address of the entry reaches last_error or mail.failed in full.
    let mut m = mail();
    m.content.to = vec![rcpt(
        "ylmaz3679@EXAMPLE.COM; oconnor.bakker1470@sub.dept.example.net",
    )];
    let err = validate(&m).unwrap_err();
    assert_eq!(
        err.kind,
        MailError::permanent(CODE_INVALID_RECIPIENT, "to[0] (y***@EXAMPLE.COM; o***@sub.dept.example.net) is not one valid email address; put each recipient in its own entry").kind
    );
}

#[test]
fn unparsable_addresses_are_refused_with_the_field_and_a_masked_address() {
    let mut m = mail();
    m.content.bcc = vec![rcpt("ok@example.org"), rcpt("lotte.jansen@@example.com")];
    let err = validate(&m).unwrap_err();
    assert_eq!(
        err.kind,
        MailError::permanent(
            CODE_INVALID_RECIPIENT,
            "bcc[1] (l***@example.com) is not one valid email address"
        )
        .kind
    );
    for raw in ["", "nobody", "<a@b.example>", "a b@example.org"] {
        let mut m = mail();
        m.content.cc = vec![rcpt(raw)];
        assert_eq!(code(validate(&m)), CODE_INVALID_RECIPIENT, "{raw:?}");
    }
}

#[test]
fn recipient_count_must_be_between_one_and_five_hundred() {
    let mut m = mail();
    m.content.to.clear();
    assert_eq!(code(validate(&m)), CODE_NO_RECIPIENTS);

    m.content.to = (0..200)
        .map(|i| rcpt(&format!("t{i}@example.org")))
        .collect();
    m.content.cc = (0..200)
        .map(|i| rcpt(&format!("c{i}@example.org")))
        .collect();
    m.content.bcc = (0..100)
        .map(|i| rcpt(&format!("b{i}@example.org")))
        .collect();
    assert_eq!(
        validate(&m).map_err(|e| e.kind),
        Ok(()),
        "exactly 500 is allowed"
    );
    m.content.bcc.push(rcpt("one-more@example.org"));
    refused(validate(&m), CODE_TOO_MANY_RECIPIENTS, &["501 recipients"]);
}

#[test]
fn custom_headers_must_start_with_x_dash() {
    let mut m = mail();
    m.content.headers = vec![header("X-Campaign-Id", "42")];
    assert_eq!(validate(&m).map_err(|e| e.kind), Ok(()));
    for name in ["Campaign-Id", "Reply-To", "x-", "xcampaign"] {
        m.content.headers = vec![header(name, "42")];
        assert_eq!(code(validate(&m)), CODE_INVALID_HEADER, "{name}");
    }
}

#[test]
fn attachments_over_three_megabytes_are_refused_naming_upload_sessions() {
    let mut m = mail_with_three_megabytes_of_attachments();
    assert_eq!(
        validate(&m).map_err(|e| e.kind),
        Ok(()),
        "exactly 3 MB is allowed"
    );
    m.content.attachments[1].content.push(0);
    let err = refused(validate(&m), CODE_ATTACHMENTS_TOO_LARGE, &["3145729 bytes"]);
    assert!(
        err.to_string()
            .contains("upload sessions in GRAPH_SEND_MODE=draft"),
        "{err}"
    );
}

/// [`mail`] with two binary attachments of exactly 3 MB together (the inline limit).
pub(crate) fn mail_with_three_megabytes_of_attachments() -> OutgoingMail {
    let mut m = mail();
    let binary = "application/octet-stream";
    m.content.attachments = vec![
        attachment("a.bin", binary, vec![0; MAX_INLINE_ATTACHMENT_BYTES - 10]),
        attachment("b.bin", binary, vec![0; 10]),
    ];
    m
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
        m.content.subject = subject.into();
        assert_eq!(code(validate(&m)), CODE_CONTROL_CHARACTER, "{subject:?}");
    }
    let mut m = mail();
    m.content.subject = "Tab\tis fine, and so is ünïcødé 🎉".into();
    assert_eq!(validate(&m).map_err(|e| e.kind), Ok(()));
    let mut m = mail();
    m.content.to[0].name = Some("Lotte\r\nBcc: x@example.org".into());
    refused(
        validate(&m),
        CODE_CONTROL_CHARACTER,
        &["to[0].name", "U+000D"],
    );
    for (name, value) in [
        ("x-a\r\nBcc", "v"),
        ("x-a b", "v"),
        ("x-a:b", "v"),
        ("x-\u{e9}", "v"),
        ("x-a", "v\r\nBcc: x@example.org"),
        ("x-a", "v\u{0}"),
    ] {
        let mut m = mail();
        m.content.headers = vec![header(name, value)];
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
    m.content.headers = (0..MAX_HEADERS)
        .map(|i| header(&format!("x-h{i}"), "v"))
        .collect();
    assert_eq!(
        validate(&m).map_err(|e| e.kind),
        Ok(()),
        "exactly 5 is allowed"
    );
    m.content.headers.push(header("x-h5", "v"));
    refused(validate(&m), CODE_INVALID_HEADER_COLLECTION, &["at most 5"]);

    let mut m = mail();
    m.content.headers = vec![header("x-long", &"v".repeat(MAX_HEADER_LINE - 8))];
    assert_eq!(
        validate(&m).map_err(|e| e.kind),
        Ok(()),
        "a 998-character line is allowed"
    );
    m.content.headers[0].value.push('v');
    assert!(validate(&m).unwrap_err().to_string().contains("998"));

    let mut m = mail();
    m.content.headers = (0..4)
        .map(|i| header(&format!("x-h{i}"), &"v".repeat(900)))
        .collect();
    assert_eq!(
        validate(&m).map_err(|e| e.kind),
        Ok(()),
        "4 × 904 = 3,616 bytes is allowed"
    );
    m.content.headers[0].value.push('v');
    refused(
        validate(&m),
        CODE_INVALID_HEADER_COLLECTION,
        &["3617 bytes"],
    );
}

#[test]
fn non_ascii_addresses_are_refused_naming_punycode() {
    let mut m = mail();
    m.content.to = vec![rcpt("jos\u{e9}@b\u{fc}cher.example")];
    let err = refused(validate(&m), CODE_INVALID_RECIPIENT, &["punycode"]);
    assert!(!err.to_string().contains("jos\u{e9}"), "{err}");
    m.content.to = vec![rcpt("jose@xn--bcher-kva.example")];
    assert_eq!(validate(&m).map_err(|e| e.kind), Ok(()));
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
        m.content.subject = subject;
        m.content.headers = vec![header(&name, &value)];
        m.content.to[0].name = Some(display);
        if validate(&m).is_ok() {
            let crlf = |s: &str| s.contains(['\r', '\n']);
            proptest::prop_assert!(!crlf(&m.content.subject));
            proptest::prop_assert!(!crlf(&m.content.headers[0].name) && !crlf(&m.content.headers[0].value));
            proptest::prop_assert!(!crlf(m.content.to[0].name.as_deref().unwrap_or_default()));
        }
    }
}
