//! graph-sim, over HTTP with reqwest against an in-process server on port 0 (and the binary):
//! one test per behaviour of the token endpoint, sendMail, Exchange's limits, fault injection,
//! records and the admin API, asserting status, `Retry-After` and the error body's `code`.

use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};
use graph_sim::clock::ManualClock;
use graph_sim::{
    GraphSim, Latency, MailboxLimits, MinuteOverflow, RecordedMessage, RecordedRefusal,
    RefusalCause, ScriptedAnswer, SentInTransit, SimConfig, SimMailbox, SimStats, Target,
    TokenFault,
};
use reqwest::{Client, Response, StatusCode};
use serde_json::{Value, json};

const TENANT: &str = "contoso.example";
const CLIENT: &str = "app-contoso";
const SECRET: &str = "s3cret-contoso";
const MAILBOX: &str = "events@contoso.example";
const OTHER_TENANT: &str = "fabrikam.example";
const OTHER_CLIENT: &str = "app-fabrikam";
const OTHER_SECRET: &str = "s3cret-fabrikam";
const OTHER_MAILBOX: &str = "news@fabrikam.example";
const GRAPH_SCOPE: &str = "https://graph.microsoft.com/.default";

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 3, 3, 12, 0, 0).unwrap()
}

/// Microsoft's default limits, but the 31st message in a minute refused (`429`), not accepted
/// and delayed: most tests here probe refusals.
fn refusing() -> MailboxLimits {
    MailboxLimits {
        minute_overflow: MinuteOverflow::Refuse,
        ..MailboxLimits::default()
    }
}

fn config_with(limits: MailboxLimits) -> SimConfig {
    SimConfig::new()
        .with_app(TENANT, CLIENT, SECRET)
        .with_app(OTHER_TENANT, OTHER_CLIENT, OTHER_SECRET)
        .with_mailbox(SimMailbox::new(MAILBOX, TENANT).with_limits(limits))
        .with_mailbox(SimMailbox::new(OTHER_MAILBOX, OTHER_TENANT))
}

/// Two tenants with an app and a mailbox each, Microsoft's default limits, a manual clock.
async fn start_with(limits: MailboxLimits) -> (GraphSim, ManualClock) {
    let clock = ManualClock::new(t0());
    let sim = GraphSim::start(config_with(limits).with_clock(clock.clone()))
        .await
        .expect("graph-sim starts");
    (sim, clock)
}

async fn start() -> (GraphSim, ManualClock) {
    start_with(refusing()).await
}

/// As [`start_with`], but a send over the recipients per day gets the `429` (the option kept
/// beside Exchange's `202` + NDR `5.1.90`).
async fn start_refusing_the_day(limits: MailboxLimits) -> (GraphSim, ManualClock) {
    let clock = ManualClock::new(t0());
    let mut config = config_with(limits).with_clock(clock.clone());
    config.bounces.quota_exceeded = graph_sim::QuotaExceeded::Refuse;
    let sim = GraphSim::start(config).await.expect("graph-sim starts");
    (sim, clock)
}

/// As [`start`], but a 429's `Retry-After` does not hold the mailbox: for tests that probe one
/// answer after another without waiting.
async fn start_probing() -> (GraphSim, ManualClock) {
    start_with(MailboxLimits {
        retry_after_holds: false,
        ..refusing()
    })
    .await
}

async fn token_request(
    http: &Client,
    sim: &GraphSim,
    tenant: &str,
    form: &[(&str, &str)],
) -> Response {
    http.post(sim.token_url(tenant))
        .form(form)
        .send()
        .await
        .expect("token request")
}

/// The client-credentials grant's form: app `client` with `secret`, asking for `scope`.
fn credentials<'a>(client: &'a str, secret: &'a str, scope: &'a str) -> [(&'a str, &'a str); 4] {
    [
        ("grant_type", "client_credentials"),
        ("client_id", client),
        ("client_secret", secret),
        ("scope", scope),
    ]
}

/// A client-credentials token request of app `client` with `secret` in `tenant` for `scope`.
async fn client_credentials(
    http: &Client,
    sim: &GraphSim,
    tenant: &str,
    client: &str,
    secret: &str,
    scope: &str,
) -> Response {
    token_request(http, sim, tenant, &credentials(client, secret, scope)).await
}

async fn token_for(
    http: &Client,
    sim: &GraphSim,
    tenant: &str,
    client: &str,
    secret: &str,
) -> String {
    let response = client_credentials(http, sim, tenant, client, secret, GRAPH_SCOPE).await;
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    body["access_token"].as_str().unwrap().to_owned()
}

async fn token(http: &Client, sim: &GraphSim) -> String {
    token_for(http, sim, TENANT, CLIENT, SECRET).await
}

fn recipients(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| json!({"emailAddress": {"address": format!("r{i}@example.org"), "name": format!("R {i}")}}))
        .collect()
}

fn message(n: usize) -> Value {
    json!({
        "message": {
            "subject": "Spring event",
            "body": {"contentType": "HTML", "content": "<p>Welcome</p>"},
            "toRecipients": recipients(n),
            "internetMessageHeaders": [{"name": "X-Campaign-Id", "value": "c-42"}]
        },
        "saveToSentItems": false
    })
}

async fn send_as(
    http: &Client,
    sim: &GraphSim,
    token: &str,
    mailbox: &str,
    body: &Value,
) -> Response {
    http.post(format!("{}/users/{mailbox}/sendMail", sim.graph_base_url()))
        .bearer_auth(token)
        .json(body)
        .send()
        .await
        .expect("sendMail request")
}

/// `body` from [`MAILBOX`].
async fn send(http: &Client, sim: &GraphSim, token: &str, body: &Value) -> Response {
    send_as(http, sim, token, MAILBOX, body).await
}

/// One message to one recipient from [`MAILBOX`].
async fn send_one(http: &Client, sim: &GraphSim, token: &str) -> Response {
    send(http, sim, token, &message(1)).await
}

/// graph-sim and a client holding a token of the first tenant's app.
struct Session {
    sim: GraphSim,
    clock: ManualClock,
    http: Client,
    token: String,
}

impl Session {
    /// Over [`start`].
    async fn start() -> Self {
        Self::over(start().await).await
    }

    /// Over [`start_with`] Microsoft's default limits as `change` changes them.
    async fn with(change: impl FnOnce(&mut MailboxLimits)) -> Self {
        let mut limits = refusing();
        change(&mut limits);
        Self::over(start_with(limits).await).await
    }

    /// Over `started` ([`start`], [`start_with`], [`start_probing`]).
    async fn over((sim, clock): (GraphSim, ManualClock)) -> Self {
        let http = Client::new();
        let token = token(&http, &sim).await;
        Self {
            sim,
            clock,
            http,
            token,
        }
    }

    /// `body` from [`MAILBOX`].
    async fn send(&self, body: &Value) -> Response {
        send(&self.http, &self.sim, &self.token, body).await
    }

    /// Asserts graph-sim refuses `body` from [`MAILBOX`] with `status` and `code`, and no
    /// `Retry-After` ([`refusal`]).
    async fn assert_refuses(&self, body: &Value, status: StatusCode, code: &str) {
        assert_eq!(refusal(self.send(body).await).await, refused(status, code));
    }

    /// One message to one recipient from [`MAILBOX`].
    async fn send_one(&self) -> Response {
        self.send(&message(1)).await
    }
}

/// What [`refusal`] reads from a 429 `ApplicationThrottled` with this `Retry-After`.
fn throttled(retry_after: &str) -> (StatusCode, Option<String>, String) {
    (
        StatusCode::TOO_MANY_REQUESTS,
        Some(retry_after.into()),
        "ApplicationThrottled".into(),
    )
}

/// What [`refusal`] reads from a refusal with `status` and `code` and no `Retry-After`.
fn refused(status: StatusCode, code: &str) -> (StatusCode, Option<String>, String) {
    (status, None, code.into())
}

