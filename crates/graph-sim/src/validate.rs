//! Validation of a sendMail JSON body, with Graph's error codes
//! (<https://learn.microsoft.com/graph/api/user-sendmail>, message resource
//! <https://learn.microsoft.com/graph/api/resources/message>).
//!
//! Property names are matched case-insensitively, as Graph does; OData annotations (names with
//! `@`) are ignored. Codes: malformed JSON `400 BadRequest`; a value of the wrong type or an
//! unknown property `400 RequestBodyRead`; no `message` `400 ErrorInvalidParameter`; a bad,
//! missing or excess recipient `400 ErrorInvalidRecipients`; a header name without `x-` `400
//! InvalidInternetMessageHeader`.

use axum::http::StatusCode;
use base64::Engine as _;
use serde_json::{Map, Value};

use super::{
    records::{RecordedAttachment, RecordedHeader},
    wire::GraphError,
};

/// The parts of a valid sendMail body that graph-sim records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParsedMessage {
    pub subject: Option<String>,
    pub to: Vec<String>,
    pub cc: Vec<String>,
    pub bcc: Vec<String>,
    pub headers: Vec<RecordedHeader>,
    /// `text` or `html`.
    pub body_content_type: String,
    pub body_bytes: usize,
    pub save_to_sent_items: bool,
    /// `message.internetMessageId`, if the client set it.
    pub internet_message_id: Option<String>,
    /// Every file attachment: name, decoded size and SHA-256.
    pub attachments: Vec<RecordedAttachment>,
}

impl ParsedMessage {
    /// To + Cc + Bcc.
    pub(crate) fn recipient_count(&self) -> u32 {
        u32::try_from(self.to.len() + self.cc.len() + self.bcc.len()).unwrap_or(u32::MAX)
    }

    /// Number of file attachments.
    pub(crate) fn attachment_count(&self) -> u32 {
        u32::try_from(self.attachments.len()).unwrap_or(u32::MAX)
    }

    /// Decoded bytes of all attachments.
    pub(crate) fn attachment_bytes(&self) -> usize {
        self.attachments.iter().map(|a| a.bytes).sum()
    }
}

/// The properties of Graph v1.0's `message` resource; any other name is refused.
const MESSAGE_PROPERTIES: &[&str] = &[
    "attachments",
    "bccRecipients",
    "body",
    "bodyPreview",
    "categories",
    "ccRecipients",
    "changeKey",
    "conversationId",
    "conversationIndex",
    "createdDateTime",
    "extensions",
    "flag",
    "from",
    "hasAttachments",
    "id",
    "importance",
    "inferenceClassification",
    "internetMessageHeaders",
    "internetMessageId",
    "isDeliveryReceiptRequested",
    "isDraft",
    "isRead",
    "isReadReceiptRequested",
    "lastModifiedDateTime",
    "multiValueExtendedProperties",
    "parentFolderId",
    "receivedDateTime",
    "replyTo",
    "sender",
    "sentDateTime",
    "singleValueExtendedProperties",
    "subject",
    "toRecipients",
    "uniqueBody",
    "webLink",
];

const FILE_ATTACHMENT: &str = "#microsoft.graph.fileAttachment";

/// Parses and validates a sendMail body; `max_recipients` bounds To+Cc+Bcc.
///
/// # Errors
/// The [`GraphError`] Graph would answer (see the module doc).
pub(crate) fn parse_send_mail(
    bytes: &[u8],
    max_recipients: u32,
) -> Result<ParsedMessage, GraphError> {
    let root: Value = serde_json::from_slice(bytes).map_err(|_| unreadable())?;
    let Value::Object(root) = root else {
        return Err(unreadable());
    };
    for key in root.keys() {
        if !is_annotation(key)
            && !key.eq_ignore_ascii_case("message")
            && !key.eq_ignore_ascii_case("saveToSentItems")
        {
            return Err(GraphError::body_read(format!(
                "The parameter '{key}' in the request payload is not a valid parameter for the operation 'sendMail'."
            )));
        }
    }
    let save_to_sent_items = match get(&root, "saveToSentItems") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(other) => return Err(wrong_type(other, "Edm.Boolean")),
    };
    let message = match get(&root, "message") {
        None | Some(Value::Null) => {
            return Err(GraphError::new(
                StatusCode::BAD_REQUEST,
                "ErrorInvalidParameter",
                "The value of the parameter 'Message' is empty.",
            ));
        }
        Some(Value::Object(m)) => m,
        Some(other) => return Err(not_an_object(other)),
    };
    parse_message(message, max_recipients, save_to_sent_items)
}

