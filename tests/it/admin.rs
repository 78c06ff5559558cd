//! The admin UI over HTTP (`mail-worker admin`, in process on port 0): every page and action
//! with and without a session, CSRF, the limits form's validation, retry and cancel of a
//! selection, the failed-login limit, start-up refusals, and a limit changed in the UI reaching
//! two replicas' next message.

use std::{sync::Arc, time::Duration};

use mail_worker::{
    admin::{self, AdminState, AdminToken, auth},
    clock::ManualClock,
    domain::SecretRef,
    intake, log_events,
    ops::Metrics,
    reports,
    worker::handler::Handler,
};
use reqwest::{StatusCode, header};
use uuid::Uuid;

use crate::support::{
    TestApp,
    app::noon,
    claim_and_send,
    logs::{capture_logs, logs_containing},
    redis_url, spawn_app, unique, wait_until,
};

/// The test's `ADMIN_TOKEN`.
const TOKEN: &str = "test-admin-token-0123456789";

/// The UI on port 0 for `world`, stopped on drop.
pub(crate) struct Ui {
    base: String,
    http: reqwest::Client,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// A logged-in browser: its session cookie and its CSRF token.
pub(crate) struct Login {
    cookie: String,
    csrf: String,
}

pub(crate) async fn start_ui(world: &TestApp, cookie_secure: bool) -> Ui {
    let mut config = world.config.clone();
    config.admin.cookie_secure = cookie_secure;
    start_ui_on(world, config).await
}

/// The UI for `world` (session cookie not `Secure`) and an operator's session on it.
pub(crate) async fn logged_in_ui(world: &TestApp) -> (Ui, Login) {
    let ui = start_ui(world, false).await;
    let login = ui.login().await;
    (ui, login)
}

/// The UI on port 0 for `world` with `config` (its token set to [`TOKEN`]), stopped on drop.
async fn start_ui_on(world: &TestApp, mut config: mail_worker::config::Config) -> Ui {
    config.admin.token = Some(SecretRef::new(TOKEN));
    let token = AdminToken::resolve(config.admin.token.as_ref()).unwrap();
    let state = AdminState::new(config, world.db.pool.clone(), token);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(admin::serve(listener, state, async move {
        let _ = stopped.await;
    }));
    Ui {
        base,
        http: reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap(),
        _stop: stop,
    }
}

/// The value of the first hidden `csrf` field of a page.
fn csrf_of(html: &str) -> String {
    let at = html.find("name=\"csrf\" value=\"").expect("a csrf field") + 19;
    html[at..].split('"').next().unwrap().to_owned()
}

/// `name=value` of a `Set-Cookie` header named `name`, and the whole header.
fn set_cookie(response: &reqwest::Response, name: &str) -> Option<(String, String)> {
    response
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(|v| (v.split(';').next().unwrap().to_owned(), v.to_owned()))
}

/// Sends `request` with `login`'s session cookie, if any.
async fn send_as(request: reqwest::RequestBuilder, login: Option<&Login>) -> reqwest::Response {
    match login {
        Some(l) => request.header(header::COOKIE, &l.cookie),
        None => request,
    }
    .send()
    .await
    .unwrap()
}

impl Ui {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn get(&self, path: &str, login: Option<&Login>) -> reqwest::Response {
        send_as(self.http.get(self.url(path)), login).await
    }

    pub(crate) async fn post(
        &self,
        path: &str,
        login: Option<&Login>,
        form: &[(&str, &str)],
    ) -> reqwest::Response {
        send_as(self.http.post(self.url(path)).form(form), login).await
    }

    /// The page at `path` in `login`'s session, as text.
    pub(crate) async fn page(&self, path: &str, login: &Login) -> String {
        self.get(path, Some(login)).await.text().await.unwrap()
    }

    /// Posts the form `fields` to `path` in `login`'s session, its CSRF token first.
    pub(crate) async fn submit(
        &self,
        path: &str,
        login: &Login,
        fields: &[(&str, &str)],
    ) -> reqwest::Response {
        let mut form = vec![("csrf", login.csrf.as_str())];
        form.extend_from_slice(fields);
        self.post(path, Some(login), &form).await
    }

    /// Saves the limits form at `path` (a mailbox's `/limits`) with these two field values.
    async fn save_limits(
        &self,
        path: &str,
        login: &Login,
        per_minute: &str,
        per_day: &str,
    ) -> reqwest::Response {
        let fields = [
            ("rate_limit_per_minute", per_minute),
            ("rate_limit_recipients_per_day", per_day),
            ("action", "save"),
        ];
        self.submit(path, login, &fields).await
    }

    /// Submits the login form with `token`; returns the answer.
    async fn try_login(&self, token: &str) -> reqwest::Response {
        let form = self.http.get(self.url("/login")).send().await.unwrap();
        assert_eq!(form.status(), StatusCode::OK);
        let (login_cookie, _) = set_cookie(&form, auth::LOGIN_COOKIE).expect("a login cookie");
        let csrf = csrf_of(&form.text().await.unwrap());
        self.http
            .post(self.url("/login"))
            .header(header::COOKIE, login_cookie)
            .form(&[("csrf", csrf.as_str()), ("token", token)])
            .send()
            .await
            .unwrap()
    }