/// The JSON answer to `request` (which must succeed).
async fn json_of<T: serde::de::DeserializeOwned>(request: reqwest::RequestBuilder) -> T {
    json_of_answer(request.send().await).await
}

/// The JSON of `answer` (which must have arrived).
async fn json_of_answer<T: serde::de::DeserializeOwned>(answer: reqwest::Result<Response>) -> T {
    answer.unwrap().json().await.unwrap()
}

/// Lines read from a child's stdout.
type StdoutLines = tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>;

/// The graph-sim binary with `args` and `env` (logging warnings only), killed when dropped, and
/// its stdout line by line.
fn spawn_graph_sim(args: &[&str], env: &[(&str, &str)]) -> (tokio::process::Child, StdoutLines) {
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_graph-sim"))
        .args(args)
        .envs(env.iter().copied())
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    (child, tokio::io::BufReader::new(stdout).lines())
}

/// Stops the graph-sim binary `child` as a supervisor would: SIGTERM.
fn terminate(child: &tokio::process::Child) {
    let pid = child.id().expect("graph-sim still runs").to_string();
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status();
    assert!(
        kill.is_ok_and(|status| status.success()),
        "kill -TERM {pid}"
    );
}

fn retry_after(response: &Response) -> Option<String> {
    response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned())
}

