//! graph-sim against what Microsoft answered: every recording in the workspace's
//! `tests/recordings/` (seeded from learn.microsoft.com's examples, joined by a live tenant's
//! runs of `cargo test --test live -- --ignored`) is replayed step by step against graph-sim in
//! process, and any difference in status, the headers that matter or the body's JSON shape fails
//! the test, naming the file, the step and the difference.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use graph_sim::{
    GraphSim, SimConfig, SimMailbox,
    config::{SimBounces, UnknownRecipients},
    recording::Recording,
};
use reqwest::Client;
use serde_json::Value;

const TENANT: &str = "contoso.example";
const CLIENT: &str = "app-contoso";
const SECRET: &str = "s3cret-contoso";
const MAILBOX: &str = "events@contoso.example";
const DOMAIN: &str = "contoso.example";
/// The live kit's bogus recipients (`{bogus_internal}`, `{bogus_external}`): graph-sim bounces
/// both at once.
const BOGUS_INTERNAL: &str = "nobody-replay@contoso.example";
const BOGUS_EXTERNAL: &str = "nobody-replay@example.invalid";

fn recordings_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/recordings")
}

/// Every `*.json` under `dir`, sorted.
fn recordings(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).expect("the recordings folder") {
            let path = entry.expect("a folder entry").path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "json") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

async fn sim() -> GraphSim {
    let bounce = |address: &str, code: &str| UnknownRecipients {
        address: address.into(),
        code: code.into(),
    };
    GraphSim::start(
        SimConfig {
            bounces: SimBounces {
                unknown_recipients: vec![
                    bounce(BOGUS_INTERNAL, "5.1.10"),
                    bounce(BOGUS_EXTERNAL, "5.1.1"),
                ],
                ..SimBounces::default()
            },
            ..SimConfig::new()
        }
        .with_app(TENANT, CLIENT, SECRET)
        .with_mailbox(SimMailbox::new(MAILBOX, TENANT)),
    )
    .await
    .expect("graph-sim starts")
}

async fn token(sim: &GraphSim, http: &Client) -> String {
    let answer: Value = http
        .post(sim.token_url(TENANT))
        .form(&[
            ("client_id", CLIENT),
            ("client_secret", SECRET),
            ("scope", &sim.graph_scope()),
            ("grant_type", "client_credentials"),
        ])
        .send()
        .await
        .expect("token request")
        .json()
        .await
        .expect("token JSON");
    answer["access_token"].as_str().expect("a token").to_owned()
}

/// Replays `recording` against a fresh graph-sim: the differences, each naming its step.
async fn replay(recording: &Recording) -> Vec<String> {
    let sim = sim().await;
    let http = Client::new();
    let bearer = token(&sim, &http).await;
    sim.deliver_to_inbox(
        MAILBOX,
        "noreply@planner.example",
        "You have late tasks!",
        "3 tasks",
    )
    .expect("an Inbox item");
    let inbox_item = sim.inbox(MAILBOX)[0].id.clone();
    let values = BTreeMap::from([
        ("mailbox".to_owned(), MAILBOX.to_owned()),
        ("domain".to_owned(), DOMAIN.to_owned()),
        ("tenant".to_owned(), TENANT.to_owned()),
        ("client_id".to_owned(), CLIENT.to_owned()),
        ("client_secret".to_owned(), SECRET.to_owned()),
        ("scope".to_owned(), sim.graph_scope()),
        ("to".to_owned(), "someone@example.com".to_owned()),
        ("bogus_internal".to_owned(), BOGUS_INTERNAL.to_owned()),
        ("bogus_external".to_owned(), BOGUS_EXTERNAL.to_owned()),
        ("inbox_item".to_owned(), inbox_item),
    ]);
    let out = graph_sim::recording::replay(&sim.login_base_url(), &bearer, recording, values).await;
    sim.shutdown().await.expect("graph-sim stops");
    out
}

#[tokio::test]
async fn graph_sim_answers_every_recording_as_microsoft_did() {
    let files = recordings(&recordings_dir());
    assert!(
        files.len() >= 7,
        "the seeded recordings are in tests/recordings/ ({} found)",
        files.len()
    );
    let mut failures = Vec::new();
    let mut steps = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a recording");
        let recording: Recording = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not a recording: {e}", file.display()));
        assert!(
            recording.source.contains("learn.microsoft.com")
                || recording.source.starts_with("live tenant"),
            "{} names no source",
            file.display()
        );
        steps += recording.steps.len();
        for difference in replay(&recording).await {
            failures.push(format!("{}: {difference}", file.display()));
        }
    }
    println!("replayed {} recordings, {steps} steps", files.len());
    assert!(
        failures.is_empty(),
        "graph-sim answers differently from Microsoft:\n{}",
        failures.join("\n")
    );
}

#[tokio::test]
async fn a_recording_graph_sim_does_not_match_is_caught() {
    let text = std::fs::read_to_string(recordings_dir().join("microsoft-docs/user-sendmail.json"))
        .expect("the sendMail recording");
    let mut recording: Recording = serde_json::from_str(&text).expect("a recording");
    recording.steps[0].response.status = 200;
    recording.steps[0].response.body = Some(serde_json::json!({"id": "x"}));
    let differences = replay(&recording).await;
    assert_eq!(
        differences,
        [
            "step \"sendMail\": status: recorded 200 but got 202",
            "step \"sendMail\": body: recorded JSON but got none",
        ]
    );
}
