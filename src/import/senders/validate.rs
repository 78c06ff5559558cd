//! Validating a whole senders file with the [`Checker`]: every entry's fields, names and
//! addresses given once, one tenant budget per Graph tenant; the entries ready to write.

use super::{
    checker::{ACCEPTED_DOMAINS, EXTERNAL_PER_DAY, Entry, MAILBOX_FIELDS, TENANT_FIELDS, kind},
    pools::{Known, PoolEntry, pools},
    warm_up::{not_for_sendgrid, warm_up},
    *,
};
use crate::domain::WarmUp;

/// An entry's priority, `readBounces`, `traceDelivery` (`None`: `GRAPH_TRACE_DELIVERY`) and
/// `warmUp`.
pub(super) type Settings = (Priority, bool, Option<bool>, Option<WarmUp>);

/// A validated entry, ready to write.
pub(super) enum Validated {
    /// The mailbox, its app, its overrides (per minute, per day, reserved percent), priority
    /// `readBounces` and `traceDelivery`.
    Mailbox(
        MailboxAddress,
        GraphCredentials,
        (Option<NonZeroU32>, Option<NonZeroU32>, Option<u8>),
        Settings,
    ),
    Tenant(String, MailboxAddress, TenantTransport, Settings),
    /// A pool, written after every sender (its members are looked up by address).
    Pool(PoolEntry),
}

/// Checks a whole senders document, collecting every error with its JSON path.
pub(super) fn validate_value(root: &Value) -> Result<Vec<Validated>, Vec<BadEntry>> {
    let mut check = Checker::default();
    let Value::Object(root) = root else {
        check.fail(
            "(file)".into(),
            format!(
                "must be an object with systemMailboxes, tenants and senderPools, got {}",
                kind(root)
            ),
        );
        return Err(check.errors);
    };
    let file = Entry {
        at: "(file)",
        object: root,
    };
    check.known_keys(file, &["systemMailboxes", "tenants", "senderPools"]);
    // Every sender's address and whether it sends through Graph, for the pools' members.
    let mut known = Known::new();
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
    for (at, object) in check.entries(root, "systemMailboxes") {
        let m = Entry { at: &at, object };
        check.known_keys(m, MAILBOX_FIELDS);
        let errors = check.errors.len();
        let address = check.mailbox(m, "address");
        if let Some(a) = &address {
            once(&mut check, format!("mailbox {a}"), format!("{at}.address"));
            known.insert(a.clone(), true);
        }
        let graph = check.graph_app(m);
        let per_minute = check.limit(m, "rateLimitPerMinute");
        let per_day = check.limit(m, "rateLimitRecipientsPerDay");
        let reserved = reserved_percent(&mut check, m);
        let ramp = warm_up(&mut check, m);
        let priority = (
            check.priority(m),
            check.read_bounces(m),
            check.trace_delivery(m),
            ramp.unwrap_or_default(),
        );
        if let Some(graph) = &graph {
            budgets.push((at.clone(), graph.clone()));
        }
        if let (Some(address), Some(graph), Ok(per_minute), Ok(per_day), Ok(reserved)) =
            (address, graph, per_minute, per_day, reserved)
            && check.errors.len() == errors
        {
            good.push(Validated::Mailbox(
                address,
                graph,
                (per_minute, per_day, reserved),
                priority,
            ));
        }
    }
    for (at, object) in check.entries(root, "tenants") {
        let t = Entry { at: &at, object };
        check.known_keys(t, TENANT_FIELDS);
        let errors = check.errors.len();
        let name = check.string(t, "name", true);
        if let Some(n) = &name {
            once(&mut check, format!("tenant {n}"), format!("{at}.name"));
        }
        let sender = check.mailbox(t, "sender");
        let (priority, read_bounces, trace_delivery) = (
            check.priority(t),
            check.read_bounces(t),
            check.trace_delivery(t),
        );
        let provider = check
            .string(t, "provider", true)
            .and_then(|p| check.kept(format!("{at}.provider"), p.parse::<MailProvider>()));
        let ramp = if provider == Some(MailProvider::SendGrid) {
            not_for_sendgrid(&mut check, t);
            None
        } else {
            warm_up(&mut check, t).unwrap_or_default()
        };
        let priority = (priority, read_bounces, trace_delivery, ramp);
        if let Some(s) = &sender {
            // A system mailbox with the address wins (as `senders::by_address` resolves it).
            known
                .entry(s.clone())
                .or_insert(provider != Some(MailProvider::SendGrid));
        }
        let transport = match provider {
            Some(MailProvider::MicrosoftGraph) => check.graph_app(t).map(|graph| {
                budgets.push((at.clone(), graph.clone()));
                TenantTransport::Graph(graph)
            }),
            Some(MailProvider::SendGrid) => {
                for field in [EXTERNAL_PER_DAY, ACCEPTED_DOMAINS] {
                    if object.get(field).is_some_and(|v| !v.is_null()) {
                        check.fail(
                            format!("{at}.{field}"),
                            "is only for provider microsoft-graph (a tenant budget is Exchange Online's)",
                        );
                    }
                }
                check
                    .secret(t, "sendgridApiKey")
                    .map(|api_key| TenantTransport::SendGrid { api_key })
            }
            None => {
                // A missing or unknown provider: still check the credentials it gives, so one
                // pass names every error of the entry.
                let given = |field: &str| object.get(field).is_some_and(|v| !v.is_null());
                if given("sendgridApiKey") {
                    check.secret(t, "sendgridApiKey");
                }
                let graph = [
                    "graphTenantId",
                    "clientId",
                    "clientSecret",
                    "clientCertificate",
                ];
                if graph.into_iter().any(given) {
                    check.graph_app(t);
                }
                None
            }
        };
        if let (Some(name), Some(sender), Some(transport)) = (name, sender, transport)
            && check.errors.len() == errors
        {
            good.push(Validated::Tenant(name, sender, transport, priority));
        }
    }
    check.one_budget_per_graph_tenant(&budgets);
    good.extend(
        pools(&mut check, root, &known)
            .into_iter()
            .map(Validated::Pool),
    );
    if check.errors.is_empty() {
        Ok(good)
    } else {
        Err(check.errors)
    }
}

pub(super) fn validate(file: &SendersFile) -> Result<Vec<Validated>, Vec<BadEntry>> {
    // Serialising plain strings and numbers cannot fail.
    validate_value(&serde_json::to_value(file).unwrap_or(Value::Null))
}

/// A mailbox's optional `rateLimitReservedPercent`: a whole number from 0 to 90.
fn reserved_percent(check: &mut Checker, entry: Entry) -> Result<Option<u8>, ()> {
    const FIELD: &str = "rateLimitReservedPercent";
    match entry.object.get(FIELD) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => {
            let parsed = value.as_u64().map(|v| v.to_string());
            match parsed
                .as_deref()
                .map(crate::rate_limit::parse_reserved_percent)
            {
                Some(Ok(p)) => Ok(Some(p)),
                _ => {
                    check.fail(
                        format!("{}.{FIELD}", entry.at),
                        format!("must be a whole number from 0 to 90, got {value}"),
                    );
                    Err(())
                }
            }
        }
    }
}
