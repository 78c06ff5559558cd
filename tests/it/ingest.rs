//! The HTTP ingest (src/ingest, docs/ingest.md) against the real PostgreSQL: a 10,000-line
//! campaign posted through the daemon's listener with every request sent twice is stored once;
//! bad tokens, senders outside a token's set, malformed lines and oversized bodies are refused
//! with their reasons; PostgreSQL away is 503 with `Retry-After` and nothing stored; the
//! OpenAPI description passes openapi-spec-validator and is what the listener serves.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use mail_worker::{
    config::Config,
    daemon,
    domain::SecretRef,
    ingest::{self, IngestSettings, Producers, REPLAYED},
    ops::Metrics,
    store::events::Outbox,
};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{
    TestApp,
    logs::{capture_logs, logs_containing},
    proxy::Gate,
    python, spawn_app,
};

const CRM: &str = "crm-0123456789abcdef";
const NARROW: &str = "narrow-0123456789abcdef";

/// A campaign line of `mailbox`, scheduled far ahead (nothing is sent while the test runs).
fn line(id: Uuid, mailbox: &str) -> Value {
    json!({
        "id": id.to_string(),
        "systemMailbox": mailbox,
        "to": [{"address": "guest@fabrikam.example"}],
        "subject": "Invitation",
        "body": {"contentType": "text", "content": "Hello"},
        "scheduledOn": "2031-01-01T09:00:00Z",
    })
}