    pub(crate) async fn login(&self) -> Login {
        let answer = self.try_login(TOKEN).await;
        assert_eq!(answer.status(), StatusCode::SEE_OTHER);
        let (cookie, _) = set_cookie(&answer, auth::SESSION_COOKIE).expect("a session cookie");
        let page = self
            .http
            .get(self.url("/mailboxes"))
            .header(header::COOKIE, &cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(page.status(), StatusCode::OK);
        let csrf = csrf_of(&page.text().await.unwrap());
        Login { cookie, csrf }
    }
}

/// Where a `303 See Other` answer sends the browser (asserts it is one).
pub(crate) fn redirected_to(answer: &reqwest::Response) -> String {
    assert_eq!(answer.status(), StatusCode::SEE_OTHER);
    answer.headers()[header::LOCATION]
        .to_str()
        .unwrap()
        .to_owned()
}

/// The log lines of `event` that contain `needle` (the whole binary's logs: [`capture_logs`]).
pub(crate) fn logged(event: &str, needle: &str) -> Vec<serde_json::Value> {
    logs_containing(needle)
        .into_iter()
        .filter(|l| l["event"] == event)
        .collect()
}

/// A field of a log line as text.
pub(crate) fn field(line: &serde_json::Value, name: &str) -> String {
    match &line[name] {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

async fn overrides(world: &TestApp) -> (Option<i32>, Option<i32>) {
    overrides_of(world, world.mailboxes[0].0.as_str()).await
}

async fn overrides_of(world: &TestApp, address: &str) -> (Option<i32>, Option<i32>) {
    world
        .one_row(
            "SELECT rate_limit_per_minute, rate_limit_recipients_per_day FROM system_mailboxes WHERE address = $1",
            address,
        )
        .await
}

#[tokio::test]
async fn every_page_and_action_needs_a_session() {
    let world = spawn_app().await;
    let ui = start_ui(&world, false).await;
    let errors = world.insert(0, 1, "ERROR").await;
    let mb0 = world.mailboxes[0].0.to_string();
    let pages = [
        "/mailboxes".to_owned(),
        "/mailboxes/rows".to_owned(),
        format!("/mailboxes/{mb0}"),
        "/messages".to_owned(),
        "/messages?status=ERROR".to_owned(),
        "/queue".to_owned(),
        "/campaigns".to_owned(),
        "/assets/admin.js".to_owned(),
    ];
    let forged = Login {
        cookie: format!("{}=4102444800.00.00", auth::SESSION_COOKIE),
        csrf: "00".into(),
    };
    for login in [None, Some(&forged)] {
        for page in &pages {
            let answer = ui.get(page, login).await;
            assert_eq!(answer.status(), StatusCode::SEE_OTHER, "GET {page}");
            assert_eq!(answer.headers()[header::LOCATION], "/login", "GET {page}");
        }
        let id = errors[0].to_string();
        let limits = format!("/mailboxes/{mb0}/limits");
        for (path, form) in [
            ("/logout", vec![]),
            (limits.as_str(), vec![("rate_limit_per_minute", "5")]),
            ("/messages/retry", vec![("id", id.as_str())]),
            ("/messages/cancel", vec![("id", id.as_str())]),
            ("/queue/retry", vec![("all", "1")]),
            ("/queue/discard", vec![("all", "1")]),
        ] {
            let answer = ui.post(path, login, &form).await;
            assert_eq!(answer.status(), StatusCode::UNAUTHORIZED, "POST {path}");
        }
    }
    assert_eq!(overrides(&world).await, (Some(25), None), "nothing changed");
    assert_eq!(world.status_of(errors[0]).await.0, "ERROR");

    // The login form is the one page served without a session.
    assert_eq!(ui.get("/login", None).await.status(), StatusCode::OK);
    let login = ui.login().await;
    for page in &pages {
        let answer = ui.get(page, Some(&login)).await;
        assert_eq!(answer.status(), StatusCode::OK, "GET {page} with a session");
        assert_eq!(answer.headers()[header::CACHE_CONTROL], "no-store");
        assert!(
            answer
                .headers()
                .contains_key(header::CONTENT_SECURITY_POLICY)
        );
    }
    let mailboxes = ui.page("/mailboxes", &login).await;
    assert!(
        mailboxes.contains(&format!("data-mailbox=\"{mb0}\"")),
        "{mailboxes}"
    );
    assert!(mailboxes.contains("25/min <span class=\"source override\">override</span>"));
    assert!(mailboxes.contains("9000/24 h <span class=\"source default\">default</span>"));
    assert!(mailboxes.contains("ERROR 1"), "{mailboxes}");

    // Logging out ends the cookie.
    let out = ui.submit("/logout", &login, &[]).await;
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    let (cleared, header) = set_cookie(&out, auth::SESSION_COOKIE).unwrap();
    assert_eq!(cleared, format!("{}=", auth::SESSION_COOKIE));
    assert!(header.contains("Max-Age=0"), "{header}");
}

#[tokio::test]
async fn the_session_cookie_is_http_only_same_site_strict_and_secure_when_configured() {
    let world = spawn_app().await;
    for secure in [false, true] {
        let ui = start_ui(&world, secure).await;
        let answer = ui.try_login(TOKEN).await;
        assert_eq!(answer.status(), StatusCode::SEE_OTHER);
        assert_eq!(answer.headers()[header::LOCATION], "/mailboxes");
        let (_, header) = set_cookie(&answer, auth::SESSION_COOKIE).unwrap();
        assert!(
            header.contains("HttpOnly") && header.contains("SameSite=Strict"),
            "{header}"
        );
        assert!(header.contains(&format!("Max-Age={}", auth::SESSION_TTL.as_secs())));
        assert_eq!(header.contains("Secure"), secure, "{header}");
        assert!(
            !header.contains(TOKEN),
            "the cookie never carries the token"
        );
    }
}

#[tokio::test]
async fn posts_without_or_with_a_wrong_csrf_token_are_refused() {
    let world = spawn_app().await;
    let ui = start_ui(&world, false).await;
    let errors = world.insert(0, 1, "ERROR").await;
    let scheduled = world.insert(0, 1, "SCHEDULED").await;
    let login = ui.login().await;
    let other = ui.login().await;
    assert_ne!(
        login.csrf, other.csrf,
        "each session has its own CSRF token"
    );
    let limits = format!("/mailboxes/{}/limits", world.mailboxes[0].0);
    let (e, s) = (errors[0].to_string(), scheduled[0].to_string());
    for csrf in [None, Some("0".repeat(64)), Some(other.csrf.clone())] {
        let with = |mut form: Vec<(&'static str, String)>| {
            if let Some(c) = &csrf {
                form.push(("csrf", c.clone()));
            }
            form
        };
        for (path, form) in [
            (
                limits.as_str(),
                with(vec![("rate_limit_per_minute", "5".into())]),
            ),
            ("/messages/retry", with(vec![("id", e.clone())])),
            ("/messages/cancel", with(vec![("id", s.clone())])),
            ("/logout", with(vec![])),
        ] {
            let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let answer = ui.post(path, Some(&login), &form).await;
            assert_eq!(
                answer.status(),
                StatusCode::FORBIDDEN,
                "POST {path} csrf {csrf:?}"
            );
            assert!(answer.text().await.unwrap().contains("CSRF"));
        }
    }
    assert_eq!(overrides(&world).await, (Some(25), None));
    assert_eq!(world.status_of(errors[0]).await.0, "ERROR");
    assert_eq!(world.status_of(scheduled[0]).await.0, "SCHEDULED");

    // The login form's own CSRF token: without it, or with another form's, no session.
    let answer = ui
        .http
        .post(ui.url("/login"))
        .form(&[("token", TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::FORBIDDEN);
    assert!(set_cookie(&answer, auth::SESSION_COOKIE).is_none());
}

#[tokio::test]
async fn bad_limit_values_are_refused_naming_the_field_and_a_change_is_logged() {
    capture_logs();
    let world = spawn_app().await;
    // A mailbox of this test's own, to find its lines in the binary's logs.
    let mb0 = format!("{}@contoso.example", unique("limits-"));
    mail_worker::store::senders::upsert_system_mailbox(
        &world.db.pool,
        &mail_worker::domain::MailboxAddress::parse(&mb0).unwrap(),
        &mail_worker::domain::GraphCredentials {
            graph_tenant_id: crate::support::app::TENANT.into(),
            client_id: crate::support::app::CLIENT.into(),
            client_secret: SecretRef::new(crate::support::app::SECRET),
            tenant_budget: None,
        },
        std::num::NonZeroU32::new(25),
        None,
    )
    .await
    .unwrap();
    let (ui, login) = logged_in_ui(&world).await;
    let limits = format!("/mailboxes/{mb0}/limits");
    for field in ["rate_limit_per_minute", "rate_limit_recipients_per_day"] {
        for bad in ["0", "-1", "abc", "1.5", "2147483648", "1e3"] {
            let answer = ui
                .submit(&limits, &login, &[(field, bad), ("action", "save")])
                .await;
            assert_eq!(
                answer.status(),
                StatusCode::UNPROCESSABLE_ENTITY,
                "{field}={bad}"
            );
            let page = answer.text().await.unwrap();
            assert!(
                page.contains(&format!(
                    "{field}: must be a whole number from 1 to 2147483647"
                )),
                "{field}={bad}: {page}"
            );
        }
    }
    assert_eq!(
        overrides_of(&world, &mb0).await,
        (Some(25), None),
        "nothing stored"
    );
    assert!(logged(log_events::MAIL_ADMIN_LIMITS_CHANGED, &mb0).is_empty());

    // Above Exchange's limits: saved, with a warning and Microsoft's page.
    let answer = ui.save_limits(&limits, &login, "40", "12000").await;
    let location = redirected_to(&answer);
    assert_eq!(overrides_of(&world, &mb0).await, (Some(40), Some(12_000)));
    let page = ui.page(&location, &login).await;
    assert!(
        page.contains("40 messages a minute is above Exchange Online&#39;s 30"),
        "{page}"
    );
    assert!(page.contains("12000 recipients a day is above Exchange Online&#39;s 10000"));
    assert!(page.contains(admin::pages::EXCHANGE_LIMITS_URL));
    let changed = logged(log_events::MAIL_ADMIN_LIMITS_CHANGED, &mb0);
    assert_eq!(changed.len(), 1);
    assert_eq!(field(&changed[0], "mailbox"), mb0);
    assert_eq!(field(&changed[0], "per_minute_before"), "25");
    assert_eq!(field(&changed[0], "per_minute_after"), "40");
    assert_eq!(field(&changed[0], "recipients_per_day_before"), "default");
    assert_eq!(field(&changed[0], "recipients_per_day_after"), "12000");

    // An empty field is the default; "clear" removes both.
    let answer = ui.save_limits(&limits, &login, "7", "").await;
    assert_eq!(answer.status(), StatusCode::SEE_OTHER);
    assert_eq!(overrides_of(&world, &mb0).await, (Some(7), None));
    let answer = ui.submit(&limits, &login, &[("action", "clear")]).await;
    assert_eq!(answer.status(), StatusCode::SEE_OTHER);
    assert_eq!(overrides_of(&world, &mb0).await, (None, None));
    assert_eq!(logged(log_events::MAIL_ADMIN_LIMITS_CHANGED, &mb0).len(), 3);

    // A mailbox that does not exist.
    let answer = ui
        .submit(
            "/mailboxes/nobody@contoso.example/limits",
            &login,
            &[("rate_limit_per_minute", "5")],
        )
        .await;
    assert_eq!(answer.status(), StatusCode::NOT_FOUND);
    assert!(
        answer
            .text()
            .await
            .unwrap()
            .contains("nobody@contoso.example")
    );
}

#[tokio::test]
async fn retry_and_cancel_act_on_the_selection_show_counts_and_mask_recipients() {
    capture_logs();
    let world = spawn_app().await;
    let (ui, login) = logged_in_ui(&world).await;
    let errors = world.insert(0, 3, "ERROR").await;
    let scheduled = world.insert(0, 2, "SCHEDULED").await;
    let sent = world.insert(0, 1, "SENT").await;

    let page = ui.page("/messages?status=ERROR", &login).await;
    for id in &errors {
        assert!(page.contains(&format!("value=\"{id}\"")), "{page}");
    }
    assert!(
        !page.contains(&scheduled[0].to_string()),
        "filtered on ERROR"
    );
    assert!(page.contains("g***@example.org"), "masked: {page}");
    assert!(
        !page.contains("guest0@example.org"),
        "never the full address"
    );

    // Retry two of the three, plus a SENT one that must not be resent.
    let (a, b, c) = (
        errors[0].to_string(),
        errors[1].to_string(),
        sent[0].to_string(),
    );
    let answer = ui
        .submit(
            "/messages/retry",
            &login,
            &[
                ("status", "ERROR"),
                ("id", a.as_str()),
                ("id", b.as_str()),
                ("id", c.as_str()),
            ],
        )
        .await;
    let location = redirected_to(&answer);
    assert_eq!(
        location,
        "/messages?status=ERROR&done=retried&matched=2&changed=2"
    );
    let page = ui.page(&location, &login).await;
    assert!(
        page.contains("2 messages retried (2 of the selection matched)."),
        "{page}"
    );
    for id in &errors[..2] {
        let (status, attempts, _, error, _) = world.row(*id).await;
        assert_eq!((status.as_str(), attempts), ("SCHEDULED", 0));
        assert!(error.unwrap().starts_with("retried by an operator"));
    }
    assert_eq!(world.status_of(errors[2]).await.0, "ERROR", "not selected");
    assert_eq!(world.status_of(sent[0]).await.0, "SENT");
    let retried = logged(log_events::MAIL_ADMIN_MESSAGES_RETRIED, &a);
    assert_eq!(retried.len(), 1);
    assert_eq!(field(&retried[0], "selected"), "3");
    assert_eq!(field(&retried[0], "changed"), "2");
    assert_eq!(field(&retried[0], "message.ids"), format!("{a},{b},{c}"));
    assert_eq!(field(&retried[0], "before"), r#"{"ERROR":2}"#);
    assert_eq!(field(&retried[0], "after"), "SCHEDULED");

    // Cancel one scheduled message.
    let s = scheduled[0].to_string();
    let answer = ui
        .submit("/messages/cancel", &login, &[("id", s.as_str())])
        .await;
    assert!(redirected_to(&answer).ends_with("done=cancelled&matched=1&changed=1"));
    let (status, error, _) = world.status_of(scheduled[0]).await;
    assert_eq!(status, "ERROR");
    assert!(
        error
            .unwrap()
            .starts_with(mail_worker::store::admin::CANCELLED_PREFIX)
    );
    assert_eq!(world.status_of(scheduled[1]).await.0, "SCHEDULED");
    let cancelled = logged(log_events::MAIL_ADMIN_MESSAGES_CANCELLED, &s);
    assert_eq!(cancelled.len(), 1);
    assert_eq!(field(&cancelled[0], "before"), r#"{"SCHEDULED":1}"#);

    // Nothing selected, or not a message id: refused, naming the field.
    for form in [vec![], vec![("id", "not-a-uuid")]] {
        let mut form = form;
        form.push(("csrf", login.csrf.as_str()));
        let answer = ui.post("/messages/retry", Some(&login), &form).await;
        assert_eq!(answer.status(), StatusCode::UNPROCESSABLE_ENTITY);
        assert!(answer.text().await.unwrap().contains("id: "));
    }
    let answer = ui.get("/messages?status=LOST", Some(&login)).await;
    assert_eq!(answer.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(answer.text().await.unwrap().contains("status: "));
}

#[tokio::test]
async fn failed_logins_are_limited_per_client_and_logged() {
    capture_logs();
    let world = spawn_app().await;
    let ui = start_ui(&world, false).await;
    for n in 1..=auth::MAX_FAILED_LOGINS {
        let answer = ui.try_login("wrong-token-but-long-enough").await;
        assert_eq!(answer.status(), StatusCode::UNAUTHORIZED, "failure {n}");
        assert!(set_cookie(&answer, auth::SESSION_COOKIE).is_none());
    }
    // Now even the right token waits for the window.
    let answer = ui.try_login(TOKEN).await;
    assert_eq!(answer.status(), StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = answer.headers()[header::RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    assert!(set_cookie(&answer, auth::SESSION_COOKIE).is_none());
    // Only this test logs in with a wrong token.
    let failed = logged(log_events::MAIL_ADMIN_LOGIN_FAILED, "127.0.0.1");
    assert_eq!(failed.len(), auth::MAX_FAILED_LOGINS + 1);
    assert_eq!(field(&failed[4], "failures"), "5");
    assert_eq!(field(&failed[5], "throttled"), "true");
    assert_eq!(field(&failed[0], "client"), "127.0.0.1");
    for line in &failed {
        assert!(
            !format!("{line:?}").contains("wrong-token"),
            "no token in a log line"
        );
    }
}

#[test]
fn start_up_refuses_a_missing_or_short_token_naming_the_variable() {
    for env in [
        vec![],
        vec![("ADMIN_TOKEN", "short")],
        vec![("ADMIN_TOKEN", "env:MW_TEST_UNSET_TOKEN")],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_mail-worker"))
            .arg("admin")
            .env_remove("ADMIN_TOKEN")
            .envs(env.iter().copied())
            .env("ADMIN_LISTEN", "127.0.0.1:0")
            .env("DATABASE_URL", "postgres://postgres@127.0.0.1:9/none")
            .env("RUST_LOG", "error")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(78), "{env:?}: EX_CONFIG");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("ADMIN_TOKEN"), "{env:?}: {stderr}");
        assert!(!stderr.contains("\"short\""), "{stderr}");
    }
}

/// One message through `handler`; returns its status after.
async fn send_one(world: &TestApp, handler: &Handler) -> String {
    let id: Uuid = world.insert(0, 1, "SCHEDULED").await[0];
    claim_and_send(&world.db.pool, handler, id).await.unwrap();
    world.status_of(id).await.0
}

#[tokio::test]
async fn a_limit_changed_in_the_ui_reaches_both_replicas_next_message() {
    // Two replicas: each its own service stack (MailerFactory and its cache) on one database
    // and one limiter, at noon on a manual clock (fixed-window: per UTC minute).
    let world = TestApp::builder().per_minute(25).spawn().await;
    let clock = ManualClock::new(noon());
    let a = world.real_handler(Arc::new(clock.clone()));
    let b = world.real_handler(Arc::new(clock.clone()));
    // Both have built and cached the mailer under the old limit (25).
    assert_eq!(send_one(&world, &a).await, "SENT");
    assert_eq!(send_one(&world, &b).await, "SENT");

    let (ui, login) = logged_in_ui(&world).await;
    let limits = format!("/mailboxes/{}/limits", world.mailboxes[0].0);
    // An empty recipients-per-day field keeps the default, as leaving it out would.
    let answer = ui.save_limits(&limits, &login, "1", "").await;
    assert_eq!(answer.status(), StatusCode::SEE_OTHER);

    // Each replica alone, in a fresh minute: one message goes, the next is deferred.
    for (minute, replica) in [(1, &a), (2, &b)] {
        clock.set(noon() + chrono::Duration::minutes(minute));
        assert_eq!(send_one(&world, replica).await, "SENT", "minute {minute}");
        assert_eq!(
            send_one(&world, replica).await,
            "SCHEDULED",
            "minute {minute}: the UI's 1 a minute applies, not the cached 25"
        );
    }
    assert_eq!(world.sim.messages().len(), 4);
}

#[tokio::test]
async fn the_mailboxes_page_warns_of_a_day_budget_past_the_alert_share() {
    let world = spawn_app().await;
    let (ui, login) = logged_in_ui(&world).await;
    let mb0 = &world.mailboxes[0].0;
    let limits = format!("/mailboxes/{mb0}/limits");
    assert_eq!(
        ui.save_limits(&limits, &login, "25", "4").await.status(),
        StatusCode::SEE_OTHER
    );
    let handler = world.real_handler(Arc::new(mail_worker::clock::SystemClock));
    let banner = format!("{mb0} has used");
    for sent in 1..=4 {
        assert_eq!(send_one(&world, &handler).await, "SENT");
        let page = ui.page("/mailboxes", &login).await;
        // MAIL_BUDGET_ALERT_PERCENT's default, 80: 3 of 4 recipients is 75 %.
        assert_eq!(page.contains(&banner), sent == 4, "{sent} sent: {page}");
    }
    let page = ui.page("/mailboxes", &login).await;
    assert!(
        page.contains(&format!(
            "<p class=\"banner\" role=\"alert\">{mb0} has used 100 % of its 24 h recipient budget</p>"
        )),
        "{page}"
    );
}

#[tokio::test]
async fn the_limits_form_sets_the_reserved_share_and_refuses_one_over_90() {
    let world = spawn_app().await;
    let (ui, login) = logged_in_ui(&world).await;
    let (mb0, id) = (&world.mailboxes[0].0, world.mailboxes[0].1);
    let limits = format!("/mailboxes/{mb0}/limits");
    let reserved = async || -> Option<i32> {
        sqlx::query_scalar("SELECT rate_limit_reserved_percent FROM system_mailboxes WHERE id = $1")
            .bind(id)
            .fetch_one(&world.db.pool)
            .await
            .unwrap()
    };
    let form = |r: &'static str| {
        [
            ("rate_limit_per_minute", ""),
            ("rate_limit_recipients_per_day", ""),
            ("rate_limit_reserved_percent", r),
            ("action", "save"),
        ]
    };
    let answer = ui.submit(&limits, &login, &form("35")).await;
    assert_eq!(answer.status(), StatusCode::SEE_OTHER);
    assert_eq!(reserved().await, Some(35));
    let page = ui.page(&format!("/mailboxes/{mb0}"), &login).await;
    assert!(
        page.contains("id=\"rate_limit_reserved_percent\" value=\"35\""),
        "{page}"
    );
    // Nothing waits: no forecast; then 3 messages do.
    assert!(!page.contains("id=\"backlog-ends\""), "{page}");
    world.insert(0, 3, "SCHEDULED").await;
    let page = ui.page(&format!("/mailboxes/{mb0}"), &login).await;
    assert!(
        page.contains("<p id=\"backlog-ends\">The messages waiting now are sent by 20"),
        "{page}"
    );
    let refused = ui.submit(&limits, &login, &form("95")).await;
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let page = refused.text().await.unwrap();
    assert!(
        page.contains(
            "rate_limit_reserved_percent: must be a whole number from 0 to 90 (got &#34;95&#34;)"
        ) || page.contains(
            "rate_limit_reserved_percent: must be a whole number from 0 to 90 (got &quot;95&quot;)"
        ),
        "{page}"
    );
    assert_eq!(reserved().await, Some(35), "nothing written");
    // An empty field: back to MAIL_RATE_LIMIT_RESERVED_PERCENT.
    let answer = ui.submit(&limits, &login, &form("")).await;
    assert_eq!(answer.status(), StatusCode::SEE_OTHER);
    assert_eq!(reserved().await, None);
}

#[tokio::test]
async fn the_mailboxes_page_warns_of_a_tenant_budget_past_the_alert_share() {
    let world = TestApp::paced().tenant_budget(5).spawn().await;
    let (ui, login) = logged_in_ui(&world).await;
    let handler = world.real_handler(Arc::new(mail_worker::clock::SystemClock));
    for sent in 1..=4 {
        // One external recipient each (example.org); sent, or booked at its paced slot (a
        // booking holds its recipients in the tenant's window too).
        let status = send_one(&world, &handler).await;
        assert!(["SENT", "SCHEDULED"].contains(&status.as_str()), "{status}");
        let page = ui.page("/mailboxes", &login).await;
        // MAIL_BUDGET_ALERT_PERCENT's default, 80: 3 of 5 is 60 %, 4 of 5 80 %.
        assert_eq!(
            page.contains("tenant contoso.example has used"),
            sent == 4,
            "{sent} sent: {page}"
        );
    }
    let page = ui.page("/mailboxes", &login).await;
    assert!(
        page.contains("<p class=\"banner\" role=\"alert\">tenant contoso.example has used 80 % of its 24 h external recipient budget (4 of 5)</p>"),
        "{page}"
    );
}

/// The dead-job count of the app's queue.
async fn dead_count(conn: &mut intake::QueueConnection, queue: &str) -> u64 {
    intake::dead::stats(conn, queue, Duration::from_secs(30))
        .await
        .unwrap()
        .dead
}

#[tokio::test]
async fn the_queue_page_lists_dead_jobs_and_retries_or_discards_them_with_csrf() {
    capture_logs();
    let world = spawn_app().await;
    let queue = world.config.intake.queue.clone().unwrap();
    let conn = intake::connect(&redis_url().into()).await.unwrap();
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let late = "late@contoso.example";
    let lines = vec![
        crate::intake::line(a, late),
        crate::intake::line(b, late),
        b"not json".to_vec(),
    ];
    assert_eq!(
        intake::push_lines(conn.clone(), &queue, lines)
            .await
            .unwrap(),
        3
    );
    let metrics = Arc::new(Metrics::new());
    let (stop, consumer) = crate::intake::consume(&world, &conn, &metrics);
    let mut c = conn.clone();
    wait_until(Duration::from_secs(20), "3 dead", async || {
        dead_count(&mut c, &queue).await == 3
    })
    .await;
    let (ui, login) = logged_in_ui(&world).await;
    let page = ui.page("/queue", &login).await;
    assert!(page.contains("<a href=\"/queue\">Queue</a>"), "{page}");
    assert!(
        page.contains(&format!("<code id=\"queue-name\">{queue}</code>")),
        "{page}"
    );
    assert!(page.contains("<td id=\"dead\">3</td>"), "{page}");
    assert!(page.contains("<td id=\"workers\">1"), "{page}");
    for task in [a, b] {
        assert!(page.contains(&format!("data-task=\"{task}\"")), "{page}");
    }
    assert!(
        page.contains(&format!("systemMailbox {late} is unknown")),
        "{page}"
    );
    assert!(page.contains("not a message"), "{page}");
    assert!(page.contains(" UTC</td>"), "the time it died: {page}");
    assert!(
        !page.contains("guest@fabrikam.example"),
        "never a recipient address"
    );
    let not_json = intake::dead::list(&mut c, &queue, 10)
        .await
        .unwrap()
        .into_iter()
        .find(|j| j.reason.contains("not a message"))
        .unwrap()
        .task;

    // Without the session's CSRF token, nothing moves.
    for path in ["/queue/retry", "/queue/discard"] {
        for form in [vec![("all", "1")], vec![("all", "1"), ("csrf", "00")]] {
            let answer = ui.post(path, Some(&login), &form).await;
            assert_eq!(answer.status(), StatusCode::FORBIDDEN, "POST {path}");
        }
    }
    assert_eq!(dead_count(&mut c, &queue).await, 3);

    // Retried with its sender still unknown, a job is consumed again and dead again.
    let a_text = a.to_string();
    let answer = ui.submit("/queue/retry", &login, &[("id", &a_text)]).await;
    assert_eq!(answer.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        answer.headers()[header::LOCATION],
        "/queue?done=retried&changed=1"
    );
    assert!(
        ui.page("/queue?done=retried&changed=1", &login)
            .await
            .contains("1 dead job retried.")
    );
    wait_until(Duration::from_secs(20), "a dead again", async || {
        metrics
            .encode()
            .contains("mail_worker_intake_jobs_total{outcome=\"dead\"} 4")
            && dead_count(&mut c, &queue).await == 3
    })
    .await;

    // Discarded, a job is gone: id, payload and meta.
    let answer = ui
        .submit("/queue/discard", &login, &[("id", &not_json)])
        .await;
    assert_eq!(
        answer.headers()[header::LOCATION],
        "/queue?done=discarded&changed=1"
    );
    assert_eq!(dead_count(&mut c, &queue).await, 2);
    let mut r = crate::support::redis_conn().await;
    let payload: bool = redis::AsyncCommands::hexists(&mut r, format!("{queue}:data"), &not_json)
        .await
        .unwrap();
    assert!(!payload, "the discarded job's payload is gone");
    let page = ui.page("/queue", &login).await;
    assert!(!page.contains(&not_json), "{page}");

    // Its sender imported, "retry all" stores both.
    sqlx::query("INSERT INTO system_mailboxes (address, graph_client_id, graph_tenant_id, graph_client_secret) VALUES ('late@contoso.example', 'c', 't', 's')")
        .execute(&world.db.pool)
        .await
        .unwrap();
    let answer = ui.submit("/queue/retry", &login, &[("all", "1")]).await;
    assert_eq!(
        answer.headers()[header::LOCATION],
        "/queue?done=retried&changed=2"
    );
    let pool = world.db.pool.clone();
    wait_until(Duration::from_secs(20), "a and b stored", async || {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM messages WHERE id = ANY($1)")
            .bind([a, b].to_vec())
            .fetch_one(&pool)
            .await
            .unwrap()
            == 2
    })
    .await;
    let page = ui.page("/queue", &login).await;
    assert!(
        page.contains(&format!("No dead-lettered jobs in {queue}.")),
        "{page}"
    );
    let retried = logged(log_events::MAIL_ADMIN_QUEUE_RETRIED, &queue);
    assert_eq!(retried.len(), 2, "{retried:?}");
    assert_eq!(field(&retried[0], "tasks"), a_text);
    assert_eq!(field(&retried[1], "tasks"), "all");
    assert_eq!(field(&retried[1], "changed"), "2");
    let discarded = logged(log_events::MAIL_ADMIN_QUEUE_DISCARDED, &queue);
    assert_eq!(discarded.len(), 1);
    assert_eq!(field(&discarded[0], "tasks"), not_json);
    stop.cancel();
    consumer.await.unwrap().unwrap();
}

#[tokio::test]
async fn with_the_intake_off_the_queue_page_says_so() {
    let world = spawn_app().await;
    let mut config = world.config.clone();
    config.intake.queue = None;
    let ui = start_ui_on(&world, config).await;
    let login = ui.login().await;
    let page = ui.page("/queue", &login).await;
    assert!(
        page.contains("The intake queue is off (<code>INTAKE_QUEUE=off</code>)"),
        "{page}"
    );
    let answer = ui.submit("/queue/retry", &login, &[("all", "1")]).await;
    assert_eq!(answer.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(answer.text().await.unwrap().contains("INTAKE_QUEUE is off"));
}

#[tokio::test]
async fn the_campaigns_pages_count_a_campaign_by_sender_with_its_forecast_finish() {
    let world = TestApp::builder().mailboxes(2).await;
    let (ui, login) = logged_in_ui(&world).await;
    let campaign = "spring & summer";
    let mut ids = world.insert(0, 3, "SENT").await;
    ids.extend(world.insert(0, 2, "SCHEDULED").await);
    ids.extend(world.insert(1, 1, "ERROR").await);
    ids.extend(world.insert(1, 1, "SCHEDULED").await);
    let other = world.insert(1, 4, "SCHEDULED").await;
    let cancelled = world.insert(1, 1, "ERROR").await[0];
    // Sent, then its NDR came back: counted as bounced, not sent.
    let bounced = world.insert(1, 1, "SENT").await[0];
    ids.extend([cancelled, bounced]);
    sqlx::query("UPDATE messages SET campaign_id = $2, sent_at = CASE WHEN status = 'SENT' THEN now() END WHERE id = ANY($1)")
        .bind(&ids)
        .bind(campaign)
        .execute(&world.db.pool)
        .await
        .unwrap();
    sqlx::query("UPDATE messages SET last_error = $2 WHERE id = $1")
        .bind(cancelled)
        .bind(format!(
            "{}: test",
            mail_worker::store::admin::CANCELLED_PREFIX
        ))
        .execute(&world.db.pool)
        .await
        .unwrap();
    world
        .execute(
            "UPDATE messages SET status = 'BOUNCED', bounce_code = '5.1.1' WHERE id = $1",
            bounced,
        )
        .await;

    // The message trace told fates: one message delivered, one recipient filtered, one still
    // pending; the NDR's bounce named its recipient.
    world
        .execute(
            "UPDATE messages SET status = 'DELIVERED', delivered_at = now() WHERE id = $1",
            ids[0],
        )
        .await;
    for (id, outcome, code) in [
        (ids[0], "delivered", None),
        (ids[1], "filtered", None),
        (ids[2], "pending", None),
        (bounced, "failed", Some("5.1.1")),
    ] {
        sqlx::query(
            "INSERT INTO recipient_outcomes (message_id, recipient, trace_status, outcome, at, code, detail) \
             VALUES ($1, 'lotte.jansen@example.org', initcap($2), $2, now(), $3, $3)",
        )
        .bind(id)
        .bind(outcome)
        .bind(code)
        .execute(&world.db.pool)
        .await
        .unwrap();
    }

    let list = ui.page("/campaigns", &login).await;
    assert_all_in(
        &list,
        &[
            "<a href=\"/campaigns/spring%20%26%20summer\">spring &#38; summer</a></td><td>2</td><td class=\"sent\">2</td><td class=\"delivered\">1</td><td class=\"bounced\">1</td><td class=\"waiting\">3</td><td class=\"failed\">1</td><td>1</td>",
            "<a href=\"/campaigns\">Campaigns</a>",
        ],
    );

    // The forecast: mailbox 0 has its 2 waiting; mailbox 1 its 1 behind the 4 others waiting
    // (fixed-window at 25/min: 2.4 s a slot), so the 5th slot: 4 × 2.4 s from now.
    let status = reports::campaign::campaign_status(&world.config, &world.db.pool, campaign)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            status.total.sent,
            status.total.delivered,
            status.total.bounced,
            status.total.waiting,
            status.total.failed,
            status.total.cancelled
        ),
        (2, 1, 1, 3, 1, 1)
    );
    // Recipients: the two SENT messages' (one filtered, one pending), the delivered one's, the
    // bounced one's.
    assert_eq!(
        (
            status.total.recipients_delivered,
            status.total.recipients_failed,
            status.total.recipients_filtered,
            status.total.recipients_pending
        ),
        (1, 1, 1, 1)
    );
    let by: Vec<(String, i64, Option<i64>)> = status
        .senders
        .iter()
        .map(|s| {
            (
                s.mailbox.clone(),
                s.counts.waiting,
                s.forecast_finish
                    .map(|f| (f - status.now).num_milliseconds()),
            )
        })
        .collect();
    assert_eq!(
        by,
        [
            ("mb0@contoso.example".to_owned(), 2, Some(2_400)),
            ("mb1@contoso.example".to_owned(), 1, Some(4 * 2_400)),
        ]
    );
    assert_eq!(
        status
            .forecast_finish
            .map(|f| (f - status.now).num_milliseconds()),
        Some(9_600)
    );
    assert_eq!(other.len(), 4);

    let page = ui.page("/campaigns/spring%20%26%20summer", &login).await;
    assert_all_in(
        &page,
        &[
            "<h1>Campaign spring &#38; summer</h1>",
            "2 sent, 1 delivered, 1 bounced, 3 waiting (0 booked), 1 failed, 1 cancelled",
            "<a href=\"/mailboxes/mb1%40contoso.example\">mb1@contoso.example</a></td><td class=\"sent\">0</td><td class=\"delivered\">0</td><td class=\"bounced\">1</td><td class=\"waiting\">1</td>",
            "1 delivered, 1 failed, 1 filtered, 1 pending",
            "<td>mb0@contoso.example</td><td class=\"delivered\">1</td><td class=\"failed\">0</td><td class=\"filtered\">1</td><td class=\"pending\">1</td>",
        ],
    );

    // The message's page: each recipient's fate, the address masked.
    let message = ui.page(&format!("/messages/{bounced}"), &login).await;
    assert_all_in(
        &message,
        &[
            "<tr class=\"fate failed\"><td>l***@example.org</td><td class=\"outcome\">failed</td><td>Failed</td>",
            "<td class=\"code\">5.1.1</td>",
        ],
    );
    assert!(!message.contains("lotte.jansen"), "{message}");
    let answer = ui
        .get(&format!("/messages/{}", uuid::Uuid::new_v4()), Some(&login))
        .await;
    assert_eq!(answer.status(), StatusCode::NOT_FOUND);
    let answer = ui.get("/messages/not-an-id", Some(&login)).await;
    assert_eq!(answer.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let answer = ui.get("/campaigns/none-such", Some(&login)).await;
    assert_eq!(answer.status(), StatusCode::NOT_FOUND);
}

/// Asserts that `page` holds every one of `wanted`, naming the one missing.
#[track_caller]
fn assert_all_in(page: &str, wanted: &[&str]) {
    for want in wanted {
        assert!(page.contains(want), "{want:?} not in {page}");
    }
}

/// The order `page` lists mailboxes in: each `data-mailbox="…"` row's address.
fn listed(page: &str) -> Vec<String> {
    page.split("data-mailbox=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn mailboxes_are_paged_busiest_first_in_the_ui_the_report_and_the_cli() {
    use mail_worker::clock::SystemClock;
    let world = TestApp::paced().mailboxes(5).per_minute(20).spawn().await;
    // Unfinished (SCHEDULED + SENDING) per mailbox: mb2 3 (and 1 SENT through the limiter),
    // mb0 2, mb4 2, mb1 0 (4 SENT: finished), mb3 0.
    world.insert(0, 1, "SCHEDULED").await;
    world.insert(0, 1, "SENDING").await;
    world.insert(1, 4, "SENT").await;
    let mb2 = world.insert(2, 4, "SCHEDULED").await;
    world.insert(4, 2, "SCHEDULED").await;
    let handler = world.real_handler(Arc::new(SystemClock));
    claim_and_send(&world.db.pool, &handler, mb2[0])
        .await
        .unwrap();
    assert_eq!(world.status_of(mb2[0]).await.0, "SENT");
    let name = |i: usize| world.mailboxes[i].0.to_string();

    let report = |page: u32| {
        let (config, pool) = (world.config.clone(), world.db.pool.clone());
        async move {
            reports::usage::usage_page(&config, &pool, page, 2)
                .await
                .unwrap()
        }
    };
    let first = report(1).await;
    assert_eq!((first.total, first.pages, first.per_page), (5, 3, 2));
    let order = |p: &reports::usage::UsagePage| -> Vec<String> {
        p.mailboxes.iter().map(|u| u.mailbox.clone()).collect()
    };
    assert_eq!(order(&first), [name(2), name(0)]);
    assert_eq!(order(&report(2).await), [name(4), name(1)]);
    assert_eq!(order(&report(3).await), [name(3)]);
    let past = report(4).await;
    assert_eq!((past.total, past.mailboxes.len()), (5, 0));
    // Each row carries its own mailbox's figures (the page's limiter reads are not shuffled).
    let busiest = &first.mailboxes[0];
    assert_eq!(busiest.messages.by_status["SCHEDULED"], 3);
    assert_eq!(busiest.messages.by_status["SENT"], 1);
    assert_eq!(busiest.limiter.as_ref().unwrap().sent_last_minute, 1);
    let second = &first.mailboxes[1];
    assert_eq!(second.messages.by_status["SENDING"], 1);
    assert_eq!(second.limiter.as_ref().unwrap().sent_last_minute, 0);
    let quiet = &report(2).await.mailboxes[1];
    assert_eq!(quiet.messages.by_status["SENT"], 4);
    assert_eq!(quiet.limiter.as_ref().unwrap().sent_last_minute, 0);

    let (ui, login) = logged_in_ui(&world).await;
    let page = ui.page("/mailboxes?page=1&per_page=2", &login).await;
    assert_eq!(listed(&page), [name(2), name(0)]);
    assert!(page.contains("Page 1 of 3 (5 mailboxes"), "{page}");
    assert!(
        page.contains("href=\"/mailboxes?page=2&#38;per_page=2\""),
        "{page}"
    );
    assert!(
        page.contains("data-refresh=\"/mailboxes/rows?page=1&#38;per_page=2\""),
        "{page}"
    );
    let rows = ui.page("/mailboxes/rows?page=2&per_page=2", &login).await;
    assert_eq!(listed(&rows), [name(4), name(1)]);
    let all = ui.page("/mailboxes", &login).await;
    assert_eq!(listed(&all), [name(2), name(0), name(4), name(1), name(3)]);
    for (query, names) in [
        ("page=0", "page: pages count from 1"),
        ("page=abc", "page: invalid digit"),
        ("page=4&per_page=2", "page: 4 is past the last page, 3"),
    ] {
        let refused = ui.get(&format!("/mailboxes?{query}"), Some(&login)).await;
        assert_eq!(
            refused.status(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "{query}"
        );
        let body = refused.text().await.unwrap();
        assert!(
            body.contains(names) && body.contains("<h1>"),
            "{query}: {body}"
        );
    }

    let env = crate::cli::paced_env(&world, "10000");
    let out = crate::cli::mail_worker(
        &[
            "mailbox",
            "usage",
            "--page",
            "2",
            "--per-page",
            "2",
            "--json",
        ],
        &env,
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        crate::cli::text(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["total"], 5);
    assert_eq!(json["pages"], 3);
    let past = crate::cli::mail_worker(
        &["mailbox", "usage", "--page", "4", "--per-page", "2"],
        &env,
    );
    assert_ne!(past.status.code(), Some(0));
    assert!(
        crate::cli::text(&past.stderr)
            .contains("page: 4 is past the last page, 3 (5 mailboxes, 2 a page)"),
        "{}",
        crate::cli::text(&past.stderr)
    );
    assert_eq!(json["mailboxes"][0]["mailbox"], name(4));
    assert_eq!(json["mailboxes"][1]["mailbox"], name(1));
    assert_eq!(json["mailboxes"][1]["messages"]["by_status"]["SENT"], 4);
    let lines = crate::cli::text(&crate::cli::mail_worker(&["mailbox", "usage"], &env).stdout);
    let first_column: Vec<&str> = lines
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        first_column,
        [
            name(2).as_str(),
            &name(0),
            &name(4),
            &name(1),
            &name(3),
            "page"
        ]
    );
    assert!(
        lines.contains("page 1 of 1 (50 per page, 5 mailboxes in all; busiest first as of "),
        "{lines}"
    );
    assert!(lines.ends_with(" s old)\n"), "{lines}");
    assert!(json["order_as_of"].is_string(), "{json}");
}

#[tokio::test]
async fn the_order_snapshot_is_refreshed_when_stale_and_hides_no_mailbox() {
    use mail_worker::store::{mailbox_list::Order, mailbox_order};
    let world = TestApp::builder().mailboxes(4).spawn().await;
    let pool = &world.db.pool;
    let name = |i: usize| world.mailboxes[i].0.to_string();
    world.insert(0, 2, "SCHEDULED").await;
    world.insert(1, 1, "SENDING").await;
    world.insert(2, 3, "SENT").await;
    assert_eq!(mailbox_order::taken(pool).await.unwrap(), None);
    let page =
        |page: u32, per_page: u32| reports::usage::usage_page(&world.config, pool, page, per_page);
    let order = |p: &reports::usage::UsagePage| -> Vec<(String, i64)> {
        p.mailboxes
            .iter()
            .map(|u| {
                let n = |s: &str| u.messages.by_status.get(s).copied().unwrap_or(0);
                (u.mailbox.clone(), n("SCHEDULED") + n("SENDING"))
            })
            .collect()
    };
    // No snapshot: the first page takes it.
    let first = page(1, 50).await.unwrap();
    let (taken, age) = mailbox_order::taken(pool).await.unwrap().unwrap();
    assert_eq!(first.order_as_of, taken);
    assert!(age < Duration::from_secs(5), "{age:?}");
    assert_eq!(
        order(&first),
        [(name(0), 2), (name(1), 1), (name(2), 0), (name(3), 0)]
    );
    // Work given after the snapshot: the mailbox is still listed, with its live count, in the
    // snapshot's place (0 then: by address) until the next snapshot.
    world.insert(3, 5, "SCHEDULED").await;
    let fresh = page(1, 50).await.unwrap();
    assert_eq!(fresh.order_as_of, taken);
    assert_eq!(
        order(&fresh),
        [(name(0), 2), (name(1), 1), (name(2), 0), (name(3), 5)]
    );
    assert_eq!(
        order(&page(2, 2).await.unwrap()),
        [(name(2), 0), (name(3), 5)]
    );
    // Live, it is first.
    let live = reports::usage::usage_page_ordered(&world.config, pool, 1, 50, Order::Live)
        .await
        .unwrap();
    assert_eq!(order(&live)[0], (name(3), 5));
    assert!(live.order_as_of >= taken);
    // A snapshot younger than the interval is not taken again.
    assert_eq!(
        mailbox_order::refresh(pool, mailbox_order::REFRESH_EVERY)
            .await
            .unwrap(),
        None
    );
    // Older than MAX_AGE: while another process holds the lock, the page counts live and leaves
    // the snapshot alone ...
    sqlx::query("UPDATE mailbox_order SET taken_at = taken_at - interval '1 minute'")
        .execute(pool)
        .await
        .unwrap();
    let stale = mailbox_order::taken(pool).await.unwrap().unwrap().0;
    let mut other = pool.acquire().await.unwrap();
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(mailbox_order::LOCK_KEY)
        .execute(&mut *other)
        .await
        .unwrap();
    let locked_out = page(1, 50).await.unwrap();
    assert_eq!(order(&locked_out)[0], (name(3), 5));
    assert!(locked_out.order_as_of > taken);
    assert_eq!(
        mailbox_order::refresh(pool, Duration::ZERO).await.unwrap(),
        None
    );
    assert_eq!(mailbox_order::taken(pool).await.unwrap().unwrap().0, stale);
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(mailbox_order::LOCK_KEY)
        .execute(&mut *other)
        .await
        .unwrap();
    drop(other);
    // ... and without it takes a new one: the mailbox moves up.
    let retaken = page(1, 50).await.unwrap();
    assert_eq!(
        order(&retaken),
        [(name(3), 5), (name(0), 2), (name(1), 1), (name(2), 0)]
    );
    let (now_taken, _) = mailbox_order::taken(pool).await.unwrap().unwrap();
    assert_eq!(retaken.order_as_of, now_taken);
    assert!(now_taken > taken);
    // What the snapshot holds: the senders with unfinished rows, and their counts.
    let (ids, counts): (Vec<Uuid>, Vec<i64>) =
        sqlx::query_as("SELECT sender_ids, unfinished FROM mailbox_order")
            .fetch_one(pool)
            .await
            .unwrap();
    let mut held: Vec<(Uuid, i64)> = ids.into_iter().zip(counts).collect();
    held.sort_by_key(|(_, n)| -n);
    assert_eq!(
        held,
        [
            (world.mailboxes[3].1, 5),
            (world.mailboxes[0].1, 2),
            (world.mailboxes[1].1, 1)
        ]
    );
}
