//! Recordings: request/response pairs as Microsoft Graph answered them, and the check that
//! graph-sim answers the same way (`tests/replay.rs` replays every file of the workspace's
//! `tests/recordings/`).
//!
//! A recording is one JSON file: where it comes from (a learn.microsoft.com page's example, or a
//! live tenant run by `cargo test --test live -- --ignored`), and its steps in order. Paths and
//! bodies carry placeholders — `{mailbox}`, `{tenant}`, `{client_id}`, `{client_secret}`,
//! `{scope}`, `{to}`, and any value an earlier step captured (`"capture": {"draft": "/id"}` makes
//! `{draft}` the `id` of that step's response) — so a recording holds no tenant, address, secret
//! or token and replays against any stand-in.
//!
//! graph-sim answers *the same* when, per step: the status is equal; each recorded header is
//! present (a media type compared by its type, not its parameters); and the body has the
//! recorded JSON shape ([`shape_differences`]): every recorded property present with the same
//! JSON type, arrays by their first element, a recorded `null` matching anything (Graph writes
//! `null` for an absent value). Values are not compared (ids, times and texts differ by nature).

mod replay;
mod scrub;
mod shape;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use replay::replay;
pub use scrub::Scrubber;
pub use shape::shape_differences;

/// One recording file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Recording {
    /// Where it comes from: a learn.microsoft.com page (and which example), or `live tenant`.
    pub source: String,
    /// What was changed from the source, if anything, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The exchanges, in order.
    pub steps: Vec<Step>,
}

/// One request and the answer it got.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Step {
    /// What the step does.
    pub name: String,
    /// The request as sent.
    pub request: RecordedRequest,
    /// The answer as received.
    pub response: RecordedResponse,
    /// Placeholder name → JSON pointer into this step's response body: the value later steps use.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capture: BTreeMap<String, String>,
    /// Why this step is not replayed, if it is not (e.g. a `PUT` to an upload URL's own host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_replay: Option<String>,
}

/// A request: method, path on its host (from `/`), the headers that shape it, its body.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RecordedRequest {
    /// `GET`, `POST`, `PATCH`, `PUT`, `DELETE`.
    pub method: String,
    /// From the first `/`, with the query (e.g. `/v1.0/users/{mailbox}/messages?$top=1`).
    pub path: String,
    /// Headers other than `Authorization` (never recorded; the replay adds its own token).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// A JSON body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// A text body (a MIME `sendMail`: base64 text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// A form body (the token request), field by field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub form: Option<BTreeMap<String, String>>,
    /// Whether the request goes to the token endpoint's host (no `Authorization`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub login: bool,
}

/// An answer: status, the headers that matter, the body.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RecordedResponse {
    /// The HTTP status.
    pub status: u16,
    /// Headers whose presence (and, for `Content-Type`, media type) the replay checks.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// A JSON body (absent for 202/204).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// A text body (an item's MIME at `$value`), kept for the reader; not compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

impl RecordedResponse {
    /// How `status`, `headers` and `body` (an answer to the same request) differ from this
    /// recorded answer; empty when they agree.
    pub fn differences(
        &self,
        status: u16,
        headers: &[(String, String)],
        body: Option<&Value>,
    ) -> Vec<String> {
        let mut out = Vec::new();
        if status != self.status {
            out.push(format!("status: recorded {} but got {status}", self.status));
        }
        for (name, recorded) in &self.headers {
            let got = headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str());
            match got {
                None => out.push(format!("header {name}: recorded but absent")),
                Some(got) if name.eq_ignore_ascii_case("content-type") => {
                    if media_type(got) != media_type(recorded) {
                        out.push(format!(
                            "header {name}: recorded {recorded:?} but got {got:?}"
                        ));
                    }
                }
                Some(_) => {}
            }
        }
        match (&self.body, body) {
            (Some(recorded), Some(got)) => shape_differences(recorded, got, &mut out),
            (Some(_), None) => out.push("body: recorded JSON but got none".into()),
            (None, _) => {}
        }
        out
    }
}

fn media_type(value: &str) -> String {
    value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// `text` with each `{name}` of `values` replaced.
pub fn fill(text: &str, values: &BTreeMap<String, String>) -> String {
    values.iter().fold(text.to_owned(), |acc, (name, value)| {
        acc.replace(&format!("{{{name}}}"), value)
    })
}

/// `value` with each `{name}` of `values` replaced in every string (keys too).
pub fn fill_json(value: &Value, values: &BTreeMap<String, String>) -> Value {
    match value {
        Value::String(s) => Value::String(fill(s, values)),
        Value::Array(items) => Value::Array(items.iter().map(|v| fill_json(v, values)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (fill(k, values), fill_json(v, values)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(status: u16, body: Option<Value>) -> RecordedResponse {
        RecordedResponse {
            status,
            headers: BTreeMap::from([("Content-Type".into(), "application/json".into())]),
            body,
            text: None,
        }
    }

    #[test]
    fn the_same_answer_has_no_differences_and_values_do_not_count() {
        let recorded = answer(201, Some(json!({"id": "AAMk=", "isDraft": true})));
        let headers = [(
            "content-type".to_owned(),
            "application/json; odata.metadata=minimal".to_owned(),
        )];
        let got = json!({"id": "other", "isDraft": false, "extra": 1});
        assert!(recorded.differences(201, &headers, Some(&got)).is_empty());
    }

    #[test]
    fn status_header_and_shape_differences_are_each_named() {
        let recorded = answer(
            201,
            Some(json!({"id": "AAMk=", "toRecipients": [{"emailAddress": {"address": "a@b.c"}}]})),
        );
        let headers = [("Content-Type".to_owned(), "text/plain".to_owned())];
        let got = json!({"toRecipients": [{"emailAddress": "a@b.c"}]});
        let diffs = recorded.differences(200, &headers, Some(&got));
        assert_eq!(
            diffs,
            [
                "status: recorded 201 but got 200",
                "header Content-Type: recorded \"application/json\" but got \"text/plain\"",
                "body /id: recorded but absent",
                "body /toRecipients/0/emailAddress: recorded object but got string",
            ]
        );
    }

    #[test]
    fn placeholders_are_filled_in_paths_and_bodies() {
        let values = BTreeMap::from([("mailbox".to_owned(), "events@contoso.example".to_owned())]);
        assert_eq!(
            fill("/v1.0/users/{mailbox}/messages", &values),
            "/v1.0/users/events@contoso.example/messages"
        );
        assert_eq!(
            fill_json(&json!({"from": ["{mailbox}"]}), &values),
            json!({"from": ["events@contoso.example"]})
        );
    }
}
