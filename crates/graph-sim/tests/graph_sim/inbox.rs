//! The Inbox: NDRs for unknown recipients and for a tenant over its external budget, after
//! their delay; the listing's filter, `$select`, `$top` and `@odata.nextLink`; `PATCH` and
//! `move`; and the same 4-concurrent-requests limit as a send.

use super::*;
use graph_sim::{SimTenant, UnknownRecipients};

const NDR_FILTER: &str = "singleValueExtendedProperties/any(ep:ep/id eq 'String 0x001A' and ep/value eq 'REPORT.IPM.Note.NDR') and isRead eq false";

async fn start_bouncing(delay: Duration) -> (GraphSim, ManualClock) {
    let clock = ManualClock::new(t0());
    let sim = GraphSim::start(
        config_with(refusing())
            .with_unknown_recipients(UnknownRecipients::domain("nowhere.example", "5.1.1"))
            .with_tenant(SimTenant::new(TENANT, 2, [TENANT]))
            .with_ndr_delay(delay)
            .with_clock(clock.clone()),
    )
    .await
    .unwrap();
    (sim, clock)
}

fn to(addresses: &[&str], imid: &str) -> Value {
    let to: Vec<Value> = addresses
        .iter()
        .map(|a| json!({"emailAddress": {"address": a}}))
        .collect();
    json!({"message": {"subject": "Invitation", "body": {"contentType": "Text", "content": "hi"},
        "toRecipients": to, "internetMessageId": imid}, "saveToSentItems": false})
}

async fn inbox(http: &Client, sim: &GraphSim, token: &str, query: &[(&str, &str)]) -> Value {
    let url = format!(
        "{}/users/{MAILBOX}/mailFolders/inbox/messages",
        sim.graph_base_url()
    );
    let answer = http
        .get(url)
        .query(query)
        .bearer_auth(token)
        .header("Prefer", "outlook.body-content-type=\"text\"")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    answer.json().await.unwrap()
}

