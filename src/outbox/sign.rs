//! The webhook signatures (docs/events.md, ADR 0037).
//!
//! **Standard Webhooks** (the specification of standard-webhooks/standard-webhooks):
//! `webhook-id` (the batch's id, [`batch_id`]), `webhook-timestamp` (Unix seconds) and
//! `webhook-signature: v1,<base64 HMAC-SHA256(key, id + "." + timestamp + "." + body)>`, one
//! per key, space-separated, during a rotation. A key is written `whsec_<base64>` (the key is
//! the decoded bytes) or raw (the key is its bytes).
//!
//! **Legacy** (until the deprecation window ends): `X-Mail-Worker-Signature: v1=<hex>`, the
//! HMAC-SHA256 keyed with the first secret's text of the `X-Mail-Worker-Timestamp` value, a `.`,
//! and the raw body.
//!
//! Which are sent: `EVENTS_SIGNATURE` ([`Scheme`]).

use base64::{Engine, engine::general_purpose::STANDARD};
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretSlice, SecretString};
use sha2::{Digest, Sha256};

pub use crate::config::events::SignatureScheme as Scheme;
use crate::store::events::delivery::Event;

/// The legacy header carrying the signature.
pub const SIGNATURE_HEADER: &str = "X-Mail-Worker-Signature";
/// The legacy header carrying the signed timestamp (Unix seconds).
pub const TIMESTAMP_HEADER: &str = "X-Mail-Worker-Timestamp";
/// Standard Webhooks: the message's id (here the batch's).
pub const ID_HEADER: &str = "webhook-id";
/// Standard Webhooks: the signed timestamp (Unix seconds).
pub const STANDARD_TIMESTAMP_HEADER: &str = "webhook-timestamp";
/// Standard Webhooks: the signatures, space-separated.
pub const STANDARD_SIGNATURE_HEADER: &str = "webhook-signature";

/// The prefix of a secret written in the specification's form.
const WHSEC: &str = "whsec_";
/// At least this many characters in a raw secret (as before the standard signatures).
const RAW_MIN_CHARS: usize = 16;
/// The specification's bounds on a `whsec_` key's length, in bytes.
const WHSEC_BYTES: std::ops::RangeInclusive<usize> = 24..=64;
/// At most this many secrets at once: the current one and, during a rotation, the next.
const MAX_SECRETS: usize = 2;

/// One secret of `EVENTS_WEBHOOK_SECRET`.
pub struct Key {
    /// The text as configured: the legacy signature's key (its bytes, as before).
    text: SecretString,
    /// The Standard Webhooks key: the base64-decoded part of `whsec_…`, else `text`'s bytes.
    key: SecretSlice<u8>,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(***)")
    }
}

impl Key {
    /// `text` read as one secret.
    ///
    /// # Errors
    /// A `whsec_` secret that is not base64 or whose key is not 24 to 64 bytes; a raw one
    /// shorter than 16 characters. The message never shows the secret.
    pub fn parse(text: &str) -> Result<Self, String> {
        let key = if let Some(encoded) = text.strip_prefix(WHSEC) {
            let key = STANDARD
                .decode(encoded)
                .map_err(|_| "a `whsec_` secret must be followed by base64".to_owned())?;
            if !WHSEC_BYTES.contains(&key.len()) {
                return Err(format!(
                    "a `whsec_` secret's key is {} bytes; it must have 24 to 64 (e.g. `echo whsec_$(openssl rand -base64 32)`)",
                    key.len()
                ));
            }
            key
        } else {
            let chars = text.chars().count();
            if chars < RAW_MIN_CHARS {
                return Err(format!(
                    "is {chars} characters long; it must have at least 16 (e.g. `openssl rand -hex 32`, or `whsec_` and base64)"
                ));
            }
            text.as_bytes().to_vec()
        };
        Ok(Self {
            text: text.into(),
            key: key.into(),
        })
    }
}

