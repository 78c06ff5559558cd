//! Issue 16, "bad input never costs good input": every class of bad campaign line is named by
//! its line number while every good line of the same file is enqueued; bad senders files are
//! refused with every error at once; cleartext provider URLs stop start-up. Uses only
//! `crate::support::TestDb` and the library's public API.

use mail_worker::{
    domain::MailboxAddress,
    import::{
        self,
        campaign::{self, SenderDirectory},
    },
    mailer::{MailErrorKind, validate::validate},
    store::{messages, senders},
};
use uuid::Uuid;

use crate::support::TestDb;

const SENDERS: &str = r#"{"systemMailboxes":[{"address":"events@contoso.example","graphTenantId":"contoso.example",
  "clientId":"11111111-1111-4111-8111-111111111111","clientSecret":"env:CONTOSO_GRAPH_SECRET"}],
  "tenants":[{"name":"northwind","provider":"microsoft-graph","sender":"hello@northwind.example",
  "graphTenantId":"9d6b1c1e-0000-4000-8000-00000000abcd","clientId":"33333333-3333-4333-8333-333333333333",
  "clientSecret":"env:NORTHWIND_GRAPH_SECRET"}]}"#;

async fn db_with_senders() -> TestDb {
    let db = TestDb::new().await;
    let file = import::senders::parse(SENDERS).unwrap();
    import::senders::import(&db.pool, &file).await.unwrap();
    db
}

fn id(n: usize) -> Uuid {
    Uuid::from_u128(0x1600_0000_0000_0000_0000_0000_0000_0000 + n as u128)
}

/// A good line for message `n`; `subject` and `body` are JSON string contents.
fn line(n: usize, subject: &str, body: &str) -> String {
    format!(
        r#"{{"id":"{}","tenant":"northwind","to":[{{"address":"r{n}@example.org","name":"R {n}"}}],"subject":"{subject}","body":{{"contentType":"text","content":"{body}"}},"headers":[{{"name":"x-campaign-id","value":"c16"}}]}}"#,
        id(n)
    )
}

/// `count` good lines with `bad` replacing line `at` (1-based).
fn file_with(count: usize, at: usize, bad: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for n in 1..=count {
        if n == at {
            bytes.extend_from_slice(bad);
        } else {
            bytes.extend_from_slice(line(n, "Hello", "Hi").as_bytes());
        }
        bytes.push(b'\n');
    }
    bytes
}

async fn stored(db: &TestDb) -> i64 {
    db.rows_in("messages").await
}

#[tokio::test]
async fn one_line_that_is_not_utf8_costs_only_itself() {
    let db = db_with_senders().await;
    let mut bad = line(26, "Caf\u{e9}", "x").into_bytes();
    let at = bad.windows(2).position(|w| w == [0xC3, 0xA9]).unwrap();
    bad.splice(at..at + 2, [0xE9]); // Latin-1 é
    let bytes = file_with(51, 26, &bad);
    let (inserted, good, bad) = enqueue(&db.pool, &bytes).await;
    assert_eq!((inserted, good), (50, 50), "{bad:?}");
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0].location, "line 26");
    assert!(bad[0].reason.contains("not valid UTF-8"), "{}", bad[0]);
    assert!(bad[0].reason.contains(&id(26).to_string()), "{}", bad[0]);
    assert_eq!(stored(&db).await, 50);
}

#[tokio::test]
async fn a_nul_at_line_600_of_700_costs_only_that_line_and_names_it() {
    let db = db_with_senders().await;
    let bytes = file_with(700, 600, line(600, "Hello", "a\\u0000b").as_bytes());
    let (inserted, good, bad) = enqueue(&db.pool, &bytes).await;
    assert_eq!((inserted, good), (699, 699), "{bad:?}");
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0].location, "line 600");
    assert!(
        bad[0].reason.contains("body.content contains a NUL"),
        "{}",
        bad[0]
    );
    assert!(bad[0].reason.contains(&id(600).to_string()), "{}", bad[0]);
    assert_eq!(stored(&db).await, 699);

    // And in a header name, a header value, a display name, an attachment name.
    for (n, bad_line) in [
        (
            3,
            line(3, "Hello", "x").replace("x-campaign-id", "x-\\u0000"),
        ),
        (4, line(4, "Hello", "x").replace("c16", "c\\u0000")),
        (5, line(5, "Hello", "x").replace("R 5", "R\\u00005")),
        (
            6,
            line(6, "Hello", "x").replace(
                "\"headers\"",
                r#""attachments":[{"name":"a\u0000","contentBase64":"QQ=="}],"headers""#,
            ),
        ),
    ] {
        let db = db_with_senders().await;
        let bytes = file_with(8, n, bad_line.as_bytes());
        let (inserted, _, bad) = enqueue(&db.pool, &bytes).await;
        assert_eq!(inserted, 7, "{bad:?}");
        assert_eq!(bad[0].location, format!("line {n}"));
        assert!(bad[0].reason.contains("contains a NUL"), "{}", bad[0]);
    }
}