/// Parses and validates the body of `POST /users/{id}/messages` (a draft: the message object
/// itself, <https://learn.microsoft.com/graph/api/user-post-messages>) with the same rules as a
/// sendMail message.
///
/// # Errors
/// The [`GraphError`] Graph would answer.
pub(crate) fn parse_draft(bytes: &[u8], max_recipients: u32) -> Result<ParsedMessage, GraphError> {
    let root: Value = serde_json::from_slice(bytes).map_err(|_| unreadable())?;
    let Value::Object(message) = root else {
        return Err(unreadable());
    };
    parse_message(&message, max_recipients, true)
}

fn parse_message(
    message: &Map<String, Value>,
    max_recipients: u32,
    save_to_sent_items: bool,
) -> Result<ParsedMessage, GraphError> {
    for key in message.keys() {
        if !is_annotation(key)
            && !MESSAGE_PROPERTIES
                .iter()
                .any(|p| p.eq_ignore_ascii_case(key))
        {
            return Err(GraphError::body_read(format!(
                "The property '{key}' does not exist on type 'microsoft.graph.message'. Make sure to only use property names that are defined by the type or mark the type as open type."
            )));
        }
    }
    let subject = optional_string(message, "subject")?;
    let internet_message_id = optional_string(message, "internetMessageId")?;
    let (body_content_type, body_bytes) = parse_body(message)?;
    let to = parse_recipients(message, "toRecipients")?;
    let cc = parse_recipients(message, "ccRecipients")?;
    let bcc = parse_recipients(message, "bccRecipients")?;
    let total = to.len() + cc.len() + bcc.len();
    if total == 0 {
        return Err(invalid_recipients(
            "A message can't be sent because it contains no recipients.",
        ));
    }
    if total > max_recipients as usize {
        return Err(invalid_recipients(format!(
            "The message has {total} recipients (To, Cc and Bcc together); at most {max_recipients} are allowed."
        )));
    }
    let headers = parse_headers(message)?;
    let attachments = parse_attachments(message)?;
    Ok(ParsedMessage {
        subject,
        to,
        cc,
        bcc,
        headers,
        body_content_type,
        body_bytes,
        save_to_sent_items,
        internet_message_id,
        attachments,
    })
}

fn is_annotation(key: &str) -> bool {
    key.contains('@')
}

fn get<'a>(object: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    object
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v)
}

fn unreadable() -> GraphError {
    GraphError::new(
        StatusCode::BAD_REQUEST,
        "BadRequest",
        "Unable to read JSON request payload. Please ensure Content-Type header is set and payload is of valid JSON format.",
    )
}

fn literal(value: &Value) -> String {
    let text = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if text.chars().count() > 40 {
        format!("{}…", text.chars().take(40).collect::<String>())
    } else {
        text
    }
}

fn wrong_type(value: &Value, expected: &str) -> GraphError {
    GraphError::body_read(format!(
        "Cannot convert the literal '{}' to the expected type '{expected}'.",
        literal(value)
    ))
}

fn not_an_object(value: &Value) -> GraphError {
    GraphError::body_read(format!(
        "An unexpected '{}' node was found when reading from the JSON reader. A 'StartObject' node was expected.",
        node_kind(value)
    ))
}

fn not_an_array(value: &Value) -> GraphError {
    GraphError::body_read(format!(
        "An unexpected '{}' node was found when reading from the JSON reader. A 'StartArray' node was expected.",
        node_kind(value)
    ))
}

fn node_kind(value: &Value) -> &'static str {
    match value {
        Value::Object(_) => "StartObject",
        Value::Array(_) => "StartArray",
        _ => "PrimitiveValue",
    }
}

fn invalid_recipients(detail: impl std::fmt::Display) -> GraphError {
    GraphError::new(
        StatusCode::BAD_REQUEST,
        "ErrorInvalidRecipients",
        format!("At least one recipient is not valid., {detail}"),
    )
}

fn optional_string(object: &Map<String, Value>, name: &str) -> Result<Option<String>, GraphError> {
    match get(object, name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(wrong_type(other, "Edm.String")),
    }
}

fn optional_array<'a>(
    object: &'a Map<String, Value>,
    name: &str,
) -> Result<&'a [Value], GraphError> {
    match get(object, name) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(other) => Err(not_an_array(other)),
    }
}

fn parse_body(message: &Map<String, Value>) -> Result<(String, usize), GraphError> {
    let body = match get(message, "body") {
        None | Some(Value::Null) => return Ok(("text".to_owned(), 0)),
        Some(Value::Object(b)) => b,
        Some(other) => return Err(not_an_object(other)),
    };
    let content_type = match optional_string(body, "contentType")? {
        None => "text".to_owned(),
        Some(t) if t.eq_ignore_ascii_case("text") || t.eq_ignore_ascii_case("html") => {
            t.to_ascii_lowercase()
        }
        Some(t) => return Err(wrong_type(&Value::String(t), "microsoft.graph.bodyType")),
    };
    let content = optional_string(body, "content")?;
    Ok((content_type, content.map_or(0, |c| c.len())))
}

