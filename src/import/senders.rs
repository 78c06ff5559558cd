//! The senders file (the format of `shared/data/senders.json`):
//!
//! ```json
//! { "systemMailboxes": [ { "address": "events@contoso.example", "graphTenantId": "contoso.example",
//!       "clientId": "…", "clientSecret": "env:CONTOSO_GRAPH_SECRET",
//!       "rateLimitPerMinute": 20, "rateLimitRecipientsPerDay": 5000 } ],
//!   "tenants": [ { "name": "fabrikam", "provider": "microsoft-graph", "sender": "invites@fabrikam.example",
//!       "graphTenantId": "…", "clientId": "…", "clientSecret": "env:…" },
//!     { "name": "adatum", "provider": "sendgrid", "sender": "news@adatum.example",
//!       "sendgridApiKey": "env:ADATUM_SENDGRID_KEY" } ] }
//! ```
//!
//! Secrets may be values or references `env:NAME` / `file:/path`; references are stored as
//! they are and resolved when a mailer is built. A Graph sender may give `clientCertificate` (a
//! PEM bundle: private key + certificate, or a reference to one) instead of `clientSecret`.

use std::num::NonZeroU32;

use serde::Deserialize;
use sqlx::PgPool;

use super::BadEntry;
use crate::{
    domain::{GraphCredentials, MailProvider, MailboxAddress, SecretRef, TenantTransport},
    store::{StoreError, senders},
};

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SendersFile {
    /// Platform mailboxes (always Microsoft Graph).
    #[serde(default)]
    pub system_mailboxes: Vec<SystemMailboxEntry>,
    /// Tenants and their senders.
    #[serde(default)]
    pub tenants: Vec<TenantEntry>,
}

/// One `systemMailboxes[]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SystemMailboxEntry {
    /// The mailbox address.
    pub address: String,
    /// Entra ID tenant id or domain.
    pub graph_tenant_id: String,
    /// App (client) id.
    pub client_id: String,
    /// Secret value or reference (or give `clientCertificate`).
    #[serde(default)]
    pub client_secret: String,
    /// Certificate credential instead of the secret: a PEM bundle (private key + certificate)
    /// as the value or an `env:`/`file:` reference; stored in the secret column and recognised
    /// when resolved (`mailer::graph::assertion`). Wins over `clientSecret`.
    #[serde(default)]
    pub client_certificate: Option<String>,
    /// Messages per UTC minute override.
    #[serde(default)]
    pub rate_limit_per_minute: Option<u32>,
    /// Recipients per UTC day override.
    #[serde(default)]
    pub rate_limit_recipients_per_day: Option<u32>,
}

/// One `tenants[]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TenantEntry {
    /// Unique tenant name (what campaign lines' `tenant` refers to).
    pub name: String,
    /// `microsoft-graph` or `sendgrid`.
    pub provider: String,
    /// The `From` mailbox.
    pub sender: String,
    /// Graph: Entra ID tenant id or domain.
    #[serde(default)]
    pub graph_tenant_id: Option<String>,
    /// Graph: app (client) id.
    #[serde(default)]
    pub client_id: Option<String>,
    /// Graph: secret value or reference.
    #[serde(default)]
    pub client_secret: Option<String>,
    /// Graph: certificate credential (PEM bundle or reference) instead of the secret.
    #[serde(default)]
    pub client_certificate: Option<String>,
    /// SendGrid: API key or reference.
    #[serde(default)]
    pub sendgrid_api_key: Option<String>,
}

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Tenants inserted or updated.
    pub tenants: usize,
    /// System mailboxes inserted or updated.
    pub system_mailboxes: usize,
}

fn required(value: &Option<String>, location: &str, field: &str) -> Result<String, BadEntry> {
    value
        .as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| BadEntry {
            location: location.to_owned(),
            reason: format!("{field} is required"),
        })
}

fn limit(value: Option<u32>, location: &str, field: &str) -> Result<Option<NonZeroU32>, BadEntry> {
    match value {
        None => Ok(None),
        Some(v) => NonZeroU32::new(v)
            .filter(|v| v.get() <= i32::MAX as u32)
            .map(Some)
            .ok_or_else(|| BadEntry {
                location: location.to_owned(),
                reason: format!("{field} must be a positive whole number, got {v}"),
            }),
    }
}

fn mailbox(raw: &str, location: &str, field: &str) -> Result<MailboxAddress, BadEntry> {
    MailboxAddress::parse(raw).map_err(|e| BadEntry {
        location: location.to_owned(),
        reason: format!("{field}: {e}"),
    })
}

/// A validated entry, ready to write.
enum Validated {
    Mailbox(
        MailboxAddress,
        GraphCredentials,
        Option<NonZeroU32>,
        Option<NonZeroU32>,
    ),
    Tenant(String, MailboxAddress, TenantTransport),
}