/// Status, `Retry-After`, and the error body's `error.code`.
async fn refusal(response: Response) -> (StatusCode, Option<String>, String) {
    let status = response.status();
    let ra = retry_after(&response);
    let body: Value = response.json().await.expect("a JSON error body");
    (
        status,
        ra,
        body["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

/// [`refusal`] of the answer to `request`.
async fn refusal_of(request: reqwest::RequestBuilder) -> (StatusCode, Option<String>, String) {
    refusal(request.send().await.expect("an answer")).await
}

/// The body of Entra's refusal `response` after asserting its `status` (`context` names the
/// case).
async fn entra_refusal(response: Response, status: StatusCode, context: &str) -> Value {
    let (answered, body) = entra_error(response).await;
    assert_eq!(answered, status, "{context}");
    body
}

async fn entra_error(response: Response) -> (StatusCode, Value) {
    let status = response.status();
    (status, response.json().await.expect("a JSON token error"))
}

fn assert_entra_shape(body: &Value, error: &str, code: u64) {
    assert_eq!(body["error"], error, "{body}");
    assert_eq!(body["error_codes"], json!([code]), "{body}");
    let description = body["error_description"].as_str().unwrap();
    assert!(
        description.starts_with(&format!("AADSTS{code}: ")),
        "{description}"
    );
    for field in ["timestamp", "trace_id", "correlation_id", "error_uri"] {
        assert!(
            body[field].as_str().is_some_and(|s| !s.is_empty()),
            "{field} in {body}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Token endpoint

#[tokio::test]
async fn token_endpoint_issues_a_bearer_token_for_the_graph_default_scope() {
    let (sim, _) = start().await;
    let http = Client::new();
    for scope in [GRAPH_SCOPE.to_owned(), sim.graph_scope()] {
        let response = client_credentials(&http, &sim, TENANT, CLIENT, SECRET, &scope).await;
        assert_eq!(response.status(), StatusCode::OK, "{scope}");
        assert_eq!(response.headers()["cache-control"], "no-store, no-cache");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["token_type"], "Bearer");
        assert_eq!(body["expires_in"], 3599);
        assert_eq!(body["ext_expires_in"], 3599);
        assert!(body["access_token"].as_str().unwrap().len() > 40);
    }
    assert_eq!(
        sim.graph_scope(),
        format!("http://127.0.0.1:{}/.default", sim.local_addr().port())
    );
}

#[tokio::test]
async fn token_lifetime_is_configurable() {
    let sim = GraphSim::start(config_with(refusing()).with_token_lifetime(Duration::from_secs(60)))
        .await
        .unwrap();
    let response =
        client_credentials(&Client::new(), &sim, TENANT, CLIENT, SECRET, GRAPH_SCOPE).await;
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["expires_in"], 60);
}

#[tokio::test]
async fn wrong_secret_is_refused_with_aadsts7000215() {
    let (sim, _) = start().await;
    let response = Client::new()
        .post(sim.token_url(TENANT))
        .header("client-request-id", "corr-123")
        .form(&credentials(CLIENT, "wrong", GRAPH_SCOPE))
        .send()
        .await
        .unwrap();
    let body = entra_refusal(response, StatusCode::UNAUTHORIZED, "").await;
    assert_entra_shape(&body, "invalid_client", 7000215);
    assert!(
        body["error_description"]
            .as_str()
            .unwrap()
            .contains("Invalid client secret provided")
    );
    assert_eq!(body["correlation_id"], "corr-123");
    // Entra's timestamp format: `2025-03-03 12:00:00Z`.
    assert_eq!(body["timestamp"], "2025-03-03 12:00:00Z");
}

#[tokio::test]
async fn unknown_client_is_refused_with_aadsts700016() {
    let (sim, _) = start().await;
    let http = Client::new();
    // Unknown anywhere, and known only in another tenant.
    for client in ["no-such-app", OTHER_CLIENT] {
        let response =
            client_credentials(&http, &sim, TENANT, client, OTHER_SECRET, GRAPH_SCOPE).await;
        let body = entra_refusal(response, StatusCode::BAD_REQUEST, client).await;
        assert_entra_shape(&body, "unauthorized_client", 700016);
    }
}

#[tokio::test]
async fn unknown_tenant_is_refused_with_aadsts90002() {
    let (sim, _) = start().await;
    let response = client_credentials(
        &Client::new(),
        &sim,
        "nowhere.example",
        CLIENT,
        SECRET,
        GRAPH_SCOPE,
    )
    .await;
    let body = entra_refusal(response, StatusCode::BAD_REQUEST, "").await;
    assert_entra_shape(&body, "invalid_request", 90002);
}

#[tokio::test]
async fn a_scope_other_than_graph_default_is_refused_with_aadsts70011() {
    let (sim, _) = start().await;
    for scope in [
        "https://graph.microsoft.com/Mail.Send",
        "http://127.0.0.1:1/.default",
    ] {
        let response =
            client_credentials(&Client::new(), &sim, TENANT, CLIENT, SECRET, scope).await;
        let body = entra_refusal(response, StatusCode::BAD_REQUEST, scope).await;
        assert_entra_shape(&body, "invalid_scope", 70011);
    }
}

#[tokio::test]
async fn token_requests_are_counted_per_app_including_refused_ones() {
    let (sim, _) = start().await;
    let http = Client::new();
    token(&http, &sim).await;
    token(&http, &sim).await;
    client_credentials(&http, &sim, TENANT, CLIENT, "wrong", GRAPH_SCOPE).await;
    token_for(&http, &sim, OTHER_TENANT, OTHER_CLIENT, OTHER_SECRET).await;
    assert_eq!(sim.token_requests(CLIENT), 3);
    assert_eq!(sim.token_requests(OTHER_CLIENT), 1);
    assert_eq!(sim.token_requests("never-asked"), 0);
    assert_eq!(sim.stats().token_requests.get(CLIENT), Some(&3));
}

#[tokio::test]
async fn client_secret_in_basic_auth_is_accepted_as_the_oauth2_crate_sends_it() {
    let clock = ManualClock::new(t0());
    let sim = GraphSim::start(
        SimConfig::new()
            .with_app(TENANT, "app with space", "se:cr&t+")
            .with_mailbox(SimMailbox::new(MAILBOX, TENANT))
            .with_clock(clock),
    )
    .await
    .unwrap();
    let id: String = url::form_urlencoded::byte_serialize(b"app with space").collect();
    let secret: String = url::form_urlencoded::byte_serialize(b"se:cr&t+").collect();
    let response = Client::new()
        .post(sim.token_url(TENANT))
        .basic_auth(id, Some(secret))
        .form(&[("grant_type", "client_credentials"), ("scope", GRAPH_SCOPE)])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(sim.token_requests("app with space"), 1);
}

#[tokio::test]
async fn scripted_token_faults_answer_once_each_in_order() {
    let (sim, _) = start().await;
    sim.push_token_faults([TokenFault::unavailable(), TokenFault::server_error()])
        .unwrap();
    let http = Client::new();
    let form = credentials(CLIENT, SECRET, GRAPH_SCOPE);
    // The scripted faults in order, then the real answer.
    for (status, error) in [
        (StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable"),
        (StatusCode::INTERNAL_SERVER_ERROR, "server_error"),
    ] {
        let response = token_request(&http, &sim, TENANT, &form).await;
        let body = entra_refusal(response, status, error).await;
        assert_entra_shape(&body, error, 50000);
    }
    assert_eq!(
        token_request(&http, &sim, TENANT, &form).await.status(),
        StatusCode::OK
    );
    assert_eq!(sim.token_requests(CLIENT), 3);
}

// ---------------------------------------------------------------------------------------------
// sendMail

#[tokio::test]
async fn a_valid_message_is_accepted_with_202_and_recorded() {
    let s = Session::start().await;
    let response = s.send(&message(3)).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let request_id = response.headers()["request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(retry_after(&response).is_none());
    assert_eq!(response.bytes().await.unwrap().len(), 0);

    let messages = s.sim.messages();
    assert_eq!(messages.len(), 1);
    let m = &messages[0];
    assert_eq!(m.mailbox, MAILBOX);
    assert_eq!(Some(m.mailbox_id), s.sim.mailbox_id(MAILBOX));
    assert_eq!(m.client_id, CLIENT);
    assert_eq!(m.request_id, request_id);
    assert_eq!(m.received_at, t0());
    assert_eq!(m.received_at_ms, t0().timestamp_millis());
    assert_eq!(m.recipient_count, 3);
    assert_eq!(
        m.to,
        vec!["r0@example.org", "r1@example.org", "r2@example.org"]
    );
    assert_eq!(m.header("x-campaign-id"), Some("c-42"));
    assert_eq!(m.subject.as_deref(), Some("Spring event"));
    assert_eq!(m.body_content_type, "html");
    assert_eq!(m.body_bytes, "<p>Welcome</p>".len());
    assert_eq!(m.request_bytes, message(3).to_string().len());
    assert!(!m.save_to_sent_items);
    assert!(!m.delayed);
    assert_eq!(m.answered_status, 202);
    let stats = s.sim.mailbox_stats(MAILBOX).unwrap();
    assert_eq!(stats.accepted, 1);
    assert_eq!(stats.recipients_last_24h, 3);
    assert_eq!(stats.refused.total(), 0);
}

#[tokio::test]
async fn mailboxes_are_found_by_id_and_by_upn_in_any_case() {
    let s = Session::start().await;
    let id = s.sim.mailbox_id(MAILBOX).unwrap().to_string();
    for user in ["Events@Contoso.Example", id.as_str()] {
        let response = send_as(&s.http, &s.sim, &s.token, user, &message(1)).await;
        assert_eq!(response.status(), StatusCode::ACCEPTED, "{user}");
    }
    let mailboxes: Vec<String> = s.sim.messages().into_iter().map(|m| m.mailbox).collect();
    assert_eq!(mailboxes, vec![MAILBOX, MAILBOX]);
}

#[tokio::test]
async fn missing_unknown_and_expired_tokens_get_401_invalid_authentication_token() {
    let (sim, clock) = start().await;
    let http = Client::new();
    let url = format!("{}/users/{MAILBOX}/sendMail", sim.graph_base_url());
    let missing = http.post(&url).json(&message(1)).send().await.unwrap();
    assert!(missing.headers().contains_key("www-authenticate"));
    assert_eq!(
        refusal(missing).await,
        refused(StatusCode::UNAUTHORIZED, "InvalidAuthenticationToken")
    );
    let unknown = send_as(&http, &sim, "not-a-token", MAILBOX, &message(1)).await;
    assert_eq!(refusal(unknown).await.2, "InvalidAuthenticationToken");

    let token = token(&http, &sim).await;
    clock.advance(Duration::from_secs(3598));
    assert_eq!(
        send_one(&http, &sim, &token).await.status(),
        StatusCode::ACCEPTED
    );
    clock.advance(Duration::from_secs(1)); // 3599 s: expired
    let expired = send_one(&http, &sim, &token).await;
    let status = expired.status();
    let body: Value = expired.json().await.unwrap();
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"]["code"], "InvalidAuthenticationToken");
    assert_eq!(
        body["error"]["message"],
        "Lifetime validation failed, the token is expired."
    );
    assert_eq!(sim.mailbox_stats(MAILBOX).unwrap().refused.auth, 3);
}

#[tokio::test]
async fn a_token_of_another_tenant_gets_403_error_access_denied() {
    let clock = ManualClock::new(t0());
    let sim = GraphSim::start(
        config_with(refusing())
            .with_app(TENANT, "second-app", "second-secret")
            .with_mailbox(SimMailbox::new("restricted@contoso.example", TENANT).with_apps([CLIENT]))
            .with_clock(clock),
    )
    .await
    .unwrap();
    let http = Client::new();
    let other = token_for(&http, &sim, OTHER_TENANT, OTHER_CLIENT, OTHER_SECRET).await;
    let response = send_as(&http, &sim, &other, MAILBOX, &message(1)).await;
    assert_eq!(
        refusal(response).await,
        refused(StatusCode::FORBIDDEN, "ErrorAccessDenied")
    );
    // Same tenant, but not an app the mailbox allows.
    let second = token_for(&http, &sim, TENANT, "second-app", "second-secret").await;
    let response = send_as(
        &http,
        &sim,
        &second,
        "restricted@contoso.example",
        &message(1),
    )
    .await;
    assert_eq!(refusal(response).await.2, "ErrorAccessDenied");
    assert_eq!(sim.mailbox_stats(MAILBOX).unwrap().refused.auth, 1);
    assert!(sim.messages().is_empty());
}

#[tokio::test]
async fn an_unknown_mailbox_gets_404_error_invalid_user() {
    let s = Session::start().await;
    let response = send_as(
        &s.http,
        &s.sim,
        &s.token,
        "nobody@contoso.example",
        &message(1),
    )
    .await;
    assert_eq!(
        refusal(response).await,
        refused(StatusCode::NOT_FOUND, "ErrorInvalidUser")
    );
    assert_eq!(s.sim.stats().unknown_mailbox_requests, 1);
}

#[tokio::test]
async fn invalid_recipients_get_400_error_invalid_recipients() {
    let s = Session::start().await;
    let bad_syntax = json!({"message": {"toRecipients": [{"emailAddress": {"address": "lotte at example.org"}}]}});
    let none = json!({"message": {"subject": "x", "toRecipients": []}});
    let too_many =
        json!({"message": {"toRecipients": recipients(300), "bccRecipients": recipients(201)}});
    for body in [bad_syntax, none, too_many] {
        s.assert_refuses(&body, StatusCode::BAD_REQUEST, "ErrorInvalidRecipients")
            .await;
    }
    let exactly_500 =
        json!({"message": {"toRecipients": recipients(300), "bccRecipients": recipients(200)}});
    assert_eq!(s.send(&exactly_500).await.status(), StatusCode::ACCEPTED);
    assert_eq!(s.sim.mailbox_stats(MAILBOX).unwrap().refused.validation, 3);
}

#[tokio::test]
async fn a_header_without_x_prefix_gets_400_invalid_internet_message_header() {
    let s = Session::start().await;
    let mut body = message(1);
    body["message"]["internetMessageHeaders"] =
        json!([{"name": "List-Unsubscribe", "value": "<mailto:u@example.org>"}]);
    s.assert_refuses(
        &body,
        StatusCode::BAD_REQUEST,
        "InvalidInternetMessageHeader",
    )
    .await;
}

#[tokio::test]
async fn attachments_need_valid_base64_content_bytes() {
    let s = Session::start().await;
    let mut body = message(1);
    body["message"]["attachments"] = json!([{"@odata.type": "#microsoft.graph.fileAttachment",
        "name": "a.pdf", "contentType": "application/pdf", "contentBytes": "not base64!"}]);
    s.assert_refuses(&body, StatusCode::BAD_REQUEST, "RequestBodyRead")
        .await;
    body["message"]["attachments"][0]["contentBytes"] = json!("JVBERi0xLjQK"); // "%PDF-1.4\n"
    assert_eq!(s.send(&body).await.status(), StatusCode::ACCEPTED);
    let m = &s.sim.messages()[0];
    assert_eq!((m.attachment_count, m.attachment_bytes), (1, 9));
}

#[tokio::test]
async fn body_content_type_must_be_text_or_html_in_any_case() {
    let s = Session::start().await;
    let mut body = message(1);
    for ok in ["text", "HTML", "Html"] {
        body["message"]["body"]["contentType"] = json!(ok);
        assert_eq!(s.send(&body).await.status(), StatusCode::ACCEPTED, "{ok}");
    }
    body["message"]["body"]["contentType"] = json!("markdown");
    s.assert_refuses(&body, StatusCode::BAD_REQUEST, "RequestBodyRead")
        .await;
}

#[tokio::test]
async fn a_body_over_4_mb_gets_413_request_entity_too_large() {
    let s = Session::start().await;
    let with_attachment = |base64_len: usize| {
        let mut body = message(1);
        body["message"]["attachments"] = json!([{"@odata.type": "#microsoft.graph.fileAttachment",
            "name": "big.bin", "contentBytes": "A".repeat(base64_len)}]);
        body
    };
    // Just under 4 MB (4,194,304 bytes) is accepted: more than axum's 2 MB default.
    let under = with_attachment(4_190_000);
    assert!(under.to_string().len() < 4_194_304);
    assert_eq!(s.send(&under).await.status(), StatusCode::ACCEPTED);
    assert_eq!(s.sim.messages()[0].attachment_bytes, 4_190_000 / 4 * 3);
    let over = with_attachment(4_200_000);
    s.assert_refuses(
        &over,
        StatusCode::PAYLOAD_TOO_LARGE,
        "RequestEntityTooLarge",
    )
    .await;
    assert_eq!(s.sim.messages().len(), 1);
}

#[tokio::test]
async fn every_error_has_graphs_body_shape_and_request_id_header() {
    let (sim, _) = start().await;
    let http = Client::new();
    let response = http
        .post(format!("{}/users/{MAILBOX}/sendMail", sim.graph_base_url()))
        .header("client-request-id", "my-client-id-1")
        .json(&message(1))
        .send()
        .await
        .unwrap();
    let request_id = response.headers()["request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(response.headers()["client-request-id"], "my-client-id-1");
    let body: Value = response.json().await.unwrap();
    let error = body["error"].as_object().unwrap();
    assert_eq!(
        error.keys().collect::<Vec<_>>(),
        vec!["code", "innerError", "message"]
    );
    assert_eq!(body["error"]["innerError"]["date"], "2025-03-03T12:00:00");
    assert_eq!(
        body["error"]["innerError"]["request-id"],
        request_id.as_str()
    );
    assert_eq!(
        body["error"]["innerError"]["client-request-id"],
        "my-client-id-1"
    );
    assert_eq!(body["error"]["message"], "Access token is empty.");
}

#[tokio::test]
async fn me_send_mail_is_refused_for_app_only_tokens() {
    let s = Session::start().await;
    let me = s
        .http
        .post(format!("{}/me/sendMail", s.sim.graph_base_url()))
        .bearer_auth(&s.token)
        .json(&message(1));
    assert_eq!(
        refusal_of(me).await,
        refused(StatusCode::BAD_REQUEST, "BadRequest")
    );
}

// ---------------------------------------------------------------------------------------------
// Exchange's limits

#[tokio::test]
async fn five_concurrent_slow_requests_to_one_mailbox_get_four_accepted_and_one_application_throttled()
 {
    let s = Session::start().await;
    s.sim
        .set_latency(Target::mailbox(MAILBOX), Latency::Fixed(1_500))
        .unwrap();
    let body = message(1);
    let requests = (0..5).map(|_| async {
        let started = Instant::now();
        let response = s.send(&body).await;
        let status = response.status();
        let ra = retry_after(&response);
        let text = response.text().await.unwrap();
        (status, ra, text, started.elapsed())
    });
    let answers = futures::future::join_all(requests).await;
    let accepted: Vec<_> = answers
        .iter()
        .filter(|a| a.0 == StatusCode::ACCEPTED)
        .collect();
    let throttled: Vec<_> = answers
        .iter()
        .filter(|a| a.0 == StatusCode::TOO_MANY_REQUESTS)
        .collect();
    assert_eq!(accepted.len(), 4, "{answers:?}");
    assert_eq!(throttled.len(), 1, "{answers:?}");
    let (_, ra, text, elapsed) = throttled[0];
    let body: Value = serde_json::from_str(text).unwrap();
    assert_eq!(body["error"]["code"], "ApplicationThrottled");
    assert_eq!(
        body["error"]["message"],
        "Application is over its MailboxConcurrency limit."
    );
    assert_eq!(ra.as_deref(), Some("1"));
    assert!(
        *elapsed < Duration::from_millis(1_500),
        "refused without waiting: {elapsed:?}"
    );
    assert!(accepted.iter().all(|a| a.3 >= Duration::from_millis(1_500)));
    let stats = s.sim.mailbox_stats(MAILBOX).unwrap();
    assert_eq!(stats.max_concurrent, 4);
    assert_eq!(stats.refused.concurrency, 1);
    assert_eq!(stats.accepted, 4);
}

#[tokio::test]
async fn the_31st_send_within_a_minute_is_refused_until_the_oldest_ages_out() {
    let s = Session::start().await;
    for i in 0..30 {
        let response = s.send_one().await;
        assert_eq!(response.status(), StatusCode::ACCEPTED, "send {i}");
        s.clock.advance(Duration::from_secs(1));
    }
    // 12:00:30 — the 31st within 60 s of the first (12:00:00), which ages out at 12:01:00.
    let response = s.send_one().await;
    assert_eq!(refusal(response).await, throttled("30"));
    s.clock.advance(Duration::from_millis(29_500)); // 12:00:59.5 → 0.5 s left, rounded up to 1
    let response = s.send_one().await;
    assert_eq!(retry_after(&response).as_deref(), Some("1"));
    s.clock.advance(Duration::from_millis(500)); // 12:01:00
    assert_eq!(s.send_one().await.status(), StatusCode::ACCEPTED);
    let stats = s.sim.mailbox_stats(MAILBOX).unwrap();
    assert_eq!(stats.accepted, 31);
    // The second refusal came before the first one's Retry-After: a client that did not wait.
    assert_eq!(stats.refused.minute, 1);
    assert_eq!(stats.refused.retry_after_ignored, 1);
    assert_eq!(stats.max_in_rolling_60s, 30);
    // The other mailbox has its own budget.
    let other = token_for(&s.http, &s.sim, OTHER_TENANT, OTHER_CLIENT, OTHER_SECRET).await;
    assert_eq!(
        send_as(&s.http, &s.sim, &other, OTHER_MAILBOX, &message(1))
            .await
            .status(),
        StatusCode::ACCEPTED
    );
}

#[tokio::test]
async fn by_default_the_31st_message_in_a_minute_is_accepted_and_counted_as_delayed() {
    let s = Session::over(start_with(MailboxLimits::default()).await).await;
    for i in 0..31 {
        let response = s.send_one().await;
        assert_eq!(response.status(), StatusCode::ACCEPTED, "send {i}");
    }
    let stats = s.sim.mailbox_stats(MAILBOX).unwrap();
    assert_eq!(
        (stats.accepted, stats.delayed, stats.refused.minute),
        (31, 1, 0)
    );
    let delayed: Vec<bool> = s.sim.messages().iter().map(|m| m.delayed).collect();
    assert_eq!(delayed.iter().filter(|d| **d).count(), 1);
    assert!(delayed[30]);
}

#[tokio::test]
async fn recipients_over_10000_in_24_hours_get_error_submission_quota_exceeded_until_they_age_out()
{
    let mut s = Session::over(start_refusing_the_day(refusing()).await).await;
    let big = message(500);
    for i in 0..20 {
        let response = s.send(&big).await;
        assert_eq!(response.status(), StatusCode::ACCEPTED, "send {i}");
        s.clock.advance(Duration::from_secs(60));
    }
    // 12:20: 10,000 recipients used; the first 500 leave at 12:00 tomorrow, 23 h 40 min away.
    let response = s.send_one().await;
    assert_eq!(
        refusal(response).await,
        (
            StatusCode::TOO_MANY_REQUESTS,
            Some("85200".into()),
            "ErrorSubmissionQuotaExceeded".into()
        )
    );
    assert_eq!(
        s.sim.mailbox_stats(MAILBOX).unwrap().recipients_last_24h,
        10_000
    );
    s.clock.set(t0() + chrono::Duration::hours(24));
    s.token = self::token(&s.http, &s.sim).await; // the first one expired meanwhile
    assert_eq!(s.send_one().await.status(), StatusCode::ACCEPTED);
    let stats = s.sim.mailbox_stats(MAILBOX).unwrap();
    assert_eq!(stats.recipients_last_24h, 9_501);
    assert_eq!(stats.refused.day, 1);
}

#[tokio::test]
async fn the_10_minute_request_quota_per_app_gets_429_application_throttled() {
    let s = Session::with(|l| l.requests_per_10_minutes = 3).await;
    for _ in 0..3 {
        assert_eq!(s.send_one().await.status(), StatusCode::ACCEPTED);
        s.clock.advance(Duration::from_secs(1));
    }
    // 12:00:03; the first request (12:00:00) ages out at 12:10:00.
    let response = s.send_one().await;
    assert_eq!(refusal(response).await, throttled("597"));
    assert_eq!(
        s.sim.mailbox_stats(MAILBOX).unwrap().refused.request_quota,
        1
    );
}

#[tokio::test]
async fn stats_report_peaks_per_rolling_minute_and_per_utc_minute() {
    let s = Session::with(|l| l.messages_per_minute = 100).await;
    s.clock.set(t0() + chrono::Duration::seconds(40));
    for _ in 0..40 {
        // 12:00:40 … 12:01:19
        assert_eq!(s.send(&message(2)).await.status(), StatusCode::ACCEPTED);
        s.clock.advance(Duration::from_secs(1));
    }
    let stats = s.sim.mailbox_stats(MAILBOX).unwrap();
    assert_eq!(stats.max_in_utc_minute, 20);
    assert_eq!(stats.max_in_rolling_60s, 40);
    assert_eq!(stats.messages_last_60s, 40);
    assert_eq!(stats.recipients_last_24h, 80);
}

// ---------------------------------------------------------------------------------------------
// Fault injection

#[tokio::test]
async fn scripted_answers_are_served_in_order_for_their_mailbox() {
    let s = Session::over(start_probing().await).await;
    let at = s.clock.now_plus(Duration::from_secs(2));
    s.sim
        .push_script(
            Target::mailbox(MAILBOX),
            [
                ScriptedAnswer::unavailable(),
                ScriptedAnswer::throttled("2.128"),
                ScriptedAnswer::status(429).with_retry_after_date(at),
                ScriptedAnswer::gateway_timeout_after_delivery(),
                ScriptedAnswer::accepted_with_retry_after("7"),
            ],
        )
        .unwrap();
    let body = message(1);
    let send = || s.send(&body);
    assert_eq!(
        refusal(send().await).await,
        refused(StatusCode::SERVICE_UNAVAILABLE, "ErrorServerBusy")
    );
    assert_eq!(refusal(send().await).await, throttled("2.128"));
    assert_eq!(
        refusal(send().await).await,
        throttled("Mon, 03 Mar 2025 12:00:02 GMT")
    );
    assert_eq!(s.sim.messages().len(), 0, "no message recorded yet");
    assert_eq!(
        refusal(send().await).await,
        refused(StatusCode::GATEWAY_TIMEOUT, "UnknownError")
    );
    assert_eq!(s.sim.messages().len(), 1, "the 504 was delivered anyway");
    let accepted = send().await;
    assert_eq!(accepted.status(), StatusCode::ACCEPTED);
    assert_eq!(retry_after(&accepted).as_deref(), Some("7"));
    assert_eq!(send().await.status(), StatusCode::ACCEPTED);
    assert!(retry_after(&send().await).is_none(), "script used up");
    let statuses: Vec<u16> = s.sim.messages().iter().map(|m| m.answered_status).collect();
    assert_eq!(statuses, vec![504, 202, 202, 202]);
    let stats = s.sim.mailbox_stats(MAILBOX).unwrap();
    assert_eq!(
        (
            stats.refused.scripted,
            stats.scripted_answers,
            stats.accepted
        ),
        (3, 5, 4)
    );
}

trait NowPlus {
    fn now_plus(&self, by: Duration) -> DateTime<Utc>;
}

impl NowPlus for ManualClock {
    fn now_plus(&self, by: Duration) -> DateTime<Utc> {
        use graph_sim::clock::Clock;
        self.now() + chrono::Duration::from_std(by).unwrap()
    }
}

#[tokio::test]
async fn a_global_script_applies_to_any_mailbox_without_its_own() {
    let s = Session::over(start_probing().await).await;
    let other = token_for(&s.http, &s.sim, OTHER_TENANT, OTHER_CLIENT, OTHER_SECRET).await;
    s.sim
        .push_script(
            Target::Global,
            [ScriptedAnswer::unavailable(), ScriptedAnswer::status(500)],
        )
        .unwrap();
    s.sim
        .push_script(Target::mailbox(MAILBOX), [ScriptedAnswer::throttled("3")])
        .unwrap();
    // The mailbox's own script first, then the global one.
    let r = s.send_one().await;
    assert_eq!(refusal(r).await, throttled("3"));
    let r = send_as(&s.http, &s.sim, &other, OTHER_MAILBOX, &message(1)).await;
    assert_eq!(
        refusal(r).await,
        refused(StatusCode::SERVICE_UNAVAILABLE, "ErrorServerBusy")
    );
    let r = s.send_one().await;
    assert_eq!(
        refusal(r).await,
        refused(
            StatusCode::INTERNAL_SERVER_ERROR,
            "ErrorInternalServerError"
        )
    );
    assert_eq!(
        send_as(&s.http, &s.sim, &other, OTHER_MAILBOX, &message(1))
            .await
            .status(),
        StatusCode::ACCEPTED
    );
    assert!(matches!(
        s.sim.push_script(
            Target::mailbox("nobody@contoso.example"),
            [ScriptedAnswer::unavailable()]
        ),
        Err(graph_sim::SimError::UnknownMailbox(_))
    ));
}

#[tokio::test]
async fn added_latency_delays_answers_fixed_or_uniform() {
    let s = Session::start().await;
    let timed = || async {
        let started = Instant::now();
        let status = s.send_one().await.status();
        assert_eq!(status, StatusCode::ACCEPTED);
        started.elapsed()
    };
    s.sim
        .set_latency(Target::Global, Latency::Fixed(300))
        .unwrap();
    assert!(timed().await >= Duration::from_millis(300));
    s.sim
        .set_latency(Target::mailbox(MAILBOX), Latency::Uniform(100, 150))
        .unwrap();
    let elapsed = timed().await;
    assert!(elapsed >= Duration::from_millis(100), "{elapsed:?}");
    s.sim
        .set_latency(Target::mailbox(MAILBOX), Latency::None)
        .unwrap();
    assert!(
        timed().await < Duration::from_millis(300),
        "the mailbox's own setting wins"
    );
    assert!(
        s.sim
            .set_latency(Target::Global, Latency::Uniform(5, 1))
            .is_err()
    );
}

// ---------------------------------------------------------------------------------------------
// Admin API

#[tokio::test]
async fn the_admin_api_serves_stats_messages_and_takes_faults() {
    let (sim, _) = start().await;
    let http = Client::new();
    let admin = |path: &str| format!("{}_sim/{path}", sim.login_base_url());
    let token = token(&http, &sim).await;
    assert_eq!(
        send(&http, &sim, &token, &message(2)).await.status(),
        StatusCode::ACCEPTED
    );

    let script = json!({"mailbox": MAILBOX, "answers": [{"status": 429, "retry_after": "2.128"}]});
    let r = http
        .post(admin("script"))
        .json(&script)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let r = send_one(&http, &sim, &token).await;
    assert_eq!(refusal(r).await, throttled("2.128"));

    let bad = json!({"latency": {"uniform": [5, 1]}});
    let r = http.post(admin("latency")).json(&bad).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = http
        .post(admin("latency"))
        .json(&json!({"mailbox": MAILBOX, "latency": {"fixed": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);

    let faults = json!({"faults": [{"status": 503, "error": "temporarily_unavailable", "error_code": 50000, "description": "Down."}]});
    assert_eq!(
        http.post(admin("token-faults"))
            .json(&faults)
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::NO_CONTENT
    );
    let r = client_credentials(&http, &sim, TENANT, CLIENT, SECRET, GRAPH_SCOPE).await;
    let (status, body) = entra_error(r).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        body["error_description"]
            .as_str()
            .unwrap()
            .starts_with("AADSTS50000: Down.")
    );

    let messages: Vec<RecordedMessage> = json_of(http.get(admin("messages"))).await;
    assert_eq!(messages, sim.messages());
    assert_eq!(messages.len(), 1);
    let stats: SimStats = json_of(http.get(admin("stats"))).await;
    assert_eq!(stats, sim.stats());
    let mine = stats.mailbox(MAILBOX).unwrap();
    assert_eq!(
        (
            mine.accepted,
            mine.refused.scripted,
            mine.recipients_last_24h
        ),
        (1, 1, 2)
    );
    assert_eq!(stats.token_requests.get(CLIENT), Some(&2));

    assert_eq!(
        http.post(admin("reset")).send().await.unwrap().status(),
        StatusCode::NO_CONTENT
    );
    let stats = sim.stats();
    assert_eq!(stats.total_accepted(), 0);
    assert!(sim.messages().is_empty());
    assert_eq!(stats.mailbox(MAILBOX).unwrap().recipients_last_24h, 0);
    // Tokens survive a reset.
    assert_eq!(
        send_one(&http, &sim, &token).await.status(),
        StatusCode::ACCEPTED
    );
}

#[tokio::test]
async fn an_unknown_path_gets_graphs_bad_request() {
    let (sim, _) = start().await;
    let users = Client::new().get(format!("{}/users", sim.graph_base_url()));
    assert_eq!(
        refusal_of(users).await,
        refused(StatusCode::BAD_REQUEST, "BadRequest")
    );
}

// ---------------------------------------------------------------------------------------------
// The binary

async fn send_with_id(http: &Client, sim: &GraphSim, token: &str, id: &str, n: usize) -> u16 {
    http.post(format!("{}/users/{MAILBOX}/sendMail", sim.graph_base_url()))
        .bearer_auth(token)
        .header("client-request-id", id)
        .json(&message(n))
        .send()
        .await
        .expect("sendMail request")
        .status()
        .as_u16()
}

#[tokio::test]
async fn every_429_is_recorded_with_its_cause_time_and_client_request_id() {
    let s = Session::over(
        start_refusing_the_day(MailboxLimits {
            concurrent_requests: 1,
            messages_per_minute: 2,
            recipients_per_day: 10,
            retry_after_holds: false,
            ..refusing()
        })
        .await,
    )
    .await;
    s.clock.advance(Duration::from_secs(7)); // 12:00:07
    assert_eq!(send_with_id(&s.http, &s.sim, &s.token, "m-1", 1).await, 202);
    assert_eq!(send_with_id(&s.http, &s.sim, &s.token, "m-2", 1).await, 202);
    s.clock.advance(Duration::from_secs(5)); // 12:00:12
    assert_eq!(send_with_id(&s.http, &s.sim, &s.token, "m-3", 1).await, 429);
    assert_eq!(send_with_id(&s.http, &s.sim, &s.token, "m-4", 9).await, 429);
    // Two at once against a concurrency limit of 1: the slow one holds the slot.
    s.sim
        .set_latency(Target::mailbox(MAILBOX), Latency::Fixed(500))
        .unwrap();
    let (a, b) = tokio::join!(send_with_id(&s.http, &s.sim, &s.token, "m-5", 1), async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        send_with_id(&s.http, &s.sim, &s.token, "m-6", 1).await
    });
    assert_eq!(
        (a, b),
        (429, 429),
        "m-5 is over the minute limit once it has the slot"
    );

    let refusals = s.sim.refusals();
    let seen: Vec<(RefusalCause, Option<&str>, Option<u64>, i64)> = refusals
        .iter()
        .map(|r| {
            (
                r.cause,
                r.client_request_id.as_deref(),
                r.retry_after_s,
                r.at_ms - t0().timestamp_millis(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (RefusalCause::Minute, Some("m-3"), Some(55), 12_000),
            // 2 of 10 recipients used at 12:00:07; 9 more fit when those age out, 24 h later.
            (RefusalCause::Day, Some("m-4"), Some(86_395), 12_000),
            (RefusalCause::Concurrency, Some("m-6"), Some(1), 12_000),
            (RefusalCause::Minute, Some("m-5"), Some(55), 12_000),
        ]
    );
    assert!(
        refusals
            .iter()
            .all(|r| r.mailbox == MAILBOX && r.client_id == CLIENT)
    );
    let over_http: Vec<RecordedRefusal> = json_of(
        s.http
            .get(format!("{}_sim/refusals", s.sim.login_base_url())),
    )
    .await;
    assert_eq!(over_http, refusals);
    let ids: Vec<Option<String>> = s
        .sim
        .messages()
        .into_iter()
        .map(|m| m.client_request_id)
        .collect();
    assert_eq!(ids, vec![Some("m-1".to_owned()), Some("m-2".to_owned())]);
    s.sim.reset();
    assert!(s.sim.refusals().is_empty());
}

#[tokio::test]
async fn a_record_keeps_both_its_arrival_and_its_acceptance_after_the_added_latency() {
    let sim = GraphSim::start(config_with(refusing())).await.unwrap();
    let http = Client::new();
    let token = token(&http, &sim).await;
    sim.set_latency(Target::Global, Latency::Fixed(300))
        .unwrap();
    let before = Utc::now().timestamp_millis();
    assert_eq!(send_with_id(&http, &sim, &token, "m-1", 1).await, 202);
    let after = Utc::now().timestamp_millis();
    let m = &sim.messages()[0];
    assert!(
        before <= m.arrived_at_ms && m.received_at_ms <= after,
        "{m:?}"
    );
    let processing = m.received_at_ms - m.arrived_at_ms;
    assert!((300..1_000).contains(&processing), "{processing} ms");
}

#[tokio::test]
async fn graph_sim_binary_serves_a_sendgrid_stand_in_beside_graph_when_asked() {
    let (mut child, mut lines) = spawn_graph_sim(
        &[
            "--listen",
            "127.0.0.1:0",
            "--sendgrid-listen",
            "127.0.0.1:0",
        ],
        &[("GRAPH_SIM_SENDGRID_KEYS", "sg-key-1,sg-key-2")],
    );
    let mut sendgrid = None;
    for _ in 0..3 {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let Some(url) = line.strip_prefix("SENDGRID_API_BASE_URL=") {
            sendgrid = Some(url.trim_end_matches('/').to_owned());
        }
    }
    let sendgrid = sendgrid.expect("the third line names the SendGrid URL");
    let http = Client::new();
    let send = |key: &'static str| {
        http.post(format!("{sendgrid}/v3/mail/send"))
            .bearer_auth(key)
            .json(&json!({
                "personalizations": [{"to": [{"email": "a@example.org"}], "bcc": [{"email": "b@example.org"}]}],
                "from": {"email": "News@Adatum.example"},
                "subject": "s",
                "content": [{"type": "text/plain", "value": "b"}],
                "custom_args": {"mail_worker_message_id": "6f1c2a9e-3b4d-4e5f-8a7b-9c0d1e2f3a4b"}
            }))
            .send()
    };
    assert_eq!(
        send("sg-key-2").await.unwrap().status(),
        StatusCode::ACCEPTED
    );
    assert_eq!(
        send("nope").await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    let records: Value = json_of(http.get(format!("{sendgrid}/_sim/messages"))).await;
    let records = records.as_array().unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(
        records[0]["message_id"],
        "6f1c2a9e-3b4d-4e5f-8a7b-9c0d1e2f3a4b"
    );
    assert_eq!(records[0]["from"], "news@adatum.example");
    assert_eq!(records[0]["recipient_count"], 2);
    terminate(&child);
    assert!(child.wait().await.unwrap().success());
}

#[tokio::test]
async fn graph_sim_binary_documents_its_config_file_in_help() {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_graph-sim"))
        .arg("--help")
        .output()
        .await
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "CONFIG FILE",
        "\"mailboxes\"",
        "\"minute_overflow\": \"accept_delayed\"",
        "\"recipients_per_day\": 10000",
        "--mailbox <ADDRESS>",
        "--listen <ADDR>",
        "learn.microsoft.com/graph/throttling-limits",
    ] {
        assert!(help.contains(needle), "--help lacks {needle:?}");
    }
}

#[tokio::test]
async fn graph_sim_binary_serves_a_quick_mailbox_and_prints_stats_on_sigterm() {
    let (mut child, mut lines) = spawn_graph_sim(
        &[
            "--listen",
            "127.0.0.1:0",
            "--mailbox",
            "quick@contoso.example",
            "--tenant-id",
            TENANT,
            "--client-id",
            CLIENT,
            "--client-secret",
            SECRET,
            "--messages-per-minute",
            "1",
        ],
        &[],
    );
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let graph_base = first
        .strip_prefix("GRAPH_API_BASE_URL=")
        .expect("first line names the Graph URL");
    let login = lines.next_line().await.unwrap().unwrap();
    let login = login
        .strip_prefix("GRAPH_LOGIN_BASE_URL=")
        .unwrap()
        .trim_end_matches('/')
        .to_owned();

    let http = Client::new();
    let body: Value = json_of(
        http.post(format!("{login}/{TENANT}/oauth2/v2.0/token"))
            .form(&credentials(CLIENT, SECRET, &format!("{login}/.default"))),
    )
    .await;
    let token = body["access_token"].as_str().unwrap();
    let send = || {
        http.post(format!("{graph_base}/users/quick@contoso.example/sendMail"))
            .bearer_auth(token)
            .json(&message(1))
            .send()
    };
    assert_eq!(send().await.unwrap().status(), StatusCode::ACCEPTED);
    assert_eq!(
        send().await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS,
        "--messages-per-minute 1"
    );

    terminate(&child);
    let mut last = String::new();
    while let Some(line) = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap()
    {
        last = line;
    }
    let status = child.wait().await.unwrap();
    assert!(status.success(), "{status:?}");
    let stats: SimStats = serde_json::from_str(&last).expect("the last line is the stats JSON");
    let quick = stats.mailbox("quick@contoso.example").unwrap();
    assert_eq!((quick.accepted, quick.refused.minute), (1, 1));
}

// ---------------------------------------------------------------------------------------------
// Drafts, eventual consistency and upload sessions
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_draft_keeps_its_immutable_id_and_reads_as_sent_only_after_the_visibility_delay() {
    for in_transit in [SentInTransit::NotFound, SentInTransit::Draft] {
        a_sent_draft_becomes_visible_after_the_delay(in_transit).await;
    }
}

/// One run of the test above, the sent draft shown as `in_transit` until it is visible.
async fn a_sent_draft_becomes_visible_after_the_delay(in_transit: SentInTransit) {
    let clock = ManualClock::new(t0());
    let sim = GraphSim::start(
        config_with(refusing())
            .with_clock(clock.clone())
            .with_sent_visibility_delay(Duration::from_secs(2))
            .with_sent_in_transit(in_transit),
    )
    .await
    .unwrap();
    let http = Client::new();
    let bearer = token(&http, &sim).await;
    let base = format!("{}/users/{MAILBOX}", sim.graph_base_url());
    let create = |prefer: bool| {
        let mut request = http
            .post(format!("{base}/messages"))
            .bearer_auth(&bearer)
            .json(&json!({
                "subject": "Hi",
                "toRecipients": recipients(1),
                "internetMessageId": format!("<{}@contoso.example>", uuid::Uuid::new_v4()),
            }));
        if prefer {
            request = request.header("Prefer", "IdType=\"ImmutableId\"");
        }
        request.send()
    };
    let get = |id: String| {
        http.get(format!("{base}/messages/{id}"))
            .bearer_auth(&bearer)
            .send()
    };
    for prefer in [true, false] {
        let created = create(prefer).await.unwrap();
        assert_eq!(created.status(), StatusCode::CREATED);
        let draft: Value = created.json().await.unwrap();
        let id = draft["id"].as_str().unwrap().to_owned();
        assert_eq!(draft["isDraft"], true);
        let sent = http
            .post(format!("{base}/messages/{id}/send"))
            .bearer_auth(&bearer)
            .send()
            .await
            .unwrap();
        assert_eq!(sent.status(), StatusCode::ACCEPTED);
        let before = get(id.clone()).await.unwrap();
        let imid = draft["internetMessageId"].as_str().unwrap();
        let listing = |folder: &'static str, imid: String| {
            http.get(format!("{base}{folder}/messages"))
                .query(&[("$filter", format!("internetMessageId eq '{imid}'"))])
                .bearer_auth(&bearer)
                .send()
        };
        let sent_items = |imid: String| listing("/mailFolders/sentitems", imid);
        let everywhere: Value = json_of_answer(listing("", imid.to_owned()).await).await;
        if in_transit == SentInTransit::NotFound {
            assert_eq!(before.status(), StatusCode::NOT_FOUND, "gone from Drafts");
            let error: Value = before.json().await.unwrap();
            assert_eq!(error["error"]["code"], "ErrorItemNotFound");
            assert_eq!(everywhere["value"], json!([]), "in no folder yet");
        } else {
            let before: Value = before.json().await.unwrap();
            assert_eq!(before["isDraft"], true, "not visible as sent yet");
            assert_eq!(everywhere["value"][0]["isDraft"], true, "still in Drafts");
        }
        let listed: Value = json_of_answer(sent_items(imid.to_owned()).await).await;
        assert_eq!(
            listed["value"].as_array().unwrap().len(),
            0,
            "{in_transit:?}"
        );
        clock.advance(Duration::from_secs(2));
        let after = get(id.clone()).await.unwrap();
        if prefer {
            let after: Value = after.json().await.unwrap();
            assert_eq!(
                (after["id"].as_str(), after["isDraft"].as_bool()),
                (Some(id.as_str()), Some(false))
            );
        } else {
            assert_eq!(
                after.status(),
                StatusCode::NOT_FOUND,
                "a mutable id changes on the move"
            );
        }
        let listed: Value = json_of_answer(sent_items(imid.to_owned()).await).await;
        assert_eq!(listed["value"].as_array().unwrap().len(), 1);
    }
    assert_eq!(sim.messages().len(), 2);
    assert!(sim.messages().iter().all(|m| m.via == "draft"));
}

/// A message to `to` (one recipient each).
fn message_to(to: &[&str]) -> Value {
    let to: Vec<Value> = to
        .iter()
        .map(|a| json!({"emailAddress": {"address": a}}))
        .collect();
    json!({
        "message": {"subject": "s", "body": {"contentType": "Text", "content": "b"}, "toRecipients": to},
        "saveToSentItems": false
    })
}

#[tokio::test]
async fn after_a_429_with_retry_after_every_request_to_the_mailbox_is_refused_until_then() {
    let s = Session::start().await;
    let other = token_for(&s.http, &s.sim, OTHER_TENANT, OTHER_CLIENT, OTHER_SECRET).await;
    s.sim
        .push_script(Target::mailbox(MAILBOX), [ScriptedAnswer::throttled("315")])
        .unwrap();
    let body = message(1);
    let send = || s.send(&body);
    assert_eq!(retry_after(&send().await).as_deref(), Some("315"));
    // 10 s later: refused again, with the rest of the wait, recorded as a finding.
    s.clock.advance(Duration::from_secs(10));
    let again = send().await;
    assert_eq!(retry_after(&again).as_deref(), Some("305"));
    assert_eq!(refusal(again).await, throttled("305"));
    // Another mailbox is not held.
    assert_eq!(
        send_as(&s.http, &s.sim, &other, OTHER_MAILBOX, &message(1))
            .await
            .status(),
        StatusCode::ACCEPTED
    );
    s.clock.advance(Duration::from_millis(304_999)); // 1 ms before the end
    assert_eq!(send().await.status(), StatusCode::TOO_MANY_REQUESTS);
    s.clock.advance(Duration::from_millis(1));
    assert_eq!(send().await.status(), StatusCode::ACCEPTED);
    let stats = s.sim.mailbox_stats(MAILBOX).unwrap();
    assert_eq!(stats.refused.retry_after_ignored, 2);
    assert_eq!(stats.refused.scripted, 1);
    assert_eq!(stats.accepted, 1);
    let causes: Vec<RefusalCause> = s.sim.refusals().iter().map(|r| r.cause).collect();
    assert_eq!(
        causes,
        [
            RefusalCause::RetryAfterIgnored,
            RefusalCause::RetryAfterIgnored
        ]
    );
    assert_eq!(
        RefusalCause::RetryAfterIgnored.as_str(),
        "retry_after_ignored"
    );

    // Its own minute 429 holds the mailbox too.
    let s = Session::over(
        start_with(MailboxLimits {
            messages_per_minute: 1,
            ..refusing()
        })
        .await,
    )
    .await;
    let send = || s.send(&body);
    assert_eq!(send().await.status(), StatusCode::ACCEPTED);
    s.clock.advance(Duration::from_secs(20));
    assert_eq!(retry_after(&send().await).as_deref(), Some("40"));
    s.clock.advance(Duration::from_secs(39));
    assert_eq!(send().await.status(), StatusCode::TOO_MANY_REQUESTS);
    s.clock.advance(Duration::from_secs(1));
    assert_eq!(send().await.status(), StatusCode::ACCEPTED);
    let refused = s.sim.mailbox_stats(MAILBOX).unwrap().refused;
    assert_eq!((refused.minute, refused.retry_after_ignored), (1, 1));
}

#[tokio::test]
async fn over_the_tenants_external_budget_mail_is_accepted_but_bounces() {
    const SECOND: &str = "hello@contoso.example";
    let clock = ManualClock::new(t0());
    let sim = GraphSim::start(
        config_with(refusing())
            .with_mailbox(SimMailbox::new(SECOND, TENANT))
            .with_tenant(graph_sim::SimTenant::new(TENANT, 3, ["Contoso.example"]))
            .with_token_lifetime(Duration::from_secs(2 * 86_400))
            .with_clock(clock.clone()),
    )
    .await
    .unwrap();
    let http = Client::new();
    let token = token(&http, &sim).await;
    let send = |mailbox: &'static str, to: &'static [&'static str]| {
        let (http, sim, token) = (&http, &sim, &token);
        async move {
            send_as(http, sim, token, mailbox, &message_to(to))
                .await
                .status()
        }
    };
    // 2 external + 1 internal, then 1 external from the other mailbox of the tenant: 3.
    assert_eq!(
        send(
            MAILBOX,
            &["a@example.org", "b@example.org", "c@CONTOSO.example"]
        )
        .await,
        202
    );
    assert_eq!(send(SECOND, &["d@example.org"]).await, 202);
    // Over the budget: still 202, but bounced, not accepted.
    assert_eq!(send(SECOND, &["e@example.org"]).await, 202);
    // Internal mail still goes.
    assert_eq!(send(MAILBOX, &["f@contoso.example"]).await, 202);
    // 24 h later the first 3 have left the window.
    clock.advance(Duration::from_secs(86_400));
    assert_eq!(send(MAILBOX, &["g@sub.contoso.example"]).await, 202);
    let stats = sim.stats();
    let first = stats.mailbox(MAILBOX).unwrap();
    let second = stats.mailbox(SECOND).unwrap();
    assert_eq!((first.accepted, second.accepted), (3, 1));
    assert_eq!(second.refused.tenant_external_limit, 1);
    assert_eq!(
        second.refused.total(),
        0,
        "a bounce is not a refused request"
    );
    let delivered: Vec<String> = sim.messages().iter().flat_map(|m| m.to.clone()).collect();
    assert!(
        !delivered.contains(&"e@example.org".to_owned()),
        "{delivered:?}"
    );
    assert_eq!(delivered.len(), 6);
    let findings: Vec<RefusalCause> = sim.refusals().iter().map(|r| r.cause).collect();
    assert_eq!(findings, [RefusalCause::TenantExternalLimit]);
    // Another tenant has no budget.
    let other = token_for(&http, &sim, OTHER_TENANT, OTHER_CLIENT, OTHER_SECRET).await;
    for _ in 0..5 {
        assert_eq!(
            send_as(&http, &sim, &other, OTHER_MAILBOX, &message(1))
                .await
                .status(),
            StatusCode::ACCEPTED
        );
    }
    assert_eq!(sim.mailbox_stats(OTHER_MAILBOX).unwrap().accepted, 5);
}

#[test]
fn a_tenant_budget_needs_a_limit_and_domains() {
    let bad = config_with(refusing()).with_tenant(graph_sim::SimTenant::new(
        TENANT,
        0,
        ["contoso.example"],
    ));
    let err = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(GraphSim::start(bad))
        .unwrap_err();
    assert!(
        err.to_string().contains("external_recipients_per_day"),
        "{err}"
    );
    let json = r#"{"tenants":[{"tenant_id":"contoso.example","external_recipients_per_day":5,"accepted_domains":["contoso.example"]}]}"#;
    let config = SimConfig::from_json_str(json).unwrap();
    assert_eq!(config.tenants[0].external_recipients_per_day, 5);
}

#[path = "graph_sim/inbox.rs"]
mod inbox;
#[path = "graph_sim/ndr_mime.rs"]
mod ndr_mime;

#[path = "graph_sim/attachments.rs"]
mod attachments;

#[path = "graph_sim/permissions.rs"]
mod permissions;