#[tokio::test]
async fn an_oversize_line_is_refused_at_parse_time_and_the_rest_enqueued() {
    let db = db_with_senders().await;
    let body = "a".repeat(5 * 1024 * 1024);
    let bytes = file_with(10, 4, line(4, "Hello", &body).as_bytes());
    let (inserted, _, bad) = enqueue(&db.pool, &bytes).await;
    assert_eq!(inserted, 9, "{bad:?}");
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0].location, "line 4");
    assert!(bad[0].reason.contains("4194304 bytes"), "{}", bad[0]);
}

#[tokio::test]
async fn not_json_and_not_a_message_are_named_and_the_rest_enqueued() {
    let db = db_with_senders().await;
    let mut bytes = file_with(5, 2, b"{not json");
    bytes.extend_from_slice(
        format!(r#"{{"id":"{}","tenant":"northwind","to":[],"body":{{"contentType":"text","content":"x"}}}}"#, id(6)).as_bytes(),
    );
    bytes.push(b'\n');
    let (inserted, _, bad) = enqueue(&db.pool, &bytes).await;
    assert_eq!(inserted, 4, "{bad:?}");
    let lines: Vec<&str> = bad.iter().map(|b| b.location.as_str()).collect();
    assert_eq!(lines, ["line 2", "line 6"]);
    assert!(bad[1].reason.contains(&id(6).to_string()), "{}", bad[1]);
}

/// CR/LF in the subject, a header value, a header *name* and a display name: the line is stored
/// (never silently dropped) and refused locally at send time, before any budget or request.
#[tokio::test]
async fn cr_lf_in_a_header_is_stored_and_refused_before_sending() {
    let db = db_with_senders().await;
    let cases = [
        (
            2,
            line(2, "Hi\\r\\nBcc: x@example.org", "x"),
            "ControlCharacter",
        ),
        (
            3,
            line(3, "Hi", "x").replace("c16", "c\\r\\nBcc: x@example.org"),
            "InvalidInternetMessageHeader",
        ),
        (
            4,
            line(4, "Hi", "x").replace("x-campaign-id", "x-a\\r\\nBcc"),
            "InvalidInternetMessageHeader",
        ),
        (
            5,
            line(5, "Hi", "x").replace("R 5", "R\\r\\nBcc: x@example.org"),
            "ControlCharacter",
        ),
    ];
    let mut bytes = Vec::new();
    for n in 1..=6 {
        match cases.iter().find(|(at, ..)| *at == n) {
            Some((_, text, _)) => bytes.extend_from_slice(text.as_bytes()),
            None => bytes.extend_from_slice(line(n, "Hello", "Hi").as_bytes()),
        }
        bytes.push(b'\n');
    }
    let (inserted, _, bad) = enqueue(&db.pool, &bytes).await;
    assert_eq!((inserted, bad.len()), (6, 0), "{bad:?}");
    sqlx::query("UPDATE messages SET scheduled_on = now()")
        .execute(&db.pool)
        .await
        .unwrap();
    let claimed = messages::claim_due(&db.pool, 6).await.unwrap();
    assert_eq!(claimed.len(), 6);
    let from = MailboxAddress::parse("hello@northwind.example").unwrap();
    for n in 1..=6 {
        let row = claimed.iter().find(|m| m.id == id(n)).expect("claimed");
        let verdict = validate(&row.outgoing(from.clone()).unwrap());
        match cases.iter().find(|(at, ..)| *at == n) {
            Some((_, _, expected)) => match verdict.map_err(|e| e.kind) {
                Err(MailErrorKind::Permanent { code, message }) => {
                    assert_eq!(code, *expected, "line {n}: {message}");
                    assert!(!message.contains("x@example.org"), "{message}");
                }
                other => panic!("line {n}: {other:?}"),
            },
            None => assert_eq!(verdict.map_err(|e| e.kind), Ok(()), "line {n}"),
        }
    }
}

/// A chunk PostgreSQL refuses (here: a sender deleted after the directory was read) is
/// retried line by line, so only the refused line is lost, and named.
#[tokio::test]
async fn a_refused_chunk_is_retried_line_by_line() {
    let db = db_with_senders().await;
    let (tenants, system_mailboxes) = senders::sender_ids(&db.pool).await.unwrap();
    let mut directory = SenderDirectory {
        tenants,
        system_mailboxes,
        pools: Default::default(),
    };
    directory.tenants.insert("ghost".into(), Uuid::new_v4());
    let ghost = line(3, "Hello", "Hi").replace("northwind", "ghost");
    let bytes = file_with(20, 3, ghost.as_bytes());
    let report = campaign::enqueue(&db.pool, &bytes, &directory, Default::default())
        .await
        .unwrap();
    assert_eq!(
        (report.inserted, report.stored),
        (19, 19),
        "{:?}",
        report.bad
    );
    assert_eq!(report.bad.len(), 1);
    assert_eq!(report.bad[0].location, "line 3");
    assert!(
        report.bad[0].reason.contains(&id(3).to_string()),
        "{}",
        report.bad[0]
    );
    assert!(
        report.bad[0].reason.contains("PostgreSQL refused"),
        "{}",
        report.bad[0]
    );
    assert_eq!(stored(&db).await, 19);
}

#[tokio::test]
async fn a_senders_file_reports_every_error_at_once_and_writes_nothing() {
    let db = TestDb::new().await;
    let text = r#"{"systemMailboxes":[
        {"address":"ops@contoso.example","graphTenantId":"http://evil.example","clientId":"c","clientSecret":"file:http://evil.example/s"},
        {"address":"OPS@contoso.example","graphTenantId":"contoso.example","clientId":"c","clientSecret":"env:OK","rateLimitPerMinute":"20"}],
      "tenants":[
        {"name":"a","provider":"microsoft-graph","sender":"a@a.example","graphTenantId":"a.example","clientId":"c","clientSecret":"http://x/secret"},
        {"name":"b","provider":"sendgrid","sender":"b@b.example","sendgridApiKey":"env:1BAD"},
        {"name":"c","provider":"sendgrid","sender":"c@c.example","sendgridApiKey":"SG.ok","colour":"red"}]}"#;
    let err = import::senders::parse(text).unwrap_err().to_string();
    for path in [
        "systemMailboxes[0].graphTenantId",
        "systemMailboxes[0].clientSecret",
        "systemMailboxes[1].address: mailbox ops@contoso.example: appears more than once",
        "systemMailboxes[1].rateLimitPerMinute",
        "tenants[0].clientSecret",
        "tenants[1].sendgridApiKey",
        "tenants[2].colour: unknown field",
    ] {
        assert!(err.contains(path), "{path} missing from: {err}");
    }
    assert!(err.contains("has 7 errors in 5 entries: "), "{err}");
    // A file of the right shape with bad values: every one named by import, nothing written.
    let text = text
        .replace(r#""rateLimitPerMinute":"20""#, r#""rateLimitPerMinute":0"#)
        .replace(r#","colour":"red""#, "");
    let file = import::senders::parse(&text).unwrap();
    let err = import::senders::import(&db.pool, &file)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("has 6 errors in 4 entries: "), "{err}");
    let (tenants, mailboxes) = senders::sender_ids(&db.pool).await.unwrap();
    assert!(tenants.is_empty() && mailboxes.is_empty());
}

