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
//! The import is all-or-nothing, and reports **every** error of the file at once, each at its
//! JSON path (`tenants[2].clientSecret: …`): a wrong type, an unknown or missing field, a bad
//! address, tenant id, secret reference or limit, a name or address given twice. Every field
//! and refusal is listed in `docs/file-formats.md`.

use std::num::NonZeroU32;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sqlx::PgPool;

use super::BadEntry;
use crate::{
    domain::{
        GraphCredentials, MailProvider, MailboxAddress, SecretRef, TenantBudget, TenantTransport,
    },
    store::{StoreError, senders},
};

/// The whole file.
#[derive(Debug, Clone, Deserialize, Serialize)]
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
    /// The Graph tenant's external recipients per rolling 24 h (with `acceptedDomains`).
    #[serde(default)]
    pub external_recipients_per_day: Option<u32>,
    /// The Graph tenant's own domains (with `externalRecipientsPerDay`).
    #[serde(default)]
    pub accepted_domains: Option<Vec<String>>,
}

/// One `tenants[]` entry.
#[derive(Debug, Clone, Deserialize, Serialize)]
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
    /// Graph: the tenant's external recipients per rolling 24 h (with `acceptedDomains`).
    #[serde(default)]
    pub external_recipients_per_day: Option<u32>,
    /// Graph: the tenant's own domains (with `externalRecipientsPerDay`).
    #[serde(default)]
    pub accepted_domains: Option<Vec<String>>,
}

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Tenants inserted or updated.
    pub tenants: usize,
    /// System mailboxes inserted or updated.
    pub system_mailboxes: usize,
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

/// Collects every error of a file, each at its JSON path.
#[derive(Default)]
struct Checker {
    errors: Vec<BadEntry>,
}

impl Checker {
    fn fail(&mut self, location: String, reason: impl Into<String>) {
        self.errors.push(BadEntry {
            location,
            reason: reason.into(),
        });
    }

    /// Refuses every key of `object` not in `known`.
    fn known_keys(&mut self, object: &Map<String, Value>, at: &str, known: &[&str]) {
        for key in object.keys() {
            if !known.contains(&key.as_str()) {
                self.fail(
                    format!("{at}.{}", key.escape_debug()),
                    format!("unknown field; expected one of {}", known.join(", ")),
                );
            }
        }
    }

    /// A string field: `None` (with an error when `required`) if it is absent, null, empty or
    /// not a string; trimmed otherwise. Control characters (NUL included) are refused.
    fn string(
        &mut self,
        object: &Map<String, Value>,
        at: &str,
        field: &str,
        required: bool,
    ) -> Option<String> {
        let path = format!("{at}.{field}");
        match object.get(field) {
            None | Some(Value::Null) => {
                if required {
                    self.fail(path, "is required");
                }
                None
            }
            Some(Value::String(raw)) => {
                let value = raw.trim();
                if value.is_empty() {
                    if required {
                        self.fail(path, "is required (it is empty)");
                    }
                    None
                } else if value.contains(char::is_control) {
                    self.fail(path, "contains a control character (CR, LF, NUL, …)");
                    None
                } else {
                    Some(value.to_owned())
                }
            }
            Some(other) => {
                self.fail(path, format!("must be a string, got {}", kind(other)));
                None
            }
        }
    }

    fn mailbox(
        &mut self,
        object: &Map<String, Value>,
        at: &str,
        field: &str,
    ) -> Option<MailboxAddress> {
        let raw = self.string(object, at, field, true)?;
        match MailboxAddress::parse(&raw) {
            Ok(address) => Some(address),
            Err(e) => {
                self.fail(format!("{at}.{field}"), e.to_string());
                None
            }
        }
    }

    fn tenant_id(&mut self, object: &Map<String, Value>, at: &str) -> Option<String> {
        let raw = self.string(object, at, "graphTenantId", true)?;
        match GraphCredentials::check_tenant_id(&raw) {
            Ok(()) => Some(raw),
            Err(e) => {
                self.fail(format!("{at}.graphTenantId"), e);
                None
            }
        }
    }

    fn secret(&mut self, object: &Map<String, Value>, at: &str, field: &str) -> Option<SecretRef> {
        let path = format!("{at}.{field}");
        // Not `string()`: its messages could not quote a literal, but this one must not either.
        match object.get(field) {
            None | Some(Value::Null) => {
                self.fail(path, "is required");
                None
            }
            Some(Value::String(raw)) => match SecretRef::check(raw.trim()) {
                Ok(()) => Some(SecretRef::new(raw.trim())),
                Err(e) => {
                    self.fail(path, e.to_string());
                    None
                }
            },
            Some(other) => {
                self.fail(path, format!("must be a string, got {}", kind(other)));
                None
            }
        }
    }

