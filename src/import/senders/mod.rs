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
//! Secrets may be values or references `env:NAME` / `file:/absolute/path`; references are
//! stored as they are and resolved when a mailer is built.
//!
//! A Graph entry may carry its Graph tenant's external-recipient budget,
//! `"externalRecipientsPerDay": 50000, "acceptedDomains": ["fabrikam.example"]` (both or neither,
//! the same on every entry of one `graphTenantId`).
//!
//! Any Graph entry may say `"readBounces": false` to keep its Inbox from being read for bounces
//! while `GRAPH_READ_BOUNCES=on` (default true).
//!
//! The import is all-or-nothing, and reports **every** error of the file at once, each at its
//! JSON path (`tenants[2].clientSecret: …`): a wrong type, an unknown or missing field, a bad
//! address, tenant id, secret reference or limit, a name or address given twice. Every field
//! and refusal is listed in `docs/file-formats.md`.
//!
//! Here the file's types, parsing and the database import; the checker (`checker.rs`) and the
//! whole-file validation (`validate.rs`) beside them.

use std::num::NonZeroU32;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sqlx::PgPool;

use super::BadEntry;
use crate::{
    domain::{
        GraphCredentials, MailProvider, MailboxAddress, Priority, SecretRef, Sender, TenantBudget,
        TenantTransport,
    },
    store::{StoreError, messages::SenderRef, sender_settings, senders},
};

mod checker;
mod pools;
mod validate;
mod warm_up;

use checker::Checker;
use validate::{Validated, validate, validate_value};

/// The whole file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SendersFile {
    /// Platform mailboxes (always Microsoft Graph).
    #[serde(default, deserialize_with = "null_as_default")]
    pub system_mailboxes: Vec<SystemMailboxEntry>,
    /// Tenants and their senders.
    #[serde(default, deserialize_with = "null_as_default")]
    pub tenants: Vec<TenantEntry>,
    /// Sender pools: named sets of Graph senders a campaign line may name (`senderPool`).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub sender_pools: Vec<SenderPoolEntry>,
}

/// One `senderPools[]` entry (checked in `pools.rs`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SenderPoolEntry {
    /// Unique pool name (what campaign lines' `senderPool` refers to).
    pub name: String,
    /// Its members: system mailboxes' addresses or Graph tenants' senders of the file.
    pub members: Vec<String>,
    /// Where its mail goes when its members cannot take it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overflow: Option<OverflowEntry>,
}

/// A pool's `overflow`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OverflowEntry {
    /// The overflow sender's address (a tenant's sender or a system mailbox of the file).
    pub sender: String,
    /// `budgetsSpent` or `forecastMisses`.
    pub when: String,
    /// Only messages with an external recipient overflow (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_only: Option<bool>,
}

/// `null` read as the field's default, as the checker reads it (`"tenants": null` is no
/// tenants), so a file the checker passes is one serde takes.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// One `systemMailboxes[]` entry.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SystemMailboxEntry {
    /// The mailbox address.
    pub address: String,
    /// Entra ID tenant id or domain.
    pub graph_tenant_id: String,
    /// App (client) id.
    pub client_id: String,
    /// Secret value or reference (or give `clientCertificate`).
    #[serde(default, deserialize_with = "null_as_default")]
    pub client_secret: String,
    /// Certificate credential instead of the secret: a PEM bundle (private key + certificate)
    /// as the value or an `env:`/`file:` reference; stored in the secret column and recognised
    /// when resolved (`mailer::graph::assertion`). Wins over `clientSecret`.
    pub client_certificate: Option<String>,
    /// Messages per UTC minute override.
    pub rate_limit_per_minute: Option<u32>,
    /// Recipients per UTC day override.
    pub rate_limit_recipients_per_day: Option<u32>,
    /// Override of `MAIL_RATE_LIMIT_RESERVED_PERCENT` (0 to 90): the share of its budgets
    /// only `high` messages may use.
    pub rate_limit_reserved_percent: Option<u32>,
    /// The Graph tenant's external recipients per rolling 24 h (with `acceptedDomains`).
    pub external_recipients_per_day: Option<u32>,
    /// The Graph tenant's own domains (with `externalRecipientsPerDay`).
    pub accepted_domains: Option<Vec<String>>,
    /// The default priority of its messages (`high` | `normal` | `bulk`; default `normal`).
    #[serde(default)]
    pub priority: Option<String>,
    /// Whether its Inbox is read for bounces while `GRAPH_READ_BOUNCES=on` (default true;
    /// needs the app's `Mail.Read` application permission).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_bounces: Option<bool>,
    /// Whether its deliveries are reconciled from the message trace (default
    /// `GRAPH_TRACE_DELIVERY`; needs `ExchangeMessageTrace.Read.All`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_delivery: Option<bool>,
    /// Its warm-up ramp (`{"startPerDay", "growth", "maxPerDay"}`, ADR 0047): a day budget
    /// that steps up per clean sending day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_up: Option<WarmUpEntry>,
}

