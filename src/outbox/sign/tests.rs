use axum::http::{HeaderMap, HeaderName, HeaderValue};
use chrono::Utc;
use uuid::Uuid;

use super::*;

/// A `whsec_` secret of 32 bytes (0, 1, …, 31): docs/events.md's standard test vector.
const OURS: &str = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
/// Another, as the next secret of a rotation.
const NEXT: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// docs/events.md's test vector body.
const BODY: &str = r#"{"events":[{"id":"00000000-0000-4000-8000-000000000001","type":"sent"}]}"#;

fn event(id: u128) -> Event {
    let seq = i64::try_from(id).unwrap();
    super::super::test_events::sent(Uuid::from_u128(id), Uuid::from_u128(id + 1000), (7, seq))
}

fn header_map(headers: &[(&'static str, String)]) -> HeaderMap {
    headers
        .iter()
        .map(|(name, value)| {
            (
                HeaderName::from_static(name.to_ascii_lowercase().leak()),
                HeaderValue::from_str(value).unwrap(),
            )
        })
        .collect()
}

/// The reference crate's receiver of `secret` (`whsec_…`, or raw bytes as `Webhook::from_bytes`).
fn reference(secret: &str) -> standardwebhooks::Webhook {
    if secret.starts_with(WHSEC) {
        standardwebhooks::Webhook::new(secret).unwrap()
    } else {
        standardwebhooks::Webhook::from_bytes(secret.as_bytes().to_vec()).unwrap()
    }
}

/// The specification's own test vector (spec/standard-webhooks.md, "Signature scheme").
#[test]
fn the_specifications_test_vector_holds() {
    let key = Key::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
    let got = standard(
        &[key],
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        1_614_265_330,
        br#"{"test": 2432232314}"#,
    );
    assert_eq!(got, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
}

/// docs/events.md's vectors, standard and legacy: a receiver's implementation must give the same.
#[test]
fn the_documented_test_vectors_hold() {
    let docs = include_str!("../../../docs/events.md");
    // The batch of the body's one event.
    let mut one = event(1);
    one.id = "00000000-0000-4000-8000-000000000001".parse().unwrap();
    let id = batch_id(&[one]);
    let standard_sig = standard(
        &[Key::parse(OURS).unwrap()],
        &id,
        1_767_225_600,
        BODY.as_bytes(),
    );
    let expected = "v1,sFqAL1Jby5U0Nu2OWXtYkZq67NolMSnzSDGtUONNTpA=";
    assert_eq!(standard_sig, expected, "id {id}");
    for text in [OURS, &id, expected, BODY] {
        assert!(docs.contains(text), "docs/events.md lacks {text}");
    }
    // Legacy (unchanged since ADR 0019).
    let (secret, timestamp, body, expected) = (
        "whsec-test-0123456789",
        1_767_225_600,
        BODY,
        "v1=69eeb6ce26ee05269a78eb0ac2bc914242b14ffbfa5ae1124250cd5ad55faf7b",
    );
    let got = signature(secret.as_bytes(), timestamp, body.as_bytes());
    assert_eq!(got, expected);
    for text in [secret, &timestamp.to_string(), body, expected] {
        assert!(docs.contains(text), "docs/events.md lacks {text}");
    }
}

/// The reference crate (crates.io `standardwebhooks`) verifies what we send, with a `whsec_`
/// secret and with a raw one, and refuses a tampered body, a wrong secret, a stale timestamp.
#[test]
fn the_reference_crate_verifies_ours_and_refuses_forgeries() {
    let body = serde_json::to_vec(&serde_json::json!({"events": [event(1), event(2)]})).unwrap();
    let id = batch_id(&[event(1), event(2)]);
    let now = Utc::now().timestamp();
    for secret in [OURS, "a-raw-secret-0123456789"] {
        let signing = Signing::new(Scheme::Standard, secret).unwrap();
        let receiver = reference(secret);
        let headers = header_map(&signing.headers(&id, now, &body));
        receiver.verify(&body, &headers).unwrap();
        let mut tampered = body.clone();
        tampered[12] ^= 1;
        assert!(receiver.verify(&tampered, &headers).is_err());
        assert!(reference(NEXT).verify(&body, &headers).is_err());
        let stale = header_map(&signing.headers(&id, now - 600, &body));
        assert!(matches!(
            receiver.verify(&body, &stale),
            Err(standardwebhooks::WebhookError::TimestampTooOldError)
        ));
    }
}

/// During a rotation both signatures are sent: a receiver knowing only one of the two secrets
/// verifies; the legacy header is signed with the first.
#[test]
fn two_secrets_send_two_signatures_each_verifying() {
    let signing = Signing::new(Scheme::Both, &format!("{OURS}, {NEXT}")).unwrap();
    let (id, now) = ("msg_x", Utc::now().timestamp());
    let headers = signing.headers(id, now, BODY.as_bytes());
    let names: Vec<&str> = headers.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        [
            ID_HEADER,
            STANDARD_TIMESTAMP_HEADER,
            STANDARD_SIGNATURE_HEADER,
            TIMESTAMP_HEADER,
            SIGNATURE_HEADER
        ]
    );
    assert_eq!(headers[2].1.split(' ').count(), 2);
    let map = header_map(&headers);
    for secret in [OURS, NEXT] {
        reference(secret).verify(BODY.as_bytes(), &map).unwrap();
    }
    assert_eq!(
        headers[4].1,
        signature(OURS.as_bytes(), now, BODY.as_bytes())
    );
    // One scheme only: only its headers.
    let legacy = Signing::new(Scheme::Legacy, OURS).unwrap();
    let names: Vec<&str> = legacy
        .headers(id, now, b"{}")
        .iter()
        .map(|(n, _)| *n)
        .collect();
    assert_eq!(names, [TIMESTAMP_HEADER, SIGNATURE_HEADER]);
}

#[test]
fn bad_secrets_are_refused_without_showing_them() {
    let cases = [
        ("", "is empty"),
        ("short", "is 5 characters long"),
        ("whsec_not*base64", "must be followed by base64"),
        ("whsec_AAECAwQFBgcICQoLDA0ODw==", "key is 16 bytes"),
        (
            "a-raw-secret-0123456789 b-raw-secret-0123456789,c-raw-secret-0123456789",
            "holds 3 secrets",
        ),
        (
            "a-raw-secret-0123456789,short2",
            "secret 2: is 6 characters",
        ),
    ];
    for (value, problem) in cases {
        let e = Signing::new(Scheme::Both, value).unwrap_err();
        assert!(e.contains(problem), "{value:?}: {e}");
        for secret in value.split([',', ' ']).filter(|s| !s.is_empty()) {
            assert!(!e.contains(secret), "{e} shows {secret}");
        }
    }
    assert_eq!(format!("{:?}", Key::parse(OURS).unwrap()), "Key(***)");
}

#[test]
fn a_batch_id_depends_on_its_events_only() {
    let (a, b, c) = (event(1), event(2), event(3));
    let id = batch_id(&[a.clone(), b.clone()]);
    assert!(id.starts_with("msg_") && id.len() == 44, "{id}");
    assert_eq!(id, batch_id(&[a.clone(), b.clone()]));
    assert_ne!(id, batch_id(&[a.clone(), b.clone(), c.clone()]));
    assert_ne!(id, batch_id(&[a.clone(), c]));
    assert_ne!(id, batch_id(&[a]));
}

/// Signing throughput, standard (one secret, and two during a rotation) against legacy, in the
/// same run: `cargo test --lib outbox::sign -- --ignored --nocapture` (ADR 0037's figures).
#[test]
#[ignore = "a micro benchmark: prints figures"]
fn signing_throughput_standard_against_legacy() {
    let events: Vec<Event> = (0..100).map(event).collect();
    let body = serde_json::to_vec(&serde_json::json!({ "events": events })).unwrap();
    let schemes = [
        ("legacy", Signing::new(Scheme::Legacy, OURS).unwrap()),
        ("standard", Signing::new(Scheme::Standard, OURS).unwrap()),
        (
            "standard, 2 secrets",
            Signing::new(Scheme::Standard, &format!("{OURS} {NEXT}")).unwrap(),
        ),
        ("both", Signing::new(Scheme::Both, OURS).unwrap()),
    ];
    // Interleaved, best of 5 runs each: the machine is shared, the best run is the least
    // disturbed one.
    let (rounds, runs) = (1_000, 5);
    let mut best = vec![f64::MAX; schemes.len()];
    println!("batches of {} events, {} bytes", events.len(), body.len());
    for _ in 0..runs {
        for ((_, signing), best) in schemes.iter().zip(&mut best) {
            let started = std::time::Instant::now();
            for n in 0..rounds {
                // The per-batch work of a POST: the id and the headers.
                let id = batch_id(&events);
                std::hint::black_box(signing.headers(&id, 1_767_225_600 + n, &body));
            }
            *best = best.min(started.elapsed().as_secs_f64());
        }
    }
    let per_second = |seconds: f64| f64::from(rounds as u32) * events.len() as f64 / seconds;
    let legacy = per_second(best[0]);
    for ((name, _), seconds) in schemes.iter().zip(best) {
        let rate = per_second(seconds);
        println!(
            "{name:>20}: {rate:>10.0} events/s signed ({:.3}x legacy)",
            rate / legacy
        );
    }
}