#[tokio::test]
async fn an_unknown_recipient_gets_an_ndr_after_the_delay_with_the_code_and_the_original_id() {
    let (sim, clock) = start_bouncing(Duration::from_secs(30)).await;
    let http = Client::new();
    let token = token(&http, &sim).await;
    let sent = send(
        &http,
        &sim,
        &token,
        &to(
            &["ghost@nowhere.example", "a@contoso.example"],
            "<m-1@contoso.example>",
        ),
    )
    .await;
    assert_eq!(
        sent.status(),
        StatusCode::ACCEPTED,
        "accepted, bounced later"
    );
    sim.deliver_to_inbox(MAILBOX, "someone@example.org", "Re: Invitation", "thanks")
        .unwrap();
    let select = (
        "$select",
        "id,subject,from,body,internetMessageHeaders,isRead",
    );
    let listed = inbox(&http, &sim, &token, &[("$filter", NDR_FILTER), select]).await;
    assert_eq!(
        listed["value"].as_array().unwrap().len(),
        0,
        "not before the delay"
    );
    clock.advance(Duration::from_secs(30));
    let listed = inbox(&http, &sim, &token, &[("$filter", NDR_FILTER), select]).await;
    let items = listed["value"].as_array().unwrap();
    assert_eq!(items.len(), 1, "the reply is no NDR: {listed}");
    let ndr = &items[0];
    assert_eq!(ndr["subject"], "Undeliverable: Invitation");
    // The default layout: the tenant's postmaster (exchange-online-03 of the product's fixtures).
    assert_eq!(
        ndr["from"]["emailAddress"]["address"],
        "postmaster@contoso.example"
    );
    assert_eq!(ndr["body"]["contentType"], "text");
    let body = ndr["body"]["content"].as_str().unwrap();
    assert!(
        body.contains("Remote Server returned '550 5.1.1 RESOLVER.ADR.RecipNotFound; not found'"),
        "{body}"
    );
    assert!(
        body.contains("ghost@nowhere.example") && !body.contains("a@contoso.example\r\nRemote"),
        "{body}"
    );
    assert!(body.contains("Message-ID: <m-1@contoso.example>"), "{body}");
    // A postmaster's NDR carries no In-Reply-To: the original's id is in the quoted headers.
    let headers = ndr["internetMessageHeaders"].as_array().unwrap();
    assert!(headers.iter().any(|h| {
        h["name"] == "Content-Type"
            && h["value"]
                .as_str()
                .unwrap()
                .starts_with("multipart/report; report-type=delivery-status")
    }));
    assert!(!headers.iter().any(|h| h["name"] == "In-Reply-To"));
    assert!(
        ndr.get("toRecipients").is_none(),
        "$select leaves the rest out"
    );
    // Marked read, it leaves the unread listing; moved, it leaves the Inbox.
    let id = ndr["id"].as_str().unwrap();
    let patched = http
        .patch(format!(
            "{}/users/{MAILBOX}/messages/{id}",
            sim.graph_base_url()
        ))
        .bearer_auth(&token)
        .json(&json!({"isRead": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(patched.status(), StatusCode::OK);
    let listed = inbox(&http, &sim, &token, &[("$filter", NDR_FILTER)]).await;
    assert_eq!(listed["value"].as_array().unwrap().len(), 0);
    let moved = http
        .post(format!(
            "{}/users/{MAILBOX}/messages/{id}/move",
            sim.graph_base_url()
        ))
        .bearer_auth(&token)
        .json(&json!({"destinationId": "deleteditems"}))
        .send()
        .await
        .unwrap();
    assert_eq!(moved.status(), StatusCode::CREATED);
    let moved: Value = moved.json().await.unwrap();
    assert_ne!(
        moved["id"].as_str().unwrap(),
        id,
        "a moved message gets a new id"
    );
    let items = sim.inbox(MAILBOX);
    assert_eq!(items.len(), 2);
    assert_eq!(
        items
            .iter()
            .map(|i| (i.folder.as_str(), i.message_class.as_str(), i.is_read))
            .collect::<Vec<_>>(),
        [
            ("deleteditems", "REPORT.IPM.Note.NDR", true),
            ("inbox", "IPM.Note", false)
        ]
    );
    assert_eq!(sim.stats().requests.get("listInbox"), Some(&3));
    assert_eq!(sim.stats().requests.get("patchMessage"), Some(&1));
    assert_eq!(sim.stats().requests.get("moveMessage"), Some(&1));
}

#[tokio::test]
async fn a_tenant_over_its_external_budget_gets_550_5_7_233_and_pages_follow_the_next_link() {
    let (sim, _clock) = start_bouncing(Duration::ZERO).await;
    let http = Client::new();
    let token = token(&http, &sim).await;
    // Budget 2: the first two external recipients go, the next three messages bounce.
    for i in 0..5 {
        let imid = format!("<t-{i}@contoso.example>");
        let sent = send(&http, &sim, &token, &to(&["x@example.org"], &imid)).await;
        assert_eq!(sent.status(), StatusCode::ACCEPTED);
    }
    let mut url = format!(
        "{}/users/{MAILBOX}/mailFolders/inbox/messages?$top=2&$select=body",
        sim.graph_base_url()
    );
    let mut bodies = Vec::new();
    let mut pages = 0;
    loop {
        let page: Value = json_of(http.get(&url).bearer_auth(&token)).await;
        pages += 1;
        for item in page["value"].as_array().unwrap() {
            bodies.push(item["body"]["content"].as_str().unwrap().to_owned());
        }
        match page["@odata.nextLink"].as_str() {
            Some(next) => url = next.to_owned(),
            None => break,
        }
    }
    assert_eq!((pages, bodies.len()), (2, 3));
    for body in &bodies {
        assert!(body.contains("550 5.7.233"), "{body}");
    }
    for i in 2..5 {
        let imid = format!("Message-ID: &lt;t-{i}@contoso.example&gt;");
        assert!(
            bodies.iter().any(|b| b.contains(&imid)),
            "{imid} in HTML bodies"
        );
    }
}

#[tokio::test]
async fn inbox_requests_count_against_the_mailboxs_four_concurrent_requests() {
    let (sim, _clock) = start_bouncing(Duration::ZERO).await;
    sim.set_latency(Target::Mailbox(MAILBOX.into()), Latency::Fixed(300))
        .unwrap();
    let http = Client::new();
    let token = token(&http, &sim).await;
    let url = format!(
        "{}/users/{MAILBOX}/mailFolders/inbox/messages",
        sim.graph_base_url()
    );
    let answers =
        futures::future::join_all((0..5).map(|_| http.get(&url).bearer_auth(&token).send())).await;
    let mut statuses: Vec<u16> = answers
        .into_iter()
        .map(|a| a.unwrap().status().as_u16())
        .collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 200, 200, 429]);
    assert_eq!(sim.mailbox_stats(MAILBOX).unwrap().refused.concurrency, 1);
}

#[tokio::test]
async fn a_filter_graph_sim_does_not_serve_is_refused() {
    let (sim, _clock) = start_bouncing(Duration::ZERO).await;
    let http = Client::new();
    let token = token(&http, &sim).await;
    let answer = http
        .get(format!(
            "{}/users/{MAILBOX}/mailFolders/inbox/messages",
            sim.graph_base_url()
        ))
        .query(&[("$filter", "subject eq 'x'")])
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::BAD_REQUEST);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"]["code"], "ErrorInvalidUrlQueryFilter");
}

