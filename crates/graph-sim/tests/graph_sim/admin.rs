//! The admin API.

#[allow(unused_imports)]
use super::*;

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