    /// A Graph app's credential: `clientCertificate` (a PEM bundle or a reference to one)
    /// when given, else `clientSecret`; either is stored in the secret column.
    fn credential(&mut self, object: &Map<String, Value>, at: &str) -> Option<SecretRef> {
        match object.get("clientCertificate") {
            None | Some(Value::Null) => self.secret(object, at, "clientSecret"),
            Some(_) => self.secret(object, at, "clientCertificate"),
        }
    }

    fn limit(
        &mut self,
        object: &Map<String, Value>,
        at: &str,
        field: &str,
    ) -> Result<Option<NonZeroU32>, ()> {
        match object.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => match value
                .as_u64()
                .filter(|v| *v <= i32::MAX as u64)
                .and_then(|v| NonZeroU32::new(v as u32))
            {
                Some(v) => Ok(Some(v)),
                None => {
                    self.fail(
                        format!("{at}.{field}"),
                        format!(
                            "must be a positive whole number up to {}, got {}",
                            i32::MAX,
                            short(value)
                        ),
                    );
                    Err(())
                }
            },
        }
    }

    /// `acceptedDomains`: a non-empty array of domain names, each stored lower case in
    /// punycode; `Ok(None)` when absent.
    fn accepted_domains(
        &mut self,
        object: &Map<String, Value>,
        at: &str,
    ) -> Result<Option<Vec<String>>, ()> {
        let path = format!("{at}.{ACCEPTED_DOMAINS}");
        let items = match object.get(ACCEPTED_DOMAINS) {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Array(items)) if items.is_empty() => {
                self.fail(path, "must list at least one domain of the tenant");
                return Err(());
            }
            Some(Value::Array(items)) => items,
            Some(other) => {
                self.fail(
                    path,
                    format!("must be an array of domain names, got {}", kind(other)),
                );
                return Err(());
            }
        };
        let errors = self.errors.len();
        let mut domains = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let checked = match item {
                Value::String(raw) => TenantBudget::accepted_domain(raw),
                other => Err(format!("must be a domain name, got {}", kind(other))),
            };
            match checked {
                Ok(domain) if !domains.contains(&domain) => domains.push(domain),
                Ok(_) => {}
                Err(e) => self.fail(format!("{path}[{i}]"), e),
            }
        }
        if self.errors.len() == errors {
            domains.sort();
            Ok(Some(domains))
        } else {
            Err(())
        }
    }

    /// A Graph app's tenant budget: `externalRecipientsPerDay` and `acceptedDomains`, both or
    /// neither.
    fn tenant_budget(
        &mut self,
        object: &Map<String, Value>,
        at: &str,
    ) -> Result<Option<TenantBudget>, ()> {
        let per_day = self.limit(object, at, EXTERNAL_PER_DAY);
        let domains = self.accepted_domains(object, at);
        match (per_day?, domains?) {
            (None, None) => Ok(None),
            (Some(external_recipients_per_day), Some(accepted_domains)) => Ok(Some(TenantBudget {
                external_recipients_per_day,
                accepted_domains,
            })),
            (Some(_), None) => {
                self.fail(
                    format!("{at}.{ACCEPTED_DOMAINS}"),
                    format!(
                        "is required with {EXTERNAL_PER_DAY}: the tenant's own domains (recipients in any other domain count against the budget)"
                    ),
                );
                Err(())
            }
            (None, Some(_)) => {
                self.fail(
                    format!("{at}.{EXTERNAL_PER_DAY}"),
                    format!(
                        "is required with {ACCEPTED_DOMAINS}: the tenant's external recipients per rolling 24 h"
                    ),
                );
                Err(())
            }
        }
    }

    /// A Graph app: `graphTenantId`, `clientId`, the credential and the tenant budget.
    fn graph_app(&mut self, object: &Map<String, Value>, at: &str) -> Option<GraphCredentials> {
        let graph_tenant_id = self.tenant_id(object, at);
        let client_id = self.string(object, at, "clientId", true);
        let client_secret = self.credential(object, at);
        let tenant_budget = self.tenant_budget(object, at);
        Some(GraphCredentials {
            graph_tenant_id: graph_tenant_id?,
            client_id: client_id?,
            client_secret: client_secret?,
            tenant_budget: tenant_budget.ok()?,
        })
    }

    /// The budget is the Graph tenant's, shared by all of its mailboxes (the limiter counts it
    /// under the `graphTenantId`): every entry of one `graphTenantId` (compared without case)
    /// must give the same `externalRecipientsPerDay` and `acceptedDomains`, or none, or a
    /// mailbox without them would send external mail the budget never sees.
    fn one_budget_per_graph_tenant(&mut self, apps: &[(String, GraphCredentials)]) {
        let mut first: std::collections::HashMap<String, &(String, GraphCredentials)> =
            std::collections::HashMap::new();
        for entry in apps {
            let (at, graph) = entry;
            let tenant = graph.graph_tenant_id.to_lowercase();
            match first.get(&tenant) {
                None => {
                    first.insert(tenant, entry);
                }
                Some((first_at, first_graph))
                    if first_graph.tenant_budget != graph.tenant_budget =>
                {
                    self.fail(
                        format!("{at}.{EXTERNAL_PER_DAY}"),
                        format!(
                            "graphTenantId {tenant} has a different tenant budget at {first_at}: the budget is the Graph tenant's, so give every entry of it the same {EXTERNAL_PER_DAY} and {ACCEPTED_DOMAINS} (or none)"
                        ),
                    );
                }
                Some(_) => {}
            }
        }
    }

    fn entries<'v>(
        &mut self,
        root: &'v Map<String, Value>,
        field: &str,
    ) -> Vec<(String, &'v Map<String, Value>)> {
        match root.get(field) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .filter_map(|(i, item)| {
                    let at = format!("{field}[{i}]");
                    match item {
                        Value::Object(object) => Some((at, object)),
                        other => {
                            self.fail(at, format!("must be an object, got {}", kind(other)));
                            None
                        }
                    }
                })
                .collect(),
            Some(other) => {
                self.fail(
                    field.to_owned(),
                    format!("must be an array, got {}", kind(other)),
                );
                Vec::new()
            }
        }
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A value for an error message, cut to 40 characters (limits are not secret).
fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 40 {
        format!("{}…", text.chars().take(40).collect::<String>())
    } else {
        text
    }
}