#[tokio::test]
async fn a_new_tenant_past_its_trusted_external_recipients_gets_550_5_7_705_for_external_mail_only()
{
    let clock = ManualClock::new(t0());
    let sim = GraphSim::start(
        config_with(refusing())
            .with_tenant(SimTenant::new(TENANT, 100, [TENANT]).with_new_tenant(2, "5.7.705"))
            .with_clock(clock.clone()),
    )
    .await
    .unwrap();
    let http = Client::new();
    let token = token(&http, &sim).await;
    // Trusted with 2 external recipients a day: t-0 and t-1 go, t-2 and t-3 bounce; the
    // internal t-4 goes whatever the reputation.
    for (i, rcpt) in [
        "x@example.org",
        "y@example.org",
        "z@example.org",
        "w@example.org",
        "colleague@contoso.example",
    ]
    .iter()
    .enumerate()
    {
        let imid = format!("<t-{i}@contoso.example>");
        let sent = send(&http, &sim, &token, &to(&[rcpt], &imid)).await;
        assert_eq!(sent.status(), StatusCode::ACCEPTED);
    }
    let page = inbox(&http, &sim, &token, &[("$select", "body")]).await;
    let bodies: Vec<&str> = page["value"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["body"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(bodies.len(), 2, "{bodies:?}");
    for body in &bodies {
        assert!(
            body.contains("550 5.7.705 Access denied, tenant has exceeded threshold"),
            "{body}"
        );
    }
    let stats = sim.mailbox_stats(MAILBOX).unwrap();
    assert_eq!(
        (
            stats.accepted,
            stats.refused.tenant_reputation,
            stats.refused.tenant_external_limit
        ),
        (3, 2, 0)
    );
    // A day later the window is empty again.
    clock.advance(Duration::from_secs(24 * 3600));
    let token = super::token(&http, &sim).await;
    let sent = send(
        &http,
        &sim,
        &token,
        &to(&["v@example.org"], "<t-5@contoso.example>"),
    )
    .await;
    assert_eq!(sent.status(), StatusCode::ACCEPTED);
    assert_eq!(sim.mailbox_stats(MAILBOX).unwrap().accepted, 4);
}

#[tokio::test]
async fn a_mailbox_concurrency_storm_answers_the_next_n_sends_429_mailbox_concurrency() {
    let (sim, clock) = start_bouncing(Duration::ZERO).await;
    sim.mailbox_concurrency_storm(Target::Mailbox(MAILBOX.into()), 3)
        .unwrap();
    let http = Client::new();
    let token = token(&http, &sim).await;
    let mut answers = Vec::new();
    for i in 0..4 {
        let imid = format!("<s-{i}@contoso.example>");
        let sent = send(&http, &sim, &token, &to(&["a@contoso.example"], &imid)).await;
        let status = sent.status().as_u16();
        let body = sent.text().await.unwrap();
        answers.push((status, body.contains("MailboxConcurrency")));
        // Each 429 says Retry-After: 1; a client that waits gets the next scripted one.
        clock.advance(Duration::from_secs(1));
    }
    assert_eq!(
        answers,
        [(429, true), (429, true), (429, true), (202, false)]
    );
}
