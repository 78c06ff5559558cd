//! The senders file's hand-written checker: [`Checker`] collects every error of a file, each
//! at its JSON path (a wrong type, a bad address, secret reference or limit).

use super::*;

/// One object of the file at its JSON path (`tenants[2]`): what every field check reads.
#[derive(Clone, Copy)]
pub(super) struct Entry<'o> {
    pub(super) at: &'o str,
    pub(super) object: &'o Map<String, Value>,
}

impl Entry<'_> {
    /// The JSON path of its `field` (`tenants[2].clientSecret`).
    fn path(self, field: &str) -> String {
        format!("{}.{field}", self.at)
    }
}

#[derive(Default)]
pub(super) struct Checker {
    pub(super) errors: Vec<BadEntry>,
}

impl Checker {
    pub(super) fn fail(&mut self, location: String, reason: impl Into<String>) {
        self.errors.push(BadEntry {
            location,
            reason: reason.into(),
        });
    }

    /// `result`'s value, or `None` with its error recorded at `location`.
    pub(super) fn kept<T, E: std::fmt::Display>(
        &mut self,
        location: String,
        result: Result<T, E>,
    ) -> Option<T> {
        result.map_err(|e| self.fail(location, e.to_string())).ok()
    }

    /// Refuses every key of `entry` not in `known`.
    pub(super) fn known_keys(&mut self, entry: Entry, known: &[&str]) {
        for key in entry.object.keys() {
            if !known.contains(&key.as_str()) {
                self.fail(
                    entry.path(&key.escape_debug().to_string()),
                    format!("unknown field; expected one of {}", known.join(", ")),
                );
            }
        }
    }

