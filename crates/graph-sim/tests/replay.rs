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
    recording::{Recording, fill, fill_json},
};
use reqwest::{Client, Method};
use serde_json::Value;

const TENANT: &str = "contoso.example";
const CLIENT: &str = "app-contoso";
const SECRET: &str = "s3cret-contoso";
const MAILBOX: &str = "events@contoso.example";

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
    GraphSim::start(
        SimConfig::new()
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
    let mut values = BTreeMap::from([
        ("mailbox".to_owned(), MAILBOX.to_owned()),
        ("tenant".to_owned(), TENANT.to_owned()),
        ("client_id".to_owned(), CLIENT.to_owned()),
        ("client_secret".to_owned(), SECRET.to_owned()),
        ("scope".to_owned(), sim.graph_scope()),
        ("to".to_owned(), "someone@example.com".to_owned()),
        ("inbox_item".to_owned(), inbox_item),
    ]);
    let mut out = Vec::new();
    for step in &recording.steps {
        let path = fill(&step.request.path, &values);
        // One origin serves both: the token endpoint and the API (whose paths carry /v1.0).
        let url = format!(
            "{}{}",
            sim.login_base_url().as_str().trim_end_matches('/'),
            path
        );
        let method = Method::from_bytes(step.request.method.as_bytes()).expect("a method");
        let mut request = http.request(method, &url);
        if !step.request.login {
            request = request.bearer_auth(&bearer);
        }
        for (name, value) in &step.request.headers {
            if !name.eq_ignore_ascii_case("content-type") || step.request.body.is_none() {
                request = request.header(name, fill(value, &values));
            }
        }
        if let Some(body) = &step.request.body {
            request = request.json(&fill_json(body, &values));
        } else if let Some(form) = &step.request.form {
            let form: Vec<(String, String)> = form
                .iter()
                .map(|(k, v)| (k.clone(), fill(v, &values)))
                .collect();
            request = request.form(&form);
        } else if step.request.method == "POST" {
            request = request.header("Content-Length", "0");
        }
        let answer = request.send().await.expect("graph-sim answers");
        let status = answer.status().as_u16();
        let headers: Vec<(String, String)> = answer
            .headers()
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or_default().to_owned()))
            .collect();
        let text = answer.text().await.expect("a body");
        let body: Option<Value> = serde_json::from_str(&text).ok();
        for difference in step.response.differences(status, &headers, body.as_ref()) {
            out.push(format!("step {:?}: {difference}", step.name));
        }
        if status != step.response.status
            && let Some(error) = body.as_ref().and_then(|b| b.get("error"))
        {
            out.push(format!("step {:?}: graph-sim said {error}", step.name));
        }
        for (name, pointer) in &step.capture {
            match body
                .as_ref()
                .and_then(|b| b.pointer(pointer))
                .and_then(Value::as_str)
            {
                Some(value) => {
                    values.insert(name.clone(), value.to_owned());
                }
                None => out.push(format!(
                    "step {:?}: nothing at {pointer} to capture",
                    step.name
                )),
            }
        }
    }
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