#[test]
fn cleartext_provider_urls_stop_start_up_naming_the_variable() {
    for var in [
        "GRAPH_API_BASE_URL",
        "GRAPH_LOGIN_BASE_URL",
        "SENDGRID_API_BASE_URL",
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_mail-worker"))
            .arg("check-config")
            .env(var, "http://graph.example")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(78), "{var}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(var) && stderr.contains("https://"),
            "{stderr}"
        );
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_mail-worker"))
            .arg("check-config")
            .env(var, "http://127.0.0.1:9")
            .output()
            .unwrap();
        assert!(out.status.success(), "loopback is our stand-in: {var}");
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
    /// The deferral spread (FNV-1a of the id, `service::spread_ms`) is always below its max.
    #[test]
    fn the_spread_is_always_below_its_max(id in proptest::num::u128::ANY, max in 1u64..=u64::MAX) {
        proptest::prop_assert!(mail_worker::service::spread_ms(Uuid::from_u128(id), max) < max);
    }
}

/// `import::enqueue` as `(inserted, good, bad)`.
async fn enqueue(
    pool: &sqlx::PgPool,
    bytes: &[u8],
) -> (u64, usize, Vec<mail_worker::import::BadEntry>) {
    let e = mail_worker::import::enqueue(pool, bytes, Default::default())
        .await
        .unwrap();
    (e.inserted, e.good, e.bad)
}