fn validate(file: &SendersFile) -> Result<Vec<Validated>, Vec<BadEntry>> {
    let mut good = Vec::new();
    let mut bad = Vec::new();
    for (i, m) in file.system_mailboxes.iter().enumerate() {
        let at = format!("systemMailboxes[{i}]");
        let entry = (|| {
            Ok(Validated::Mailbox(
                mailbox(&m.address, &at, "address")?,
                GraphCredentials {
                    graph_tenant_id: required(
                        &Some(m.graph_tenant_id.clone()),
                        &at,
                        "graphTenantId",
                    )?,
                    client_id: required(&Some(m.client_id.clone()), &at, "clientId")?,
                    client_secret: SecretRef::new(required(
                        &m.client_certificate
                            .clone()
                            .or_else(|| Some(m.client_secret.clone())),
                        &at,
                        "clientSecret",
                    )?),
                },
                limit(m.rate_limit_per_minute, &at, "rateLimitPerMinute")?,
                limit(
                    m.rate_limit_recipients_per_day,
                    &at,
                    "rateLimitRecipientsPerDay",
                )?,
            ))
        })();
        match entry {
            Ok(v) => good.push(v),
            Err(e) => bad.push(e),
        }
    }
    for (i, t) in file.tenants.iter().enumerate() {
        let at = format!("tenants[{i}]");
        let entry = (|| {
            let name = required(&Some(t.name.clone()), &at, "name")?;
            let sender = mailbox(&t.sender, &at, "sender")?;
            let provider: MailProvider = t.provider.parse().map_err(|e| BadEntry {
                location: at.clone(),
                reason: format!("provider: {e}"),
            })?;
            let transport = match provider {
                MailProvider::MicrosoftGraph => TenantTransport::Graph(GraphCredentials {
                    graph_tenant_id: required(&t.graph_tenant_id, &at, "graphTenantId")?,
                    client_id: required(&t.client_id, &at, "clientId")?,
                    client_secret: SecretRef::new(required(
                        &t.client_certificate
                            .clone()
                            .or_else(|| t.client_secret.clone()),
                        &at,
                        "clientSecret",
                    )?),
                }),
                MailProvider::SendGrid => TenantTransport::SendGrid {
                    api_key: SecretRef::new(required(&t.sendgrid_api_key, &at, "sendgridApiKey")?),
                },
            };
            Ok(Validated::Tenant(name, sender, transport))
        })();
        match entry {
            Ok(v) => good.push(v),
            Err(e) => bad.push(e),
        }
    }
    // A name or address given twice would silently overwrite the first entry.
    let mut seen = std::collections::HashMap::new();
    for (i, entry) in good.iter().enumerate() {
        let key = match entry {
            Validated::Mailbox(address, ..) => format!("mailbox {address}"),
            Validated::Tenant(name, ..) => format!("tenant {name}"),
        };
        if let Some(first) = seen.insert(key.clone(), i) {
            seen.insert(key.clone(), first);
            bad.push(BadEntry {
                location: key,
                reason: "appears more than once; give each tenant name and mailbox address once"
                    .into(),
            });
        }
    }
    if bad.is_empty() { Ok(good) } else { Err(bad) }
}

/// Why an import did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The file is not JSON of the expected shape.
    #[error("senders file is not valid: {0}")]
    Parse(String),
    /// Some entries are unusable; nothing was written.
    #[error("senders file has {} bad entr{}: {}", .0.len(), if .0.len() == 1 { "y" } else { "ies" }, .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "))]
    BadEntries(Vec<BadEntry>),
    /// PostgreSQL failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Parses a senders file's text.
///
/// # Errors
/// [`ImportError::Parse`] with serde's line/column.
pub fn parse(text: &str) -> Result<SendersFile, ImportError> {
    serde_json::from_str(text).map_err(|e| ImportError::Parse(e.to_string()))
}

/// Validates every entry, then upserts them all (tenants by `name`, mailboxes by `address`).
/// A file with any bad entry writes nothing.
///
/// # Errors
/// [`ImportError`].
pub async fn import(pool: &PgPool, file: &SendersFile) -> Result<ImportReport, ImportError> {
    let entries = validate(file).map_err(ImportError::BadEntries)?;
    let mut report = ImportReport::default();
    for entry in entries {
        match entry {
            Validated::Mailbox(address, graph, per_minute, per_day) => {
                senders::upsert_system_mailbox(pool, &address, &graph, per_minute, per_day).await?;
                report.system_mailboxes += 1;
            }
            Validated::Tenant(name, sender, transport) => {
                senders::upsert_tenant(pool, &name, &sender, &transport).await?;
                report.tenants += 1;
            }
        }
    }
    Ok(report)
}