fn jsonl(lines: &[Value]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// The listener on `pool` in this process, with tokens `crm` (every sender) and `narrow`
/// (`mb0@contoso.example` only), at most `max_lines` lines and `max_bytes` bytes.
async fn listener(pool: sqlx::PgPool, max_lines: usize, max_bytes: usize) -> SocketAddr {
    let producers = Producers::from_secrets([
        ("crm", CRM, None),
        (
            "narrow",
            NARROW,
            Some(vec!["mb0@contoso.example".to_owned()]),
        ),
    ]);
    listener_for(pool, producers, max_lines, max_bytes).await
}

/// The listener on `pool` for `producers`.
async fn listener_for(
    pool: sqlx::PgPool,
    producers: Producers,
    max_lines: usize,
    max_bytes: usize,
) -> SocketAddr {
    let settings = IngestSettings {
        producers: Arc::new(producers),
        max_body_bytes: max_bytes,
        max_lines,
        outbox: Outbox::Off,
        retry_after: Duration::from_secs(5),
    };
    let bound = ingest::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = bound.local_addr().unwrap();
    let metrics = Arc::new(Metrics::new());
    tokio::spawn(ingest::serve(
        bound,
        pool,
        settings,
        metrics,
        std::future::pending(),
    ));
    addr
}

/// POSTs `body` with `token` (and `key`); the status, the `Idempotent-Replayed` header and the
/// JSON answer.
async fn post(
    addr: SocketAddr,
    token: &str,
    key: Option<&str>,
    body: String,
) -> (u16, bool, Value, reqwest::header::HeaderMap) {
    let mut request = reqwest::Client::new()
        .post(format!("http://{addr}/v1/messages"))
        .bearer_auth(token)
        .header("content-type", "application/x-ndjson")
        .body(body);
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let answer = request.send().await.unwrap();
    let status = answer.status().as_u16();
    let headers = answer.headers().clone();
    let replayed = headers.get(REPLAYED).is_some();
    (status, replayed, answer.json().await.unwrap(), headers)
}

async fn stored(app: &TestApp, ids: &[Uuid]) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM messages WHERE id = ANY($1)")
        .bind(ids)
        .fetch_one(&app.db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_10000_line_campaign_with_every_request_sent_twice_is_stored_once() {
    let app = spawn_app().await;
    let mut config: Config = app.config.clone();
    config.metrics_listen = None;
    config.intake.queue = None;
    config.ingest.listen = Some("127.0.0.1:0".parse().unwrap());
    config.ingest.tokens = vec![("crm".to_owned(), SecretRef::new(CRM))];
    let (handle, run) = daemon::start(config, daemon::Options::default())
        .await
        .unwrap();
    let run = tokio::spawn(run);
    let addr = handle.ingest_addr.expect("INGEST_LISTEN is set");
    let mailbox = app.mailboxes[0].0.to_string();
    let ids: Vec<Uuid> = (0..10_000).map(|_| Uuid::new_v4()).collect();
    let mut total_stored = 0;
    for (n, batch) in ids.chunks(500).enumerate() {
        let lines: Vec<Value> = batch.iter().map(|id| line(*id, &mailbox)).collect();
        // Half the batches as a JSON array, half as JSONL.
        let body = if n % 2 == 0 {
            Value::Array(lines).to_string()
        } else {
            jsonl(&lines)
        };
        let key = format!("campaign-batch-{n}");
        // The request and its repeat at once: the second waits for the first's transaction.
        let (first, again) = tokio::join!(
            post(addr, CRM, Some(&key), body.clone()),
            post(addr, CRM, Some(&key), body)
        );
        assert_eq!((first.0, again.0), (200, 200), "{:?}", first.2);
        assert_eq!(first.2, again.2, "the repeat gets the first answer");
        assert!(first.1 ^ again.1, "exactly one of the two is the replay");
        assert_eq!(first.2["status"], "stored");
        assert_eq!(first.2["lines"], 500);
        total_stored += first.2["stored"].as_u64().unwrap();
    }
    assert_eq!(total_stored, 10_000);
    assert_eq!(stored(&app, &ids).await, 10_000);
    assert_eq!(app.db.rows_in("messages").await, 10_000);
    assert_eq!(app.db.rows_in("ingest_requests").await, 20);
    // Sent again without a key: every line is a duplicate, nothing new.
    let lines: Vec<Value> = ids[..500].iter().map(|id| line(*id, &mailbox)).collect();
    let (status, replayed, answer, _) = post(addr, CRM, None, jsonl(&lines)).await;
    assert_eq!((status, replayed), (200, false));
    assert_eq!(
        (answer["stored"].as_u64(), answer["duplicate"].as_u64()),
        (Some(0), Some(500))
    );
    assert_eq!(answer["results"][0]["outcome"], "duplicate");
    assert_eq!(app.db.rows_in("messages").await, 10_000);
    let metrics = handle.metrics.encode();
    assert!(
        metrics.contains("mail_worker_ingest_lines_total{outcome=\"stored\"} 10000"),
        "{metrics}"
    );
    handle.stop();
    run.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_bad_token_is_401_and_a_sender_outside_the_tokens_set_is_refused_with_the_reason() {
    let app = TestApp::builder().mailboxes(2).spawn().await;
    let addr = listener(app.db.pool.clone(), 100, 1 << 20).await;
    let (mb0, mb1) = (
        app.mailboxes[0].0.to_string(),
        app.mailboxes[1].0.to_string(),
    );
    let ids = [Uuid::new_v4(), Uuid::new_v4()];
    let body = jsonl(&[line(ids[0], &mb0), line(ids[1], &mb1)]);
    let answer = reqwest::Client::new()
        .post(format!("http://{addr}/v1/messages"))
        .bearer_auth("crm-0123456789abcdeX")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 401);
    assert_eq!(answer.headers()["www-authenticate"], "Bearer");
    let no_header = reqwest::Client::new()
        .post(format!("http://{addr}/v1/messages"))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(no_header.status().as_u16(), 401);
    assert_eq!(
        stored(&app, &ids).await,
        0,
        "nothing stored for a bad token"
    );

    let (status, _, answer, _) = post(addr, NARROW, None, body).await;
    assert_eq!(status, 207, "{answer}");
    assert_eq!(answer["status"], "partial");
    assert_eq!(answer["producer"], "narrow");
    assert_eq!(answer["results"][0]["outcome"], "stored");
    let refused = &answer["results"][1];
    assert_eq!(
        (refused["line"].as_u64(), &refused["outcome"]),
        (Some(2), &json!("refused"))
    );
    assert_eq!(refused["id"], ids[1].to_string());
    let reason = refused["reason"].as_str().unwrap();
    assert!(
        reason.contains("not one token narrow may post for")
            && reason.contains("mb0@contoso.example"),
        "{reason}"
    );
    assert_eq!(stored(&app, &ids[..1]).await, 1);
    assert_eq!(stored(&app, &ids[1..]).await, 0);
}

#[tokio::test]
async fn a_malformed_line_is_refused_with_its_number_while_the_good_lines_are_stored() {
    let app = spawn_app().await;
    let addr = listener(app.db.pool.clone(), 100, 1 << 20).await;
    let mb = app.mailboxes[0].0.to_string();
    let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let mut no_body = line(c, &mb);
    no_body.as_object_mut().unwrap().remove("body");
    let body = format!(
        "{}\n{{\"id\": \"{b}\", \"to\": \n{}\n\n{}\n",
        line(a, &mb),
        no_body,
        line(b, &mb)
    );
    let (status, _, answer, _) = post(addr, CRM, None, body).await;
    assert_eq!(status, 207, "{answer}");
    assert_eq!(answer["status"], "partial");
    assert_eq!(
        (answer["stored"].as_u64(), answer["refused"].as_u64()),
        (Some(2), Some(2))
    );
    let results = answer["results"].as_array().unwrap();
    let lines: Vec<(u64, &str)> = results
        .iter()
        .map(|r| (r["line"].as_u64().unwrap(), r["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(
        lines,
        [(1, "stored"), (2, "refused"), (3, "refused"), (5, "stored")]
    );
    assert_eq!(
        results[1]["id"],
        Value::Null,
        "line 2 is not JSON: no id read"
    );
    assert!(
        results[1]["reason"]
            .as_str()
            .unwrap()
            .starts_with("not a message"),
        "{answer}"
    );
    assert_eq!(results[2]["id"], c.to_string());
    assert!(
        results[2]["reason"].as_str().unwrap().contains("body"),
        "{answer}"
    );
    assert_eq!(stored(&app, &[a, b, c]).await, 2);

    // Every line refused: 422, status `refused`, nothing stored.
    let (status, _, answer, _) = post(addr, CRM, None, "{\"id\": 1}\n".into()).await;
    assert_eq!((status, answer["status"].as_str()), (422, Some("refused")));
}

#[tokio::test]
async fn too_many_lines_or_bytes_are_413_and_a_reused_key_with_another_body_is_422() {
    let app = spawn_app().await;
    let addr = listener(app.db.pool.clone(), 3, 4_000).await;
    let mb = app.mailboxes[0].0.to_string();
    let ids: Vec<Uuid> = (0..4).map(|_| Uuid::new_v4()).collect();
    let four = jsonl(&ids.iter().map(|id| line(*id, &mb)).collect::<Vec<_>>());
    let (status, _, answer, _) = post(addr, CRM, None, four).await;
    assert_eq!(status, 413);
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("INGEST_MAX_LINES (3)"),
        "{answer}"
    );
    let mut big = line(ids[0], &mb);
    big["subject"] = json!("x".repeat(5_000));
    let (status, _, answer, _) = post(addr, CRM, None, jsonl(&[big])).await;
    assert_eq!(status, 413);
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("INGEST_MAX_BODY_BYTES (4000 bytes)"),
        "{answer}"
    );
    assert_eq!(stored(&app, &ids).await, 0);

    let one = jsonl(&[line(ids[0], &mb)]);
    assert_eq!(post(addr, CRM, Some("k-1"), one).await.0, 200);
    let other = jsonl(&[line(ids[1], &mb)]);
    let (status, _, answer, _) = post(addr, CRM, Some("k-1"), other.clone()).await;
    assert_eq!(status, 422);
    assert!(
        answer["error"].as_str().unwrap().contains("\"k-1\""),
        "{answer}"
    );
    // The key is per token: another token may use it.
    assert_eq!(post(addr, NARROW, Some("k-1"), other).await.0, 200);
    assert_eq!(stored(&app, &ids).await, 2);
}

#[tokio::test]
async fn postgresql_away_is_503_with_retry_after_and_nothing_stored() {
    let app = spawn_app().await;
    let (pg, pool) = Gate::postgres(&app.db.url, 2, Duration::from_secs(2)).await;
    let addr = listener(pool, 100, 1 << 20).await;
    let mb = app.mailboxes[0].0.to_string();
    let before = Uuid::new_v4();
    assert_eq!(
        post(addr, CRM, None, jsonl(&[line(before, &mb)])).await.0,
        200
    );
    pg.cut();
    let ids: Vec<Uuid> = (0..50).map(|_| Uuid::new_v4()).collect();
    let body = jsonl(&ids.iter().map(|id| line(*id, &mb)).collect::<Vec<_>>());
    let (status, _, answer, headers) = post(addr, CRM, Some("outage"), body.clone()).await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(headers["retry-after"], "5");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("nothing was stored"),
        "{answer}"
    );
    assert_eq!(stored(&app, &ids).await, 0, "nothing half-stored");
    assert_eq!(
        app.db.rows_in("ingest_requests").await,
        1,
        "only the request before"
    );
    // PostgreSQL back: the same request with the same key is stored, once.
    pg.open(true);
    let (status, replayed, answer, _) = post(addr, CRM, Some("outage"), body).await;
    assert_eq!(
        (status, replayed, answer["stored"].as_u64()),
        (200, false, Some(50))
    );
    assert_eq!(stored(&app, &ids).await, 50);
}

#[tokio::test]
async fn the_openapi_description_passes_the_validator_and_is_served_as_committed() {
    let python = python::with("openapi_spec_validator");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/ingest-openapi.json");
    let out = std::process::Command::new(python)
        .args(["-m", "openapi_spec_validator", path])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openapi-spec-validator: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let app = spawn_app().await;
    let addr = listener(app.db.pool.clone(), 10, 1_000).await;
    let served = reqwest::get(format!("http://{addr}/v1/openapi.json"))
        .await
        .unwrap();
    assert_eq!(served.headers()["content-type"], "application/json");
    let served: Value = served.json().await.unwrap();
    let committed: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(served, committed);
    assert_eq!(served["openapi"], "3.1.0");
}

#[tokio::test]
async fn the_admin_queue_page_shows_the_http_ingests_counts_per_producer() {
    let app = spawn_app().await;
    let addr = listener(app.db.pool.clone(), 100, 1 << 20).await;
    let (ui, login) = crate::admin::logged_in_ui(&app).await;
    let page = ui.page("/queue", &login).await;
    assert!(page.contains("id=\"no-http\""), "{page}");
    let mb = app.mailboxes[0].0.to_string();
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let body = jsonl(&[line(a, &mb), line(b, &mb), json!({"id": "x"})]);
    assert_eq!(post(addr, CRM, None, body).await.0, 207);
    assert_eq!(post(addr, CRM, None, jsonl(&[line(a, &mb)])).await.0, 200);
    let page = ui.page("/queue", &login).await;
    let row = page
        .split("<tr data-producer=\"crm\">")
        .nth(1)
        .and_then(|r| r.split("</tr>").next())
        .unwrap_or_else(|| panic!("no row for crm: {page}"));
    for (class, n) in [
        ("requests", 2),
        ("stored", 2),
        ("duplicate", 1),
        ("refused", 1),
    ] {
        assert!(
            row.contains(&format!("<td class=\"{class}\">{n}</td>")),
            "{class}: {row}"
        );
    }
}

#[tokio::test]
async fn more_concurrent_requests_than_pool_connections_are_all_stored() {
    // Each request holds one connection at a time: 6 requests on a pool of 2 wait their turn
    // instead of each holding one while waiting for a second (503 after the store deadline).
    let app = spawn_app().await;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(app.db.url.as_str())
        .await
        .unwrap();
    let addr = listener(pool, 100, 1 << 20).await;
    let mb = app.mailboxes[0].0.to_string();
    let ids: Vec<Uuid> = (0..60).map(|_| Uuid::new_v4()).collect();
    let posts = ids.chunks(10).map(|chunk| {
        let body = jsonl(&chunk.iter().map(|id| line(*id, &mb)).collect::<Vec<_>>());
        post(addr, CRM, None, body)
    });
    let answers = futures::future::join_all(posts).await;
    let statuses: Vec<u16> = answers.iter().map(|a| a.0).collect();
    assert_eq!(
        statuses,
        [200; 6],
        "{:?}",
        answers.iter().map(|a| &a.2).collect::<Vec<_>>()
    );
    assert_eq!(stored(&app, &ids).await, 60);
}

#[tokio::test]
async fn the_curl_example_posts_a_campaign_file_in_requests_of_500() {
    let app = spawn_app().await;
    let addr = listener(app.db.pool.clone(), 1_000, 1 << 20).await;
    let mb = app.mailboxes[0].0.to_string();
    let ids: Vec<Uuid> = (0..1_200).map(|_| Uuid::new_v4()).collect();
    let mut lines: Vec<String> = ids.iter().map(|id| line(*id, &mb).to_string()).collect();
    lines[700] = "{\"id\": \"not a message\"}".to_owned();
    let dir = crate::support::temp_dir("ingest-curl");
    // A name with a space and a comma: the example makes its keys of it, which take neither.
    let file = dir.path().join("spring campaign, v2.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/ingest/curl.sh");
    let run = || {
        tokio::process::Command::new("bash")
            .arg(script)
            .arg(&file)
            .env("INGEST_URL", format!("http://{addr}"))
            .env("INGEST_TOKEN", CRM)
            .output()
    };
    let out = run().await.unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "a line was refused: {said}");
    assert_eq!(said.matches("HTTP 200 stored").count(), 2, "{said}");
    assert!(said.contains("HTTP 207 partial stored 499"), "{said}");
    assert!(
        said.contains("line 201"),
        "the refused line by its number in its request: {said}"
    );
    assert!(!said.contains(CRM), "the token is never printed");
    assert_eq!(stored(&app, &ids).await, 1_199);
    // Run again (new keys): every line a duplicate, nothing stored twice.
    let out = run().await.unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(said.contains("stored 0 duplicate 500 refused 0"), "{said}");
    assert_eq!(app.db.rows_in("messages").await, 1_199);
}

