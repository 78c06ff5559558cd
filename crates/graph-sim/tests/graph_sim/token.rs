//! The token endpoint: tokens, lifetimes, Entra ID's refusals (AADSTS codes), scripted token faults.

#[allow(unused_imports)]
use super::*;

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
