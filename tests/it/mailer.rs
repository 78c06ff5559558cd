//! The mailers end to end through `MailerFactory`, against wiremock stand-ins for Graph's token
//! endpoint, Graph's `sendMail` and SendGrid's `mail/send`: every row of the answer mappings
//! with exact request counts, the token cache, the decorator with a fake limiter, the factory's
//! config-hash cache, and local validation costing no request.

use std::{
    collections::HashMap,
    num::NonZeroU32,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use chrono::{DateTime, TimeZone, Utc};
use mail_worker::{
    clock::{ManualClock, SystemClock},
    config::Config,
    domain::{
        Attachment, BodyContentType, GraphCredentials, Header, MailboxAddress, MessageContent,
        OutgoingMail, Recipient, SecretRef, SystemMailbox, Tenant, TenantTransport,
    },
    mailer::{MailError, MailErrorKind, Mailer, MailerFactory},
    rate_limit::{Decision, DenyReason, MailRateLimiter},
};
use redis::AsyncCommands;
use serde_json::json;
use uuid::Uuid;
use wiremock::{
    Mock, MockServer, Request, ResponseTemplate,
    matchers::{header, method, path},
};

use crate::support::{TestKeys, doubles::FakeLimiter, redis_conn, redis_url};

const SECRET: &str = "s3cret-value-Q~abc";
/// How long the rig's factory keeps a `file:` secret (production: 5 s).
const FILE_TTL: Duration = Duration::from_millis(300);
const GRAPH_TENANT: &str = "contoso.example";
const TOKEN_PATH: &str = "/contoso.example/oauth2/v2.0/token";
const SEND_PATH: &str = "/v1.0/users/events@contoso.example/sendMail";
const SENDGRID_PATH: &str = "/v3/mail/send";
const RECIPIENT: &str = "lotte.jansen@example.com";

// ---------------------------------------------------------------------------------------------
// Fakes and fixtures
// ---------------------------------------------------------------------------------------------

/// One wiremock server standing in for login.microsoftonline.com, graph.microsoft.com and
/// api.sendgrid.com, plus a factory pointed at it.
struct Rig {
    server: MockServer,
    clock: ManualClock,
    limiter: Arc<FakeLimiter>,
    factory: MailerFactory<FakeLimiter>,
    tokens_issued: Arc<AtomicUsize>,
}

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 3, 1, 12, 0, 0).unwrap()
}

fn config_for(server: &MockServer, extra: &[(&str, String)]) -> Config {
    let mut vars: HashMap<String, String> = HashMap::from([
        (
            "GRAPH_API_BASE_URL".to_owned(),
            format!("{}/v1.0", server.uri()),
        ),
        ("GRAPH_LOGIN_BASE_URL".to_owned(), server.uri()),
        ("SENDGRID_API_BASE_URL".to_owned(), server.uri()),
        ("HTTP_TIMEOUT".to_owned(), "5s".to_owned()),
        // These tests pin sendMail's answer mapping; the draft flow is in `exactly_once.rs`.
        ("GRAPH_SEND_MODE".to_owned(), "sendmail".to_owned()),
    ]);
    for (k, v) in extra {
        vars.insert((*k).to_owned(), v.clone());
    }
    Config::from_lookup(|k| vars.get(k).cloned()).expect("test config")
}

impl Rig {
    async fn new() -> Self {
        Self::with(&[]).await
    }

