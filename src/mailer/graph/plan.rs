//! Which request carries each attachment of a draft (`GRAPH_SEND_MODE=draft`), chosen by the
//! attachment's own size, as Microsoft says: "choose the approach for each file based on its
//! file size and attach the files individually"
//! (<https://learn.microsoft.com/graph/outlook-large-attachments>):
//! - under 3 MB: in the draft's own JSON while that request stays within Graph's 4 MB
//!   ([`MAX_REQUEST_BYTES`]), else one `POST /users/{mailbox}/messages/{id}/attachments` each
//!   (<https://learn.microsoft.com/graph/api/message-post-attachments>);
//! - 3 MB and over (up to 150 MB): an upload session each
//!   (<https://learn.microsoft.com/graph/api/attachment-createuploadsession>). Graph refuses a
//!   session for a smaller file (`400 ErrorAttachmentSizeShouldNotBeLessThanMinimumSize`, the
//!   large-attachments page, "Errors"), so the size of the others never sends them there.
//!
//! "3 MB" is read as 3 MiB (3,145,728 bytes), the harsher reading for the session's minimum
//! (a file of 3,000,000 bytes goes in a `POST`, which both readings accept).

use crate::{domain::Attachment, mailer::validate::MAX_REQUEST_BYTES};

use super::request::{attachment_body, message};

/// The smallest attachment sent through an upload session: 3 MB (3,145,728 bytes); smaller ones
/// go inline or in a `POST …/attachments` of their own.
pub(crate) const UPLOAD_SESSION_MIN_BYTES: usize = 3 * 1024 * 1024;

/// `,"attachments":[` and `]`: what a non-empty attachment list adds to the draft's JSON.
const LIST_BYTES: usize = r#","attachments":[]"#.len();

/// A draft's requests: the create request's JSON and the attachments left for requests of
/// their own, each list in the message's order.
#[derive(Debug)]
pub struct DraftPlan<'a> {
    /// The draft (`POST /users/{mailbox}/messages`) with the attachments that fit in it.
    pub body: Vec<u8>,
    /// Under 3 MB, not in the draft: one `POST …/attachments` each.
    pub posted: Vec<&'a Attachment>,
    /// 3 MB and over: one upload session each.
    pub uploaded: Vec<&'a Attachment>,
}

impl DraftPlan<'_> {
    /// Whether any attachment is added after the draft is created (a draft found after a
    /// failed attempt may lack it).
    pub fn adds_attachments(&self) -> bool {
        !self.posted.is_empty() || !self.uploaded.is_empty()
    }
}

