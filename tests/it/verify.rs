//! Issue 41 point 1: `mail-worker senders verify` against graph-sim — a correct setup gives
//! every check `ok` (exit 0); each configured fault gives its own `fail` line and fix (exit 1);
//! an onmicrosoft.com sender warns; `--send-test-to` sends one message, found by its
//! `internetMessageId`; no secret and no token is ever printed.

use std::{num::NonZeroU32, sync::Arc};

use mail_worker::{
    clock::SystemClock,
    domain::{GraphCredentials, MailboxAddress, SecretRef},
    service::verify::{Outcome, VerifyOptions, VerifyReport, verify_senders},
    store::senders,
};

use crate::{
    cli::{mail_worker, text},
    support::{
        TestApp,
        app::{CLIENT, SECRET, TENANT},
    },
};

const MB0: &str = "mb0@contoso.example";

async fn verify(h: &TestApp, options: VerifyOptions) -> VerifyReport {
    verify_senders(&h.config, &h.db.pool, &options, Arc::new(SystemClock))
        .await
        .unwrap()
}

/// The report of `address` alone.
async fn verify_one(h: &TestApp, address: &str) -> VerifyReport {
    verify(
        h,
        VerifyOptions {
            addresses: vec![address.to_owned()],
            send_test_to: None,
        },
    )
    .await
}

/// Stores a system mailbox at `address` with these credentials (an upsert: it replaces mb0's).
async fn store_mailbox(h: &TestApp, address: &str, tenant: &str, client: &str, secret: &str) {
    senders::upsert_system_mailbox(
        &h.db.pool,
        &MailboxAddress::parse(address).unwrap(),
        &GraphCredentials {
            graph_tenant_id: tenant.into(),
            client_id: client.into(),
            client_secret: SecretRef::new(secret),
            tenant_budget: None,
        },
        NonZeroU32::new(25),
        None,
    )
    .await
    .unwrap();
}

/// `(outcome, line)` of the check `name` of the only sender.
fn check(report: &VerifyReport, name: &str) -> (Outcome, String) {
    let c = report.senders[0]
        .checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no {name} line in\n{}", report.text()));
    (c.outcome, c.line())
}

/// The names of the checks that came out `outcome`.
fn named(report: &VerifyReport, outcome: Outcome) -> Vec<&'static str> {
    report.senders[0]
        .checks
        .iter()
        .filter(|c| c.outcome == outcome)
        .map(|c| c.name)
        .collect()
}

#[tokio::test]
async fn a_correct_setup_is_all_ok() {
    let h = TestApp::builder().spawn().await;
    let report = verify(&h, VerifyOptions::default()).await;
    println!("{}", report.text());
    assert_eq!(report.senders.len(), 1);
    let names: Vec<_> = report.senders[0].checks.iter().map(|c| c.name).collect();
    assert_eq!(
        names,
        [
            "secret",
            "credentials",
            "permissions",
            "mailbox",
            "address",
            "limits"
        ]
    );
    assert_eq!(named(&report, Outcome::Ok).len(), 6, "{}", report.text());
    assert!(!report.failed());
    assert!(
        check(&report, "mailbox")
            .1
            .contains("create and delete a draft: HTTP 204")
    );
    let drafts = h.sim.drafts();
    assert_eq!(drafts.len(), 1, "one check draft");
    assert!(
        drafts[0].deleted && drafts[0].sends == 0,
        "deleted, never sent"
    );
    assert!(h.sim.messages().is_empty(), "nothing sent");
}

