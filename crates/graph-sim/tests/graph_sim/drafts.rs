//! Drafts, eventual consistency and upload sessions.

#[allow(unused_imports)]
use super::*;

#[tokio::test]
async fn a_draft_keeps_its_immutable_id_and_reads_as_sent_only_after_the_visibility_delay() {
    for in_transit in [SentInTransit::NotFound, SentInTransit::Draft] {
        a_sent_draft_becomes_visible_after_the_delay(in_transit).await;
    }
}

/// One run of the test above, the sent draft shown as `in_transit` until it is visible.
pub(crate) async fn a_sent_draft_becomes_visible_after_the_delay(in_transit: SentInTransit) {
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
pub(crate) fn message_to(to: &[&str]) -> Value {
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