    async fn with(extra: &[(&str, String)]) -> Self {
        let server = MockServer::start().await;
        let config = config_for(&server, extra);
        let clock = ManualClock::new(t0());
        let limiter = Arc::new(FakeLimiter::default());
        let factory = MailerFactory::new(&config, Arc::clone(&limiter), Arc::new(clock.clone()))
            .expect("factory")
            .with_secret_file_ttl(FILE_TTL);
        Self {
            server,
            clock,
            limiter,
            factory,
            tokens_issued: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Mounts a token endpoint issuing `tok-1`, `tok-2`, … valid for `expires_in` s, answering
    /// after `delay`.
    /// A rig whose token endpoint issues hour-long tokens at once and whose sendMail answers
    /// `template`, expected `expect` times.
    async fn answering(template: ResponseTemplate, expect: u64) -> Self {
        let rig = Self::new().await;
        rig.token_endpoint(3599, Duration::ZERO).await;
        rig.send_answers(template, expect).await;
        rig
    }

    async fn token_endpoint(&self, expires_in: u64, delay: Duration) {
        let issued = Arc::clone(&self.tokens_issued);
        Mock::given(method("POST"))
            .and(path(TOKEN_PATH))
            .respond_with(move |_: &Request| {
                let n = issued.fetch_add(1, Ordering::SeqCst) + 1;
                ResponseTemplate::new(200)
                    .set_body_json(json!({
                        "token_type": "Bearer",
                        "expires_in": expires_in,
                        "ext_expires_in": expires_in,
                        "access_token": format!("tok-{n}"),
                    }))
                    .set_delay(delay)
            })
            .mount(&self.server)
            .await;
    }

    async fn send_answers(&self, template: ResponseTemplate, expect: u64) {
        Mock::given(method("POST"))
            .and(path(SEND_PATH))
            .respond_with(template)
            .expect(expect)
            .mount(&self.server)
            .await;
    }

    async fn requests_to(&self, p: &str) -> Vec<Request> {
        requests_to(&self.server, p).await
    }

    async fn count(&self, p: &str) -> usize {
        self.requests_to(p).await.len()
    }

    async fn graph_mailer(&self) -> Arc<dyn Mailer> {
        self.factory
            .mailer_for_tenant(&graph_tenant(SECRET))
            .await
            .expect("graph mailer")
    }

    /// The SendGrid tenant's mailer (API key `SG.key`).
    async fn sendgrid_mailer(&self) -> Arc<dyn Mailer> {
        self.factory
            .mailer_for_tenant(&sendgrid_tenant("SG.key"))
            .await
            .expect("sendgrid mailer")
    }
}

fn graph_credentials(secret: &str) -> GraphCredentials {
    GraphCredentials {
        graph_tenant_id: GRAPH_TENANT.into(),
        client_id: "app-1".into(),
        client_secret: SecretRef::new(secret),
        tenant_budget: None,
    }
}

fn graph_tenant(secret: &str) -> Tenant {
    Tenant {
        id: Uuid::nil(),
        name: "northwind".into(),
        sender_address: MailboxAddress::parse("events@contoso.example").unwrap(),
        transport: TenantTransport::Graph(graph_credentials(secret)),
        warm_up: None,
    }
}

fn sendgrid_tenant(key: &str) -> Tenant {
    Tenant {
        id: Uuid::nil(),
        name: "fabrikam".into(),
        sender_address: MailboxAddress::parse("news@fabrikam.example").unwrap(),
        transport: TenantTransport::SendGrid {
            api_key: SecretRef::new(key),
        },
        warm_up: None,
    }
}

fn system_mailbox(address: &str, secret: &str, per_minute: Option<u32>) -> SystemMailbox {
    SystemMailbox {
        id: Uuid::nil(),
        address: MailboxAddress::parse(address).unwrap(),
        graph: graph_credentials(secret),
        rate_limit_per_minute: per_minute.and_then(NonZeroU32::new),
        rate_limit_recipients_per_day: None,
        rate_limit_reserved_percent: None,
        warm_up: None,
    }
}

fn mail_from(from: &str) -> OutgoingMail {
    OutgoingMail {
        id: Uuid::new_v4(),
        from: MailboxAddress::parse(from).unwrap(),
        content: MessageContent {
            to: vec![Recipient {
                address: RECIPIENT.into(),
                name: Some("Lotte Jansen".into()),
            }],
            cc: vec![],
            bcc: vec![],
            subject: "Your invitation".into(),
            body_content_type: BodyContentType::Html,
            body: "<p>Welcome</p>".into(),
            headers: vec![Header {
                name: "x-campaign-id".into(),
                value: "42".into(),
            }],
            attachments: vec![Attachment {
                name: "invite.ics".into(),
                content_type: "text/calendar".into(),
                content: b"BEGIN:VCALENDAR".to_vec(),
            }],
        },
        priority: Default::default(),
    }
}

fn mail() -> OutgoingMail {
    mail_from("events@contoso.example")
}

fn graph_error(status: u16, code: &str, message: &str) -> ResponseTemplate {
    ResponseTemplate::new(status).set_body_json(json!({
        "error": {"code": code, "message": message, "innerError": {"request-id": "r"}}
    }))
}

/// Asserts no secret, token, full recipient address or request URL (it names the mailbox)
/// leaked into `error` or any error under it.
fn assert_clean(error: &MailError) {
    let mut text = format!("{error} {error:?}");
    let mut cause = std::error::Error::source(error);
    while let Some(c) = cause {
        text.push_str(&format!(" | {c} {c:?}"));
        cause = c.source();
    }
    for needle in [SECRET, "tok-1", "tok-2", RECIPIENT, "/users/"] {
        assert!(!text.contains(needle), "{needle} leaked into {text}");
    }
}

// ---------------------------------------------------------------------------------------------
// Graph: request shape and answer mapping
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn graph_202_is_sent_once_with_the_documented_request_shape() {
    let accepted = ResponseTemplate::new(202).insert_header("request-id", "graph-req-7");
    let rig = Rig::answering(accepted, 1).await;
    let m = mail();
    let receipt = rig.graph_mailer().await.send(&m).await.unwrap();
    assert_eq!(receipt.provider_id.as_deref(), Some("graph-req-7"));

    let tokens = rig.requests_to(TOKEN_PATH).await;
    assert_eq!(tokens.len(), 1);
    let form: HashMap<String, String> = url::form_urlencoded::parse(&tokens[0].body)
        .into_owned()
        .collect();
    assert_eq!(form["grant_type"], "client_credentials");
    assert_eq!(form["client_id"], "app-1");
    assert_eq!(
        form["client_secret"], SECRET,
        "secret in the body (RequestBody)"
    );
    let port = rig.server.address().port();
    assert_eq!(form["scope"], format!("http://127.0.0.1:{port}/.default"));
    assert!(tokens[0].headers.get("authorization").is_none());

    let sends = rig.requests_to(SEND_PATH).await;
    assert_eq!(sends.len(), 1);
    let post = &sends[0];
    assert_eq!(post.headers["authorization"], "Bearer tok-1");
    assert_eq!(post.headers["client-request-id"], m.id.to_string().as_str());
    assert_eq!(post.headers["content-type"], "application/json");
    let body: serde_json::Value = serde_json::from_slice(&post.body).unwrap();
    assert_eq!(
        body,
        json!({
            "message": {
                "subject": "Your invitation",
                "body": {"contentType": "HTML", "content": "<p>Welcome</p>"},
                "toRecipients": [{"emailAddress": {"address": RECIPIENT, "name": "Lotte Jansen"}}],
                "internetMessageHeaders": [{"name": "x-campaign-id", "value": "42"}],
                "internetMessageId": format!("<{}@contoso.example>", m.id),
                "attachments": [{
                    "@odata.type": "#microsoft.graph.fileAttachment",
                    "name": "invite.ics",
                    "contentType": "text/calendar",
                    "contentBytes": "QkVHSU46VkNBTEVOREFS"
                }]
            },
            "saveToSentItems": true
        })
    );
    assert!(rig.limiter.checks().len() == 1 && rig.limiter.releases() == 0);
}

#[tokio::test]
async fn graph_save_to_sent_items_follows_the_config() {
    let rig = Rig::with(&[("GRAPH_SAVE_TO_SENT_ITEMS", "false".into())]).await;
    rig.token_endpoint(3599, Duration::ZERO).await;
    rig.send_answers(ResponseTemplate::new(202), 1).await;
    rig.graph_mailer().await.send(&mail()).await.unwrap();
    let body: serde_json::Value =
        serde_json::from_slice(&rig.requests_to(SEND_PATH).await[0].body).unwrap();
    assert_eq!(body["saveToSentItems"], false);
}

#[tokio::test]
async fn a_202_with_retry_after_is_sent_and_never_resent() {
    let accepted = ResponseTemplate::new(202).insert_header("Retry-After", "30");
    let rig = Rig::answering(accepted, 1).await;
    let result = rig.graph_mailer().await.send(&mail()).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(rig.count(SEND_PATH).await, 1);
}

#[tokio::test]
async fn throttling_answers_are_throttled_with_retry_after_and_one_post() {
    let at_90s = (t0() + chrono::Duration::seconds(90))
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string();
    let rows: [(u16, Option<&str>, Option<Duration>); 6] = [
        (429, Some("120"), Some(Duration::from_secs(120))),
        (429, Some(&at_90s), Some(Duration::from_secs(90))),
        (503, Some("2.128"), Some(Duration::from_secs(3))),
        (503, Some("-1"), None),
        (504, Some("later"), None),
        (504, None, None),
    ];
    for (status, retry_after, expected) in rows {
        let rig = Rig::new().await;
        rig.token_endpoint(3599, Duration::ZERO).await;
        let mut answer = graph_error(status, "ApplicationThrottled", "slow down");
        if let Some(v) = retry_after {
            answer = answer.insert_header("Retry-After", v);
        }
        rig.send_answers(answer, 1).await;
        let result = rig.graph_mailer().await.send(&mail()).await;
        // A 503/504 is a server error to the adaptive rules (`5xx`); this 429 names no limit.
        let signal = (status != 429).then_some(mail_worker::domain::adaptive::Signal::ServerErrors);
        assert_eq!(
            result.map_err(|e| e.kind),
            Err(MailError::throttled_by(expected, signal).kind),
            "{status} {retry_after:?}"
        );
        assert_eq!(rig.count(SEND_PATH).await, 1, "{status}");
        assert_eq!(
            rig.limiter.releases(),
            0,
            "a throttled send keeps its budget: the mailbox is over Exchange's limit"
        );
    }
}

#[tokio::test]
async fn a_401_then_202_makes_two_posts_two_token_requests_and_an_identical_body() {
    let rig = Rig::new().await;
    rig.token_endpoint(3599, Duration::ZERO).await;
    Mock::given(method("POST"))
        .and(path(SEND_PATH))
        .and(header("authorization", "Bearer tok-1"))
        .respond_with(graph_error(
            401,
            "InvalidAuthenticationToken",
            "Access token has expired or is not yet valid.",
        ))
        .expect(1)
        .mount(&rig.server)
        .await;
    Mock::given(method("POST"))
        .and(path(SEND_PATH))
        .and(header("authorization", "Bearer tok-2"))
        .respond_with(ResponseTemplate::new(202))
        .expect(1)
        .mount(&rig.server)
        .await;
    let result = rig.graph_mailer().await.send(&mail()).await;
    assert!(result.is_ok(), "{result:?}");
    let sends = rig.requests_to(SEND_PATH).await;
    assert_eq!(sends.len(), 2);
    assert_eq!(rig.count(TOKEN_PATH).await, 2);
    assert_eq!(sends[0].body, sends[1].body, "the resend is byte-identical");
    assert_eq!(
        sends[0].headers["client-request-id"],
        sends[1].headers["client-request-id"]
    );
}

#[tokio::test]
async fn a_second_401_is_unauthorized_after_exactly_two_posts() {
    let rig = Rig::answering(
        graph_error(
            401,
            "InvalidAuthenticationToken",
            "Access token validation failure.",
        ),
        2,
    )
    .await;
    let err = rig.graph_mailer().await.send(&mail()).await.unwrap_err();
    assert_eq!(
        err.kind,
        MailError::unauthorized(
            "Graph refused the access token for mailbox events@contoso.example twice: InvalidAuthenticationToken: Access token validation failure."
        ).kind
    );
    assert_eq!(rig.count(SEND_PATH).await, 2);
    assert_eq!(rig.count(TOKEN_PATH).await, 2);
    assert_clean(&err);
}

#[tokio::test]
async fn client_errors_are_permanent_with_graphs_code_after_one_post() {
    let rows = [
        (400, "ErrorInvalidRecipients"),
        (400, "InvalidInternetMessageHeader"),
        (403, "ErrorSendAsDenied"),
        (413, "ErrorMessageSizeExceeded"),
    ];
    for (status, code) in rows {
        let rig = Rig::answering(
            graph_error(
                status,
                code,
                &format!("Recipient '{RECIPIENT}' is not resolved."),
            ),
            1,
        )
        .await;
        let err = rig.graph_mailer().await.send(&mail()).await.unwrap_err();
        assert_eq!(
            err.kind,
            MailError::permanent(code, format!(
                    "Graph refused the message (HTTP {status}): Recipient 'l***@example.com' is not resolved."
                )).kind
        );
        assert_eq!(rig.count(SEND_PATH).await, 1);
        assert_eq!(rig.limiter.releases(), 1);
        assert_clean(&err);
    }
}

#[tokio::test]
async fn sender_level_refusals_pause_the_sender_instead_of_failing_the_message() {
    // Issue 40: these were `Permanent`, so a mailbox's whole queue ended ERROR one by one.
    for (status, code) in [
        (403, "ErrorAccessDenied"),
        (404, "ErrorInvalidUser"),
        (404, "MailboxNotEnabledForRESTAPI"),
    ] {
        let rig = Rig::answering(graph_error(status, code, "Access is denied."), 1).await;
        let err = rig.graph_mailer().await.send(&mail()).await.unwrap_err();
        let text = match &err.kind {
            MailErrorKind::Unauthorized(t) if status == 403 => t.clone(),
            MailErrorKind::Misconfigured(t) if status == 404 => t.clone(),
            other => panic!("{status} {code}: {other:?}"),
        };
        assert!(
            text.starts_with(&format!(
                "Graph answered {status} {code} for mailbox events@contoso.example: Access is denied.; fix: "
            )),
            "{text}"
        );
        assert_eq!(rig.count(SEND_PATH).await, 1);
        assert_clean(&err);
    }
}

#[tokio::test]
async fn other_server_errors_are_outcome_unknown_after_one_post() {
    for status in [500, 502] {
        let rig = Rig::answering(graph_error(status, "generalException", "oops"), 1).await;
        let err = rig.graph_mailer().await.send(&mail()).await.unwrap_err();
        assert_eq!(
            err.kind,
            MailError::outcome_unknown(format!(
                "Graph sendMail for mailbox events@contoso.example answered {status}: generalException: oops"
            )).kind
        );
        assert_eq!(rig.count(SEND_PATH).await, 1);
        assert_eq!(
            rig.limiter.releases(),
            0,
            "Graph may have delivered it: budget kept"
        );
    }
}

#[tokio::test]
async fn a_send_slower_than_http_timeout_ms_is_outcome_unknown() {
    let rig = Rig::with(&[("HTTP_TIMEOUT", "300ms".into())]).await;
    rig.token_endpoint(3599, Duration::ZERO).await;
    rig.send_answers(
        ResponseTemplate::new(202).set_delay(Duration::from_secs(3)),
        1,
    )
    .await;
    let started = std::time::Instant::now();
    let err = rig.graph_mailer().await.send(&mail()).await.unwrap_err();
    let took = started.elapsed();
    let MailErrorKind::OutcomeUnknown(text) = &err.kind else {
        panic!("{err:?}")
    };
    assert!(text.contains("timed out"), "{text}");
    let cause = std::error::Error::source(&err).and_then(|c| c.downcast_ref::<reqwest::Error>());
    assert!(cause.is_some_and(reqwest::Error::is_timeout), "{cause:?}");
    assert!(took < Duration::from_secs(2), "gave up after {took:?}");
    assert_eq!(
        rig.limiter.releases(),
        0,
        "the request was written: budget kept"
    );
    assert_eq!(rig.count(SEND_PATH).await, 1);
    assert_clean(&err);
}

#[tokio::test]
async fn a_connection_error_is_transient() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let rig = Rig::with(&[(
        "GRAPH_API_BASE_URL",
        format!("http://127.0.0.1:{closed}/v1.0"),
    )])
    .await;
    rig.token_endpoint(3599, Duration::ZERO).await;
    let err = rig.graph_mailer().await.send(&mail()).await.unwrap_err();
    let MailErrorKind::Transient(text) = &err.kind else {
        panic!("{err:?}")
    };
    assert!(text.contains("could not connect"), "{text}");
    assert!(!text.contains("127.0.0.1"), "no URL in the error: {text}");
    let cause = std::error::Error::source(&err).and_then(|c| c.downcast_ref::<reqwest::Error>());
    assert!(cause.is_some_and(reqwest::Error::is_connect), "{cause:?}");
    assert_clean(&err);
    assert_eq!(rig.count(TOKEN_PATH).await, 1);
    assert_eq!(rig.limiter.releases(), 1);
}

// ---------------------------------------------------------------------------------------------
// Token cache
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_token_is_reused_until_five_minutes_before_expiry() {
    let rig = Rig::new().await;
    rig.token_endpoint(3600, Duration::ZERO).await;
    rig.send_answers(ResponseTemplate::new(202), 4).await;
    let mailer = rig.graph_mailer().await;
    mailer.send(&mail()).await.unwrap();
    assert_eq!(rig.count(TOKEN_PATH).await, 1);

    rig.clock.advance(Duration::from_secs(3600 - 300 - 1));
    mailer.send(&mail()).await.unwrap();
    assert_eq!(
        rig.count(TOKEN_PATH).await,
        1,
        "54:59 after issue: still cached"
    );

    rig.clock.advance(Duration::from_secs(1));
    mailer.send(&mail()).await.unwrap();
    assert_eq!(
        rig.count(TOKEN_PATH).await,
        2,
        "55:00 after issue: refreshed"
    );
    let sends = rig.requests_to(SEND_PATH).await;
    assert_eq!(sends[2].headers["authorization"], "Bearer tok-2");

    mailer.send(&mail()).await.unwrap();
    assert_eq!(rig.count(TOKEN_PATH).await, 2);
}

#[tokio::test]
async fn a_hundred_concurrent_sends_at_expiry_make_one_token_request() {
    let rig = Rig::new().await;
    rig.token_endpoint(3600, Duration::from_millis(200)).await;
    rig.send_answers(ResponseTemplate::new(202), 101).await;
    let mailer = rig.graph_mailer().await;
    mailer.send(&mail()).await.unwrap();
    rig.clock.advance(Duration::from_secs(3600));

    let mails: Vec<OutgoingMail> = (0..100).map(|_| mail()).collect();
    let results = futures::future::join_all(mails.iter().map(|m| mailer.send(m))).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(
        rig.count(TOKEN_PATH).await,
        2,
        "one at start, one at expiry"
    );
    let sends = rig.requests_to(SEND_PATH).await;
    assert_eq!(sends.len(), 101);
    assert!(
        sends[1..]
            .iter()
            .all(|r| r.headers["authorization"] == "Bearer tok-2")
    );
}

#[tokio::test]
async fn mailers_of_the_same_app_share_one_token() {
    let rig = Rig::new().await;
    rig.token_endpoint(3600, Duration::ZERO).await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(202))
        .mount(&rig.server)
        .await;
    let a = system_mailbox("alerts@contoso.example", SECRET, None);
    let b = system_mailbox("billing@contoso.example", SECRET, None);
    let ma = rig.factory.mailer_for_system_mailbox(&a).await.unwrap();
    let mb = rig.factory.mailer_for_system_mailbox(&b).await.unwrap();
    assert!(!Arc::ptr_eq(&ma, &mb));
    ma.send(&mail_from("alerts@contoso.example")).await.unwrap();
    mb.send(&mail_from("billing@contoso.example"))
        .await
        .unwrap();
    assert_eq!(rig.count(TOKEN_PATH).await, 1);
    assert_eq!(
        rig.count("/v1.0/users/billing@contoso.example/sendMail")
            .await,
        1
    );
}