#[tokio::test]
async fn a_wrong_secret_fails_with_aadsts7000215_and_its_fix_and_the_secret_is_not_printed() {
    let h = TestApp::builder().spawn().await;
    store_mailbox(&h, MB0, TENANT, CLIENT, "Wr0ng-s3cret-value").await;
    let report = verify_one(&h, MB0).await;
    println!("{}", report.text());
    let (outcome, line) = check(&report, "credentials");
    assert_eq!(outcome, Outcome::Fail);
    assert!(
        line.contains("AADSTS7000215 — wrong client secret")
            && line.contains("fix: copy the secret's Value (not its Secret ID)"),
        "{line}"
    );
    assert!(report.failed());
    let json = serde_json::to_string(&report).unwrap();
    for out in [report.text(), json] {
        assert!(!out.contains("Wr0ng-s3cret-value") && !out.contains(SECRET));
    }
}

#[tokio::test]
async fn an_unknown_tenant_and_an_unknown_app_each_fail_with_their_cause() {
    let h = TestApp::builder().spawn().await;
    store_mailbox(&h, MB0, "fabrikam.example", CLIENT, SECRET).await;
    let (outcome, line) = check(&verify_one(&h, MB0).await, "credentials");
    assert_eq!(outcome, Outcome::Fail);
    assert!(
        line.contains("AADSTS90002 — unknown tenant")
            && line.contains("fix: check the sender's graphTenantId"),
        "{line}"
    );
    store_mailbox(
        &h,
        MB0,
        TENANT,
        "22222222-2222-4222-8222-222222222222",
        SECRET,
    )
    .await;
    let (outcome, line) = check(&verify_one(&h, MB0).await, "credentials");
    assert_eq!(outcome, Outcome::Fail);
    assert!(
        line.contains("AADSTS700016 — unknown application")
            && line.contains("fix: check the sender's clientId"),
        "{line}"
    );
}

#[tokio::test]
async fn only_mail_send_in_draft_mode_names_mail_readwrite_and_the_mailbox_cannot_be_checked() {
    let h = TestApp::builder()
        .sim_roles(vec!["Mail.Send".to_owned()])
        .spawn()
        .await;
    let report = verify_one(&h, MB0).await;
    println!("{}", report.text());
    let (outcome, line) = check(&report, "permissions");
    assert_eq!(outcome, Outcome::Fail);
    assert!(
        line.contains("missing Mail.ReadWrite (needed to create drafts (GRAPH_SEND_MODE=draft))")
            && line.contains("its roles: Mail.Send")
            && line.contains("fix: grant Mail.ReadWrite and Mail.Read to the app as application permissions with admin consent, or set GRAPH_SEND_MODE=sendmail"),
        "{line}"
    );
    let (outcome, line) = check(&report, "mailbox");
    assert_eq!(outcome, Outcome::Warn);
    assert!(line.contains("--send-test-to"), "{line}");
    assert!(h.sim.drafts().is_empty());
}

#[tokio::test]
async fn a_mailbox_outside_the_apps_scope_fails_with_403_and_the_scope_fix() {
    let h = TestApp::builder()
        .sim_mailbox_scope(vec!["other@contoso.example".to_owned()])
        .spawn()
        .await;
    let report = verify_one(&h, MB0).await;
    println!("{}", report.text());
    let (outcome, line) = check(&report, "mailbox");
    assert_eq!(outcome, Outcome::Fail);
    assert!(
        line.contains("HTTP 403 ErrorAccessDenied")
            && line.contains("outside the app's mailbox scope")
            && line.contains("RBAC for Applications")
            && line.contains("30 minutes to 2 hours"),
        "{line}"
    );
    assert_eq!(named(&report, Outcome::Fail), ["mailbox"]);
}

#[tokio::test]
async fn an_unknown_mailbox_fails_with_error_invalid_user() {
    let h = TestApp::builder().spawn().await;
    let ghost = "ghost@contoso.example";
    store_mailbox(&h, ghost, TENANT, CLIENT, SECRET).await;
    let report = verify_one(&h, ghost).await;
    println!("{}", report.text());
    let (outcome, line) = check(&report, "mailbox");
    assert_eq!(outcome, Outcome::Fail);
    assert!(
        line.contains("HTTP 404 ErrorInvalidUser")
            && line.contains("no such mailbox in the tenant"),
        "{line}"
    );
}

