//! Who sends: a tenant (Graph or SendGrid) or a system mailbox (always Graph).

use std::num::NonZeroU32;

use uuid::Uuid;

use super::{MailboxAddress, SecretRef};

/// `tenants.mail_provider`: `microsoft-graph` or `sendgrid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MailProvider {
    /// Microsoft Graph `sendMail`, wrapped by our limiter.
    MicrosoftGraph,
    /// SendGrid v3 `mail/send`, not wrapped.
    SendGrid,
}

super::keyword::keywords!(MailProvider {
    MicrosoftGraph => "microsoft-graph",
    SendGrid => "sendgrid",
});

/// An Entra ID app registration allowed to send for a mailbox (application `Mail.Send`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphCredentials {
    /// Directory (tenant) id or verified domain, e.g. `contoso.example`.
    pub graph_tenant_id: String,
    /// Application (client) id.
    pub client_id: String,
    /// The client secret's value, or a reference `env:NAME` / `file:/path`.
    pub client_secret: SecretRef,
    /// The Graph tenant's external-recipient budget (`externalRecipientsPerDay` and
    /// `acceptedDomains` of the senders file); `None` = no tenant budget.
    pub tenant_budget: Option<TenantBudget>,
}

/// A tenant's outbound budget for recipients outside its accepted domains: Exchange Online's
/// tenant external recipient rate limit (TERRL), counted over a rolling 24 h for the whole
/// tenant; going over it blocks external mail for every user of the tenant.
/// <https://learn.microsoft.com/office365/servicedescriptions/exchange-online-service-description/exchange-online-limits#sending-limits>
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TenantBudget {
    /// External recipients per rolling 24 h for the whole tenant.
    pub external_recipients_per_day: NonZeroU32,
    /// Domains of the tenant (lower case, punycode); every other recipient domain is external.
    pub accepted_domains: Vec<String>,
}

impl TenantBudget {
    /// How many of `addresses` are outside the accepted domains, compared without regard to
    /// case (a subdomain of an accepted domain is not accepted unless listed: the safe reading,
    /// as Exchange's accepted domains are exact unless a subdomain is configured). Addresses
    /// reach here validated, with punycode domains.
    pub(crate) fn external_count<'a>(&self, addresses: impl IntoIterator<Item = &'a str>) -> u32 {
        let external = addresses
            .into_iter()
            .filter(|address| {
                let domain = address.rsplit('@').next().unwrap_or_default();
                let domain = domain.strip_suffix('.').unwrap_or(domain);
                !self
                    .accepted_domains
                    .iter()
                    .any(|d| d.eq_ignore_ascii_case(domain))
            })
            .count();
        u32::try_from(external).unwrap_or(u32::MAX)
    }

    /// An `acceptedDomains` entry as stored: trimmed, without a trailing dot, converted to
    /// punycode (IDNA, UTS #46) and lower case, and a domain name of two or more labels.
    ///
    /// # Errors
    /// What is wrong, quoting the value (a domain is not secret).
    pub(crate) fn accepted_domain(raw: &str) -> Result<String, String> {
        let value = raw.trim();
        let value = value.strip_suffix('.').unwrap_or(value);
        let quoted = value.chars().take(100).collect::<String>();
        let ascii = idna::domain_to_ascii(value)
            .map_err(|_| format!("{quoted:?} is not a domain name (IDNA conversion failed)"))?;
        if is_domain_name(&ascii) {
            Ok(ascii.to_ascii_lowercase())
        } else {
            Err(format!(
                "{quoted:?} is not a domain name of two or more labels (e.g. contoso.com)"
            ))
        }
    }
}

impl GraphCredentials {
    /// Checks a `graphTenantId`: a directory (tenant) id as a hyphenated GUID
    /// (`9d6b1c1e-0000-4000-8000-00000000abcd`) or a domain name of two or more labels
    /// (`contoso.onmicrosoft.com`, `contoso.example`): letters, digits and `-`, each label 1–63
    /// characters not starting or ending with `-`, at most 253 in all. It becomes a path segment
    /// of the token URL (<https://learn.microsoft.com/entra/identity-platform/v2-oauth2-client-creds-grant-flow>),
    /// so anything else (`http://…`, `a/b`, spaces) is refused.
    ///
    /// # Errors
    /// What is wrong, quoting the value (a tenant id is not secret).
    pub(crate) fn check_tenant_id(raw: &str) -> Result<(), String> {
        let value = raw.trim();
        let guid = value.len() == 36
            && value.bytes().enumerate().all(|(i, b)| match i {
                8 | 13 | 18 | 23 => b == b'-',
                _ => b.is_ascii_hexdigit(),
            });
        if guid || is_domain_name(value) {
            Ok(())
        } else {
            Err(format!(
                "{:?} is neither a tenant GUID nor a domain name (e.g. contoso.onmicrosoft.com)",
                value.chars().take(100).collect::<String>()
            ))
        }
    }
}

/// A DNS name of two or more LDH labels (RFC 1123 §2.1), the last not all digits.
fn is_domain_name(value: &str) -> bool {
    let name = value.strip_suffix('.').unwrap_or(value);
    let labels: Vec<&str> = name.split('.').collect();
    name.len() <= 253
        && labels.len() >= 2
        && labels.iter().all(|l| {
            (1..=63).contains(&l.len())
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
        && !labels
            .last()
            .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()))
}