    /// A field that must be a string if it is there: `Some(None)` if it is absent or null,
    /// `None` (with the error recorded at `path`) if it is something else.
    fn as_str<'o>(
        &mut self,
        object: &'o Map<String, Value>,
        path: &str,
        field: &str,
    ) -> Option<Option<&'o str>> {
        match object.get(field) {
            None | Some(Value::Null) => Some(None),
            Some(Value::String(raw)) => Some(Some(raw)),
            Some(other) => {
                self.fail(
                    path.to_owned(),
                    format!("must be a string, got {}", kind(other)),
                );
                None
            }
        }
    }

    /// An entry's optional `priority` (`high` | `normal` | `bulk`); `normal` when absent or
    /// refused (a refusal is recorded, so the entry is not written).
    pub(super) fn priority(&mut self, entry: Entry) -> Priority {
        self.string(entry, "priority", false)
            .and_then(|p| self.kept(entry.path("priority"), p.trim().parse::<Priority>()))
            .unwrap_or_default()
    }

    /// `readBounces`: a boolean, default true.
    pub(super) fn read_bounces(&mut self, entry: Entry) -> bool {
        self.boolean(entry, "readBounces").unwrap_or(true)
    }

    /// `traceDelivery`: a boolean; absent, the sender follows `GRAPH_TRACE_DELIVERY`.
    pub(super) fn trace_delivery(&mut self, entry: Entry) -> Option<bool> {
        self.boolean(entry, "traceDelivery")
    }

    /// An optional boolean field (`None` when absent, null or refused).
    fn boolean(&mut self, entry: Entry, field: &str) -> Option<bool> {
        match entry.object.get(field) {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(other) => {
                self.fail(
                    entry.path(field),
                    format!("must be true or false, got {}", kind(other)),
                );
                None
            }
        }
    }

    /// A string field: `None` (with an error when `required`) if it is absent, null, empty or
    /// not a string; trimmed otherwise. Control characters (NUL included) are refused.
    pub(super) fn string(&mut self, entry: Entry, field: &str, required: bool) -> Option<String> {
        let path = entry.path(field);
        match self.as_str(entry.object, &path, field)?.map(str::trim) {
            None => {
                if required {
                    self.fail(path, "is required");
                }
                None
            }
            Some("") => {
                if required {
                    self.fail(path, "is required (it is empty)");
                }
                None
            }
            Some(value) if value.contains(char::is_control) => {
                self.fail(path, "contains a control character (CR, LF, NUL, …)");
                None
            }
            Some(value) => Some(value.to_owned()),
        }
    }

    pub(super) fn mailbox(&mut self, entry: Entry, field: &str) -> Option<MailboxAddress> {
        let raw = self.string(entry, field, true)?;
        self.kept(entry.path(field), MailboxAddress::parse(&raw))
    }

    pub(super) fn tenant_id(&mut self, entry: Entry) -> Option<String> {
        let raw = self.string(entry, "graphTenantId", true)?;
        let checked = GraphCredentials::check_tenant_id(&raw);
        self.kept(entry.path("graphTenantId"), checked)
            .map(|()| raw)
    }

    pub(super) fn secret(&mut self, entry: Entry, field: &str) -> Option<SecretRef> {
        let path = entry.path(field);
        // Not `string()`: its messages could not quote a literal, but this one must not either.
        match self.as_str(entry.object, &path, field)?.map(str::trim) {
            None => {
                self.fail(path, "is required");
                None
            }
            Some(raw) => self
                .kept(path, SecretRef::check(raw))
                .map(|()| SecretRef::new(raw)),
        }
    }

    /// A Graph app's credential: `clientCertificate` (a PEM bundle or a reference to one)
    /// when given, else `clientSecret`; either is stored in the secret column.
    pub(super) fn credential(&mut self, entry: Entry) -> Option<SecretRef> {
        match entry.object.get("clientCertificate") {
            None | Some(Value::Null) => self.secret(entry, "clientSecret"),
            Some(_) => self.secret(entry, "clientCertificate"),
        }
    }

    pub(super) fn limit(&mut self, entry: Entry, field: &str) -> Result<Option<NonZeroU32>, ()> {
        match entry.object.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => match value
                .as_u64()
                .filter(|v| *v <= i32::MAX as u64)
                .and_then(|v| NonZeroU32::new(v as u32))
            {
                Some(v) => Ok(Some(v)),
                None => {
                    self.fail(
                        entry.path(field),
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
    pub(super) fn accepted_domains(&mut self, entry: Entry) -> Result<Option<Vec<String>>, ()> {
        let path = entry.path(ACCEPTED_DOMAINS);
        let items = match entry.object.get(ACCEPTED_DOMAINS) {
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
    pub(super) fn tenant_budget(&mut self, entry: Entry) -> Result<Option<TenantBudget>, ()> {
        let per_day = self.limit(entry, EXTERNAL_PER_DAY);
        let domains = self.accepted_domains(entry);
        match (per_day?, domains?) {
            (None, None) => Ok(None),
            (Some(external_recipients_per_day), Some(accepted_domains)) => Ok(Some(TenantBudget {
                external_recipients_per_day,
                accepted_domains,
            })),
            (Some(_), None) => {
                self.fail(
                    entry.path(ACCEPTED_DOMAINS),
                    format!(
                        "is required with {EXTERNAL_PER_DAY}: the tenant's own domains (recipients in any other domain count against the budget)"
                    ),
                );
                Err(())
            }
            (None, Some(_)) => {
                self.fail(
                    entry.path(EXTERNAL_PER_DAY),
                    format!(
                        "is required with {ACCEPTED_DOMAINS}: the tenant's external recipients per rolling 24 h"
                    ),
                );
                Err(())
            }
        }
    }

    /// A Graph app: `graphTenantId`, `clientId`, the credential and the tenant budget.
    pub(super) fn graph_app(&mut self, entry: Entry) -> Option<GraphCredentials> {
        let graph_tenant_id = self.tenant_id(entry);
        let client_id = self.string(entry, "clientId", true);
        let client_secret = self.credential(entry);
        let tenant_budget = self.tenant_budget(entry);
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
    pub(super) fn one_budget_per_graph_tenant(&mut self, apps: &[(String, GraphCredentials)]) {
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

    pub(super) fn entries<'v>(
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

pub(super) fn kind(value: &Value) -> &'static str {
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
pub(super) fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 40 {
        format!("{}…", text.chars().take(40).collect::<String>())
    } else {
        text
    }
}

pub(super) const MAILBOX_FIELDS: &[&str] = &[
    "address",
    "graphTenantId",
    "clientId",
    "clientSecret",
    "clientCertificate",
    "rateLimitPerMinute",
    "rateLimitRecipientsPerDay",
    "rateLimitReservedPercent",
    "externalRecipientsPerDay",
    "acceptedDomains",
    "priority",
    "readBounces",
    "traceDelivery",
    "warmUp",
];
pub(super) const TENANT_FIELDS: &[&str] = &[
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
    "priority",
    "readBounces",
    "traceDelivery",
    "warmUp",
];
pub(super) const EXTERNAL_PER_DAY: &str = "externalRecipientsPerDay";
pub(super) const ACCEPTED_DOMAINS: &str = "acceptedDomains";