#[tokio::test]
async fn an_unlicensed_mailbox_fails_with_mailbox_not_enabled_for_rest_api() {
    let h = TestApp::builder().sim_unlicensed().spawn().await;
    let report = verify_one(&h, MB0).await;
    println!("{}", report.text());
    let (outcome, line) = check(&report, "mailbox");
    assert_eq!(outcome, Outcome::Fail);
    assert!(
        line.contains("HTTP 404 MailboxNotEnabledForRESTAPI")
            && line.contains("no Exchange Online licence")
            && line.contains("fix: assign the user an Exchange Online licence"),
        "{line}"
    );
}

#[tokio::test]
async fn an_unset_env_secret_fails_naming_the_reference() {
    let h = TestApp::builder().spawn().await;
    store_mailbox(&h, MB0, TENANT, CLIENT, "env:MW_VERIFY_TEST_UNSET_SECRET").await;
    let report = verify_one(&h, MB0).await;
    println!("{}", report.text());
    let (outcome, line) = check(&report, "secret");
    assert_eq!(outcome, Outcome::Fail);
    assert!(
        line.contains(
            "env:MW_VERIFY_TEST_UNSET_SECRET names an environment variable that is not set"
        ) && line.contains("fix: set MW_VERIFY_TEST_UNSET_SECRET in the environment"),
        "{line}"
    );
    assert_eq!(h.sim.token_requests(CLIENT), 0, "no token asked for");
}

#[tokio::test]
async fn an_onmicrosoft_sender_warns_about_100_external_recipients_a_day() {
    let h = TestApp::builder().spawn().await;
    let address = "noreply@contoso.onmicrosoft.com";
    store_mailbox(&h, address, TENANT, CLIENT, SECRET).await;
    let report = verify_one(&h, address).await;
    let (outcome, line) = check(&report, "address");
    assert_eq!(outcome, Outcome::Warn);
    assert!(
        line.contains("100 external recipients per 24 h")
            && line.contains("550 5.7.236")
            && line.contains("fix: send from a mailbox on a custom domain"),
        "{line}"
    );
}

#[tokio::test]
async fn a_send_test_through_an_unreachable_limiter_warns_that_it_failed_open() {
    let mut h = TestApp::builder().spawn().await;
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    h.config.rate_limit.redis_url = url::Url::parse(&format!("redis://127.0.0.1:{closed}"))
        .unwrap()
        .into();
    let report = verify(
        &h,
        VerifyOptions {
            addresses: vec![MB0.to_owned()],
            send_test_to: Some("someone@fabrikam.example".to_owned()),
        },
    )
    .await;
    let (outcome, line) = check(&report, "send test");
    assert_eq!(outcome, Outcome::Warn, "{line}");
    assert!(line.contains("sent failing open"), "{line}");
    assert!(line.contains("MAIL_RATE_LIMIT_REDIS_URL"), "{line}");
    assert_eq!(h.sim.messages().len(), 1, "the message went out, uncounted");
}

#[tokio::test]
async fn send_test_to_sends_one_message_found_in_sent_items_by_its_internet_message_id() {
    let h = TestApp::builder().spawn().await;
    let report = verify(
        &h,
        VerifyOptions {
            addresses: vec![MB0.to_owned()],
            send_test_to: Some("someone@fabrikam.example".to_owned()),
        },
    )
    .await;
    println!("{}", report.text());
    let (outcome, line) = check(&report, "send test");
    assert_eq!(outcome, Outcome::Ok, "{line}");
    let messages = h.sim.messages();
    assert_eq!(messages.len(), 1, "one message at graph-sim");
    let imid = messages[0].internet_message_id.clone().unwrap();
    assert!(
        line.contains(&format!(
            "found in Sent Items by its internetMessageId {imid}"
        )),
        "{line}"
    );
    assert!(
        !line.contains("someone@fabrikam.example"),
        "the recipient is masked: {line}"
    );
    assert_eq!(messages[0].to, ["someone@fabrikam.example"]);
    assert!(!report.failed());
}

