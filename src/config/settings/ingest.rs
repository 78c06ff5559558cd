//! The HTTP ingest (`POST /v1/messages`, docs/ingest.md, [`crate::ingest`]): where it listens,
//! who may post and how much one request may carry.

use std::{net::SocketAddr, num::NonZeroU32, path::PathBuf};

use super::Fallback::{Unset, Value};
use super::Setting;
use super::kinds::{Bad, FilePath, Kind, Off, Optional, Positive};
use super::urls::Listen;
use crate::config::{env::Env, is_token_name};
use crate::domain::SecretRef;

/// `INGEST_TOKENS`: `name=secret[,name=secret…]`, each secret a literal or an `env:NAME` /
/// `file:/path` reference; shown as the names and the secrets' kinds only. An error never
/// shows a secret: the value is `***`, the problem names the element and its token.
pub(crate) struct Tokens;

impl Kind for Tokens {
    type Value = Vec<(String, SecretRef)>;
    fn parse(&self, raw: &str, _: &Env<'_>) -> Result<Self::Value, Bad> {
        let mut tokens: Self::Value = Vec::new();
        for (n, element) in raw.split(',').map(str::trim).enumerate() {
            let bad = |problem: String| Bad {
                problem: format!("list element {} {problem}", n + 1),
                value: Some("***".into()),
            };
            let Some((name, secret)) = element.split_once('=') else {
                return Err(bad("is not name=secret".into()));
            };
            let name = name.trim();
            if !is_token_name(name) {
                return Err(bad(format!(
                    "names the token {name:?}: a name is 1 to 64 letters, digits, `_`, `-` or `.`"
                )));
            }
            if tokens.iter().any(|(other, _)| other == name) {
                return Err(bad(format!("names the token {name:?} twice")));
            }
            let secret = SecretRef::new(secret.trim());
            SecretRef::check(secret.raw()).map_err(|e| bad(format!("({name}): {e}")))?;
            tokens.push((name.to_owned(), secret));
        }
        Ok(tokens)
    }
    fn show(&self, value: &Self::Value) -> String {
        if value.is_empty() {
            return "(unset)".to_owned();
        }
        let shown: Vec<String> = value
            .iter()
            .map(|(name, secret)| format!("{name}={}", secret.describe()))
            .collect();
        shown.join(",")
    }
    fn unset(&self) -> Option<Self::Value> {
        Some(Vec::new())
    }
}

settings! {
    /// The HTTP ingest.
    pub struct IngestSettings = "HTTP ingest (docs/ingest.md)" {
        listen: Option<SocketAddr> = Off(Listen), Setting {
            name: "INGEST_LISTEN",
            flag: "ingest-listen",
            default: Value("off"),
            help: "the HTTP ingest's listener (`POST /v1/messages`, `GET /v1/openapi.json`; docs/ingest.md): `host:port` or `off`; plain HTTP, TLS is the ingress's; needs INGEST_TOKENS or INGEST_TOKENS_FILE",
            doc: "POST /v1/messages (a JSON array or JSONL of campaign lines, judged as `mail-worker enqueue`\n\
                  judges a file) and GET /v1/openapi.json on their own listener; `off` by default. Plain HTTP:\n\
                  put it behind an ingress or proxy that terminates TLS.",
            ..Setting::NEW
        };
        tokens: Vec<(String, SecretRef)> = Tokens, Setting {
            name: "INGEST_TOKENS",
            flag: "ingest-tokens",
            default: Unset,
            secret: true,
            help: "the producers' bearer tokens, `name=secret[,name=secret…]`, each secret a literal or an env:NAME / file:/path reference (at least 16 characters); each may post for every sender",
            doc: "The producers' bearer tokens: name=secret[,name=secret…], each secret a literal or an\n\
                  env:NAME / file:/path reference, at least 16 characters; each may post for every sender.",
            example: Some("crm=env:INGEST_TOKEN_CRM"),
            ..Setting::NEW
        };
        tokens_file: Option<PathBuf> = Optional(FilePath, "(unset)"), Setting {
            name: "INGEST_TOKENS_FILE",
            flag: "ingest-tokens-file",
            default: Unset,
            help: "a JSON file of tokens, `[{\"name\": …, \"secret\": …, \"senders\": [\"events@contoso.example\", \"northwind\"]}]`, each narrowed to the senders it lists (read at start-up)",
            doc: "Tokens narrowed to senders: a JSON array of {\"name\", \"secret\", \"senders\": [address or tenant]}.",
            example: Some("/etc/mail-worker/ingest-tokens.json"),
            ..Setting::NEW
        };
        max_body_bytes: NonZeroU32 = Positive, Setting {
            name: "INGEST_MAX_BODY_BYTES",
            flag: "ingest-max-body-bytes",
            default: Value("10485760"),
            help: "the largest request body the ingest takes, bytes; a larger one is answered 413",
            doc: "A larger body is answered 413 (10 MiB: 1,000 lines of about 10 KiB).",
            ..Setting::NEW
        };
        max_lines: NonZeroU32 = Positive, Setting {
            name: "INGEST_MAX_LINES",
            flag: "ingest-max-lines",
            default: Value("1000"),
            help: "the most campaign lines one ingest request may carry (stored in one transaction); more is answered 413",
            doc: "A request of more lines is answered 413 (one transaction each).",
            ..Setting::NEW
        };
    }
}
