//! The kit's observations: each a few Graph requests, written as a recording
//! (graph_sim::recording) with everything that names the tenant replaced.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::Path,
    time::{Duration, Instant},
};

use base64::Engine as _;
use graph_sim::recording::{RecordedRequest, RecordedResponse, Recording, Scrubber, Step};
use reqwest::{Client, Method};
use serde_json::{Value, json};
use url::Url;
use uuid::Uuid;

/// Microsoft's hosts, unless `GRAPH_LIVE_LOGIN_BASE_URL` / `GRAPH_LIVE_API_BASE_URL` say
/// otherwise.
const LOGIN: &str = "https://login.microsoftonline.com/";
const API: &str = "https://graph.microsoft.com/v1.0";

/// The NDR listing's `$filter`, as the product's bounce reader asks it
/// (`src/mailer/graph/inbox.rs`, `NDR_FILTER`).
const NDR_FILTER: &str = "singleValueExtendedProperties/any(ep:ep/id eq 'String 0x001A' and ep/value eq 'REPORT.IPM.Note.NDR')";

/// A short, valid base64 standing in for an attachment's bytes in a recording (a 1×1 GIF).
const SHORT_BYTES: &str = "R0lGODlhAQABAIAAAP///wAAACwAAAAAAQABAAACAkQBADs=";

/// What the kit needs: a tenant's app and two mailboxes.
#[derive(Debug, Clone)]
pub struct LiveConfig {
    tenant: String,
    client_id: String,
    secret: String,
    mailbox: String,
    to: String,
    login: Url,
    api: Url,
    /// A recipient in the mailbox's own domain that does not exist (default
    /// `nonexistent-<random>@<domain>`).
    bogus_internal: Option<String>,
    /// How long to wait for a Sent Items copy or an NDR (default 4 min).
    pub patience: Duration,
}

impl LiveConfig {
    /// The variables that must be set.
    pub const REQUIRED: [&'static str; 5] = [
        "GRAPH_LIVE_TENANT_ID",
        "GRAPH_LIVE_CLIENT_ID",
        "GRAPH_LIVE_CLIENT_SECRET",
        "GRAPH_LIVE_MAILBOX",
        "GRAPH_LIVE_TO",
    ];

    /// The configuration from `get` (the environment), or the required names unset.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Self, Vec<&'static str>> {
        let unset: Vec<&'static str> = Self::REQUIRED
            .into_iter()
            .filter(|n| get(n).is_none_or(|v| v.trim().is_empty()))
            .collect();
        if !unset.is_empty() {
            return Err(unset);
        }
        let value = |n: &str| get(n).unwrap_or_default().trim().to_owned();
        let url = |n: &str, default: &str| {
            let text = get(n).unwrap_or_else(|| default.to_owned());
            Url::parse(&text).unwrap_or_else(|e| panic!("{n} is not a URL ({e}): {text}"))
        };
        Ok(Self {
            tenant: value("GRAPH_LIVE_TENANT_ID"),
            client_id: value("GRAPH_LIVE_CLIENT_ID"),
            secret: value("GRAPH_LIVE_CLIENT_SECRET"),
            mailbox: value("GRAPH_LIVE_MAILBOX"),
            to: value("GRAPH_LIVE_TO"),
            login: url("GRAPH_LIVE_LOGIN_BASE_URL", LOGIN),
            api: url("GRAPH_LIVE_API_BASE_URL", API),
            bogus_internal: get("GRAPH_LIVE_BOGUS_INTERNAL"),
            patience: Duration::from_secs(240),
        })
    }

    fn domain(&self) -> &str {
        self.mailbox.rsplit('@').next().unwrap_or_default()
    }
}

/// A body to send.
enum Body {
    None,
    Json(Value),
    /// A MIME `sendMail`: base64 text.
    Mime(String),
    Form(BTreeMap<String, String>),
}