#[tokio::test]
async fn invalid_client_is_unauthorized_with_the_aadsts_code_and_one_request_per_30_s() {
    let rig = Rig::new().await;
    Mock::given(method("POST"))
        .and(path(TOKEN_PATH))
        .respond_with(ResponseTemplate::new(401).set_body_json(json!({
            "error": "invalid_client",
            "error_description": "AADSTS7000215: Invalid client secret provided. Ensure the secret being sent in the request is the client secret value, not the client secret ID, for a secret added to app 'app-1'.\r\nTrace ID: 0f1e\r\nCorrelation ID: 9a8b\r\nTimestamp: 2025-03-01 12:00:00Z",
            "error_codes": [7000215],
        })))
        .mount(&rig.server)
        .await;
    rig.send_answers(ResponseTemplate::new(202), 0).await;
    let mailer = rig.graph_mailer().await;
    let expected = MailError::unauthorized(
        "the token endpoint refused app app-1 in tenant contoso.example: invalid_client (AADSTS7000215): AADSTS7000215: Invalid client secret provided. Ensure the secret being sent in the request is the client secret value, not the client secret ID, for a secret added to app 'app-1'.",
    );
    for _ in 0..3 {
        assert_eq!(
            mailer.send(&mail()).await.map_err(|e| e.kind),
            Err(expected.clone().kind)
        );
    }
    assert_eq!(rig.count(TOKEN_PATH).await, 1);
    rig.clock.advance(Duration::from_secs(29));
    assert_eq!(
        mailer.send(&mail()).await.map_err(|e| e.kind),
        Err(expected.clone().kind)
    );
    assert_eq!(rig.count(TOKEN_PATH).await, 1, "29 s later: still paused");
    rig.clock.advance(Duration::from_secs(1));
    assert_eq!(
        mailer.send(&mail()).await.map_err(|e| e.kind),
        Err(expected.clone().kind)
    );
    assert_eq!(rig.count(TOKEN_PATH).await, 2, "30 s later: one new try");
    assert_eq!(rig.count(SEND_PATH).await, 0);
    assert_eq!(
        rig.limiter.releases(),
        5,
        "every refused send gave its budget back"
    );
    assert_clean(&expected);
}

