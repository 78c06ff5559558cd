//! sendMail: accepted and recorded, mailboxes by id or UPN, Graph's refusals and its error body.

#[allow(unused_imports)]
use super::*;

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