const MAILBOX_FIELDS: &[&str] = &[
    "address",
    "graphTenantId",
    "clientId",
    "clientSecret",
    "clientCertificate",
    "rateLimitPerMinute",
    "rateLimitRecipientsPerDay",
    "externalRecipientsPerDay",
    "acceptedDomains",
];
const TENANT_FIELDS: &[&str] = &[
    "name",
    "provider",
    "sender",
    "graphTenantId",
    "clientId",
    "clientSecret",
    "clientCertificate",
    "sendgridApiKey",
    "externalRecipientsPerDay",
    "acceptedDomains",
];
const EXTERNAL_PER_DAY: &str = "externalRecipientsPerDay";
const ACCEPTED_DOMAINS: &str = "acceptedDomains";

/// Checks a whole senders document, collecting every error with its JSON path.
fn validate_value(root: &Value) -> Result<Vec<Validated>, Vec<BadEntry>> {
    let mut check = Checker::default();
    let Value::Object(root) = root else {
        check.fail(
            "(file)".into(),
            format!(
                "must be an object with systemMailboxes and tenants, got {}",
                kind(root)
            ),
        );
        return Err(check.errors);
    };
    check.known_keys(root, "(file)", &["systemMailboxes", "tenants"]);
    let mut good = Vec::new();
    // A name or address given twice would silently overwrite the first entry.
    let mut seen: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    let mut once = |check: &mut Checker, key: String, at: String| {
        if let Some(first) = seen.get(&key) {
            check.fail(
                at,
                format!(
                    "{key}: appears more than once (first at {first}); give each tenant name and mailbox address once"
                ),
            );
        } else {
            seen.insert(key, at);
        }
    };
    // Every Graph app of the file with its path, to check one budget per Graph tenant.
    let mut budgets: Vec<(String, GraphCredentials)> = Vec::new();
    for (at, m) in check.entries(root, "systemMailboxes") {
        check.known_keys(m, &at, MAILBOX_FIELDS);
        let errors = check.errors.len();
        let address = check.mailbox(m, &at, "address");
        if let Some(a) = &address {
            once(&mut check, format!("mailbox {a}"), format!("{at}.address"));
        }
        let graph = check.graph_app(m, &at);
        let per_minute = check.limit(m, &at, "rateLimitPerMinute");
        let per_day = check.limit(m, &at, "rateLimitRecipientsPerDay");
        if let Some(graph) = &graph {
            budgets.push((at.clone(), graph.clone()));
        }
        if let (Some(address), Some(graph), Ok(per_minute), Ok(per_day)) =
            (address, graph, per_minute, per_day)
            && check.errors.len() == errors
        {
            good.push(Validated::Mailbox(address, graph, per_minute, per_day));
        }
    }
    for (at, t) in check.entries(root, "tenants") {
        check.known_keys(t, &at, TENANT_FIELDS);
        let errors = check.errors.len();
        let name = check.string(t, &at, "name", true);
        if let Some(n) = &name {
            once(&mut check, format!("tenant {n}"), format!("{at}.name"));
        }
        let sender = check.mailbox(t, &at, "sender");
        let provider =
            check
                .string(t, &at, "provider", true)
                .and_then(|p| match p.parse::<MailProvider>() {
                    Ok(p) => Some(p),
                    Err(e) => {
                        check.fail(format!("{at}.provider"), e);
                        None
                    }
                });
        let transport = match provider {
            Some(MailProvider::MicrosoftGraph) => check.graph_app(t, &at).map(|graph| {
                budgets.push((at.clone(), graph.clone()));
                TenantTransport::Graph(graph)
            }),
            Some(MailProvider::SendGrid) => {
                for field in [EXTERNAL_PER_DAY, ACCEPTED_DOMAINS] {
                    if t.get(field).is_some_and(|v| !v.is_null()) {
                        check.fail(
                            format!("{at}.{field}"),
                            "is only for provider microsoft-graph (a tenant budget is Exchange Online's)",
                        );
                    }
                }
                check
                    .secret(t, &at, "sendgridApiKey")
                    .map(|api_key| TenantTransport::SendGrid { api_key })
            }
            None => None,
        };
        if let (Some(name), Some(sender), Some(transport)) = (name, sender, transport)
            && check.errors.len() == errors
        {
            good.push(Validated::Tenant(name, sender, transport));
        }
    }
    check.one_budget_per_graph_tenant(&budgets);
    if check.errors.is_empty() {
        Ok(good)
    } else {
        Err(check.errors)
    }
}

