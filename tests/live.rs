//! The live conformance kit: what Microsoft 365 really answers to the requests this product makes,
//! observed on a tenant of your own and written as recordings that graph-sim is then checked
//! against (`crates/graph-sim/tests/replay.rs`). docs/live-tenant.md says how to set a tenant up.
//!
//! ```text
//! GRAPH_LIVE_TENANT_ID=… GRAPH_LIVE_CLIENT_ID=… GRAPH_LIVE_CLIENT_SECRET=… \
//! GRAPH_LIVE_MAILBOX=sender@yourtenant.example GRAPH_LIVE_TO=inbox-you-read@yourtenant.example \
//!   cargo test --test live -- --ignored --nocapture
//! ```
//!
//! About ten minutes and at most 12 messages: a draft with our `internetMessageId` sent and
//! found in Sent Items by it; a `sendMail` with it set (kept or not); NDRs for a bogus internal
//! and a bogus external address, listed with the product's exact request and read as MIME and
//! as JSON; 2.0 MB + 1.0 MB and 3.5 MB attachments; a `List-Unsubscribe` header through a MIME
//! send; any 429 met. Each exchange is written, with the tenant, client id, secret, tokens and
//! addresses replaced by placeholders, to `tests/recordings/<date>/live-*.json`, and what was
//! observed to `tests/recordings/<date>/observations.md`. Unset variables skip it, naming them.
//!
//! `GRAPH_LIVE_LOGIN_BASE_URL` and `GRAPH_LIVE_API_BASE_URL` point it elsewhere than Microsoft
//! (the test below runs it against graph-sim to keep the kit itself working);
//! `GRAPH_LIVE_BOGUS_INTERNAL` names the bogus internal recipient (default
//! `nonexistent-<random>@<the mailbox's domain>`).

#[path = "live/kit.rs"]
mod kit;

use std::time::Duration;

use graph_sim::{
    GraphSim, SimConfig, SimMailbox,
    config::{SimBounces, UnknownRecipients},
    recording::{Recording, replay},
};
use kit::{Kit, LiveConfig};

#[tokio::test]
#[ignore = "talks to a real Microsoft 365 tenant: set GRAPH_LIVE_* and pass --ignored"]
async fn observe_a_real_tenant() {
    let config = match LiveConfig::from_env(|name| std::env::var(name).ok()) {
        Ok(config) => config,
        Err(unset) => {
            println!(
                "live kit skipped: set {} (unset: {})",
                LiveConfig::REQUIRED.join(", "),
                unset.join(", ")
            );
            return;
        }
    };
    let out = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/recordings")
        .join(chrono::Utc::now().format("%Y-%m-%d").to_string());
    let report = Kit::new(config).run(&out).await;
    println!("{report}");
}

#[test]
fn without_its_variables_the_kit_names_each_one_unset() {
    let err = LiveConfig::from_env(|name| (name == "GRAPH_LIVE_TO").then(|| "a@b.example".into()))
        .unwrap_err();
    assert_eq!(
        err,
        [
            "GRAPH_LIVE_TENANT_ID",
            "GRAPH_LIVE_CLIENT_ID",
            "GRAPH_LIVE_CLIENT_SECRET",
            "GRAPH_LIVE_MAILBOX"
        ]
    );
}