/// One run of the kit.
pub struct Kit {
    config: LiveConfig,
    http: Client,
    token: String,
    scrub: Scrubber,
    steps: Vec<Step>,
    recordings: Vec<(String, Recording)>,
    report: String,
    throttled: u32,
}

impl Kit {
    /// A kit for `config`.
    pub fn new(config: LiveConfig) -> Self {
        let mut scrub = Scrubber::new();
        scrub.know(config.secret.clone(), "client_secret");
        scrub.know(config.tenant.clone(), "tenant");
        scrub.know(config.client_id.clone(), "client_id");
        scrub.know(config.mailbox.clone(), "mailbox");
        scrub.know(config.to.clone(), "to");
        scrub.know(config.domain().to_owned(), "domain");
        Self {
            config,
            http: Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .expect("an HTTP client"),
            token: String::new(),
            scrub,
            steps: Vec::new(),
            recordings: Vec::new(),
            report: String::new(),
            throttled: 0,
        }
    }

    /// Makes every observation, writes the recordings and `observations.md` into `out`, and
    /// returns what was observed.
    pub async fn run(mut self, out: &Path) -> String {
        self.token().await;
        if self.token.is_empty() {
            self.say("token: refused: nothing else observed");
        } else {
            self.draft_keeps_our_id().await;
            self.sendmail_keeps_our_id().await;
            let internal =
                self.config.bogus_internal.clone().unwrap_or_else(|| {
                    format!("nonexistent-{}@{}", short_id(), self.config.domain())
                });
            self.ndr("internal", &internal, "bogus_internal").await;
            let external = format!("nonexistent-{}@example.invalid", short_id());
            self.ndr("external", &external, "bogus_external").await;
            self.attachments().await;
            self.list_unsubscribe().await;
        }
        let throttled = self.throttled;
        self.say(&format!("429s met: {throttled}"));
        std::fs::create_dir_all(out).expect("the recordings folder");
        for (name, recording) in &self.recordings {
            let recording = Recording {
                steps: recording.steps.iter().map(|s| self.scrub.step(s)).collect(),
                ..recording.clone()
            };
            let text = serde_json::to_string_pretty(&recording).expect("JSON");
            std::fs::write(out.join(format!("live-{name}.json")), text + "\n")
                .expect("a recording written");
        }
        let report = self.scrub.text(&self.report);
        std::fs::write(
            out.join("observations.md"),
            format!("# What the tenant answered\n\n{report}"),
        )
        .expect("observations written");
        report
    }

    fn say(&mut self, line: &str) {
        let _ = writeln!(self.report, "- {line}");
    }

    /// Closes the steps so far as recording `name`.
    fn record(&mut self, name: &str, note: &str) {
        let steps = std::mem::take(&mut self.steps);
        self.recordings.push((
            name.to_owned(),
            Recording {
                source: format!("live tenant, {}", chrono::Utc::now().format("%Y-%m-%d")),
                note: Some(note.to_owned()),
                steps,
            },
        ));
    }

