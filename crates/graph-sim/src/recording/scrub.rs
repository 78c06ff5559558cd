//! Taking a live tenant's identity out of a recording before it is written.

use serde_json::Value;

use super::{RecordedRequest, RecordedResponse, Step};

/// Replaces known values (secret, token, tenant, client id, mailbox, recipient, captured ids)
/// with their placeholders, then any JWT (`eyJ…`, a token or an upload URL's `authtoken`) with
/// `{token}` and any other e-mail address with `someone@example.com`, in paths, headers and
/// bodies. `Authorization` is never recorded.
#[derive(Debug, Default, Clone)]
pub struct Scrubber {
    known: Vec<(String, String)>,
}

impl Scrubber {
    /// A scrubber that knows nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces `value` with `{placeholder}` from now on (longest values first, so a mailbox
    /// inside a longer string is not cut apart). An empty value is ignored.
    pub fn know(&mut self, value: impl Into<String>, placeholder: &str) {
        let value = value.into();
        if value.is_empty() {
            return;
        }
        self.known.push((value, format!("{{{placeholder}}}")));
        self.known.sort_by_key(|(v, _)| std::cmp::Reverse(v.len()));
    }

    /// `text` scrubbed.
    pub fn text(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for (value, placeholder) in &self.known {
            out = replace_ignoring_case(&out, value, placeholder);
        }
        mask_addresses(&mask_jwts(&out))
    }

    /// `value` scrubbed in every string.
    pub fn json(&self, value: &Value) -> Value {
        match value {
            Value::String(s) => Value::String(self.text(s)),
            Value::Array(items) => Value::Array(items.iter().map(|v| self.json(v)).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (self.text(k), self.json(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// A MIME `sendMail` body (base64 text) scrubbed inside: decoded, scrubbed, encoded again
    /// (its placeholders then stay literal in a replay). Text that is not base64 of UTF-8 is
    /// scrubbed as it is.
    pub fn mime(&self, base64_text: &str) -> String {
        use base64::Engine as _;
        let engine = base64::engine::general_purpose::STANDARD;
        match engine
            .decode(base64_text.trim())
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
        {
            Some(mime) => engine.encode(self.text(&mime)),
            None => self.text(base64_text),
        }
    }

    /// `step` scrubbed whole (its request's `Authorization` dropped).
    pub fn step(&self, step: &Step) -> Step {
        let request = RecordedRequest {
            method: step.request.method.clone(),
            path: self.text(&step.request.path),
            headers: step
                .request
                .headers
                .iter()
                .filter(|(n, _)| !n.eq_ignore_ascii_case("authorization"))
                .map(|(n, v)| (n.clone(), self.text(v)))
                .collect(),
            body: step.request.body.as_ref().map(|b| self.json(b)),
            text: step.request.text.as_ref().map(|t| self.mime(t)),
            form: step
                .request
                .form
                .as_ref()
                .map(|f| f.iter().map(|(n, v)| (n.clone(), self.text(v))).collect()),
            login: step.request.login,
        };
        let response = RecordedResponse {
            status: step.response.status,
            headers: step
                .response
                .headers
                .iter()
                .map(|(n, v)| (n.clone(), self.text(v)))
                .collect(),
            body: step.response.body.as_ref().map(|b| self.json(b)),
            text: step.response.text.as_ref().map(|t| self.text(t)),
        };
        Step {
            name: step.name.clone(),
            request,
            response,
            capture: step.capture.clone(),
            skip_replay: step.skip_replay.clone(),
        }
    }
}

fn replace_ignoring_case(text: &str, value: &str, with: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let needle = value.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut rest = 0;
    while let Some(found) = lower[rest..].find(&needle) {
        let start = rest + found;
        out.push_str(&text[rest..start]);
        out.push_str(with);
        rest = start + needle.len();
    }
    out.push_str(&text[rest..]);
    out
}

/// Every `eyJ…` run of base64url and dots (a JWT) → `{token}`.
fn mask_jwts(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("eyJ") {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
            .unwrap_or(tail.len());
        out.push_str("{token}");
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// Every `local@domain.tld` left → `someone@example.com` (placeholders already in are kept).
fn mask_addresses(text: &str) -> String {
    let is_part = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+' | '%');
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for (i, &(at, c)) in chars.iter().enumerate() {
        if c != '@' || at < copied {
            continue;
        }
        let start = chars[..i]
            .iter()
            .rev()
            .take_while(|(_, c)| is_part(*c))
            .last()
            .map(|(p, _)| *p);
        let end = chars[i + 1..]
            .iter()
            .take_while(|(_, c)| is_part(*c))
            .last()
            .map(|(p, c)| p + c.len_utf8());
        if let (Some(start), Some(end)) = (start, end)
            && text[at + 1..end].contains('.')
        {
            out.push_str(&text[copied..start]);
            out.push_str("someone@example.com");
            copied = end;
        }
    }
    out.push_str(&text[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn known_values_tokens_and_addresses_leave_no_trace() {
        let mut s = Scrubber::new();
        s.know("Events@Fabrikam.com", "mailbox");
        s.know("72aa88bf-76f0-494f-91ab-2d7cd730db47", "tenant");
        s.know("s3cret~value", "client_secret");
        let text = "https://outlook.office.com/api/v2.0/Users('events@fabrikam.com@72aa88bf-76f0-494f-91ab-2d7cd730db47')/AttachmentSessions('x')?authtoken=eyJhbGciOi.JSUzI1N-iJ9 to Bob.Smith@contoso.org (s3cret~value)";
        let out = s.text(text);
        assert_eq!(
            out,
            "https://outlook.office.com/api/v2.0/Users('{mailbox}@{tenant}')/AttachmentSessions('x')?authtoken={token} to someone@example.com ({client_secret})"
        );
        let body = s.json(&json!({"toRecipients": [{"emailAddress": {"address": "Ann@x.example"}}], "access_token": "eyJ0eXAi.abc.def"}));
        assert_eq!(
            body,
            json!({"toRecipients": [{"emailAddress": {"address": "someone@example.com"}}], "access_token": "{token}"})
        );
    }
}