fn validate(file: &SendersFile) -> Result<Vec<Validated>, Vec<BadEntry>> {
    // Serialising plain strings and numbers cannot fail.
    validate_value(&serde_json::to_value(file).unwrap_or(Value::Null))
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

/// Parses a senders file's text. Values that are merely bad (an address, a tenant id, a
/// secret, a limit) are left to [`import`]; a file that is not of the expected shape is refused
/// here with every error it has (shape and value alike), each at its JSON path.
///
/// # Errors
/// [`ImportError::Parse`] with serde's line/column when the text is not JSON;
/// [`ImportError::BadEntries`] when it is not of the expected shape.
pub fn parse(text: &str) -> Result<SendersFile, ImportError> {
    let value: Value = serde_json::from_str(text).map_err(|e| ImportError::Parse(e.to_string()))?;
    match SendersFile::deserialize(&value) {
        Ok(file) => Ok(file),
        Err(e) => match validate_value(&value) {
            Err(errors) => Err(ImportError::BadEntries(errors)),
            Ok(_) => Err(ImportError::Parse(e.to_string())),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(text: &str) -> Vec<String> {
        match check(text) {
            Err(ImportError::BadEntries(e)) => e.iter().map(ToString::to_string).collect(),
            other => panic!("expected bad entries, got {other:?}"),
        }
    }

    #[test]
    fn shape_and_value_errors_are_reported_together_at_their_paths() {
        let found = errors(
            r#"{"systemMailboxes":[{"address":"a@x.example","graphTenantId":"x.example","clientId":7,"clientSecret":"env:A"}],
                "tenants":[{"name":"t","provider":"sendgrid","sender":"nope","sendgridApiKey":"file:relative"}, 3]}"#,
        );
        assert_eq!(found.len(), 4, "{found:?}");
        assert!(
            found[0].starts_with("systemMailboxes[0].clientId: must be a string, got a number")
        );
        assert!(
            found.iter().any(|e| e.starts_with("tenants[0].sender:")),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|e| e.starts_with("tenants[0].sendgridApiKey:")),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|e| e.starts_with("tenants[1]: must be an object")),
            "{found:?}"
        );
    }

    #[test]
    fn a_literal_secret_is_never_quoted_in_an_error() {
        let found = errors(
            r#"{"tenants":[{"name":"t","provider":"sendgrid","sender":"a@t.example","sendgridApiKey":"https://hunter2@x"}]}"#,
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(!found[0].contains("hunter2"), "{found:?}");
    }

    fn mailbox_with(budget: &str) -> String {
        format!(
            r#"{{"systemMailboxes":[{{"address":"a@contoso.example","graphTenantId":"contoso.example","clientId":"c","clientSecret":"env:S"{budget}}}]}}"#
        )
    }

    #[test]
    fn bad_tenant_budgets_are_refused_naming_the_field() {
        for (budget, path, needle) in [
            (
                r#","externalRecipientsPerDay":0,"acceptedDomains":["contoso.example"]"#,
                "systemMailboxes[0].externalRecipientsPerDay",
                "positive whole number",
            ),
            (
                r#","externalRecipientsPerDay":-5,"acceptedDomains":["contoso.example"]"#,
                "systemMailboxes[0].externalRecipientsPerDay",
                "positive whole number",
            ),
            (
                r#","externalRecipientsPerDay":"500","acceptedDomains":["contoso.example"]"#,
                "systemMailboxes[0].externalRecipientsPerDay",
                "positive whole number",
            ),
            (
                r#","externalRecipientsPerDay":1.5,"acceptedDomains":["contoso.example"]"#,
                "systemMailboxes[0].externalRecipientsPerDay",
                "positive whole number",
            ),
            (
                r#","externalRecipientsPerDay":500"#,
                "systemMailboxes[0].acceptedDomains",
                "is required with externalRecipientsPerDay",
            ),
            (
                r#","acceptedDomains":["contoso.example"]"#,
                "systemMailboxes[0].externalRecipientsPerDay",
                "is required with acceptedDomains",
            ),
            (
                r#","externalRecipientsPerDay":500,"acceptedDomains":[]"#,
                "systemMailboxes[0].acceptedDomains",
                "at least one domain",
            ),
            (
                r#","externalRecipientsPerDay":500,"acceptedDomains":"contoso.example""#,
                "systemMailboxes[0].acceptedDomains",
                "must be an array",
            ),
            (
                r#","externalRecipientsPerDay":500,"acceptedDomains":["contoso.example","contoso"]"#,
                "systemMailboxes[0].acceptedDomains[1]",
                "not a domain name",
            ),
            (
                r#","externalRecipientsPerDay":500,"acceptedDomains":[7]"#,
                "systemMailboxes[0].acceptedDomains[0]",
                "must be a domain name",
            ),
        ] {
            let found = errors(&mailbox_with(budget));
            assert_eq!(found.len(), 1, "{budget}: {found:?}");
            assert!(
                found[0].starts_with(&format!("{path}: ")),
                "{budget}: {found:?}"
            );
            assert!(found[0].contains(needle), "{budget}: {found:?}");
        }
        let good = r#","externalRecipientsPerDay":500,"acceptedDomains":["Contoso.example."]"#;
        assert!(check(&mailbox_with(good)).is_ok());
    }

    #[test]
    fn a_graph_tenant_has_one_budget_and_sendgrid_none() {
        // Two entries of one graphTenantId (any case) with different budgets.
        let found = errors(
            r#"{"systemMailboxes":[
                 {"address":"a@contoso.example","graphTenantId":"contoso.example","clientId":"c","clientSecret":"env:S","externalRecipientsPerDay":500,"acceptedDomains":["contoso.example"]},
                 {"address":"b@contoso.example","graphTenantId":"Contoso.Example","clientId":"c","clientSecret":"env:S"}],
               "tenants":[
                 {"name":"t","provider":"microsoft-graph","sender":"t@contoso.example","graphTenantId":"contoso.example","clientId":"c","clientSecret":"env:S","externalRecipientsPerDay":500,"acceptedDomains":["CONTOSO.example"]},
                 {"name":"s","provider":"sendgrid","sender":"s@adatum.example","sendgridApiKey":"env:K","externalRecipientsPerDay":10}]}"#,
        );
        assert_eq!(found.len(), 2, "{found:?}");
        // Entry by entry first; the one-budget check runs over the whole file at the end.
        assert!(
            found[1].starts_with("systemMailboxes[1].externalRecipientsPerDay: graphTenantId contoso.example has a different tenant budget at systemMailboxes[0]"),
            "{found:?}"
        );
        assert!(
            found[0].starts_with(
                "tenants[1].externalRecipientsPerDay: is only for provider microsoft-graph"
            ),
            "{found:?}"
        );
    }

    #[test]
    fn the_example_file_is_clean() {
        let text = include_str!("../../examples/senders.json");
        assert!(check(text).is_ok());
    }
}