#[test]
fn the_binary_exits_0_when_all_is_ok_1_on_a_failed_check_or_an_unknown_address_and_prints_no_secret()
 {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let h = runtime.block_on(TestApp::builder().spawn());
    let env = |h: &TestApp| {
        [
            ("DATABASE_URL", h.db.url.to_string()),
            (
                "GRAPH_API_BASE_URL",
                h.config.graph.api_base_url.to_string(),
            ),
            (
                "GRAPH_LOGIN_BASE_URL",
                h.config.graph.login_base_url.to_string(),
            ),
            (
                "MAIL_RATE_LIMIT_KEY_PREFIX",
                h.config.rate_limit.key_prefix.clone(),
            ),
            ("VERIFY_TEST_SECRET", SECRET.to_owned()),
        ]
    };
    // The known secret through an env: reference, as production stores it.
    runtime.block_on(store_mailbox(
        &h,
        MB0,
        TENANT,
        CLIENT,
        "env:VERIFY_TEST_SECRET",
    ));
    let ok = mail_worker(&["senders", "verify"], &env(&h));
    let stdout = text(&ok.stdout);
    assert_eq!(ok.status.code(), Some(0), "{stdout}{}", text(&ok.stderr));
    assert!(
        stdout.contains("ok    secret       env:VERIFY_TEST_SECRET resolves"),
        "{stdout}"
    );
    assert!(
        stdout.ends_with("1 sender checked: 6 ok, 0 warn, 0 fail\n"),
        "{stdout}"
    );
    let json = mail_worker(&["senders", "verify", "--json", MB0], &env(&h));
    assert_eq!(json.status.code(), Some(0));
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(value["senders"][0]["address"], MB0);
    assert_eq!(value["senders"][0]["checks"][1]["name"], "credentials");
    assert_eq!(value["senders"][0]["checks"][1]["outcome"], "ok");
    for out in [&ok, &json] {
        let all = text(&out.stdout) + &text(&out.stderr);
        assert!(!all.contains(SECRET), "the secret was printed: {all}");
        assert!(!all.contains("eyJ"), "a token was printed: {all}");
    }

    let wrong = [("VERIFY_TEST_SECRET", "n0t-the-secret".to_owned())];
    let env_wrong: Vec<_> = env(&h)
        .into_iter()
        .filter(|(k, _)| *k != "VERIFY_TEST_SECRET")
        .chain(wrong)
        .collect();
    let failed = mail_worker(&["senders", "verify"], &env_wrong);
    let all = text(&failed.stdout) + &text(&failed.stderr);
    assert_eq!(failed.status.code(), Some(1), "{all}");
    assert!(all.contains("fail  credentials  AADSTS7000215"), "{all}");
    assert!(
        !all.contains("n0t-the-secret") && !all.contains("eyJ"),
        "{all}"
    );

    let unknown = mail_worker(&["senders", "verify", "nobody@contoso.example"], &env(&h));
    let stderr = text(&unknown.stderr);
    assert_eq!(unknown.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no sender has the address nobody@contoso.example"),
        "{stderr}"
    );
    drop(h);
}

const APP_KEY: &str = include_str!("../fixtures/app-key.pem");
const APP_CERT: &str = include_str!("../fixtures/app-cert.pem");