/// POSTs `body` with `CRM`'s token and the raw `key` header; the status, whether replayed and
/// the answer's bytes as sent.
async fn post_raw(addr: SocketAddr, key: &[u8], body: String) -> (u16, bool, Vec<u8>) {
    post_raw_as(addr, CRM, key, body).await
}

/// [`post_raw`] with `token`.
async fn post_raw_as(
    addr: SocketAddr,
    token: &str,
    key: &[u8],
    body: String,
) -> (u16, bool, Vec<u8>) {
    let answer = reqwest::Client::new()
        .post(format!("http://{addr}/v1/messages"))
        .bearer_auth(token)
        .header(
            "idempotency-key",
            reqwest::header::HeaderValue::from_bytes(key).unwrap(),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    let replayed = answer.headers().get(REPLAYED).is_some();
    (status, replayed, answer.bytes().await.unwrap().to_vec())
}

#[tokio::test]
async fn a_replay_is_the_first_answer_byte_for_byte_and_keys_follow_the_ietf_draft() {
    let app = spawn_app().await;
    let addr = listener(app.db.pool.clone(), 10, 1 << 20).await;
    let mb = app.mailboxes[0].0.to_string();
    let ids = [Uuid::new_v4(), Uuid::new_v4()];
    // A refused line too, so the answer has every field (`reason` included).
    let body = format!(
        "{}{{\"id\": \"{}\"}}\n",
        jsonl(&[line(ids[0], &mb)]),
        ids[1]
    );
    let (status, replayed, first) = post_raw(addr, b"batch-7", body.clone()).await;
    assert_eq!(
        (status, replayed),
        (207, false),
        "{}",
        String::from_utf8_lossy(&first)
    );
    // The answer's fields in the order the daemon writes them (not jsonb's, which sorts keys).
    let text = String::from_utf8(first.clone()).unwrap();
    assert!(
        text.starts_with("{\"status\":\"partial\",\"producer\":\"crm\",\"lines\":2,"),
        "{text}"
    );
    // The draft's quoted form names the same key: the first answer again, byte for byte.
    let (status, replayed, again) = post_raw(addr, b"\"batch-7\"", body.clone()).await;
    assert_eq!((status, replayed), (207, true));
    assert_eq!(again, first);
    assert_eq!(app.db.rows_in("ingest_requests").await, 1);

    // A bare key with a space is refused naming it; quoted, as the draft writes it, it is a key.
    let (status, _, answer) = post_raw(addr, b"batch 8", body.clone()).await;
    assert_eq!(status, 400);
    let answer: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(
        answer["error"],
        "Idempotency-Key: character 6 is a space; an unquoted key takes visible ASCII but `\"`, `\\` and `,`: \
         quote a key holding spaces as the IETF draft's string (Idempotency-Key: \"batch 7\")"
    );
    let (status, replayed, answer) = post_raw(addr, b"\"batch 8\"", body.clone()).await;
    assert_eq!((status, replayed), (207, false));
    let answer: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(answer["results"][0]["outcome"], "duplicate");
    let (status, _, answer) = post_raw(addr, b"a,b", body).await;
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&answer));
    assert_eq!(app.db.rows_in("ingest_requests").await, 2);
    assert_eq!(stored(&app, &ids).await, 1);
}

