//! Graph's request-size rule, checked locally before any request: a `sendMail` JSON (or a
//! draft's, which carries the same message) over [`MAX_REQUEST_BYTES`] is refused by Graph.
//! Graph-only: it measures Graph's own body encoding, so it lives with the Graph mailer, not in
//! the provider-neutral [`crate::mailer::validate`].

use crate::{
    domain::OutgoingMail,
    mailer::{
        MailError,
        validate::{MAX_INLINE_ATTACHMENT_BYTES, MAX_REQUEST_BYTES, permanent},
    },
};

use super::send_mail_body;

/// `Permanent.code` of a `sendMail` request over [`MAX_REQUEST_BYTES`].
pub(crate) const CODE_REQUEST_TOO_LARGE: &str = "RequestTooLarge";

/// Checks that `mail`'s `sendMail` JSON is at most [`MAX_REQUEST_BYTES`]. Attachments beyond
/// the inline limit are uploaded separately (draft mode): the request that carries such a
/// message holds only its body and headers, and is not checked here.
///
/// # Errors
/// [`MailError::Permanent`] with [`CODE_REQUEST_TOO_LARGE`], naming both sizes.
pub fn check_request_size(mail: &OutgoingMail) -> Result<(), MailError> {
    if mail.content.attachment_bytes() > MAX_INLINE_ATTACHMENT_BYTES
        || most_request_bytes(mail) <= MAX_REQUEST_BYTES
    {
        return Ok(());
    }
    let size = send_mail_body(mail, true).len();
    if size > MAX_REQUEST_BYTES {
        return Err(permanent(
            CODE_REQUEST_TOO_LARGE,
            format!(
                "the sendMail request would be {size} bytes; Graph refuses JSON requests over {MAX_REQUEST_BYTES} bytes (4 MB, https://learn.microsoft.com/graph/api/user-sendmail)"
            ),
        ));
    }
    Ok(())
}

/// An upper bound of the `sendMail` JSON's size without serialising it: every string byte may
/// be escaped to six (`\u001f`), attachments become base64, plus room for the fixed shape.
fn most_request_bytes(mail: &OutgoingMail) -> usize {
    let recipients: usize = mail
        .content
        .to
        .iter()
        .chain(&mail.content.cc)
        .chain(&mail.content.bcc)
        .map(|r| r.address.len() + r.name.as_deref().map_or(0, str::len) + 64)
        .sum();
    let headers: usize = mail
        .content
        .headers
        .iter()
        .map(|h| h.name.len() + h.value.len() + 32)
        .sum();
    let attachments: usize = mail
        .content
        .attachments
        .iter()
        .map(|a| a.content.len().div_ceil(3) * 4 + 6 * (a.name.len() + a.content_type.len()) + 128)
        .sum();
    6 * (mail.content.subject.len() + mail.content.body.len() + recipients + headers)
        + attachments
        + 256
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mailer::validate::{
        CODE_ATTACHMENTS_TOO_LARGE, MAX_INLINE_ATTACHMENT_BYTES,
        tests::{code, mail, mail_with_three_megabytes_of_attachments, refused},
        validate,
    };

    /// What the Graph mailer checks in `sendmail` mode: the neutral rules, then the size.
    fn graph_check(mail: &OutgoingMail) -> Result<(), MailError> {
        validate(mail).and_then(|()| check_request_size(mail))
    }

    #[test]
    fn three_megabytes_of_attachments_make_a_request_over_four() {
        let mut m = mail_with_three_megabytes_of_attachments();
        // Exactly 3 MB passes the attachment rule, but its base64 alone is 4 MB.
        assert_eq!(validate(&m), Ok(()));
        assert_eq!(code(graph_check(&m)), CODE_REQUEST_TOO_LARGE);
        m.content.attachments[0]
            .content
            .truncate(MAX_INLINE_ATTACHMENT_BYTES - 64 * 1024);
        assert_eq!(graph_check(&m), Ok(()), "3 MB less 64 KiB fits in 4 MB");
        m.content.attachments[0]
            .content
            .resize(MAX_INLINE_ATTACHMENT_BYTES, 0);
        // Over 3 MB the attachment rule speaks first.
        refused(graph_check(&m), CODE_ATTACHMENTS_TOO_LARGE, &["3 MB"]);
    }

    #[test]
    fn a_request_over_four_megabytes_is_refused_before_any_request() {
        let mut m = mail();
        m.content.body = "a".repeat(MAX_REQUEST_BYTES);
        refused(
            graph_check(&m),
            CODE_REQUEST_TOO_LARGE,
            &["4194304", "user-sendmail"],
        );
        // Escaping counts: 700,000 control-free quotes are 1.4 MB of JSON, fine.
        m.content.body = "\"".repeat(700_000);
        assert_eq!(graph_check(&m), Ok(()));
        // A body that fits only before escaping does not.
        m.content.body = "\u{1}".repeat(MAX_REQUEST_BYTES / 6 + 1);
        assert_eq!(code(graph_check(&m)), CODE_REQUEST_TOO_LARGE);
    }
}