/// Each item of the optional array `name` of `message`, read by `parse`; an item that is not
/// an object is refused.
fn parse_each<T>(
    message: &Map<String, Value>,
    name: &str,
    mut parse: impl FnMut(&Map<String, Value>) -> Result<T, GraphError>,
) -> Result<Vec<T>, GraphError> {
    optional_array(message, name)?
        .iter()
        .map(|item| match item {
            Value::Object(object) => parse(object),
            other => Err(not_an_object(other)),
        })
        .collect()
}

fn parse_recipients(message: &Map<String, Value>, name: &str) -> Result<Vec<String>, GraphError> {
    parse_each(message, name, |recipient| {
        let address = match get(recipient, "emailAddress") {
            None | Some(Value::Null) => None,
            Some(Value::Object(email)) => {
                optional_string(email, "name")?;
                optional_string(email, "address")?
            }
            Some(other) => return Err(not_an_object(other)),
        };
        let address = address.unwrap_or_default();
        // graph-sim's own check (`crate::address`), not the product's parser.
        if !crate::address::is_smtp_address(&address) {
            return Err(invalid_recipients(format!(
                "Recipient '{address}' is not resolved. All recipients must be resolved before a message can be submitted."
            )));
        }
        Ok(address)
    })
}

fn parse_headers(message: &Map<String, Value>) -> Result<Vec<RecordedHeader>, GraphError> {
    parse_each(message, "internetMessageHeaders", |header| {
        let name = optional_string(header, "name")?.unwrap_or_default();
        let value = optional_string(header, "value")?.unwrap_or_default();
        let prefixed =
            name.len() > 2 && name.is_char_boundary(2) && name[..2].eq_ignore_ascii_case("x-");
        if !prefixed {
            return Err(GraphError::new(
                StatusCode::BAD_REQUEST,
                "InvalidInternetMessageHeader",
                format!(
                    "The internet message header name '{name}' should start with 'x-' or 'X-'."
                ),
            ));
        }
        Ok(RecordedHeader { name, value })
    })
}

fn parse_attachments(message: &Map<String, Value>) -> Result<Vec<RecordedAttachment>, GraphError> {
    parse_each(message, "attachments", parse_file_attachment)
}

/// The body of `POST /users/{id}/messages/{id}/attachments`: one `fileAttachment`
/// (<https://learn.microsoft.com/graph/api/message-post-attachments>).
pub(crate) fn parse_attachment_body(bytes: &[u8]) -> Result<RecordedAttachment, GraphError> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(attachment)) => parse_file_attachment(&attachment),
        Ok(other) => Err(not_an_object(&other)),
        Err(_) => Err(unreadable()),
    }
}

fn parse_file_attachment(
    attachment: &Map<String, Value>,
) -> Result<RecordedAttachment, GraphError> {
    let odata_type = match get(attachment, "@odata.type") {
        Some(Value::String(t)) => t.clone(),
        _ => {
            return Err(GraphError::body_read(
                "An attachment needs '@odata.type' (for example '#microsoft.graph.fileAttachment'): 'microsoft.graph.attachment' is abstract.",
            ));
        }
    };
    let normalized = if odata_type.starts_with('#') {
        odata_type.clone()
    } else {
        format!("#{odata_type}")
    };
    if !normalized.eq_ignore_ascii_case(FILE_ATTACHMENT) {
        return Err(GraphError::body_read(format!(
            "graph-sim takes only '{FILE_ATTACHMENT}' attachments, not '{odata_type}'."
        )));
    }
    let name = optional_string(attachment, "name")?.unwrap_or_default();
    optional_string(attachment, "contentType")?;
    let content = match get(attachment, "contentBytes") {
        Some(Value::String(s)) => s,
        None | Some(Value::Null) => {
            return Err(GraphError::body_read(
                "The property 'contentBytes' of a fileAttachment must be set.",
            ));
        }
        Some(other) => return Err(wrong_type(other, "Edm.Binary")),
    };
    let decoded = decode_base64(content)
        .ok_or_else(|| wrong_type(&Value::String(content.clone()), "Edm.Binary"))?;
    Ok(RecordedAttachment::of(name, &decoded))
}