impl PartialEq for SecretRef {
    fn eq(&self, other: &Self) -> bool {
        self.raw() == other.raw()
    }
}
impl Eq for SecretRef {}

/// How a tenant sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TenantTransport {
    /// Microsoft Graph with these credentials.
    Graph(GraphCredentials),
    /// SendGrid with this API key (or reference).
    SendGrid {
        /// The API key or a reference to it.
        api_key: SecretRef,
    },
}

/// A row of `tenants`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant {
    /// `tenants.id`.
    pub id: Uuid,
    /// `tenants.name`, unique, e.g. `northwind`.
    pub name: String,
    /// The `From` mailbox.
    pub sender_address: MailboxAddress,
    /// Provider and credentials.
    pub transport: TenantTransport,
    /// Its warm-up ramp and current step (`sender_warmups`, ADR 0047); `None`: no warm-up.
    pub warm_up: Option<super::WarmUpStep>,
}

impl Tenant {
    /// The tenant's provider.
    pub fn provider(&self) -> MailProvider {
        match self.transport {
            TenantTransport::Graph(_) => MailProvider::MicrosoftGraph,
            TenantTransport::SendGrid { .. } => MailProvider::SendGrid,
        }
    }
}

/// A row of `system_mailboxes`: a platform mailbox that always sends through Graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemMailbox {
    /// `system_mailboxes.id`.
    pub id: Uuid,
    /// The mailbox, lower-case.
    pub address: MailboxAddress,
    /// The app that sends for it.
    pub graph: GraphCredentials,
    /// Override of `MAIL_RATE_LIMIT_PER_MINUTE` (messages per UTC minute); `None` = default.
    pub rate_limit_per_minute: Option<NonZeroU32>,
    /// Override of `MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY` (recipients per UTC day); `None` = default.
    pub rate_limit_recipients_per_day: Option<NonZeroU32>,
    /// Override of `MAIL_RATE_LIMIT_RESERVED_PERCENT` (0 to 90); `None` = default.
    pub rate_limit_reserved_percent: Option<u8>,
    /// Its warm-up ramp and current step (`sender_warmups`, ADR 0047); `None`: no warm-up.
    pub warm_up: Option<super::WarmUpStep>,
}

/// The sender of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sender {
    /// A tenant's own sender.
    Tenant(Tenant),
    /// A system mailbox.
    SystemMailbox(SystemMailbox),
}

impl Sender {
    /// The `From` mailbox.
    pub(crate) fn mailbox(&self) -> &MailboxAddress {
        match self {
            Self::Tenant(t) => &t.sender_address,
            Self::SystemMailbox(m) => &m.address,
        }
    }

    /// Its warm-up ramp and step, if any.
    pub(crate) fn warm_up(&self) -> Option<super::WarmUpStep> {
        match self {
            Self::Tenant(t) => t.warm_up,
            Self::SystemMailbox(m) => m.warm_up,
        }
    }

    /// Its Graph app (and tenant budget); `None` for a SendGrid tenant.
    pub(crate) fn graph(&self) -> Option<&GraphCredentials> {
        match self {
            Self::Tenant(t) => match &t.transport {
                TenantTransport::Graph(g) => Some(g),
                TenantTransport::SendGrid { .. } => None,
            },
            Self::SystemMailbox(m) => Some(&m.graph),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external_recipients_are_those_outside_the_accepted_domains() {
        let budget = TenantBudget {
            external_recipients_per_day: NonZeroU32::new(100).unwrap(),
            accepted_domains: vec!["contoso.example".into(), "xn--mnchen-3ya.example".into()],
        };
        assert_eq!(
            budget.external_count([
                "a@contoso.example",
                "b@CONTOSO.example",
                "c@sub.contoso.example",
                "d@example.com",
                "e@xn--mnchen-3ya.example",
                "f@contoso.example.",
            ]),
            2
        );
    }

    #[test]
    fn accepted_domains_are_stored_lower_case_in_punycode() {
        assert_eq!(
            TenantBudget::accepted_domain(" Contoso.Example. "),
            Ok("contoso.example".into())
        );
        assert_eq!(
            TenantBudget::accepted_domain("München.example"),
            Ok("xn--mnchen-3ya.example".into())
        );
        crate::domain::assert_sorts(
            TenantBudget::accepted_domain,
            &[],
            &[
                "",
                "contoso",
                "a b.example",
                "@contoso.example",
                "x@y.example",
                "10.0.0.1",
            ],
        );
    }

    #[test]
    fn tenant_ids_are_guids_or_domain_names() {
        crate::domain::assert_sorts(
            GraphCredentials::check_tenant_id,
            &[
                "9d6b1c1e-0000-4000-8000-00000000abcd",
                "contoso.example",
                "contoso.onmicrosoft.com",
                "a-b.c1.example.",
            ],
            &[
                "",
                "t",
                "http://evil.example",
                "contoso.example/../x",
                "a b.example",
                "-a.example",
                "a..example",
                "10.0.0.1",
                "9d6b1c1e00004000800000000000abcd",
                "{9d6b1c1e-0000-4000-8000-00000000abcd}",
            ],
        );
    }
}
