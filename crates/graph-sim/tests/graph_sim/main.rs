//! graph-sim, over HTTP with reqwest against an in-process server on port 0 (and the binary):
//! one test per behaviour of the token endpoint, sendMail, Exchange's limits, fault injection,
//! records and the admin API, asserting status, `Retry-After` and the error body's `code`.
//! Here the helpers the subjects share; one file a subject.

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

mod admin;
mod attachments;
mod binary;
mod drafts;
mod faults;
mod inbox;
mod limits;
mod ndr_mime;
mod permissions;
mod send_mail;
mod token;

#[allow(unused_imports)]
pub(crate) use self::{
    admin::*, binary::*, drafts::*, faults::*, limits::*, send_mail::*, token::*,
};

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