#[tokio::test]
async fn a_certificate_shows_its_days_to_expiry_and_one_not_registered_fails_with_aadsts700027() {
    let bundle = format!("{APP_KEY}{APP_CERT}");
    for registered in [true, false] {
        let mut builder = TestApp::builder();
        if registered {
            builder = builder.sim_certificate(APP_CERT);
        }
        let h = builder.spawn().await;
        sqlx::query("UPDATE system_mailboxes SET graph_client_secret = $1")
            .bind(&bundle)
            .execute(&h.db.pool)
            .await
            .unwrap();
        let report = verify_one(&h, MB0).await;
        println!("{}", report.text());
        // `openssl x509 -enddate` of the fixture: notAfter=Nov 28 09:03:13 2036 GMT.
        let (outcome, line) = check(&report, "certificate");
        assert_eq!(outcome, Outcome::Ok);
        assert!(line.contains("expires 2036-11-28 09:03 UTC ("), "{line}");
        let (outcome, line) = check(&report, "credentials");
        if registered {
            assert_eq!(outcome, Outcome::Ok);
            assert!(line.contains("with certificate "), "{line}");
            assert!(!report.failed());
        } else {
            assert_eq!(outcome, Outcome::Fail);
            assert!(
                line.contains("AADSTS700027 — the certificate is not registered on the app")
                    && line.contains("fix: upload the certificate"),
                "{line}"
            );
        }
        let text = report.text();
        assert!(!text.contains("PRIVATE KEY") && !text.contains(APP_KEY.lines().nth(1).unwrap()));
    }
}

#[tokio::test]
async fn the_admin_uis_verify_button_renders_the_report_and_needs_the_csrf_token() {
    let h = TestApp::builder()
        .sim_mailbox_scope(vec!["other@contoso.example".to_owned()])
        .spawn()
        .await;
    let (ui, login) = crate::admin::logged_in_ui(&h).await;
    let mailbox_page = ui.page(&format!("/mailboxes/{MB0}"), &login).await;
    assert!(
        mailbox_page.contains("action=\"/mailboxes/mb0%40contoso.example/verify\""),
        "a Verify button on the mailbox page"
    );
    let path = format!("/mailboxes/{MB0}/verify");
    let refused = ui.post(&path, None, &[]).await;
    assert_ne!(
        refused.status(),
        reqwest::StatusCode::OK,
        "no session, no report"
    );
    let wrong_csrf = ui.post(&path, Some(&login), &[("csrf", "00")]).await;
    assert_eq!(wrong_csrf.status(), reqwest::StatusCode::FORBIDDEN);
    assert!(
        h.sim.drafts().is_empty(),
        "no check ran without the CSRF token"
    );
    let answer = ui.submit(&path, &login, &[]).await;
    assert_eq!(answer.status(), reqwest::StatusCode::OK);
    let html = answer.text().await.unwrap();
    assert!(html.contains("A check failed"), "{html}");
    assert!(
        html.contains("<tr class=\"fail\"><td>fail</td><td>mailbox</td><td>create and delete a draft: Graph answered HTTP 403 ErrorAccessDenied"),
        "{html}"
    );
    assert!(
        html.contains("<tr class=\"ok\"><td>ok</td><td>credentials</td>"),
        "{html}"
    );
    assert!(!html.contains(SECRET), "no secret in the page");
    let unknown = ui
        .submit("/mailboxes/nobody%40contoso.example/verify", &login, &[])
        .await;
    assert_eq!(unknown.status(), reqwest::StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_test_message_goes_through_the_limiter_a_second_one_within_the_minute_waits() {
    let h = TestApp::builder()
        .algorithm(mail_worker::rate_limit::Algorithm::Paced)
        .per_minute(1)
        .spawn()
        .await;
    let options = VerifyOptions {
        addresses: vec![MB0.to_owned()],
        send_test_to: Some("someone@fabrikam.example".to_owned()),
    };
    let first = verify(&h, options.clone()).await;
    assert_eq!(check(&first, "send test").0, Outcome::Ok);
    let second = verify(&h, options).await;
    let (outcome, line) = check(&second, "send test");
    println!("{line}");
    assert_eq!(outcome, Outcome::Warn);
    assert!(
        line.contains("not sent: the limiter has no room in this mailbox's budget now")
            && line.contains("fix: run it again in"),
        "{line}"
    );
    assert_eq!(
        h.sim.messages().len(),
        1,
        "the limiter held the second back"
    );
}