    /// One exchange, recorded as step `name`: the status, the JSON body (if any) and the text.
    async fn call(
        &mut self,
        name: &str,
        method: Method,
        url: Url,
        body: Body,
        login: bool,
    ) -> (u16, Option<Value>, String) {
        let mut request = self.http.request(method.clone(), url.clone());
        let mut headers = BTreeMap::new();
        if !login {
            request = request.bearer_auth(&self.token);
        }
        let (json_body, text_body, form_body) = match body {
            Body::None => {
                if method == Method::POST {
                    request = request.header("Content-Length", "0");
                }
                (None, None, None)
            }
            Body::Json(value) => {
                headers.insert("Content-Type".to_owned(), "application/json".to_owned());
                request = request
                    .header("Content-Type", "application/json")
                    .body(value.to_string());
                (Some(value), None, None)
            }
            Body::Mime(text) => {
                headers.insert("Content-Type".to_owned(), "text/plain".to_owned());
                request = request
                    .header("Content-Type", "text/plain")
                    .body(text.clone());
                (None, Some(text), None)
            }
            Body::Form(form) => {
                headers.insert(
                    "Content-Type".to_owned(),
                    "application/x-www-form-urlencoded".to_owned(),
                );
                request = request.form(&form);
                (None, None, Some(form))
            }
        };
        let (status, response_headers, text) = match request.send().await {
            Ok(answer) => {
                let status = answer.status().as_u16();
                let mut kept = BTreeMap::new();
                for name in ["Content-Type", "Retry-After"] {
                    if let Some(v) = answer.headers().get(name).and_then(|v| v.to_str().ok()) {
                        kept.insert(name.to_owned(), v.to_owned());
                    }
                }
                (status, kept, answer.text().await.unwrap_or_default())
            }
            Err(e) => {
                self.say(&format!("{name}: no answer: {e}"));
                return (0, None, String::new());
            }
        };
        if status == 429 {
            self.throttled += 1;
            let after = response_headers
                .get("Retry-After")
                .cloned()
                .unwrap_or_default();
            self.say(&format!("{name}: 429, Retry-After {after:?}"));
        }
        let json: Option<Value> = serde_json::from_str(&text).ok();
        let path = match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_owned(),
        };
        self.steps.push(Step {
            name: name.to_owned(),
            request: RecordedRequest {
                method: method.to_string(),
                path,
                headers,
                body: json_body,
                text: text_body,
                form: form_body,
                login,
            },
            response: RecordedResponse {
                status,
                headers: response_headers,
                body: json.clone(),
                text: json
                    .is_none()
                    .then(|| text.clone())
                    .filter(|t| !t.is_empty()),
            },
            capture: BTreeMap::new(),
            skip_replay: None,
        });
        (status, json, text)
    }

    /// Marks the last step as capturing `pointer` as `{name}`, and scrubs the value from now on.
    fn capture(&mut self, name: &str, pointer: &str, value: &str) {
        if let Some(step) = self.steps.last_mut() {
            step.capture.insert(name.to_owned(), pointer.to_owned());
        }
        self.scrub.know(value.to_owned(), name);
    }

    fn user(&self, tail: &[&str]) -> Url {
        let mut url = self.config.api.clone();
        {
            let mut segments = url
                .path_segments_mut()
                .expect("an API base URL with a path");
            segments
                .pop_if_empty()
                .push("users")
                .push(&self.config.mailbox);
            for s in tail {
                segments.push(s);
            }
        }
        url
    }

    async fn token(&mut self) {
        let mut url = self.config.login.clone();
        url.path_segments_mut()
            .expect("a login base URL")
            .pop_if_empty()
            .extend([self.config.tenant.as_str(), "oauth2", "v2.0", "token"]);
        let scope = format!(
            "{}/.default",
            self.config.api.origin().ascii_serialization()
        );
        let form = BTreeMap::from([
            ("client_id".to_owned(), self.config.client_id.clone()),
            ("client_secret".to_owned(), self.config.secret.clone()),
            ("scope".to_owned(), scope.clone()),
            ("grant_type".to_owned(), "client_credentials".to_owned()),
        ]);
        self.scrub.know(scope, "scope");
        let (status, body, _) = self
            .call("app-only token", Method::POST, url, Body::Form(form), true)
            .await;
        let token = body
            .as_ref()
            .and_then(|b| b["access_token"].as_str())
            .unwrap_or_default()
            .to_owned();
        self.scrub.know(token.clone(), "token");
        self.token = token;
        let roles = roles_of(&self.token);
        self.say(&format!("token: {status}; roles: {roles}"));
        self.record("token", "the client-credentials token request");
    }

    /// The product's Sent Items look-up by `internetMessageId`, repeated until found or out of
    /// patience: whether and after how long.
    async fn find_sent(&mut self, imid: &str) -> Option<Duration> {
        let started = Instant::now();
        let mut url = self.user(&["mailFolders", "sentitems", "messages"]);
        url.query_pairs_mut()
            .append_pair(
                "$filter",
                &format!("internetMessageId eq '{}'", imid.replace('\'', "''")),
            )
            .append_pair("$select", "id,isDraft");
        loop {
            let (_, body, _) = self
                .call(
                    "look it up in Sent Items",
                    Method::GET,
                    url.clone(),
                    Body::None,
                    false,
                )
                .await;
            let found = body
                .as_ref()
                .and_then(|b| b["value"].as_array())
                .is_some_and(|v| !v.is_empty());
            if found {
                return Some(started.elapsed());
            }
            if started.elapsed() >= self.config.patience {
                return None;
            }
            // Only the last try is kept.
            self.steps.pop();
            tokio::time::sleep(Duration::from_secs(5).min(self.config.patience / 4)).await;
        }
    }

    fn message(&self, subject: &str, to: &str, imid: Option<&str>) -> Value {
        let mut message = json!({
            "subject": format!("mail-worker live kit: {subject}"),
            "body": {"contentType": "Text", "content": format!(
                "mail-worker's live conformance kit sent this to observe how Microsoft 365 answers: {subject}. Nothing to do."
            )},
            "toRecipients": [{"emailAddress": {"address": to}}],
        });
        if let Some(imid) = imid {
            message["internetMessageId"] = json!(imid);
        }
        message
    }

    /// `POST …/messages` with `message`: the status, the new draft's id (captured as
    /// `{placeholder}`) and the answer's body.
    async fn create_draft(
        &mut self,
        message: Value,
        placeholder: &str,
    ) -> (u16, Option<String>, Option<Value>) {
        let (status, body, _) = self
            .call(
                "create the draft",
                Method::POST,
                self.user(&["messages"]),
                Body::Json(message),
                false,
            )
            .await;
        let id = body
            .as_ref()
            .and_then(|b| b["id"].as_str())
            .map(str::to_owned);
        if let Some(id) = &id {
            self.capture(placeholder, "/id", id);
        }
        (status, id, body)
    }

    /// `POST …/messages/{id}/send`: its status.
    async fn send_draft(&mut self, id: &str) -> u16 {
        let url = self.user(&["messages", id, "send"]);
        self.call("send the draft", Method::POST, url, Body::None, false)
            .await
            .0
    }

    async fn draft_keeps_our_id(&mut self) {
        let imid = format!("<live-{}@{}>", Uuid::new_v4(), self.config.domain());
        let to = self.config.to.clone();
        let message = self.message("a draft with our internetMessageId", &to, Some(&imid));
        let (status, id, body) = self.create_draft(message, "draft").await;
        let Some(id) = id else {
            self.say(&format!("draft: not created ({status})"));
            self.record(
                "draft-internet-message-id",
                "a draft with our internetMessageId",
            );
            return;
        };
        let given = body
            .as_ref()
            .and_then(|b| b["internetMessageId"].as_str())
            .unwrap_or_default()
            .to_owned();
        let status = self.send_draft(&id).await;
        let found = self.find_sent(&imid).await;
        self.say(&format!(
            "draft: our internetMessageId kept: {} (the draft answered {}; send {status}; {})",
            yes(found.is_some() && given == imid),
            if given == imid { "ours" } else { "another" },
            found.map_or("not found in Sent Items".to_owned(), |d| format!(
                "in Sent Items after {} s",
                d.as_secs()
            )),
        ));
        self.record(
            "draft-internet-message-id",
            "a draft with our internetMessageId, sent, found in Sent Items by it",
        );
    }

    async fn sendmail_keeps_our_id(&mut self) {
        let imid = format!("<live-{}@{}>", Uuid::new_v4(), self.config.domain());
        let to = self.config.to.clone();
        let message = self.message("sendMail with our internetMessageId", &to, Some(&imid));
        let (status, _, _) = self
            .call(
                "sendMail",
                Method::POST,
                self.user(&["sendMail"]),
                Body::Json(json!({"message": message, "saveToSentItems": true})),
                false,
            )
            .await;
        let found = if status == 202 {
            self.find_sent(&imid).await
        } else {
            None
        };
        self.say(&format!(
            "sendMail: our internetMessageId kept: {} (sendMail {status}; {})",
            yes(found.is_some()),
            found.map_or("not found in Sent Items by it".to_owned(), |d| format!(
                "in Sent Items after {} s",
                d.as_secs()
            )),
        ));
        self.record(
            "sendmail-internet-message-id",
            "sendMail with internetMessageId set: found in Sent Items by it, or not",
        );
    }

    /// Sends to `bogus`, waits for its NDR with the bounce reader's listing, reads it as MIME
    /// and as JSON.
    async fn ndr(&mut self, which: &str, bogus: &str, placeholder: &str) {
        self.scrub.know(bogus.to_owned(), placeholder);
        let imid = format!("<live-{}@{}>", Uuid::new_v4(), self.config.domain());
        let message = self.message(
            &format!("an NDR for a bogus {which} address"),
            bogus,
            Some(&imid),
        );
        let (status, _, _) = self
            .call(
                "sendMail to a bogus address",
                Method::POST,
                self.user(&["sendMail"]),
                Body::Json(json!({"message": message, "saveToSentItems": false})),
                false,
            )
            .await;
        let started = Instant::now();
        let mut url = self.user(&["mailFolders", "inbox", "messages"]);
        url.query_pairs_mut()
            .append_pair("$filter", &format!("{NDR_FILTER} and isRead eq false"))
            .append_pair("$select", "id,body,internetMessageHeaders")
            .append_pair("$top", "50");
        let bare = imid.trim_matches(['<', '>']).to_owned();
        let mut seen = Vec::new();
        let found = 'wait: loop {
            let (_, body, _) = self
                .call(
                    "list unread NDRs (the bounce reader's request)",
                    Method::GET,
                    url.clone(),
                    Body::None,
                    false,
                )
                .await;
            let ids: Vec<String> = body
                .as_ref()
                .and_then(|b| b["value"].as_array())
                .map(|v| {
                    v.iter()
                        .filter_map(|m| m["id"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            for (index, id) in ids.iter().enumerate() {
                if seen.contains(id) {
                    continue;
                }
                seen.push(id.clone());
                let (_, _, mime) = self
                    .call(
                        "the NDR as MIME ($value)",
                        Method::GET,
                        self.user(&["messages", id, "$value"]),
                        Body::None,
                        false,
                    )
                    .await;
                if mime.contains(&bare) {
                    let listing = self.steps.len() - 2;
                    self.steps[listing]
                        .capture
                        .insert("ndr".into(), format!("/value/{index}/id"));
                    self.scrub.know(id.clone(), "ndr");
                    break 'wait Some((id.clone(), mime));
                }
                self.steps.pop();
            }
            if started.elapsed() >= self.config.patience {
                break None;
            }
            self.steps.pop();
            tokio::time::sleep(Duration::from_secs(10).min(self.config.patience / 4)).await;
        };
        let Some((id, mime)) = found else {
            self.say(&format!(
                "NDR ({which}): not found within {} s (sendMail {status})",
                self.config.patience.as_secs()
            ));
            self.record(&format!("ndr-{which}"), "no NDR arrived");
            return;
        };
        let mut json_url = self.user(&["messages", &id]);
        json_url.query_pairs_mut().append_pair(
            "$select",
            "subject,from,body,internetMessageHeaders,internetMessageId",
        );
        let (_, json_view, _) = self
            .call("the NDR as JSON", Method::GET, json_url, Body::None, false)
            .await;
        let headers = match json_view.as_ref().map(|j| j.get("internetMessageHeaders")) {
            Some(Some(Value::Null)) => "null",
            Some(Some(_)) => "present",
            _ => "absent",
        };
        let report = mime.contains("multipart/report");
        let dsn = mime.contains("message/delivery-status");
        let in_reply_to = mime
            .lines()
            .any(|l| l.starts_with("In-Reply-To:") && l.contains(&bare));
        self.say(&format!(
            "NDR ({which}): found after {} s; multipart/report: {}; DSN part: {}; original Message-ID in In-Reply-To: {}; internetMessageHeaders in the JSON view: {headers}",
            started.elapsed().as_secs(),
            yes(report),
            yes(dsn),
            yes(in_reply_to),
        ));
        self.record(
            &format!("ndr-{which}"),
            "an NDR listed with the product's request, read as MIME and as JSON",
        );
    }

    async fn attachments(&mut self) {
        let to = self.config.to.clone();
        // 2.0 MB + 1.0 MB: each under 3 MB, POSTed to the draft one by one.
        let message = self.message("attachments of 2.0 MB and 1.0 MB", &to, None);
        let mut small = "not sent".to_owned();
        if let (_, Some(id), _) = self.create_draft(message, "draft").await {
            let mut ok = true;
            for (name, size) in [("two-mb.bin", 2_000_000), ("one-mb.bin", 1_000_000)] {
                let bytes = base64::engine::general_purpose::STANDARD.encode(content(size));
                let (status, _, _) = self
                    .call(
                        &format!("add {name}"),
                        Method::POST,
                        self.user(&["messages", &id, "attachments"]),
                        Body::Json(json!({"@odata.type": "#microsoft.graph.fileAttachment", "name": name, "contentType": "application/octet-stream", "contentBytes": bytes})),
                        false,
                    )
                    .await;
                shorten_last_attachment(&mut self.steps);
                ok &= status == 201;
            }
            let status = self.send_draft(&id).await;
            small = if ok && status == 202 {
                "sent".into()
            } else {
                format!("not sent (send {status})")
            };
        }
        self.say(&format!("attachments 2.0 MB + 1.0 MB: {small}"));
        // 3.5 MB: an upload session.
        let message = self.message("an attachment of 3.5 MB", &to, None);
        let mut large = "not sent".to_owned();
        if let (_, Some(id), _) = self.create_draft(message, "large_draft").await {
            let size = 3_500_000;
            let (_, session, _) = self
                .call(
                    "create an upload session",
                    Method::POST,
                    self.user(&["messages", &id, "attachments", "createUploadSession"]),
                    Body::Json(json!({"AttachmentItem": {"attachmentType": "file", "name": "three-and-a-half-mb.bin", "size": size}})),
                    false,
                )
                .await;
            let upload = session
                .as_ref()
                .and_then(|s| s["uploadUrl"].as_str())
                .and_then(|u| Url::parse(u).ok());
            if let Some(upload) = upload {
                let data = content(size);
                let mut ok = true;
                // Chunks of 8 × 320 KiB, as Microsoft advises multiples of 320 KiB.
                for (n, chunk) in data.chunks(8 * 320 * 1024).enumerate() {
                    let start = n * 8 * 320 * 1024;
                    let answer = self
                        .http
                        .put(upload.clone())
                        .header(
                            "Content-Range",
                            format!("bytes {start}-{}/{size}", start + chunk.len() - 1),
                        )
                        .body(chunk.to_vec())
                        .send()
                        .await;
                    let status = answer.as_ref().map_or(0, |a| a.status().as_u16());
                    ok &= status == 200 || status == 201;
                }
                let status = self.send_draft(&id).await;
                large = if ok && status == 202 {
                    "sent".into()
                } else {
                    format!("not sent (chunks ok: {ok}; send {status})")
                };
                if let Some(step) = self.steps.last_mut() {
                    // The upload's PUTs go to another host and are not recorded: a replay would
                    // send a draft without its attachment.
                    step.skip_replay = Some("the draft's attachment was uploaded to the upload URL's own host, which a replay does not reach".into());
                }
            }
        }
        self.say(&format!("attachment 3.5 MB (upload session): {large}"));
        self.record("attachments", "attachments of 2.0 + 1.0 MB (contentBytes shortened in this file) and a 3.5 MB upload session (its PUTs to the upload host not recorded)");
    }

    async fn list_unsubscribe(&mut self) {
        let imid = format!("<live-{}@{}>", Uuid::new_v4(), self.config.domain());
        let mime = format!(
            "From: {mailbox}\r\nTo: {to}\r\nSubject: mail-worker live kit: List-Unsubscribe through a MIME send\r\nMessage-ID: {imid}\r\nList-Unsubscribe: <mailto:unsubscribe@{domain}?subject=unsubscribe>, <https://unsubscribe.example/u/live-kit>\r\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nmail-worker's live conformance kit: does List-Unsubscribe survive a MIME send? Nothing to do.\r\n",
            mailbox = self.config.mailbox,
            to = self.config.to,
            domain = self.config.domain(),
        );
        let encoded = base64::engine::general_purpose::STANDARD.encode(mime);
        let (status, _, _) = self
            .call(
                "sendMail as MIME",
                Method::POST,
                self.user(&["sendMail"]),
                Body::Mime(encoded),
                false,
            )
            .await;
        if status != 202 {
            self.say(&format!(
                "List-Unsubscribe through MIME: the send answered {status}"
            ));
            self.record("list-unsubscribe", "a MIME sendMail with List-Unsubscribe");
            return;
        }
        let found = self.find_sent(&imid).await;
        let id = self
            .steps
            .last()
            .and_then(|s| s.response.body.as_ref())
            .and_then(|b| b.pointer("/value/0/id"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let kept = match (found, id) {
            (Some(_), Some(id)) => {
                self.capture("sent", "/value/0/id", &id);
                let mut url = self.user(&["messages", &id]);
                url.query_pairs_mut()
                    .append_pair("$select", "internetMessageHeaders");
                let (_, body, _) = self
                    .call("its headers", Method::GET, url, Body::None, false)
                    .await;
                let kept = body
                    .as_ref()
                    .and_then(|b| b["internetMessageHeaders"].as_array())
                    .is_some_and(|h| {
                        h.iter().any(|h| {
                            h["name"]
                                .as_str()
                                .is_some_and(|n| n.eq_ignore_ascii_case("List-Unsubscribe"))
                        })
                    });
                yes(kept).to_owned()
            }
            _ => "unknown (not found in Sent Items)".to_owned(),
        };
        self.say(&format!(
            "List-Unsubscribe through MIME: kept in Sent Items: {kept}"
        ));
        self.record(
            "list-unsubscribe",
            "a MIME sendMail with List-Unsubscribe, its Sent Items copy's headers",
        );
    }
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn short_id() -> String {
    Uuid::new_v4().simple().to_string()[..12].to_owned()
}

/// `size` bytes that do not compress to nothing.
fn content(size: usize) -> Vec<u8> {
    (0..size).map(|i| (i * 31 % 251) as u8).collect()
}

/// The last step's attachment body with its bytes shortened (a recording stays small).
fn shorten_last_attachment(steps: &mut [Step]) {
    if let Some(body) = steps.last_mut().and_then(|s| s.request.body.as_mut()) {
        body["contentBytes"] = json!(SHORT_BYTES);
    }
}

/// The token's `roles` claim, for the report (never the token).
fn roles_of(token: &str) -> String {
    let payload = token.split('.').nth(1).unwrap_or_default();
    let claims: Value = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    match claims.get("roles").and_then(Value::as_array) {
        Some(roles) => roles
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(", "),
        None if claims.get("scp").is_some() => "none (a delegated token: scp, no roles)".into(),
        None => "none".into(),
    }
}