// ---------------------------------------------------------------------------------------------
// Decorator through the factory
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_limiter_denial_makes_no_http_request() {
    let rig = Rig::new().await;
    rig.limiter.then(Ok(Decision::Denied {
        reason: DenyReason::Day,
        retry_after: Duration::from_secs(3600),
        booked: false,
    }));
    let err = rig.graph_mailer().await.send(&mail()).await.unwrap_err();
    assert_eq!(
        err.kind,
        MailError::from(MailErrorKind::RateLimitExceeded {
            reason: DenyReason::Day,
            retry_after: Duration::from_secs(3600),
            booked: false,
        })
        .kind
    );
    assert!(rig.server.received_requests().await.unwrap().is_empty());
    assert_eq!(rig.limiter.releases(), 0);
}

// ---------------------------------------------------------------------------------------------
// Factory
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_same_config_returns_the_same_mailer() {
    let rig = Rig::new().await;
    let a = rig.graph_mailer().await;
    let b = rig.graph_mailer().await;
    assert!(Arc::ptr_eq(&a, &b));
    let s1 = rig.sendgrid_mailer().await;
    let s2 = rig.sendgrid_mailer().await;
    assert!(Arc::ptr_eq(&s1, &s2));
    let mb = system_mailbox("events@contoso.example", SECRET, Some(10));
    let m1 = rig.factory.mailer_for_system_mailbox(&mb).await.unwrap();
    let m2 = rig.factory.mailer_for_system_mailbox(&mb).await.unwrap();
    assert!(Arc::ptr_eq(&m1, &m2));
    assert!(!Arc::ptr_eq(&m1, &a), "other limits, other mailer");
    assert!(rig.server.received_requests().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_changed_rate_limit_per_minute_yields_a_new_mailer_applying_it() {
    let rig = Rig::new().await;
    rig.token_endpoint(3600, Duration::ZERO).await;
    rig.send_answers(ResponseTemplate::new(202), 3).await;
    let defaults = rig.factory.default_limits();
    assert_eq!(defaults.per_minute.get(), 25);
    assert_eq!(defaults.recipients_per_day.get(), 9000);

    let plain = system_mailbox("events@contoso.example", SECRET, None);
    let first = rig.factory.mailer_for_system_mailbox(&plain).await.unwrap();
    first.send(&mail()).await.unwrap();

    let tightened = system_mailbox("events@contoso.example", SECRET, Some(5));
    assert_eq!(rig.factory.limits_for(&tightened).per_minute.get(), 5);
    let second = rig
        .factory
        .mailer_for_system_mailbox(&tightened)
        .await
        .unwrap();
    assert!(!Arc::ptr_eq(&first, &second));
    second.send(&mail()).await.unwrap();

    let tenant = rig.graph_mailer().await;
    tenant.send(&mail()).await.unwrap();

    let limits: Vec<(u32, u32)> = rig
        .limiter
        .checks()
        .iter()
        .map(|(_, _, l)| (l.per_minute.get(), l.recipients_per_day.get()))
        .collect();
    assert_eq!(limits, [(25, 9000), (5, 9000), (25, 9000)]);
    assert_eq!(rig.count(TOKEN_PATH).await, 1, "same app, same token");
}

/// A Graph tenant's sender in warm-up books against its step's day budget, as a system
/// mailbox does (ADR 0047; a fresh user's trial found the tenant's ramp shown but not applied).
#[tokio::test]
async fn a_tenant_in_warm_up_books_against_its_steps_day_budget() {
    use mail_worker::domain::{WarmUp, WarmUpStep};
    let rig = Rig::new().await;
    rig.token_endpoint(3600, Duration::ZERO).await;
    rig.send_answers(ResponseTemplate::new(202), 2).await;
    let plain = graph_tenant(SECRET);
    let warming = Tenant {
        warm_up: Some(WarmUpStep {
            ramp: WarmUp {
                start_per_day: NonZeroU32::new(200).unwrap(),
                growth: 1.5,
                max_per_day: NonZeroU32::new(5_000).unwrap(),
            },
            step: 2,
        }),
        ..plain.clone()
    };
    for tenant in [&plain, &warming] {
        rig.factory
            .mailer_for_tenant(tenant)
            .await
            .unwrap()
            .send(&mail())
            .await
            .unwrap();
    }
    let days: Vec<u32> = rig
        .limiter
        .checks()
        .iter()
        .map(|(_, _, l)| l.recipients_per_day.get())
        .collect();
    // 200 × 1.5² = 450 at step 2.
    assert_eq!(days, [9000, 450]);
}

#[tokio::test]
async fn a_changed_reserved_percent_yields_a_new_mailer_applying_it() {
    let rig = Rig::new().await;
    rig.token_endpoint(3600, Duration::ZERO).await;
    rig.send_answers(ResponseTemplate::new(202), 2).await;
    assert_eq!(rig.factory.default_limits().reserved_percent, 20);
    let plain = system_mailbox("events@contoso.example", SECRET, None);
    let first = rig.factory.mailer_for_system_mailbox(&plain).await.unwrap();
    first.send(&mail()).await.unwrap();
    let off = SystemMailbox {
        rate_limit_reserved_percent: Some(0),
        ..plain
    };
    assert_eq!(rig.factory.limits_for(&off).reserved_percent, 0);
    let second = rig.factory.mailer_for_system_mailbox(&off).await.unwrap();
    assert!(!Arc::ptr_eq(&first, &second), "the digest covers it");
    second.send(&mail()).await.unwrap();
    let reserved: Vec<u8> = rig
        .limiter
        .checks()
        .iter()
        .map(|(_, _, l)| l.reserved_percent)
        .collect();
    assert_eq!(reserved, [20, 0]);
}

#[tokio::test]
async fn a_rotated_secret_yields_a_new_mailer_and_a_new_token() {
    let rig = Rig::new().await;
    rig.token_endpoint(3600, Duration::ZERO).await;
    rig.send_answers(ResponseTemplate::new(202), 2).await;
    let dir = crate::support::temp_dir("mw-secret-");
    let file = dir.path().join("client-secret");
    std::fs::write(&file, "first-secret\n").unwrap();
    let reference = format!("file:{}", file.display());

    let before = rig
        .factory
        .mailer_for_tenant(&graph_tenant(&reference))
        .await
        .unwrap();
    before.send(&mail()).await.unwrap();
    let again = rig
        .factory
        .mailer_for_tenant(&graph_tenant(&reference))
        .await
        .unwrap();
    assert!(Arc::ptr_eq(&before, &again));

    std::fs::write(&file, "second-secret\n").unwrap();
    let cached = rig
        .factory
        .mailer_for_tenant(&graph_tenant(&reference))
        .await
        .unwrap();
    assert!(
        Arc::ptr_eq(&before, &cached),
        "the file is not read again within its TTL"
    );
    tokio::time::sleep(FILE_TTL + Duration::from_millis(100)).await;
    let after = rig
        .factory
        .mailer_for_tenant(&graph_tenant(&reference))
        .await
        .unwrap();
    assert!(!Arc::ptr_eq(&before, &after));
    after.send(&mail()).await.unwrap();

    let secrets: Vec<String> = rig
        .requests_to(TOKEN_PATH)
        .await
        .iter()
        .map(|r| {
            url::form_urlencoded::parse(&r.body)
                .find(|(k, _)| k == "client_secret")
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(secrets, ["first-secret", "second-secret"]);
    let debug = format!("{after:?}");
    assert!(!debug.contains("second-secret"), "{debug}");
}

#[tokio::test]
async fn an_unresolvable_secret_is_misconfigured_naming_the_reference() {
    let rig = Rig::new().await;
    let missing_env = "env:MAIL_WORKER_TEST_SECRET_THAT_IS_NEVER_SET";
    let err = rig
        .factory
        .mailer_for_tenant(&graph_tenant(missing_env))
        .await
        .unwrap_err();
    assert_eq!(
        err.kind,
        MailError::misconfigured(
            "tenant northwind's Graph client secret: secret reference env:MAIL_WORKER_TEST_SECRET_THAT_IS_NEVER_SET names an environment variable that is not set or is empty"
        ).kind
    );
    let err = rig
        .factory
        .mailer_for_tenant(&sendgrid_tenant("file:/nonexistent/mw/key"))
        .await
        .unwrap_err();
    let MailErrorKind::Misconfigured(text) = &err.kind else {
        panic!("{err:?}")
    };
    assert!(
        text.starts_with("tenant fabrikam's SendGrid API key: secret reference file:/nonexistent/mw/key cannot be read"),
        "{text}"
    );
    let mb = system_mailbox("events@contoso.example", "env:MW_NOPE_NEVER_SET", None);
    let err = rig
        .factory
        .mailer_for_system_mailbox(&mb)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("env:MW_NOPE_NEVER_SET"), "{err}");
    assert!(rig.server.received_requests().await.unwrap().is_empty());
}

// ---------------------------------------------------------------------------------------------
// SendGrid
// ---------------------------------------------------------------------------------------------

fn sendgrid_mail() -> OutgoingMail {
    mail_from("news@fabrikam.example")
}

#[tokio::test]
async fn sendgrid_is_never_wrapped_and_sends_v3_json_with_the_bearer_key() {
    let rig = Rig::new().await;
    Mock::given(method("POST"))
        .and(path(SENDGRID_PATH))
        .and(header("authorization", "Bearer SG.key"))
        .respond_with(ResponseTemplate::new(202).insert_header("X-Message-Id", "sg-msg-1"))
        .expect(1)
        .mount(&rig.server)
        .await;
    let mailer = rig.sendgrid_mailer().await;
    let debug = format!("{mailer:?}");
    assert!(debug.starts_with("SendGridMailer"), "{debug}");
    assert!(
        !debug.contains("SG.key") && debug.contains("REDACTED"),
        "the key never shows: {debug}"
    );
    let m = sendgrid_mail();
    let receipt = mailer.send(&m).await.unwrap();
    assert_eq!(receipt.provider_id.as_deref(), Some("sg-msg-1"));
    assert!(
        rig.limiter.checks().is_empty(),
        "SendGrid is not rate limited"
    );
    let body: serde_json::Value =
        serde_json::from_slice(&rig.requests_to(SENDGRID_PATH).await[0].body).unwrap();
    assert_eq!(
        body,
        json!({
            "personalizations": [{"to": [{"email": RECIPIENT, "name": "Lotte Jansen"}]}],
            "from": {"email": "news@fabrikam.example"},
            "subject": "Your invitation",
            "content": [{"type": "text/html", "value": "<p>Welcome</p>"}],
            "attachments": [{
                "content": "QkVHSU46VkNBTEVOREFS",
                "type": "text/calendar",
                "filename": "invite.ics",
                "disposition": "attachment"
            }],
            "headers": {"x-campaign-id": "42"},
            "custom_args": {"mail_worker_message_id": m.id.to_string()}
        })
    );
}

#[tokio::test]
async fn sendgrid_answers_map_to_mail_errors_after_one_post() {
    let reset = (t0().timestamp() + 42).to_string();
    let rows: Vec<(ResponseTemplate, MailError)> = vec![
        (
            ResponseTemplate::new(429).insert_header("X-RateLimit-Reset", reset.as_str()),
            MailError::throttled(Some(Duration::from_secs(42))),
        ),
        (ResponseTemplate::new(429), MailError::throttled(None)),
        (
            ResponseTemplate::new(400).set_body_json(json!({"errors": [{
                "message": format!("Invalid email: {RECIPIENT}"),
                "field": "personalizations.0.to.0.email"
            }]})),
            MailError::permanent(
                "SendGrid400",
                "SendGrid refused the message (HTTP 400): personalizations.0.to.0.email: Invalid email: l***@example.com",
            ),
        ),
        (
            ResponseTemplate::new(401).set_body_json(json!({"errors": [{
                "message": "The provided authorization grant is invalid, expired, or revoked"
            }]})),
            MailError::unauthorized(
                "SendGrid refused the API key (HTTP 401): The provided authorization grant is invalid, expired, or revoked",
            ),
        ),
        (
            ResponseTemplate::new(403),
            MailError::unauthorized("SendGrid refused the API key (HTTP 403): no error details"),
        ),
        (
            ResponseTemplate::new(500),
            MailError::transient("SendGrid mail/send answered 500: no error details"),
        ),
    ];
    for (template, expected) in rows {
        let rig = Rig::new().await;
        Mock::given(method("POST"))
            .and(path(SENDGRID_PATH))
            .respond_with(template)
            .expect(1)
            .mount(&rig.server)
            .await;
        let mailer = rig.sendgrid_mailer().await;
        let err = mailer.send(&sendgrid_mail()).await.unwrap_err();
        assert_eq!(err.kind, expected.kind);
        assert_eq!(rig.count(SENDGRID_PATH).await, 1);
        assert!(!err.to_string().contains("SG.key"));
    }
}

// ---------------------------------------------------------------------------------------------
// Local validation
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn every_locally_rejected_message_makes_zero_http_requests() {
    type Breaker = Box<dyn Fn(&mut OutgoingMail)>;
    let cases: Vec<(&str, Breaker)> = vec![
        (
            "InvalidRecipient",
            Box::new(|m| m.content.to[0].address = "a@example.org; b@example.org".into()),
        ),
        (
            "InvalidRecipient",
            Box::new(|m| {
                m.content.cc.push(Recipient {
                    address: "not-an-address".into(),
                    name: None,
                })
            }),
        ),
        ("NoRecipients", Box::new(|m| m.content.to.clear())),
        (
            "TooManyRecipients",
            Box::new(|m| {
                m.content.bcc = (0..500)
                    .map(|i| Recipient {
                        address: format!("b{i}@example.org"),
                        name: None,
                    })
                    .collect()
            }),
        ),
        (
            "InvalidInternetMessageHeader",
            Box::new(|m| m.content.headers[0].name = "Campaign-Id".into()),
        ),
        (
            "AttachmentsTooLarge",
            Box::new(|m| m.content.attachments[0].content = vec![7; 3 * 1024 * 1024 + 1]),
        ),
    ];
    let rig = Rig::new().await;
    rig.token_endpoint(3600, Duration::ZERO).await;
    let graph = rig.graph_mailer().await;
    let sendgrid = rig.sendgrid_mailer().await;
    for (expected_code, break_it) in &cases {
        for (mailer, from) in [
            (&graph, "events@contoso.example"),
            (&sendgrid, "news@fabrikam.example"),
        ] {
            let mut m = mail_from(from);
            break_it(&mut m);
            let err = mailer.send(&m).await.unwrap_err();
            let MailErrorKind::Permanent { code, .. } = &err.kind else {
                panic!("{err:?}")
            };
            assert_eq!(code, expected_code);
            assert_clean(&err);
        }
    }
    assert!(rig.server.received_requests().await.unwrap().is_empty());
    assert!(rig.limiter.checks().is_empty(), "and no budget");
}

#[tokio::test]
async fn a_message_from_another_mailbox_is_misconfigured_without_a_request() {
    let rig = Rig::new().await;
    rig.token_endpoint(3600, Duration::ZERO).await;
    let err = rig
        .graph_mailer()
        .await
        .send(&mail_from("someone-else@contoso.example"))
        .await
        .unwrap_err();
    assert_eq!(
        err.kind,
        MailError::misconfigured(
            "message is from someone-else@contoso.example but this mailer sends as events@contoso.example"
        ).kind
    );
    assert_eq!(rig.count(SEND_PATH).await, 0);
}

#[tokio::test]
async fn graph_error_bodies_that_echo_the_secret_or_a_token_are_scrubbed() {
    let jwt = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.eyJhdWQiOiJncmFwaCJ9.c2lnbmF0dXJlc2ln";
    for status in [400, 500] {
        let rig = Rig::answering(
            graph_error(
                status,
                "ErrorInvalidRequest",
                &format!(
                    "Request had client_secret={SECRET} and Authorization: Bearer {jwt}; also {jwt}"
                ),
            ),
            1,
        )
        .await;
        let err = rig.graph_mailer().await.send(&mail()).await.unwrap_err();
        let text = err.to_string();
        assert!(!text.contains(SECRET) && !text.contains(jwt), "{text}");
        assert!(text.contains("client_secret=***"), "{text}");
        assert!(text.contains("Bearer ***"), "{text}");
        assert_clean(&err);
    }
}

// ---------------------------------------------------------------------------------------------
// The in-flight lease of a send on the real limiter (Redis's clock)
// ---------------------------------------------------------------------------------------------

/// A Graph mailer on the real `paced` limiter (fresh keys under the returned prefix, leases of
/// `lease`, Redis's clock), whose sendMail (on the returned server) answers 202 after `delay`.
async fn on_the_real_limiter(
    lease: Duration,
    delay: Duration,
) -> (MockServer, TestKeys, String, Arc<dyn Mailer>) {
    on_the_real_limiter_with(lease, delay, &[]).await
}

/// [`on_the_real_limiter`] with more variables.
async fn on_the_real_limiter_with(
    lease: Duration,
    delay: Duration,
    vars: &[(&str, String)],
) -> (MockServer, TestKeys, String, Arc<dyn Mailer>) {
    let (server, keys) = (MockServer::start().await, TestKeys::new());
    let prefix = keys.sub("rl");
    let mut all = vec![
        ("MAIL_RATE_LIMIT_REDIS_URL", redis_url().to_string()),
        ("MAIL_RATE_LIMIT_KEY_PREFIX", prefix.clone()),
    ];
    all.extend(vars.iter().cloned());
    let mut config = config_for(&server, &all);
    config.rate_limit.lease = lease;
    let limiter = Arc::new(MailRateLimiter::new(&config.rate_limit).unwrap());
    let factory = MailerFactory::new(&config, limiter, Arc::new(SystemClock)).unwrap();
    Mock::given(method("POST"))
        .and(path(TOKEN_PATH))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "token_type": "Bearer", "expires_in": 3599, "access_token": "tok-1",
        })))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(SEND_PATH))
        .respond_with(ResponseTemplate::new(202).set_delay(delay))
        .mount(&server)
        .await;
    let mailer = factory
        .mailer_for_tenant(&graph_tenant(SECRET))
        .await
        .unwrap();
    (server, keys, prefix, mailer)
}

