//! Certificate credentials: the signed `client_assertion` JWT an app presents instead of a
//! client secret (<https://learn.microsoft.com/entra/identity-platform/certificate-credentials>).
//!
//! A sender's credential is a certificate when its secret (the value, or what its `env:` /
//! `file:` reference resolves to) is a PEM bundle holding a private key (`PRIVATE KEY` or
//! `RSA PRIVATE KEY`) and a `CERTIFICATE`. The assertion is RS256 with header
//! `{"alg":"RS256","typ":"JWT","x5t#S256": base64url(SHA-256(certificate DER))}` and claims
//! `aud` = the token endpoint URL, `iss` = `sub` = the client id, `jti` a fresh UUID, `nbf` =
//! `iat` = now and `exp` = now + 5 minutes (Microsoft: at most 10 minutes), all in seconds since
//! the Unix epoch — UTC whatever the local time zone.

use base64::Engine as _;
use chrono::{DateTime, Utc};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::Serialize;
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// How long an assertion is valid: 5 minutes, under Microsoft's 10.
pub(crate) const ASSERTION_LIFETIME_S: i64 = 300;

/// `client_assertion_type` of a JWT bearer assertion.
pub(crate) const ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// A parsed certificate credential: the signing key and the certificate's thumbprint.
pub(crate) struct CertificateCredential {
    key: EncodingKey,
    x5t_s256: String,
}

impl std::fmt::Debug for CertificateCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateCredential")
            .field("x5t#S256", &self.x5t_s256)
            .finish_non_exhaustive()
    }
}

#[derive(Serialize)]
struct Claims<'a> {
    aud: &'a str,
    iss: &'a str,
    sub: &'a str,
    jti: String,
    nbf: i64,
    iat: i64,
    exp: i64,
}

/// Whether `secret` is a PEM bundle (then it is a certificate credential, not a client secret).
pub(crate) fn is_certificate_bundle(secret: &str) -> bool {
    secret.contains("-----BEGIN CERTIFICATE-----")
}

fn pem_block<'a>(pem: &'a str, label: &str) -> Option<&'a str> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = pem.find(&begin)?;
    let stop = pem[start..].find(&end)? + start + end.len();
    Some(&pem[start..stop])
}

/// base64url (no padding) of SHA-256 over the DER of the first `CERTIFICATE` in `pem`.
///
/// # Errors
/// A sentence when there is no readable certificate.
pub fn certificate_thumbprint(pem: &str) -> Result<String, String> {
    let der = certificate_der(pem)?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(der)))
}

/// The DER bytes of the first `CERTIFICATE` in `pem`.
fn certificate_der(pem: &str) -> Result<Vec<u8>, String> {
    let block = pem_block(pem, "CERTIFICATE").ok_or("no CERTIFICATE block")?;
    let body: String = block
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .map(str::trim)
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .map_err(|e| format!("the CERTIFICATE block is not base64: {e}"))
}

/// When the first `CERTIFICATE` in `pem` expires: its `notAfter` (RFC 5280 §4.1.2.5), read
/// from the DER by hand (`Certificate → tbsCertificate → [version], serialNumber, signature,
/// issuer, validity → notBefore, notAfter`), UTCTime or GeneralizedTime, both in UTC.
///
/// # Errors
/// A sentence when there is no certificate or its DER is not shaped as X.509's.
pub fn certificate_not_after(pem: &str) -> Result<DateTime<Utc>, String> {
    let der = certificate_der(pem)?;
    let bad = |what: &str| format!("the certificate is not X.509 DER ({what})");
    let (_, certificate, _) = der_item(&der).ok_or_else(|| bad("certificate"))?;
    let (_, tbs, _) = der_item(certificate).ok_or_else(|| bad("tbsCertificate"))?;
    let mut rest = tbs;
    if rest.first() == Some(&0xa0) {
        rest = der_item(rest).ok_or_else(|| bad("version"))?.2;
    }
    for field in ["serialNumber", "signature", "issuer"] {
        rest = der_item(rest).ok_or_else(|| bad(field))?.2;
    }
    let (_, validity, _) = der_item(rest).ok_or_else(|| bad("validity"))?;
    let after = der_item(validity).ok_or_else(|| bad("notBefore"))?.2;
    let (tag, value, _) = der_item(after).ok_or_else(|| bad("notAfter"))?;
    let text = std::str::from_utf8(value).map_err(|_| bad("notAfter"))?;
    let text = match tag {
        // UTCTime YYMMDDHHMMSSZ: years 50–99 are 19YY (RFC 5280 §4.1.2.5.1).
        0x17 if text.len() == 13 => {
            let century = if text[..2] >= *"50" { "19" } else { "20" };
            format!("{century}{text}")
        }
        0x18 if text.len() == 15 => text.to_owned(),
        _ => return Err(bad("notAfter is not a UTCTime or GeneralizedTime")),
    };
    chrono::NaiveDateTime::parse_from_str(&text, "%Y%m%d%H%M%SZ")
        .map(|t| t.and_utc())
        .map_err(|_| bad("notAfter"))
}