/// Decoded length of standard base64 (padded) or base64url (padded or not), as OData's
/// `Edm.Binary` allows.
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    use base64::engine::general_purpose::{STANDARD, URL_SAFE, URL_SAFE_NO_PAD};
    [STANDARD, URL_SAFE, URL_SAFE_NO_PAD]
        .iter()
        .find_map(|engine| engine.decode(text).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(body: Value) -> Result<ParsedMessage, GraphError> {
        parse_send_mail(body.to_string().as_bytes(), 500)
    }

    fn code(body: Value) -> String {
        parse(body).unwrap_err().code
    }

    fn minimal() -> Value {
        json!({"message": {"subject": "Hi", "body": {"contentType": "Text", "content": "héllo"},
               "toRecipients": [{"emailAddress": {"address": "a@example.org", "name": "A"}}]}})
    }

    #[test]
    fn a_full_message_is_parsed_with_counts_and_sizes() {
        let m = parse(json!({
            "Message": {
                "Subject": "Invitation",
                "body": {"contentType": "hTmL", "content": "<p>hi</p>"},
                "toRecipients": [{"emailAddress": {"address": "a@example.org"}}],
                "ccRecipients": [{"emailAddress": {"address": "b@example.org"}}],
                "bccRecipients": [{"emailAddress": {"address": "c@example.org"}}, {"emailAddress": {"address": "d@example.org"}}],
                "internetMessageHeaders": [{"name": "X-Campaign-Id", "value": "c-42"}],
                "attachments": [{"@odata.type": "#microsoft.graph.fileAttachment", "name": "a.txt",
                                 "contentType": "text/plain", "contentBytes": "aGVsbG8="}]
            },
            "saveToSentItems": false
        }))
        .unwrap();
        assert_eq!(m.subject.as_deref(), Some("Invitation"));
        assert_eq!(m.body_content_type, "html");
        assert_eq!(m.body_bytes, 9);
        assert_eq!(m.recipient_count(), 4);
        assert_eq!(
            m.headers,
            vec![RecordedHeader {
                name: "X-Campaign-Id".into(),
                value: "c-42".into()
            }]
        );
        assert_eq!((m.attachment_count(), m.attachment_bytes()), (1, 5));
        assert!(!m.save_to_sent_items);
        assert_eq!(parse(minimal()).unwrap().body_bytes, "héllo".len());
    }

    #[test]
    fn each_broken_part_gets_graphs_code() {
        assert_eq!(
            parse_send_mail(b"{not json", 500).unwrap_err().code,
            "BadRequest"
        );
        assert_eq!(code(json!({})), "ErrorInvalidParameter");
        assert_eq!(
            code(json!({"message": {"toRecipients": []}})),
            "ErrorInvalidRecipients"
        );
        assert_eq!(
            code(
                json!({"message": {"toRecipients": [{"emailAddress": {"address": "not an address"}}]}})
            ),
            "ErrorInvalidRecipients"
        );
        assert_eq!(
            code(json!({"message": {"toRecipients": [{"emailAddress": {}}]}})),
            "ErrorInvalidRecipients"
        );
        let mut m = minimal();
        m["message"]["internetMessageHeaders"] = json!([{"name": "Campaign", "value": "1"}]);
        assert_eq!(code(m), "InvalidInternetMessageHeader");
        let mut m = minimal();
        m["message"]["body"]["contentType"] = json!("markdown");
        assert_eq!(code(m), "RequestBodyRead");
        let mut m = minimal();
        m["message"]["subject"] = json!(5);
        assert_eq!(code(m), "RequestBodyRead");
        let mut m = minimal();
        m["message"]["subjekt"] = json!("typo");
        assert_eq!(code(m), "RequestBodyRead");
        let mut m = minimal();
        m["saveToSentItem"] = json!(true);
        assert_eq!(code(m), "RequestBodyRead");
        let mut m = minimal();
        m["message"]["attachments"] =
            json!([{"@odata.type": "#microsoft.graph.fileAttachment", "contentBytes": "%%%"}]);
        assert_eq!(code(m), "RequestBodyRead");
        let mut m = minimal();
        m["message"]["attachments"] = json!([{"name": "x", "contentBytes": "aGk="}]);
        assert_eq!(code(m), "RequestBodyRead");
    }

    #[test]
    fn at_most_500_recipients_across_to_cc_and_bcc() {
        let rcpt = |i: usize| json!({"emailAddress": {"address": format!("r{i}@example.org")}});
        let to: Vec<Value> = (0..300).map(rcpt).collect();
        let bcc: Vec<Value> = (300..500).map(rcpt).collect();
        let ok = json!({"message": {"toRecipients": to, "bccRecipients": bcc}});
        assert_eq!(parse(ok.clone()).unwrap().recipient_count(), 500);
        let mut over = ok;
        over["message"]["ccRecipients"] = json!([rcpt(500)]);
        let err = parse(over).unwrap_err();
        assert_eq!(err.code, "ErrorInvalidRecipients");
        assert!(err.message.contains("501 recipients"), "{}", err.message);
    }

    #[test]
    fn annotations_and_x_headers_in_any_case_are_accepted() {
        let mut m = minimal();
        m["@odata.context"] = json!("x");
        m["message"]["internetMessageHeaders"] =
            json!([{"name": "x-lower", "value": "1"}, {"name": "X-Upper", "value": "2"}]);
        assert_eq!(parse(m).unwrap().headers.len(), 2);
    }
}