/// How the outbox signs: the scheme and the secrets, the first of which signs the legacy header.
#[derive(Debug)]
pub struct Signing {
    /// `EVENTS_SIGNATURE`.
    pub scheme: Scheme,
    /// `EVENTS_WEBHOOK_SECRET`'s one or two secrets.
    pub keys: Vec<Key>,
}

impl Signing {
    /// `value` (the resolved `EVENTS_WEBHOOK_SECRET`) split on whitespace and commas into one
    /// or two secrets.
    ///
    /// # Errors
    /// None, more than two, or one [`Key::parse`] refuses (named by its place, never shown).
    pub fn new(scheme: Scheme, value: &str) -> Result<Self, String> {
        let texts: Vec<&str> = value
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|t| !t.is_empty())
            .collect();
        if texts.is_empty() {
            return Err("is empty".into());
        }
        if texts.len() > MAX_SECRETS {
            return Err(format!(
                "holds {} secrets; at most {MAX_SECRETS} (the current one and, during a rotation, the next), separated by a space or a comma",
                texts.len()
            ));
        }
        let keys = texts
            .iter()
            .enumerate()
            .map(|(n, text)| {
                Key::parse(text).map_err(|e| {
                    if texts.len() == 1 {
                        e
                    } else {
                        format!("secret {}: {e}", n + 1)
                    }
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { scheme, keys })
    }

    /// The headers of `body`, the batch `id`'s POST at `timestamp` (Unix seconds).
    pub fn headers(&self, id: &str, timestamp: i64, body: &[u8]) -> Vec<(&'static str, String)> {
        let mut headers = Vec::with_capacity(5);
        if matches!(self.scheme, Scheme::Standard | Scheme::Both) {
            headers.push((ID_HEADER, id.to_owned()));
            headers.push((STANDARD_TIMESTAMP_HEADER, timestamp.to_string()));
            headers.push((
                STANDARD_SIGNATURE_HEADER,
                standard(&self.keys, id, timestamp, body),
            ));
        }
        if matches!(self.scheme, Scheme::Legacy | Scheme::Both) {
            let first = self.keys[0].text.expose_secret();
            headers.push((TIMESTAMP_HEADER, timestamp.to_string()));
            headers.push((
                SIGNATURE_HEADER,
                signature(first.as_bytes(), timestamp, body),
            ));
        }
        headers
    }
}

/// The `webhook-signature` value: `v1,<base64>` for each of `keys`, space-separated, each the
/// HMAC-SHA256 of `id + "." + timestamp + "." + body`.
pub fn standard(keys: &[Key], id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut out = String::with_capacity(keys.len() * 48);
    for key in keys {
        let mut mac = Hmac::<Sha256>::new_from_slice(key.key.expose_secret())
            .expect("HMAC takes a key of any length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str("v1,");
        STANDARD.encode_string(mac.finalize().into_bytes(), &mut out);
    }
    out
}

/// The legacy signature header's value of `body` sent at `timestamp` (Unix seconds): `v1=` and
/// the lower-case hex HMAC-SHA256 of `timestamp + "." + body` keyed with `secret`.
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

/// The batch's `webhook-id`: `msg_` and the first 20 bytes (hex) of the SHA-256 of its first
/// event's id, its last one's and their count. The same events give the same id — every retry
/// of a batch (the dispatcher resends the same events, [`super::deliver`]), in any replica —
/// and a receiver may de-duplicate whole batches on it (or events on their own `id`).
pub fn batch_id(events: &[Event]) -> String {
    let mut hash = Sha256::new();
    if let (Some(first), Some(last)) = (events.first(), events.last()) {
        hash.update(first.id.as_bytes());
        hash.update(last.id.as_bytes());
    }
    hash.update((events.len() as u64).to_be_bytes());
    let digest = hash.finalize();
    let mut id = String::with_capacity(4 + 40);
    id.push_str("msg_");
    for byte in &digest[..20] {
        id.push_str(&format!("{byte:02x}"));
    }
    id
}

#[cfg(test)]
mod tests;
