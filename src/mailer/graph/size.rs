//! Graph's request-size rule, checked locally before any request: a `sendMail` JSON, a draft's
//! JSON or one attachment's `POST` over [`MAX_REQUEST_BYTES`] is refused by Graph.
//! Graph-only: it measures Graph's own body encoding, so it lives with the Graph mailer, not in
//! the provider-neutral [`crate::mailer::validate`].

use crate::{
    domain::OutgoingMail,
    mailer::{
        MailError,
        validate::{MAX_INLINE_ATTACHMENT_BYTES, MAX_REQUEST_BYTES},
    },
};

use super::{attachment_body, plan::UPLOAD_SESSION_MIN_BYTES, request::message, send_mail_body};

/// `Permanent.code` of a `sendMail` request over [`MAX_REQUEST_BYTES`].
pub(crate) const CODE_REQUEST_TOO_LARGE: &str = "RequestTooLarge";

/// Checks that `mail`'s `sendMail` JSON (`GRAPH_SEND_MODE=sendmail`: one request carries the
/// whole message) is at most [`MAX_REQUEST_BYTES`]. Attachments over the inline limit are
/// refused by [`crate::mailer::validate`] first.
///
/// # Errors
/// [`MailErrorKind::Permanent`](crate::mailer::MailErrorKind::Permanent) with [`CODE_REQUEST_TOO_LARGE`], naming both sizes, and naming
/// `GRAPH_SEND_MODE=draft` when attachments made it too large.
pub fn check_request_size(mail: &OutgoingMail) -> Result<(), MailError> {
    if mail.content.attachment_bytes() > MAX_INLINE_ATTACHMENT_BYTES
        || most_request_bytes(mail) <= MAX_REQUEST_BYTES
    {
        return Ok(());
    }
    let size = send_mail_body(mail, true).len();
    if size > MAX_REQUEST_BYTES {
        let hint = if mail.content.attachments.is_empty() {
            ""
        } else {
            "; GRAPH_SEND_MODE=draft sends attachments in requests of their own"
        };
        return Err(MailError::permanent(
            CODE_REQUEST_TOO_LARGE,
            format!(
                "the sendMail request would be {size} bytes; Graph refuses JSON requests over {MAX_REQUEST_BYTES} bytes (4 MB, https://learn.microsoft.com/graph/api/user-sendmail){hint}"
            ),
        ));
    }
    Ok(())
}

/// Checks `GRAPH_SEND_MODE=draft`'s requests against [`MAX_REQUEST_BYTES`] (`plan.rs` routes
/// the attachments): the draft without attachments, and each attachment under 3 MB in a `POST`
/// of its own. A file a few hundred bytes under 3 MB is over 4 MB as base64 with its JSON, yet
/// too small for an upload session: Graph has no request for it.
///
/// # Errors
/// [`MailErrorKind::Permanent`](crate::mailer::MailErrorKind::Permanent) with [`CODE_REQUEST_TOO_LARGE`], naming the request and its size.
pub fn check_draft_sizes(mail: &OutgoingMail) -> Result<(), MailError> {
    let bare = serde_json::to_vec(&message(mail, Some("<id@example.invalid>"), &[]))
        .unwrap_or_default()
        .len();
    if bare > MAX_REQUEST_BYTES {
        return Err(MailError::permanent(
            CODE_REQUEST_TOO_LARGE,
            format!(
                "the draft's request would be {bare} bytes without its attachments; Graph refuses JSON requests over {MAX_REQUEST_BYTES} bytes (4 MB, https://learn.microsoft.com/graph/api/user-post-messages)"
            ),
        ));
    }
    for (index, a) in mail.content.attachments.iter().enumerate() {
        let size = a.content.len();
        if size >= UPLOAD_SESSION_MIN_BYTES
            || size.div_ceil(3) * 4 + 6 * (a.name.len() + a.content_type.len()) + 128
                <= MAX_REQUEST_BYTES
        {
            continue;
        }
        let request = attachment_body(a).len();
        if request > MAX_REQUEST_BYTES {
            return Err(MailError::permanent(
                CODE_REQUEST_TOO_LARGE,
                format!(
                    "attachments[{index}] is {size} bytes: as base64 its request would be {request} bytes, over Graph's {MAX_REQUEST_BYTES} (4 MB), yet an upload session takes only files of {UPLOAD_SESSION_MIN_BYTES} bytes (3 MB) and more (https://learn.microsoft.com/graph/outlook-large-attachments); make it a few KB smaller or larger"
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
        assert_eq!(validate(&m).map_err(|e| e.kind), Ok(()));
        assert_eq!(code(graph_check(&m)), CODE_REQUEST_TOO_LARGE);
        m.content.attachments[0]
            .content
            .truncate(MAX_INLINE_ATTACHMENT_BYTES - 64 * 1024);
        assert_eq!(
            graph_check(&m).map_err(|e| e.kind),
            Ok(()),
            "3 MB less 64 KiB fits in 4 MB"
        );
        m.content.attachments[0]
            .content
            .resize(MAX_INLINE_ATTACHMENT_BYTES, 0);
        // Over 3 MB the attachment rule speaks first.
        refused(graph_check(&m), CODE_ATTACHMENTS_TOO_LARGE, &["3 MB"]);
    }

    #[test]
    fn sendmail_over_four_megabytes_through_its_attachments_names_draft_mode() {
        let mut m = mail_with_three_megabytes_of_attachments();
        refused(
            graph_check(&m),
            CODE_REQUEST_TOO_LARGE,
            &["GRAPH_SEND_MODE=draft"],
        );
        m.content.attachments.clear();
        m.content.body = "a".repeat(MAX_REQUEST_BYTES);
        let text = format!("{:?}", graph_check(&m));
        assert!(!text.contains("draft"), "no attachments, no hint: {text}");
    }

    #[test]
    fn draft_mode_refuses_a_file_too_big_for_a_post_and_too_small_for_a_session() {
        let mut m = mail_with_three_megabytes_of_attachments();
        m.content.attachments[0]
            .content
            .resize(UPLOAD_SESSION_MIN_BYTES - 1, 0);
        refused(
            check_draft_sizes(&m),
            CODE_REQUEST_TOO_LARGE,
            &["attachments[0]", "3145727 bytes", "upload session"],
        );
        m.content.attachments[0]
            .content
            .resize(UPLOAD_SESSION_MIN_BYTES - 4096, 0);
        assert_eq!(check_draft_sizes(&m).map_err(|e| e.kind), Ok(()));
        m.content.attachments[0]
            .content
            .resize(UPLOAD_SESSION_MIN_BYTES, 0);
        assert_eq!(check_draft_sizes(&m).map_err(|e| e.kind), Ok(()));
        m.content.body = "a".repeat(MAX_REQUEST_BYTES);
        refused(
            check_draft_sizes(&m),
            CODE_REQUEST_TOO_LARGE,
            &["without its attachments", "user-post-messages"],
        );
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
        assert_eq!(graph_check(&m).map_err(|e| e.kind), Ok(()));
        // A body that fits only before escaping does not.
        m.content.body = "\u{1}".repeat(MAX_REQUEST_BYTES / 6 + 1);
        assert_eq!(code(graph_check(&m)), CODE_REQUEST_TOO_LARGE);
    }
}