/// Plans the draft of `mail` with `internetMessageId` `imid`: attachments under 3 MB go into
/// the draft in order while its JSON stays within [`MAX_REQUEST_BYTES`] (its exact length,
/// counted from each attachment's own JSON), the rest of them in `posted`; 3 MB and over in
/// `uploaded`.
pub fn draft_plan<'a>(mail: &'a crate::domain::OutgoingMail, imid: &'a str) -> DraftPlan<'a> {
    let bare = serde_json::to_vec(&message(mail, Some(imid), &[]))
        .unwrap_or_default()
        .len();
    let mut inline = Vec::new();
    let mut posted = Vec::new();
    let mut uploaded = Vec::new();
    let mut size = bare + LIST_BYTES;
    for a in &mail.content.attachments {
        if a.content.len() >= UPLOAD_SESSION_MIN_BYTES {
            uploaded.push(a);
            continue;
        }
        // Its JSON, plus the comma before it when it is not the first.
        let added = attachment_body(a).len() + usize::from(!inline.is_empty());
        if size + added <= MAX_REQUEST_BYTES {
            size += added;
            inline.push(a);
        } else {
            posted.push(a);
        }
    }
    let body = serde_json::to_vec(&message(mail, Some(imid), &inline)).unwrap_or_default();
    DraftPlan {
        body,
        posted,
        uploaded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mailer::{
        graph::upload_session_body,
        validate::tests::{attachment, mail},
    };

    const MB: usize = 1024 * 1024;

    fn names(list: &[&Attachment]) -> Vec<String> {
        list.iter().map(|a| a.name.clone()).collect()
    }

    fn inline_names(plan: &DraftPlan<'_>) -> Vec<String> {
        let json: serde_json::Value = serde_json::from_slice(&plan.body).unwrap();
        json["attachments"]
            .as_array()
            .map(|l| {
                l.iter()
                    .map(|a| a["name"].as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn with(sizes: &[(&str, usize)]) -> crate::domain::OutgoingMail {
        let mut m = mail();
        m.content.attachments = sizes
            .iter()
            .map(|(name, size)| attachment(name, "application/pdf", vec![7; *size]))
            .collect();
        m
    }

    #[test]
    fn two_and_one_megabyte_files_go_inline_and_by_post_never_to_a_session() {
        let m = with(&[("two.pdf", 2 * MB), ("one.pdf", MB)]);
        let plan = draft_plan(&m, "<id@contoso.example>");
        assert_eq!(inline_names(&plan), ["two.pdf"]);
        assert_eq!(names(&plan.posted), ["one.pdf"]);
        assert!(plan.uploaded.is_empty());
        assert!(plan.body.len() <= MAX_REQUEST_BYTES, "{}", plan.body.len());
        assert!(attachment_body(plan.posted[0]).len() <= MAX_REQUEST_BYTES);
    }

    #[test]
    fn eight_half_megabyte_files_fill_the_draft_to_four_megabytes_then_post() {
        let sizes: Vec<(String, usize)> = (0..8).map(|i| (format!("f{i}.pdf"), MB / 2)).collect();
        let sizes: Vec<(&str, usize)> = sizes.iter().map(|(n, s)| (n.as_str(), *s)).collect();
        let m = with(&sizes);
        let plan = draft_plan(&m, "<id@contoso.example>");
        // 0.5 MiB is 699,052 bytes as base64, a little more with its JSON: 5 fit in 4 MiB, 6 do not.
        assert_eq!(inline_names(&plan).len(), 5);
        assert_eq!(names(&plan.posted), ["f5.pdf", "f6.pdf", "f7.pdf"]);
        assert!(plan.uploaded.is_empty());
        assert!(plan.body.len() <= MAX_REQUEST_BYTES, "{}", plan.body.len());
    }

    #[test]
    fn three_megabytes_and_over_get_an_upload_session_each() {
        let m = with(&[
            ("a.pdf", 3 * MB + MB / 2),
            ("small.txt", 2),
            ("b.pdf", 3 * MB),
            ("just-under.pdf", 3 * MB - 1),
        ]);
        let plan = draft_plan(&m, "<id@contoso.example>");
        assert_eq!(names(&plan.uploaded), ["a.pdf", "b.pdf"]);
        assert_eq!(inline_names(&plan), ["small.txt"]);
        assert_eq!(names(&plan.posted), ["just-under.pdf"]);
        assert!(plan.adds_attachments());
        let session: serde_json::Value =
            serde_json::from_slice(&upload_session_body(plan.uploaded[1])).unwrap();
        assert_eq!(
            session,
            serde_json::json!({"AttachmentItem": {"attachmentType": "file", "name": "b.pdf",
                "size": 3 * MB, "contentType": "application/pdf"}})
        );
        let json: serde_json::Value = serde_json::from_slice(&plan.body).unwrap();
        assert_eq!(json["internetMessageId"], "<id@contoso.example>");
        assert!(
            json.get("saveToSentItems").is_none(),
            "a draft is the message itself"
        );
    }

    #[test]
    fn a_message_without_attachments_adds_none() {
        let m = mail();
        let plan = draft_plan(&m, "<id@contoso.example>");
        assert!(!plan.adds_attachments());
        assert!(inline_names(&plan).is_empty());
    }
}
