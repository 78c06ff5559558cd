//! Application permissions (the token's `roles`), the app's mailbox scope, unknown and
//! unlicensed mailboxes: each answered as Graph answers it (docs/graph-sim.md).

use super::*;
use base64::Engine as _;
use graph_sim::SimApp;

const SCOPED: &str = "events2@contoso.example";
const UNLICENSED: &str = "old@contoso.example";

/// One tenant: the app `CLIENT` with `roles`, limited to [`MAILBOX`] and [`UNLICENSED`];
/// mailboxes [`MAILBOX`], [`SCOPED`] (outside the app's scope) and [`UNLICENSED`].
async fn start_granting(roles: &[&str]) -> GraphSim {
    GraphSim::start(
        SimConfig::new()
            .with_app_registration(
                SimApp::new(TENANT, CLIENT, SECRET)
                    .with_roles(roles.iter().copied())
                    .with_mailbox_scope([MAILBOX, UNLICENSED]),
            )
            .with_mailbox(SimMailbox::new(MAILBOX, TENANT))
            .with_mailbox(SimMailbox::new(SCOPED, TENANT))
            .with_mailbox(SimMailbox::new(UNLICENSED, TENANT).unlicensed()),
    )
    .await
    .unwrap()
}

fn draft() -> Value {
    json!({"subject": "Invitation", "body": {"contentType": "Text", "content": "hi"},
        "toRecipients": [{"emailAddress": {"address": "r@example.org"}}]})
}

/// The `roles` claim of a token (its payload, base64url JSON).
fn roles_of(token: &str) -> Option<Vec<String>> {
    let payload = token.split('.').nth(1).unwrap();
    let claims: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap(),
    )
    .unwrap();
    claims
        .get("roles")
        .map(|r| serde_json::from_value(r.clone()).unwrap())
}

#[tokio::test]
async fn each_route_needs_its_permission_and_a_grant_reaches_only_new_tokens() {
    let sim = start_granting(&["Mail.Send"]).await;
    let http = Client::new();
    let old = token(&http, &sim).await;
    assert_eq!(roles_of(&old), Some(vec!["Mail.Send".to_owned()]));
    let base = format!("{}/users/{MAILBOX}", sim.graph_base_url());
    // Mail.Send: sendMail goes; creating a draft (Mail.ReadWrite) and reading (Mail.Read…) not.
    assert_eq!(
        send_one(&http, &sim, &old).await.status(),
        StatusCode::ACCEPTED
    );
    let denied = refused(StatusCode::FORBIDDEN, "ErrorAccessDenied");
    let create = || http.post(format!("{base}/messages")).json(&draft());
    assert_eq!(refusal_of(create().bearer_auth(&old)).await, denied);
    let list = || http.get(format!("{base}/mailFolders/sentitems/messages"));
    assert_eq!(refusal_of(list().bearer_auth(&old)).await, denied);
    assert_eq!(sim.drafts().len(), 0);

    // The grant: the old token still lacks it, a new one carries it.
    assert!(sim.grant_roles(CLIENT, ["Mail.Send", "Mail.ReadWrite"]));
    assert_eq!(refusal_of(create().bearer_auth(&old)).await, denied);
    let new = token(&http, &sim).await;
    assert_eq!(
        roles_of(&new),
        Some(vec!["Mail.Send".to_owned(), "Mail.ReadWrite".to_owned()])
    );
    let created = create().bearer_auth(&new).send().await.unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let id = created.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Mail.ReadWrite is a higher privilege of the reads.
    assert_eq!(
        list().bearer_auth(&new).send().await.unwrap().status(),
        StatusCode::OK
    );
    // Without Mail.Send the draft cannot be sent.
    assert!(sim.grant_roles(CLIENT, ["Mail.ReadWrite"]));
    let no_send = token(&http, &sim).await;
    let send = http
        .post(format!("{base}/messages/{id}/send"))
        .bearer_auth(&no_send)
        .header("content-length", "0");
    assert_eq!(refusal_of(send).await, denied);
    assert_eq!(sim.messages().len(), 1, "only the first sendMail");

    // No role at all: the claim is absent, as Entra ID leaves it out.
    assert!(sim.grant_roles(CLIENT, Vec::<String>::new()));
    assert_eq!(roles_of(&token(&http, &sim).await), None);
}

#[tokio::test]
async fn outside_the_scope_is_denied_unknown_is_invalid_and_unlicensed_is_not_enabled() {
    let sim = start_granting(&graph_sim::DEFAULT_ROLES).await;
    let http = Client::new();
    let t = token(&http, &sim).await;
    assert_eq!(
        refusal(send_as(&http, &sim, &t, SCOPED, &message(1)).await).await,
        refused(StatusCode::FORBIDDEN, "ErrorAccessDenied")
    );
    assert_eq!(
        refusal(send_as(&http, &sim, &t, "nobody@contoso.example", &message(1)).await).await,
        refused(StatusCode::NOT_FOUND, "ErrorInvalidUser")
    );
    assert_eq!(
        refusal(send_as(&http, &sim, &t, UNLICENSED, &message(1)).await).await,
        refused(StatusCode::NOT_FOUND, "MailboxNotEnabledForRESTAPI")
    );
    assert_eq!(
        send_as(&http, &sim, &t, MAILBOX, &message(1))
            .await
            .status(),
        StatusCode::ACCEPTED
    );
    assert_eq!(sim.messages().len(), 1);
}
