//! What one non-delivery report says: the original's `internetMessageId` (ours is
//! `<{message id}@{mailbox domain}>`, `mailer::graph::internet_message_id`) and each failed
//! recipient with its enhanced status code (RFC 3463) and text. Read from the NDR's MIME
//! ([`mime`]: the DSN part, the returned original; the text's layouts as a fallback, [`text`]),
//! or, when Graph gives no MIME, from the JSON view ([`Report::read`]: `In-Reply-To`,
//! `References`, the text). The real NDRs it is tested on: `tests/fixtures/ndr/`.

#[cfg(test)]
mod fixtures;
mod mime;
mod text;

use uuid::Uuid;

use crate::mailer::graph::inbox::ReportMessage;

/// One failed recipient.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    /// The address (empty when the NDR does not name it next to the code).
    pub recipient: String,
    /// The enhanced status code, `5.1.1`.
    pub code: String,
    /// The server's text after the code (not scrubbed yet).
    pub text: String,
}

/// A parsed NDR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Report {
    /// The original's `internetMessageId`, if found.
    pub original: Option<String>,
    /// Each failed recipient (at least one when the NDR holds any status code).
    pub failures: Vec<Failure>,
}

impl Report {
    /// Reads an NDR's raw MIME (`$value`).
    pub(crate) fn from_mime(raw: &[u8]) -> Self {
        mime::read(raw)
    }

    /// Reads the JSON view of `message` (its `internetMessageHeaders` and body).
    pub(crate) fn read(message: &ReportMessage) -> Self {
        let body = message
            .body
            .as_ref()
            .map(|b| {
                if b.content_type.eq_ignore_ascii_case("html") {
                    text::strip_html(&b.content)
                } else {
                    b.content.clone()
                }
            })
            .unwrap_or_default();
        let header = |name: &str| {
            message
                .internet_message_headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .and_then(|h| first_angle(&h.value))
        };
        let original = header("In-Reply-To")
            .or_else(|| header("References"))
            .or_else(|| text::quoted_message_id(&body));
        Self {
            original,
            failures: text::failures(&body),
        }
    }

    /// `self`, with what it lacks (the original, the failures) taken from `view`.
    #[must_use]
    pub(crate) fn or(mut self, view: Self) -> Self {
        if self.original.is_none() {
            self.original = view.original;
        }
        if self.failures.is_empty() {
            self.failures = view.failures;
        }
        self
    }

    /// The message id in our `internetMessageId`, when it is ours for `domain`.
    pub(crate) fn our_message(&self, domain: &str) -> Option<Uuid> {
        let id = self
            .original
            .as_deref()?
            .strip_prefix('<')?
            .strip_suffix('>')?;
        let (local, at) = id.rsplit_once('@')?;
        at.eq_ignore_ascii_case(domain)
            .then(|| Uuid::parse_str(local).ok())
            .flatten()
    }
}

/// `<…>` in `text`.
fn first_angle(text: &str) -> Option<String> {
    let start = text.find('<')?;
    let end = text[start..].find('>')? + start;
    Some(text[start..=end].to_owned())
}

/// Whether `word` is an enhanced status code `c.s.d` (class 2, 4 or 5; 1–3 digits each).
pub(crate) fn is_code(word: &str) -> bool {
    let parts: Vec<&str> = word.split('.').collect();
    parts.len() == 3
        && matches!(parts[0], "2" | "4" | "5")
        && parts[1..]
            .iter()
            .all(|p| (1..=3).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit()))
}

/// The metric label of `code`: its class and subject (`5.1`), `other` for anything else.
pub(crate) fn code_class(code: &str) -> &'static str {
    const CLASSES: [&str; 24] = [
        "2.0", "2.1", "2.2", "2.3", "2.4", "2.5", "2.6", "2.7", "4.0", "4.1", "4.2", "4.3", "4.4",
        "4.5", "4.6", "4.7", "5.0", "5.1", "5.2", "5.3", "5.4", "5.5", "5.6", "5.7",
    ];
    if !is_code(code) {
        return "other";
    }
    let class = code.rsplit_once('.').map_or(code, |(c, _)| c);
    CLASSES
        .iter()
        .find(|c| **c == class)
        .copied()
        .unwrap_or("other")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mailer::graph::inbox::{ItemBody, MessageHeader};

    fn ndr(body: &str, content_type: &str, headers: &[(&str, &str)]) -> ReportMessage {
        ReportMessage {
            id: "AAMk1".into(),
            body: Some(ItemBody {
                content_type: content_type.into(),
                content: body.into(),
            }),
            internet_message_headers: headers
                .iter()
                .map(|(n, v)| MessageHeader {
                    name: (*n).into(),
                    value: (*v).into(),
                })
                .collect(),
        }
    }

    const EXCHANGE: &str = "Your message to ghost@nowhere.example couldn't be delivered.\r\n\r\nghost wasn't found at nowhere.example.\r\n\r\nDiagnostic information for administrators:\r\n\r\nGenerating server: AM9PR05MB8000.eurprd05.prod.outlook.com\r\n\r\nghost@nowhere.example\r\nRemote server returned '550 5.1.1 RESOLVER.ADR.RecipNotFound; not found'\r\n\r\nOriginal message headers:\r\n\r\nMessage-ID: <7c9e6679-7425-40de-944b-e07fc1f90ae7@contoso.example>\r\n";

    #[test]
    fn exchange_onlines_text_gives_the_recipient_the_code_and_the_original() {
        let report = Report::read(&ndr(EXCHANGE, "text", &[]));
        assert_eq!(
            report.failures,
            [Failure {
                recipient: "ghost@nowhere.example".into(),
                code: "5.1.1".into(),
                text: "RESOLVER.ADR.RecipNotFound; not found".into(),
            }]
        );
        assert_eq!(
            report.our_message("Contoso.Example"),
            Some(Uuid::parse_str("7c9e6679-7425-40de-944b-e07fc1f90ae7").unwrap())
        );
        assert_eq!(
            report.our_message("fabrikam.example"),
            None,
            "another mailbox's domain"
        );
    }

    #[test]
    fn the_in_reply_to_header_wins_and_html_bodies_are_read_as_text() {
        let html = "<html><body>Remote server returned &#39;550 5.7.233 tenant over its limit&#39;<br></body></html>";
        let report = Report::read(&ndr(html, "html", &[("In-Reply-To", " <a@b.example>")]));
        assert_eq!(report.original.as_deref(), Some("<a@b.example>"));
        assert_eq!(report.failures[0].code, "5.7.233");
        assert_eq!(report.failures[0].text, "tenant over its limit");
        assert_eq!(report.failures[0].recipient, "");
    }

    #[test]
    fn without_the_remote_server_line_the_first_code_of_the_body_is_taken() {
        let report = Report::read(&ndr("Delivery failed (#5.4.1) for relay", "text", &[]));
        assert_eq!(report.failures[0].code, "5.4.1");
        assert_eq!(
            Report::read(&ndr("no code 2.0.0 here", "text", &[])).failures,
            []
        );
    }

    #[test]
    fn code_classes_are_bounded() {
        assert_eq!(code_class("5.1.1"), "5.1");
        assert_eq!(code_class("5.1.10"), "5.1");
        assert_eq!(code_class("5.7.233"), "5.7");
        assert_eq!(code_class("5.9.1"), "other");
        assert_eq!(code_class("x@y.example"), "other");
        assert!(!is_code("5.1") && !is_code("5.1.1234") && is_code("4.4.7"));
    }
}