/// A sender's `warmUp` (checked in `validate.rs`).
#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WarmUpEntry {
    /// Recipients per day on the first sending day.
    pub start_per_day: u32,
    /// The factor of each clean sending day (≥ 1).
    pub growth: f64,
    /// The budget the ramp ends at (≥ `startPerDay`).
    pub max_per_day: u32,
}

/// One `tenants[]` entry: what every provider has, then Graph's fields, then SendGrid's.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TenantEntry {
    /// Unique tenant name (what campaign lines' `tenant` refers to).
    pub name: String,
    /// `microsoft-graph` or `sendgrid`.
    pub provider: String,
    /// The `From` mailbox.
    pub sender: String,
    /// The default priority of its messages (`high` | `normal` | `bulk`; default `normal`).
    #[serde(default)]
    pub priority: Option<String>,
    /// Graph: Entra ID tenant id or domain.
    pub graph_tenant_id: Option<String>,
    /// Graph: app (client) id.
    pub client_id: Option<String>,
    /// Graph: secret value or reference.
    pub client_secret: Option<String>,
    /// Graph: certificate credential (PEM bundle or reference) instead of the secret.
    pub client_certificate: Option<String>,
    /// Graph: whether its Inbox is read for bounces while `GRAPH_READ_BOUNCES=on` (default
    /// true; needs the app's `Mail.Read` application permission).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_bounces: Option<bool>,
    /// Graph: whether its deliveries are reconciled from the message trace (default
    /// `GRAPH_TRACE_DELIVERY`; needs `ExchangeMessageTrace.Read.All`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_delivery: Option<bool>,
    /// Graph: the tenant's external recipients per rolling 24 h (with `acceptedDomains`).
    pub external_recipients_per_day: Option<u32>,
    /// Graph: the tenant's own domains (with `externalRecipientsPerDay`).
    pub accepted_domains: Option<Vec<String>>,
    /// SendGrid: API key or reference.
    pub sendgrid_api_key: Option<String>,
    /// Its warm-up ramp (`{"startPerDay", "growth", "maxPerDay"}`, ADR 0047): a day budget
    /// that steps up per clean sending day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_up: Option<WarmUpEntry>,
}

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Tenants inserted or updated.
    pub tenants: usize,
    /// System mailboxes inserted or updated.
    pub system_mailboxes: usize,
    /// Sender pools inserted or updated.
    pub sender_pools: usize,
    /// Existing senders whose limits or Graph tenant budget (`externalRecipientsPerDay`,
    /// `acceptedDomains`) the file changed: the bookings the old ones made are stale (the
    /// caller drops them, as `mailbox set-limits` does).
    pub limits_changed: Vec<MailboxAddress>,
}

/// Why an import did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The file is not JSON of the expected shape.
    #[error("senders file is not valid: {0}")]
    Parse(String),
    /// Some entries are unusable; nothing was written.
    #[error("senders file has {}: {}", errors_in_entries(.0), .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "))]
    BadEntries(Vec<BadEntry>),
    /// PostgreSQL failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// `7 errors in 5 entries`: an entry is a path's first part (`tenants[2]`, `(file)`).
fn errors_in_entries(errors: &[BadEntry]) -> String {
    let entries: std::collections::BTreeSet<&str> = errors
        .iter()
        .map(|e| e.location.split('.').next().unwrap_or_default())
        .collect();
    format!(
        "{} in {}",
        crate::plural::counted(errors.len() as u64, "error", "errors"),
        crate::plural::counted(entries.len() as u64, "entry", "entries")
    )
}

