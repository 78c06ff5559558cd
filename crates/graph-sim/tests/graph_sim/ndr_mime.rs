//! NDRs as Exchange writes them: the MIME at `$value` in each real layout, the JSON view the
//! same text, and the recipient quota's `202` then NDR `5.1.90`.

use super::*;
use graph_sim::{NdrLayout, UnknownRecipients};

async fn start_in(layout: NdrLayout, limits: MailboxLimits) -> (GraphSim, ManualClock) {
    let clock = ManualClock::new(t0());
    let mut config = config_with(limits)
        .with_unknown_recipients(UnknownRecipients::domain("nowhere.example", "5.1.1"))
        .with_clock(clock.clone());
    config.bounces.layout = layout;
    (GraphSim::start(config).await.unwrap(), clock)
}

fn to_ghost() -> Value {
    json!({"message": {"subject": "Invitation", "body": {"contentType": "Text", "content": "hi"},
        "toRecipients": [{"emailAddress": {"address": "ghost@nowhere.example"}}],
        "internetMessageId": "<m-1@contoso.example>"}, "saveToSentItems": false})
}

/// The only NDR of [`MAILBOX`]'s Inbox: its JSON view and its `$value`.
async fn the_ndr(http: &Client, sim: &GraphSim, token: &str) -> (Value, String) {
    let listed: Value = http
        .get(format!(
            "{}/users/{MAILBOX}/mailFolders/inbox/messages",
            sim.graph_base_url()
        ))
        .query(&[("$select", "id,from,body,internetMessageHeaders")])
        .bearer_auth(token)
        .header("Prefer", "outlook.body-content-type=\"text\"")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let items = listed["value"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{listed}");
    let id = items[0]["id"].as_str().unwrap();
    let raw = http
        .get(format!(
            "{}/users/{MAILBOX}/messages/{id}/$value",
            sim.graph_base_url()
        ))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), StatusCode::OK);
    (items[0].clone(), raw.text().await.unwrap())
}

#[tokio::test]
async fn each_layout_serves_its_mime_at_value_and_the_json_view_shows_the_same_text() {
    // (layout, multipart/report, delivery-status, rfc822, In-Reply-To, sender)
    let layouts = [
        (
            NdrLayout::PostmasterDsn,
            1,
            1,
            0,
            false,
            "postmaster@contoso.example",
        ),
        (
            NdrLayout::PostmasterText,
            1,
            0,
            0,
            false,
            "postmaster@contoso.example",
        ),
        (
            NdrLayout::Plain,
            0,
            0,
            0,
            false,
            "postmaster@contoso.example",
        ),
        (
            NdrLayout::OutlookCom,
            1,
            1,
            1,
            true,
            "postmaster@outlook.com",
        ),
    ];
    for (layout, report, dsn, rfc822, in_reply_to, sender) in layouts {
        let (sim, _clock) = start_in(layout, MailboxLimits::default()).await;
        let http = Client::new();
        let token = token(&http, &sim).await;
        assert_eq!(
            send(&http, &sim, &token, &to_ghost()).await.status(),
            StatusCode::ACCEPTED
        );
        let (view, mime) = the_ndr(&http, &sim, &token).await;
        let count = |s: &str| mime.matches(s).count();
        assert_eq!(
            (
                count("Content-Type: multipart/report; report-type=delivery-status"),
                count("Content-Type: message/delivery-status"),
                count("Content-Type: message/rfc822"),
                count("In-Reply-To: <m-1@contoso.example>"),
            ),
            (report, dsn, rfc822, usize::from(in_reply_to)),
            "{layout:?}: {mime}"
        );
        if dsn == 1 {
            assert!(
                mime.contains(
                    "Final-Recipient: rfc822;ghost@nowhere.example\r\nAction: failed\r\nStatus: 5.1.1\r\nDiagnostic-Code: smtp;550 5.1.1 RESOLVER.ADR.RecipNotFound; not found"
                ),
                "{layout:?}: {mime}"
            );
        }
        // The JSON view is the MIME's own text and headers.
        let text = view["body"]["content"].as_str().unwrap();
        assert!(text.contains("Message-ID: <m-1@contoso.example>"), "{text}");
        assert!(
            mime.contains(text),
            "{layout:?}: the text part is the JSON body"
        );
        let headers = view["internetMessageHeaders"].as_array().unwrap();
        for h in headers {
            let (name, value) = (h["name"].as_str().unwrap(), h["value"].as_str().unwrap());
            let line = if value.is_empty() {
                format!("{name}:\r\n")
            } else {
                format!("{name}: {value}\r\n")
            };
            assert!(mime.contains(&line), "{layout:?}: {line} in the MIME");
        }
        assert_eq!(
            headers.iter().any(|h| h["name"] == "In-Reply-To"),
            in_reply_to,
            "{layout:?}"
        );
        assert_eq!(
            view["from"]["emailAddress"]["address"], sender,
            "{layout:?}"
        );
    }
}

#[tokio::test]
async fn value_of_an_unknown_item_is_404_and_properties_absent_are_null() {
    let (sim, _clock) = start_in(NdrLayout::default(), MailboxLimits::default()).await;
    let http = Client::new();
    let token = token(&http, &sim).await;
    let missing = http
        .get(format!(
            "{}/users/{MAILBOX}/messages/AAMkNope/$value",
            sim.graph_base_url()
        ))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    // A delivered note has no internetMessageHeaders: null, as Graph sends an absent value.
    sim.deliver_to_inbox(MAILBOX, "someone@example.org", "", "thanks")
        .unwrap();
    let listed: Value = http
        .get(format!(
            "{}/users/{MAILBOX}/mailFolders/inbox/messages",
            sim.graph_base_url()
        ))
        .query(&[("$select", "id,subject,internetMessageHeaders")])
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let note = &listed["value"][0];
    assert!(note["internetMessageHeaders"].is_null(), "{listed}");
    assert!(note["subject"].is_null(), "{listed}");
}

#[tokio::test]
async fn over_the_recipients_per_day_a_send_gets_202_then_an_ndr_5_1_90() {
    let limits = MailboxLimits {
        recipients_per_day: 2,
        ..MailboxLimits::default()
    };
    let (sim, _clock) = start_in(NdrLayout::OutlookCom, limits).await;
    let http = Client::new();
    let token = token(&http, &sim).await;
    for i in 0..2 {
        assert_eq!(
            send_one(&http, &sim, &token).await.status(),
            StatusCode::ACCEPTED,
            "{i}"
        );
    }
    let over = send_one(&http, &sim, &token).await;
    assert_eq!(
        over.status(),
        StatusCode::ACCEPTED,
        "Exchange accepts, then bounces"
    );
    let stats = sim.mailbox_stats(MAILBOX).unwrap();
    assert_eq!((stats.accepted, stats.refused.day), (2, 1));
    let (_, mime) = the_ndr(&http, &sim, &token).await;
    assert!(
        mime.contains(
            "Final-Recipient: rfc822;r0@example.org\r\nAction: failed\r\nStatus: 5.1.90\r\n"
        ),
        "{mime}"
    );
    assert!(mime.contains("reached your daily limit for message recipients"));
}
