//! Local validation of an [`OutgoingMail`] before any HTTP call or limiter reservation, so a
//! message Graph would refuse costs no request and no budget. Every refusal is
//! [`MailError::Permanent`] with one of the `code`s below and never a full recipient address.

use crate::domain::{MailboxAddress, OutgoingMail, Recipient, mask_address};

use super::MailError;

/// The most recipients (To + Cc + Bcc) one message may have: Exchange Online's default
/// per-message recipient limit, 500.
/// Source: <https://learn.microsoft.com/office365/servicedescriptions/exchange-online-service-description/exchange-online-limits#recipient-and-sender-limits>.
pub const MAX_RECIPIENTS: u32 = 500;

/// The most attachment bytes (before base64) one message may carry inline: 3 MB
/// (3,145,728 bytes). Graph refuses requests over 4 MB and base64 adds a third; larger files
/// need an upload session.
/// Source: <https://learn.microsoft.com/graph/outlook-large-attachments>.
pub const MAX_INLINE_ATTACHMENT_BYTES: usize = 3 * 1024 * 1024;

/// `Permanent.code` of a recipient whose address does not parse.
pub const CODE_INVALID_RECIPIENT: &str = "InvalidRecipient";
/// `Permanent.code` of a message with no recipients at all.
pub const CODE_NO_RECIPIENTS: &str = "NoRecipients";
/// `Permanent.code` of a message with more than [`MAX_RECIPIENTS`] recipients.
pub const CODE_TOO_MANY_RECIPIENTS: &str = "TooManyRecipients";
/// `Permanent.code` of a custom header whose name does not start with `x-` (Graph's own code).
pub const CODE_INVALID_HEADER: &str = "InvalidInternetMessageHeader";
/// `Permanent.code` of attachments over [`MAX_INLINE_ATTACHMENT_BYTES`].
pub const CODE_ATTACHMENTS_TOO_LARGE: &str = "AttachmentsTooLarge";

/// Checks `mail` against the rules Graph enforces, in this order: every To/Cc/Bcc address
/// parses as one address (`"a@example.org; b@example.org"` is refused, not split), 1 to
/// [`MAX_RECIPIENTS`] recipients, custom header names start with `x-` (any case), attachments
/// total at most [`MAX_INLINE_ATTACHMENT_BYTES`].
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
pub fn validate_with_attachment_limit(
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
    for header in &mail.headers {
        let name = header.name.trim();
        if !name.to_ascii_lowercase().starts_with("x-") || name.len() <= 2 {
            return Err(permanent(
                CODE_INVALID_HEADER,
                format!(
                    "custom header {name:?} is refused: Graph accepts only internet message headers whose names start with x-"
                ),
            ));
        }
    }
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
                "attachments total {bytes} bytes; at most {MAX_INLINE_ATTACHMENT_BYTES} bytes (3 MB) can be sent inline because Graph refuses requests over 4 MB and base64 adds a third; larger attachments need upload sessions, which are not supported yet"
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
pub fn check_sender(mail: &OutgoingMail, mailbox: &MailboxAddress) -> Result<(), MailError> {
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
    if single && MailboxAddress::parse(raw).is_ok() {
        return Ok(());
    }
    Err(permanent(
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
    ))
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

    fn rcpt(address: &str) -> Recipient {
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
        m.headers = vec![Header {
            name: "X-Campaign-Id".into(),
            value: "42".into(),
        }];
        assert_eq!(validate(&m), Ok(()));
        for name in ["Campaign-Id", "Reply-To", "x-", "xcampaign"] {
            m.headers = vec![Header {
                name: name.into(),
                value: "42".into(),
            }];
            assert_eq!(code(validate(&m)), CODE_INVALID_HEADER, "{name}");
        }
    }

    #[test]
    fn attachments_over_three_megabytes_are_refused_naming_upload_sessions() {
        let mut m = mail();
        m.attachments = vec![
            Attachment {
                name: "a.bin".into(),
                content_type: "application/octet-stream".into(),
                content: vec![0; MAX_INLINE_ATTACHMENT_BYTES - 10],
            },
            Attachment {
                name: "b.bin".into(),
                content_type: "application/octet-stream".into(),
                content: vec![0; 10],
            },
        ];
        assert_eq!(validate(&m), Ok(()), "exactly 3 MB is allowed");
        m.attachments[1].content.push(0);
        let err = validate(&m).unwrap_err();
        assert_eq!(code(Err(err.clone())), CODE_ATTACHMENTS_TOO_LARGE);
        assert!(err.to_string().contains("3145729 bytes"), "{err}");
        assert!(
            err.to_string()
                .contains("upload sessions, which are not supported yet"),
            "{err}"
        );
    }
}