/// The leases in the mailboxes' in-flight sets under `prefix`: (message id, expiry ms), and
/// Redis's now (ms).
async fn leases_under(prefix: &str) -> (Vec<(String, i64)>, i64) {
    let mut conn = redis_conn().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:*:inflight"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut leases = Vec::new();
    for key in keys {
        let members: Vec<(String, f64)> = conn.zrange_withscores(&key, 0, -1).await.unwrap();
        leases.extend(members.into_iter().map(|(m, e)| (m, e as i64)));
    }
    let (s, us): (i64, i64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    (leases, s * 1000 + us / 1000)
}

/// Polls until `prefix`'s leases number `n` (at most `within`).
async fn until_leases(prefix: &str, n: usize, within: Duration) -> Duration {
    let started = std::time::Instant::now();
    loop {
        if leases_under(prefix).await.0.len() == n {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "{} lease(s) after {within:?}, expected {n}",
            leases_under(prefix).await.0.len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_send_dropped_mid_flight_keeps_its_lease_until_its_request_times_out() {
    // Graph answers after 10 s; HTTP_TIMEOUT = 3 s: the request is in flight at most 3 s.
    let (server, _keys, prefix, mailer) = on_the_real_limiter_with(
        Duration::from_secs(15),
        Duration::from_secs(10),
        &[("HTTP_TIMEOUT", "3s".to_owned())],
    )
    .await;
    let m = mail();
    let (_, before_send) = leases_under(&prefix).await;
    // A deadline cuts the send off while Graph has not answered (as a shutdown's grace does).
    let mut send = Box::pin(mailer.send(&m));
    let cut = tokio::time::timeout(Duration::from_millis(700), &mut send).await;
    assert!(cut.is_err(), "the send was still running");
    let (leases, now) = leases_under(&prefix).await;
    assert_eq!(
        leases.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>(),
        [m.id.to_string()],
        "its lease, held while it runs"
    );
    let running_left = leases[0].1 - now;
    drop(send);
    assert_eq!(
        requests_to(&server, SEND_PATH).await.len(),
        1,
        "the request had gone"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (leases, now) = leases_under(&prefix).await;
    let left = leases.first().map(|(_, expiry)| expiry - now);
    println!(
        "lease left while running: {running_left} ms; 200 ms after the drop: {left:?} ms (request started {} ms after the first reading)",
        leases.first().map_or(0, |(_, e)| e - 3_000 - before_send)
    );
    assert_eq!(
        leases.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>(),
        [m.id.to_string()],
        "kept: Graph may still be serving its request"
    );
    let expiry = leases[0].1;
    assert!(
        (before_send + 3_000..=now + 3_000).contains(&expiry),
        "ends at the request's start + HTTP_TIMEOUT: {} ms after the send began",
        expiry - before_send
    );
    assert!(
        left.unwrap() < running_left,
        "set to the request's timeout, sooner than the renewed 15 s lease"
    );
}

#[tokio::test]
async fn a_send_dropped_before_its_request_releases_its_lease_at_once() {
    let (server, _keys, prefix, mailer) =
        on_the_real_limiter(Duration::from_secs(15), Duration::from_secs(10)).await;
    // The token endpoint answers after 5 s: the send is cut off before any Graph request.
    server.reset().await;
    Mock::given(method("POST"))
        .and(path(TOKEN_PATH))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({
                    "token_type": "Bearer", "expires_in": 3599, "access_token": "tok-1",
                }))
                .set_delay(Duration::from_secs(5)),
        )
        .mount(&server)
        .await;
    let m = mail();
    let mut send = Box::pin(mailer.send(&m));
    let cut = tokio::time::timeout(Duration::from_millis(700), &mut send).await;
    assert!(cut.is_err(), "the send was still running");
    assert_eq!(leases_under(&prefix).await.0.len(), 1);
    drop(send);
    assert!(
        requests_to(&server, SEND_PATH).await.is_empty(),
        "no request went"
    );
    let took = until_leases(&prefix, 0, Duration::from_millis(500)).await;
    println!("lease released {took:?} after the send was dropped");
}

#[tokio::test]
async fn a_running_send_renews_its_lease_every_third_of_it() {
    let (_server, _keys, prefix, mailer) =
        on_the_real_limiter(Duration::from_millis(900), Duration::from_millis(2_500)).await;
    let send = tokio::spawn(async move { mailer.send(&mail()).await });
    until_leases(&prefix, 1, Duration::from_secs(5)).await;
    // 2 s in, long past the 900 ms the lease was taken for, it is still ahead of Redis's now.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (leases, now) = leases_under(&prefix).await;
    assert_eq!(leases.len(), 1);
    let left = leases[0].1 - now;
    assert!((0..=900).contains(&left), "lease expires in {left} ms");
    assert!(send.await.unwrap().is_ok());
    assert!(
        leases_under(&prefix).await.0.is_empty(),
        "released when it ended"
    );
}

/// The requests `server` received for path `p`, in order.
async fn requests_to(server: &MockServer, p: &str) -> Vec<Request> {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r.url.path() == p)
        .collect()
}

/// A journal that keeps nothing.
struct NoNotes;

impl mail_worker::mailer::SendJournal for NoNotes {
    fn send_attempted(&self, _draft_id: Option<&str>) {}
}

#[tokio::test]
async fn a_draft_mode_get_sends_one_prefer_header_joining_both_preferences() {
    let rig = Rig::with(&[("GRAPH_SEND_MODE", "draft".to_owned())]).await;
    rig.token_endpoint(3599, Duration::ZERO).await;
    let item = "/v1.0/users/events@contoso.example/messages/draft-1";
    Mock::given(method("GET"))
        .and(path(item))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"id": "draft-1", "isDraft": false})),
        )
        .mount(&rig.server)
        .await;
    let prior = mail_worker::mailer::PriorAttempt {
        earlier_attempts: 1,
        graph_draft_id: Some("draft-1".to_owned()),
        send_attempted_at: Some(t0()),
    };
    let attempt = mail_worker::mailer::SendAttempt {
        prior: &prior,
        journal: &NoNotes,
    };
    let receipt = rig
        .graph_mailer()
        .await
        .send_with(&mail(), &attempt)
        .await
        .expect("found sent");
    assert!(receipt.already_sent);
    let gets = rig.requests_to(item).await;
    assert_eq!(gets.len(), 1);
    let prefer: Vec<&str> = gets[0]
        .headers
        .get_all("prefer")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(
        prefer,
        [r#"IdType="ImmutableId", outlook.body-content-type="text""#],
        "one Prefer header, its preferences joined"
    );
}
