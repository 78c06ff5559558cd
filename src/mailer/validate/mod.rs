//! Local validation of an [`OutgoingMail`] before any HTTP call or limiter reservation, so a
//! message Graph would refuse costs no request and no budget. Every refusal is
//! [`MailErrorKind::Permanent`](crate::mailer::MailErrorKind::Permanent) with one of the `code`s below and never a full recipient address;
//! each message names the rule and its limit.

use crate::domain::{MailboxAddress, OutgoingMail, Recipient, mask_address};

use super::MailError;

mod headers;
#[cfg(test)]
pub(crate) mod tests;

pub use headers::MAX_HEADERS;
use headers::check_headers;

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

/// `Permanent.code` of a recipient whose address does not parse.
pub(crate) const CODE_INVALID_RECIPIENT: &str = "InvalidRecipient";
/// `Permanent.code` of a message with no recipients at all.
pub(crate) const CODE_NO_RECIPIENTS: &str = "NoRecipients";
/// `Permanent.code` of a message with more than [`MAX_RECIPIENTS`] recipients.
pub(crate) const CODE_TOO_MANY_RECIPIENTS: &str = "TooManyRecipients";
/// `Permanent.code` of attachments over [`MAX_INLINE_ATTACHMENT_BYTES`].
pub(crate) const CODE_ATTACHMENTS_TOO_LARGE: &str = "AttachmentsTooLarge";
/// `Permanent.code` of a CR, LF or other control character in the subject or a display name.
pub(crate) const CODE_CONTROL_CHARACTER: &str = "ControlCharacter";

/// Checks `mail` against the rules Graph enforces, in this order: every To/Cc/Bcc address
/// parses as one ASCII address (`"a@example.org; b@example.org"` is refused, not split; a
/// Unicode domain must be punycode, which `enqueue` does) and its display name has no control
/// character, 1 to [`MAX_RECIPIENTS`] recipients, the subject has no control character, at
/// most [`MAX_HEADERS`] custom headers whose names are RFC 5322 field names starting with `x-`
/// (any case), whose values have no control character, each line at most
/// [`headers::MAX_HEADER_LINE`] and all together at most [`headers::MAX_HEADER_BYTES`], and
/// attachments total at most [`MAX_INLINE_ATTACHMENT_BYTES`]. Provider-neutral: Graph's
/// request-size rule is the Graph mailer's (`graph::check_request_size`).
///
/// "Control character": U+0000–U+001F but TAB, U+007F–U+009F, U+2028 and U+2029 — CR/LF would
/// split a header (`x-a\r\nBcc: …`).
///
/// # Errors
/// The first rule broken, as [`MailErrorKind::Permanent`](crate::mailer::MailErrorKind::Permanent); addresses in the message are masked.
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
    for (field, list) in [
        ("to", &mail.content.to),
        ("cc", &mail.content.cc),
        ("bcc", &mail.content.bcc),
    ] {
        for (index, recipient) in list.iter().enumerate() {
            check_recipient(field, index, recipient)?;
        }
    }
    let recipients = mail.content.recipient_count();
    if recipients == 0 {
        return Err(MailError::permanent(
            CODE_NO_RECIPIENTS,
            "the message has no To, Cc or Bcc recipients".to_owned(),
        ));
    }
    if recipients > MAX_RECIPIENTS {
        return Err(MailError::permanent(
            CODE_TOO_MANY_RECIPIENTS,
            format!(
                "the message has {recipients} recipients (To + Cc + Bcc); Exchange Online accepts at most {MAX_RECIPIENTS} per message"
            ),
        ));
    }
    refuse_control(
        &mail.content.subject,
        CODE_CONTROL_CHARACTER,
        "the subject",
        "a header",
    )?;
    check_headers(&mail.content.headers)?;
    let bytes = mail.content.attachment_bytes();
    if bytes > max_attachment_bytes && max_attachment_bytes != MAX_INLINE_ATTACHMENT_BYTES {
        return Err(MailError::permanent(
            CODE_ATTACHMENTS_TOO_LARGE,
            format!(
                "attachments total {bytes} bytes; at most {max_attachment_bytes} bytes can be sent through Graph upload sessions"
            ),
        ));
    }
    if bytes > max_attachment_bytes {
        return Err(MailError::permanent(
            CODE_ATTACHMENTS_TOO_LARGE,
            format!(
                "attachments total {bytes} bytes; at most {MAX_INLINE_ATTACHMENT_BYTES} bytes (3 MB) can be sent inline because Graph refuses requests over 4 MB and base64 adds a third; larger attachments go through upload sessions in GRAPH_SEND_MODE=draft"
            ),
        ));
    }
    Ok(())
}

/// Checks that `mail` is sent from `mailbox`, the sender this mailer was built for (the limiter
/// counts `mail.from`, the provider sends as `mailbox`: they must be the same).
///
/// # Errors
/// [`MailErrorKind::Misconfigured`](crate::mailer::MailErrorKind::Misconfigured) naming both mailboxes.
pub(crate) fn check_sender(mail: &OutgoingMail, mailbox: &MailboxAddress) -> Result<(), MailError> {
    if &mail.from == mailbox {
        Ok(())
    } else {
        Err(MailError::misconfigured(format!(
            "message is from {} but this mailer sends as {mailbox}",
            mail.from
        )))
    }
}

fn check_recipient(field: &str, index: usize, recipient: &Recipient) -> Result<(), MailError> {
    let raw = recipient.address.trim();
    let single = !raw.contains([',', ';']);
    if single && !raw.is_ascii() {
        return Err(MailError::permanent(
            CODE_INVALID_RECIPIENT,
            format!(
                "{field}[{index}] ({}) has non-ASCII characters: write the domain in punycode (`mail-worker enqueue` converts it) and the local part in ASCII (we do not send SMTPUTF8 addresses)",
                mask_each(raw)
            ),
        ));
    }
    if !(single && MailboxAddress::parse(raw).is_ok()) {
        return Err(MailError::permanent(
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
    if let Some(name) = recipient.name.as_deref() {
        let what = format!("{field}[{index}].name");
        refuse_control(name, CODE_CONTROL_CHARACTER, &what, "a display name")?;
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

/// The first control character of `text` as `U+000D at character 12`, if any (TAB allowed).
fn control_character(text: &str) -> Option<String> {
    text.chars()
        .enumerate()
        .find(|(_, c)| (c.is_control() && *c != '\t') || matches!(c, '\u{2028}' | '\u{2029}'))
        .map(|(i, c)| format!("U+{:04X} at character {}", c as u32, i + 1))
}

/// Refuses `text` (`what`, e.g. `the subject`) with `code` when it holds a control character,
/// naming it and `place` (`a header`, `a display name`).
pub(super) fn refuse_control(
    text: &str,
    code: &str,
    what: &str,
    place: &str,
) -> Result<(), MailError> {
    match control_character(text) {
        None => Ok(()),
        Some(at) => Err(MailError::permanent(
            code,
            format!(
                "{what} contains the control character {at}; CR, LF and other control characters are refused in {place}"
            ),
        )),
    }
}
