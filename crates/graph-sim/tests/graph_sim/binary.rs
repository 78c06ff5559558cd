//! The binary: `graph-sim` started as a process, its config file and flags.

#[allow(unused_imports)]
use super::*;

pub(crate) async fn send_with_id(
    http: &Client,
    sim: &GraphSim,
    token: &str,
    id: &str,
    n: usize,
) -> u16 {
    http.post(format!("{}/users/{MAILBOX}/sendMail", sim.graph_base_url()))
        .bearer_auth(token)
        .header("client-request-id", id)
        .json(&message(n))
        .send()
        .await
        .expect("sendMail request")
        .status()
        .as_u16()
}

#[tokio::test]
async fn every_429_is_recorded_with_its_cause_time_and_client_request_id() {
    let s = Session::over(
        start_refusing_the_day(MailboxLimits {
            concurrent_requests: 1,
            messages_per_minute: 2,
            recipients_per_day: 10,
            retry_after_holds: false,
            ..refusing()
        })
        .await,
    )
    .await;
    s.clock.advance(Duration::from_secs(7)); // 12:00:07
    assert_eq!(send_with_id(&s.http, &s.sim, &s.token, "m-1", 1).await, 202);
    assert_eq!(send_with_id(&s.http, &s.sim, &s.token, "m-2", 1).await, 202);
    s.clock.advance(Duration::from_secs(5)); // 12:00:12
    assert_eq!(send_with_id(&s.http, &s.sim, &s.token, "m-3", 1).await, 429);
    assert_eq!(send_with_id(&s.http, &s.sim, &s.token, "m-4", 9).await, 429);
    // Two at once against a concurrency limit of 1: the slow one holds the slot.
    s.sim
        .set_latency(Target::mailbox(MAILBOX), Latency::Fixed(500))
        .unwrap();
    let (a, b) = tokio::join!(send_with_id(&s.http, &s.sim, &s.token, "m-5", 1), async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        send_with_id(&s.http, &s.sim, &s.token, "m-6", 1).await
    });
    assert_eq!(
        (a, b),
        (429, 429),
        "m-5 is over the minute limit once it has the slot"
    );

    let refusals = s.sim.refusals();
    let seen: Vec<(RefusalCause, Option<&str>, Option<u64>, i64)> = refusals
        .iter()
        .map(|r| {
            (
                r.cause,
                r.client_request_id.as_deref(),
                r.retry_after_s,
                r.at_ms - t0().timestamp_millis(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (RefusalCause::Minute, Some("m-3"), Some(55), 12_000),
            // 2 of 10 recipients used at 12:00:07; 9 more fit when those age out, 24 h later.
            (RefusalCause::Day, Some("m-4"), Some(86_395), 12_000),
            (RefusalCause::Concurrency, Some("m-6"), Some(1), 12_000),
            (RefusalCause::Minute, Some("m-5"), Some(55), 12_000),
        ]
    );
    assert!(
        refusals
            .iter()
            .all(|r| r.mailbox == MAILBOX && r.client_id == CLIENT)
    );
    let over_http: Vec<RecordedRefusal> = json_of(
        s.http
            .get(format!("{}_sim/refusals", s.sim.login_base_url())),
    )
    .await;
    assert_eq!(over_http, refusals);
    let ids: Vec<Option<String>> = s
        .sim
        .messages()
        .into_iter()
        .map(|m| m.client_request_id)
        .collect();
    assert_eq!(ids, vec![Some("m-1".to_owned()), Some("m-2".to_owned())]);
    s.sim.reset();
    assert!(s.sim.refusals().is_empty());
}

#[tokio::test]
async fn a_record_keeps_both_its_arrival_and_its_acceptance_after_the_added_latency() {
    let sim = GraphSim::start(config_with(refusing())).await.unwrap();
    let http = Client::new();
    let token = token(&http, &sim).await;
    sim.set_latency(Target::Global, Latency::Fixed(300))
        .unwrap();
    let before = Utc::now().timestamp_millis();
    assert_eq!(send_with_id(&http, &sim, &token, "m-1", 1).await, 202);
    let after = Utc::now().timestamp_millis();
    let m = &sim.messages()[0];
    assert!(
        before <= m.arrived_at_ms && m.received_at_ms <= after,
        "{m:?}"
    );
    let processing = m.received_at_ms - m.arrived_at_ms;
    assert!((300..1_000).contains(&processing), "{processing} ms");
}

#[tokio::test]
async fn graph_sim_binary_serves_a_sendgrid_stand_in_beside_graph_when_asked() {
    let (mut child, mut lines) = spawn_graph_sim(
        &[
            "--listen",
            "127.0.0.1:0",
            "--sendgrid-listen",
            "127.0.0.1:0",
        ],
        &[("GRAPH_SIM_SENDGRID_KEYS", "sg-key-1,sg-key-2")],
    );
    let mut sendgrid = None;
    for _ in 0..3 {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let Some(url) = line.strip_prefix("SENDGRID_API_BASE_URL=") {
            sendgrid = Some(url.trim_end_matches('/').to_owned());
        }
    }
    let sendgrid = sendgrid.expect("the third line names the SendGrid URL");
    let http = Client::new();
    let send = |key: &'static str| {
        http.post(format!("{sendgrid}/v3/mail/send"))
            .bearer_auth(key)
            .json(&json!({
                "personalizations": [{"to": [{"email": "a@example.org"}], "bcc": [{"email": "b@example.org"}]}],
                "from": {"email": "News@Adatum.example"},
                "subject": "s",
                "content": [{"type": "text/plain", "value": "b"}],
                "custom_args": {"mail_worker_message_id": "6f1c2a9e-3b4d-4e5f-8a7b-9c0d1e2f3a4b"}
            }))
            .send()
    };
    assert_eq!(
        send("sg-key-2").await.unwrap().status(),
        StatusCode::ACCEPTED
    );
    assert_eq!(
        send("nope").await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    let records: Value = json_of(http.get(format!("{sendgrid}/_sim/messages"))).await;
    let records = records.as_array().unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(
        records[0]["message_id"],
        "6f1c2a9e-3b4d-4e5f-8a7b-9c0d1e2f3a4b"
    );
    assert_eq!(records[0]["from"], "news@adatum.example");
    assert_eq!(records[0]["recipient_count"], 2);
    terminate(&child);
    assert!(child.wait().await.unwrap().success());
}

#[tokio::test]
async fn graph_sim_binary_documents_its_config_file_in_help() {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_graph-sim"))
        .arg("--help")
        .output()
        .await
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "CONFIG FILE",
        "\"mailboxes\"",
        "\"minute_overflow\": \"accept_delayed\"",
        "\"recipients_per_day\": 10000",
        "--mailbox <ADDRESS>",
        "--listen <ADDR>",
        "learn.microsoft.com/graph/throttling-limits",
    ] {
        assert!(help.contains(needle), "--help lacks {needle:?}");
    }
}

