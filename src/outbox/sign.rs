//! The webhook signature (docs/events.md): `X-Mail-Worker-Signature: v1=<hex>`, the
//! HMAC-SHA256 with `EVENTS_WEBHOOK_SECRET` of the `X-Mail-Worker-Timestamp` value (Unix
//! seconds), a `.`, and the raw body.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The header carrying the signature.
pub const SIGNATURE_HEADER: &str = "X-Mail-Worker-Signature";
/// The header carrying the signed timestamp (Unix seconds).
pub const TIMESTAMP_HEADER: &str = "X-Mail-Worker-Timestamp";

/// The signature header's value of `body` sent at `timestamp` (Unix seconds): `v1=` and the
/// lower-case hex HMAC-SHA256 of `timestamp + "." + body` keyed with `secret`.
pub fn signature(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let mut hex = String::with_capacity(3 + digest.len() * 2);
    hex.push_str("v1=");
    for byte in digest {
        hex.push_str(&format!("{byte:02x}"));
    }
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test vector of docs/events.md: a receiver's implementation must give the same.
    #[test]
    fn the_documented_test_vector_holds() {
        let docs = include_str!("../../docs/events.md");
        let (secret, timestamp, body, expected) = (
            "whsec-test-0123456789",
            1_767_225_600,
            r#"{"events":[{"id":"00000000-0000-4000-8000-000000000001","type":"sent"}]}"#,
            "v1=69eeb6ce26ee05269a78eb0ac2bc914242b14ffbfa5ae1124250cd5ad55faf7b",
        );
        let got = signature(secret.as_bytes(), timestamp, body.as_bytes());
        assert_eq!(got, expected);
        for text in [secret, &timestamp.to_string(), body, expected] {
            assert!(docs.contains(text), "docs/events.md lacks {text}");
        }
    }
}