/// Parses a senders file's text. Values that are merely bad (an address, a tenant id, a
/// secret, a limit) are left to [`import`]; a file that is not of the expected shape is refused
/// here with every error it has (shape and value alike), each at its JSON path.
///
/// # Errors
/// [`ImportError::Parse`] with serde's line/column when the text is not JSON;
/// [`ImportError::BadEntries`] when it is not of the expected shape.
pub fn parse(text: &str) -> Result<SendersFile, ImportError> {
    let value: Value = serde_json::from_str(text).map_err(|e| ImportError::Parse(e.to_string()))?;
    // serde would take an array for the struct (its fields in order): `[]` is no senders file.
    let file = match value {
        Value::Object(_) => SendersFile::deserialize(&value).map_err(|e| e.to_string()),
        _ => Err("the document is not an object".to_owned()),
    };
    match file {
        Ok(file) => Ok(file),
        Err(e) => match validate_value(&value) {
            Err(errors) => Err(ImportError::BadEntries(errors)),
            Ok(_) => Err(ImportError::Parse(e)),
        },
    }
}

/// Parses and validates a senders file's text without writing anything: every error at once.
///
/// # Errors
/// As [`parse`], and [`ImportError::BadEntries`] for every bad value.
pub fn check(text: &str) -> Result<SendersFile, ImportError> {
    let file = parse(text)?;
    validate(&file).map_err(ImportError::BadEntries)?;
    Ok(file)
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
            Validated::Mailbox(
                address,
                graph,
                (per_minute, per_day, reserved),
                (priority, read_bounces, trace_delivery, ramp),
            ) => {
                let before = senders::overrides_of(pool, &address).await?;
                let budget_before = mailbox_budget(pool, &address).await?;
                let id =
                    senders::upsert_system_mailbox(pool, &address, &graph, per_minute, per_day)
                        .await?;
                let now = senders::Overrides {
                    per_minute,
                    recipients_per_day: per_day,
                    reserved_percent: reserved,
                };
                // The upsert stores the entry's budget as given.
                let budget_changed = budget_before != graph.tenant_budget;
                if before.is_some_and(|before| before != now || budget_changed) {
                    report.changed(&address);
                }
                let sender = SenderRef::SystemMailbox(id);
                sender_settings::set_priority_and_bounces(
                    pool,
                    sender,
                    priority,
                    (read_bounces, trace_delivery),
                )
                .await?;
                sender_settings::set_reserved_percent(pool, id, reserved).await?;
                crate::store::warmups::configure(pool, sender, ramp).await?;
                report.system_mailboxes += 1;
            }
            Validated::Tenant(
                name,
                sender,
                transport,
                (priority, read_bounces, trace_delivery, ramp),
            ) => {
                let before = senders::tenant_by_name(pool, &name).await?;
                let id = senders::upsert_tenant(pool, &name, &sender, &transport).await?;
                if let Some(before) = before
                    && tenant_budget(&before.transport) != tenant_budget(&transport)
                {
                    // Its bookings are under the address it sent from (and now sends from).
                    report.changed(&before.sender_address);
                    report.changed(&sender);
                }
                let sender = SenderRef::Tenant(id);
                sender_settings::set_priority_and_bounces(
                    pool,
                    sender,
                    priority,
                    (read_bounces, trace_delivery),
                )
                .await?;
                crate::store::warmups::configure(pool, sender, ramp).await?;
                report.tenants += 1;
            }
            Validated::Pool(p) => {
                crate::store::pools::upsert(pool, &p.name, &p.members, p.overflow.as_ref()).await?;
                report.sender_pools += 1;
            }
        }
    }
    Ok(report)
}

impl ImportReport {
    /// `address`'s bookings are stale (listed once).
    fn changed(&mut self, address: &MailboxAddress) {
        if !self.limits_changed.contains(address) {
            self.limits_changed.push(address.clone());
        }
    }
}

/// The Graph tenant budget stored for the system mailbox `address` (`None`: none, or no such
/// mailbox).
async fn mailbox_budget(
    pool: &PgPool,
    address: &MailboxAddress,
) -> Result<Option<TenantBudget>, StoreError> {
    Ok(match senders::by_address(pool, address).await? {
        Some(Sender::SystemMailbox(m)) => m.graph.tenant_budget,
        _ => None,
    })
}

/// A tenant's Graph tenant budget (`None`: none, or SendGrid).
fn tenant_budget(transport: &TenantTransport) -> Option<&TenantBudget> {
    match transport {
        TenantTransport::Graph(g) => g.tenant_budget.as_ref(),
        TenantTransport::SendGrid { .. } => None,
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
#[path = "tests_pools.rs"]
mod tests_pools;