/// One DER item of `bytes`: its tag, its value and what follows it.
fn der_item(bytes: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = bytes.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

impl CertificateCredential {
    /// Parses a PEM bundle (private key + certificate).
    ///
    /// # Errors
    /// A sentence naming what is missing or unreadable (never the key itself).
    pub(crate) fn from_pem(pem: &str) -> Result<Self, String> {
        let key_block = pem_block(pem, "PRIVATE KEY")
            .or_else(|| pem_block(pem, "RSA PRIVATE KEY"))
            .ok_or("the certificate credential has no PRIVATE KEY block")?;
        let key = EncodingKey::from_rsa_pem(key_block.as_bytes()).map_err(|e| {
            format!("the certificate credential's private key is not an RSA key: {e}")
        })?;
        Ok(Self {
            key,
            x5t_s256: certificate_thumbprint(pem)?,
        })
    }

    /// The certificate's `x5t#S256`.
    pub(crate) fn thumbprint(&self) -> &str {
        &self.x5t_s256
    }

    /// A fresh assertion for `client_id` at `token_url`, issued at `now`.
    ///
    /// # Errors
    /// A sentence when signing fails.
    pub(crate) fn assertion(
        &self,
        client_id: &str,
        token_url: &str,
        now: DateTime<Utc>,
    ) -> Result<String, String> {
        let mut header = Header::new(Algorithm::RS256);
        header.x5t_s256 = Some(self.x5t_s256.clone());
        let iat = now.timestamp();
        let claims = Claims {
            aud: token_url,
            iss: client_id,
            sub: client_id,
            jti: Uuid::new_v4().to_string(),
            nbf: iat,
            iat,
            exp: iat + ASSERTION_LIFETIME_S,
        };
        jsonwebtoken::encode(&header, &claims, &self.key)
            .map_err(|e| format!("cannot sign the client assertion: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    const KEY: &str = include_str!("../../../tests/fixtures/app-key.pem");
    const CERT: &str = include_str!("../../../tests/fixtures/app-cert.pem");

    fn part(jwt: &str, i: usize) -> serde_json::Value {
        let raw = jwt.split('.').nth(i).unwrap();
        serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(raw)
                .unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn an_assertion_has_microsofts_header_and_claims() {
        let credential = CertificateCredential::from_pem(&format!("{KEY}\n{CERT}")).unwrap();
        let now = Utc.with_ymd_and_hms(2026, 12, 1, 9, 0, 0).unwrap();
        let url = "https://login.microsoftonline.com/contoso/oauth2/v2.0/token";
        let a = credential.assertion("app-1", url, now).unwrap();
        let b = credential.assertion("app-1", url, now).unwrap();
        let header = part(&a, 0);
        assert_eq!(header["alg"], "RS256");
        assert_eq!(header["typ"], "JWT");
        assert_eq!(header["x5t#S256"], certificate_thumbprint(CERT).unwrap());
        assert_eq!(
            header["x5t#S256"].as_str().unwrap().len(),
            43,
            "base64url of 32 bytes"
        );
        let claims = part(&a, 1);
        assert_eq!(claims["aud"], url);
        assert_eq!(
            (claims["iss"].clone(), claims["sub"].clone()),
            ("app-1".into(), "app-1".into())
        );
        assert_eq!(claims["iat"], 1_796_115_600);
        assert_eq!(
            claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
            300
        );
        assert_ne!(claims["jti"], part(&b, 1)["jti"], "a fresh jti each time");
    }

    #[test]
    fn the_certificates_expiry_is_read_from_its_der() {
        // `openssl x509 -enddate` of the fixture: notAfter=Nov 28 09:03:13 2036 GMT.
        assert_eq!(
            certificate_not_after(CERT).unwrap(),
            Utc.with_ymd_and_hms(2036, 11, 28, 9, 3, 13).unwrap()
        );
        assert!(certificate_not_after(KEY).is_err());
        assert!(
            certificate_not_after(
                "-----BEGIN CERTIFICATE-----\nMAMCAQE=\n-----END CERTIFICATE-----"
            )
            .is_err()
        );
    }

    #[test]
    fn a_bundle_without_a_key_or_certificate_is_refused() {
        assert!(CertificateCredential::from_pem(CERT).is_err());
        assert!(CertificateCredential::from_pem(KEY).is_err());
        assert!(is_certificate_bundle(CERT) && !is_certificate_bundle("s3cret"));
    }
}