/// The kit end to end against graph-sim (NDRs after 0 s): every observation made, the
/// recordings written without the secret, the token, the tenant or an address, and each
/// recording replaying against graph-sim as recorded.
#[tokio::test]
async fn the_kit_runs_against_graph_sim_and_its_recordings_hold_no_secret() {
    const SECRET: &str = "live-s3cret-value";
    let sim = GraphSim::start(
        SimConfig {
            bounces: SimBounces {
                unknown_recipients: vec![
                    UnknownRecipients {
                        address: "*@example.invalid".into(),
                        code: "5.1.1".into(),
                    },
                    UnknownRecipients {
                        address: "nobody-live-kit@contoso.example".into(),
                        code: "5.1.10".into(),
                    },
                ],
                ..SimBounces::default()
            },
            ..SimConfig::new()
        }
        .with_app("tenant-1234", "client-5678", SECRET)
        .with_mailbox(SimMailbox::new("sender@contoso.example", "tenant-1234"))
        .with_mailbox(SimMailbox::new("reader@contoso.example", "tenant-1234")),
    )
    .await
    .expect("graph-sim starts");
    let vars = [
        ("GRAPH_LIVE_TENANT_ID", "tenant-1234".to_owned()),
        ("GRAPH_LIVE_CLIENT_ID", "client-5678".to_owned()),
        ("GRAPH_LIVE_CLIENT_SECRET", SECRET.to_owned()),
        ("GRAPH_LIVE_MAILBOX", "sender@contoso.example".to_owned()),
        ("GRAPH_LIVE_TO", "reader@contoso.example".to_owned()),
        (
            "GRAPH_LIVE_LOGIN_BASE_URL",
            sim.login_base_url().to_string(),
        ),
        ("GRAPH_LIVE_API_BASE_URL", sim.graph_base_url().to_string()),
        (
            "GRAPH_LIVE_BOGUS_INTERNAL",
            "nobody-live-kit@contoso.example".to_owned(),
        ),
    ];
    let mut config = LiveConfig::from_env(|name| {
        vars.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
    })
    .expect("every variable set");
    config.patience = Duration::from_secs(10);
    let dir = tempfile::tempdir().expect("a temporary folder");
    let report = Kit::new(config).run(dir.path()).await;
    println!("{report}");
    for line in [
        "draft: our internetMessageId kept: yes",
        "sendMail: our internetMessageId kept: yes",
        "NDR (internal): found",
        "NDR (external): found",
        "attachments 2.0 MB + 1.0 MB: sent",
        "attachment 3.5 MB (upload session): sent",
        "429s met: 0",
    ] {
        assert!(report.contains(line), "the report says {line:?}:\n{report}");
    }
    let mut files: Vec<_> = std::fs::read_dir(dir.path())
        .expect("the kit's folder")
        .map(|e| e.expect("an entry").path())
        .collect();
    files.sort();
    let names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "live-attachments.json",
            "live-draft-internet-message-id.json",
            "live-list-unsubscribe.json",
            "live-ndr-external.json",
            "live-ndr-internal.json",
            "live-sendmail-internet-message-id.json",
            "live-token.json",
            "observations.md",
        ]
    );
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a file the kit wrote");
        for secret in [
            SECRET,
            "tenant-1234",
            "client-5678",
            "contoso.example",
            "eyJ",
        ] {
            assert!(
                !text.contains(secret),
                "{} holds {secret:?}",
                file.display()
            );
        }
    }
    // Each recording replays against graph-sim as it was recorded (the format round-trips, and
    // the placeholders stand where the values were).
    let bearer: serde_json::Value = reqwest::Client::new()
        .post(sim.token_url("tenant-1234"))
        .form(&[
            ("client_id", "client-5678"),
            ("client_secret", SECRET),
            ("scope", &sim.graph_scope()),
            ("grant_type", "client_credentials"),
        ])
        .send()
        .await
        .expect("a token")
        .json()
        .await
        .expect("token JSON");
    let values = std::collections::BTreeMap::from(
        [
            ("mailbox", "sender@contoso.example".to_owned()),
            ("to", "reader@contoso.example".to_owned()),
            ("domain", "contoso.example".to_owned()),
            ("tenant", "tenant-1234".to_owned()),
            ("client_id", "client-5678".to_owned()),
            ("client_secret", SECRET.to_owned()),
            ("scope", sim.graph_scope()),
            (
                "bogus_internal",
                "nobody-live-kit@contoso.example".to_owned(),
            ),
            ("bogus_external", "nobody@example.invalid".to_owned()),
        ]
        .map(|(k, v)| (k.to_owned(), v)),
    );
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "json"))
    {
        let recording: Recording =
            serde_json::from_str(&std::fs::read_to_string(file).expect("a recording"))
                .expect("the kit writes recordings");
        let differences = replay(
            &sim.login_base_url(),
            bearer["access_token"].as_str().expect("a token"),
            &recording,
            values.clone(),
        )
        .await;
        assert!(
            differences.is_empty(),
            "{} replays differently:\n{}",
            file.display(),
            differences.join("\n")
        );
    }
    sim.shutdown().await.expect("graph-sim stops");
}