#[tokio::test]
async fn graph_sim_binary_serves_a_quick_mailbox_and_prints_stats_on_sigterm() {
    let (mut child, mut lines) = spawn_graph_sim(
        &[
            "--listen",
            "127.0.0.1:0",
            "--mailbox",
            "quick@contoso.example",
            "--tenant-id",
            TENANT,
            "--client-id",
            CLIENT,
            "--client-secret",
            SECRET,
            "--messages-per-minute",
            "1",
        ],
        &[],
    );
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let graph_base = first
        .strip_prefix("GRAPH_API_BASE_URL=")
        .expect("first line names the Graph URL");
    let login = lines.next_line().await.unwrap().unwrap();
    let login = login
        .strip_prefix("GRAPH_LOGIN_BASE_URL=")
        .unwrap()
        .trim_end_matches('/')
        .to_owned();

    let http = Client::new();
    let body: Value = json_of(
        http.post(format!("{login}/{TENANT}/oauth2/v2.0/token"))
            .form(&credentials(CLIENT, SECRET, &format!("{login}/.default"))),
    )
    .await;
    let token = body["access_token"].as_str().unwrap();
    let send = || {
        http.post(format!("{graph_base}/users/quick@contoso.example/sendMail"))
            .bearer_auth(token)
            .json(&message(1))
            .send()
    };
    assert_eq!(send().await.unwrap().status(), StatusCode::ACCEPTED);
    assert_eq!(
        send().await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS,
        "--messages-per-minute 1"
    );

    terminate(&child);
    let mut last = String::new();
    while let Some(line) = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap()
    {
        last = line;
    }
    let status = child.wait().await.unwrap();
    assert!(status.success(), "{status:?}");
    let stats: SimStats = serde_json::from_str(&last).expect("the last line is the stats JSON");
    let quick = stats.mailbox("quick@contoso.example").unwrap();
    assert_eq!((quick.accepted, quick.refused.minute), (1, 1));
}