#[tokio::test]
async fn every_request_logs_its_outcome_without_the_token_or_a_recipient() {
    // The binary's global capture (a scoped one misses events whose call site another test's
    // thread registered first): this test's lines are those of its own producer's name.
    capture_logs();
    let app = spawn_app().await;
    let producer = format!("logs-{}", &Uuid::new_v4().simple().to_string()[..8]);
    let secret = format!("{producer}-secret-0123456789");
    let producers = Producers::from_secrets([(producer.as_str(), secret.as_str(), None)]);
    let addr = listener_for(app.db.pool.clone(), producers, 2, 4_000).await;
    let post = |key: &'static [u8], body: String| post_raw_as(addr, &secret, key, body);
    let mb = app.mailboxes[0].0.to_string();
    let one = jsonl(&[line(Uuid::new_v4(), &mb)]);
    assert_eq!(post(b"k-1", one.clone()).await.0, 200);
    assert_eq!(post(b"k-1", one.clone()).await.0, 200);
    assert_eq!(post(b"k 2", one.clone()).await.0, 400);
    let three = jsonl(
        &(0..3)
            .map(|_| line(Uuid::new_v4(), &mb))
            .collect::<Vec<_>>(),
    );
    assert_eq!(post(b"k-3", three).await.0, 413);
    let mut big = line(Uuid::new_v4(), &mb);
    big["subject"] = json!("x".repeat(5_000));
    assert_eq!(post(b"k-4", jsonl(&[big])).await.0, 413);
    let malformed = format!("[{{\"to\": \"{mb}\"}}, 7");
    assert_eq!(post(b"k-5", malformed).await.0, 400);
    assert_eq!(post(b"k-6", "\n\n".into()).await.0, 400);
    let bad_token = reqwest::Client::new()
        .post(format!("http://{addr}/v1/messages"))
        .bearer_auth(format!("{secret}X"))
        .body(one)
        .send()
        .await
        .unwrap();
    assert_eq!(bad_token.status().as_u16(), 401);

    let field = |l: &Value, name: &str| match &l[name] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let requests: Vec<Value> = logs_containing(&producer)
        .into_iter()
        .filter(|l| l["event"] == "ingest.request" && l["status"].is_number())
        .collect();
    let logged: Vec<[String; 4]> = requests
        .iter()
        .map(|l| ["status", "producer", "refusal", "replayed"].map(|n| field(l, n)))
        .collect();
    let row = |status: &str, refusal: &str, replayed: &str| {
        [status, &producer, refusal, replayed].map(str::to_owned)
    };
    let expected = vec![
        row("200", "", "false"),
        row("200", "", "true"),
        row("400", "idempotency_key", "false"),
        row("413", "too_many_lines", "false"),
        row("413", "body_too_large", "false"),
        row("400", "malformed_body", "false"),
        row("400", "empty_body", "false"),
    ];
    assert_eq!(logged, expected);
    assert_eq!(
        (field(&requests[1], "lines"), field(&requests[1], "stored")),
        ("1".to_owned(), "1".to_owned()),
        "the replay's counts"
    );
    // The 401's line names no producer (none is known): one at least, with its refusal.
    let unauthorized = logs_containing("\"refusal\":\"token\"");
    assert!(
        unauthorized
            .iter()
            .any(|l| l["event"] == "ingest.request" && l["status"] == 401 && l["producer"] == ""),
        "{unauthorized:?}"
    );
    // No ingest line of any test holds a token's secret or a recipient's address (a sender's,
    // configuration, may be named: a narrowed token's refusals list its senders).
    let ingest: Vec<String> = logs_containing("\"event\":\"ingest.")
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(ingest.len() >= 9, "{ingest:#?}");
    for secret in [CRM, NARROW, &secret, "guest@fabrikam.example"] {
        assert!(
            ingest.iter().all(|l| !l.contains(secret)),
            "{secret} logged: {ingest:#?}"
        );
    }
}
