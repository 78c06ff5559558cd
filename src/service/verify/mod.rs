//! `mail-worker senders verify`: checks every Graph sender (or those named) before its first
//! message — the secret's reference, a fresh token and what it grants, one harmless mailbox
//! request, the address and the configured limits, and optionally one real test message — and
//! reports one line per check ([`report`]; what each finding means in [`explain`], the Graph
//! requests in `crate::mailer::graph::verify`). It never changes a sender and never prints a
//! secret or a token. The CLI and the admin UI render the same [`VerifyReport`].

mod explain;
mod grant;
pub mod report;
mod send_test;

use std::sync::Arc;

use secrecy::SecretString;
use sqlx::PgPool;

use crate::{
    clock::Clock,
    config::Config,
    domain::{GraphCredentials, MailboxAddress, Sender},
    mailer::{
        MailError, MailErrorKind,
        graph::{
            GraphApp, graph_scope, permissions,
            verify::{Credential, GraphProbe},
        },
    },
    store::{self, StoreError},
};

pub use report::{Check, Outcome, SenderReport, VerifyReport};

/// A certificate expiring within this many days warns.
pub const CERTIFICATE_WARN_DAYS: i64 = 30;

/// What to check.
#[derive(Debug, Clone, Default)]
pub struct VerifyOptions {
    /// Only these sending addresses (every sender when empty); an unknown one is an error.
    pub addresses: Vec<String>,
    /// Send one real test message to this address from each sender checked.
    pub send_test_to: Option<String>,
}

/// Why the checks could not run at all (a failed check is a line of the report, not this).
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// An address given is not a mailbox address.
    #[error("{0:?} is not a mailbox address")]
    BadAddress(String),
    /// Addresses given that no sender has.
    #[error("no sender has the address {}: `mailbox usage` lists the senders, `senders import` adds one", .0.join(", "))]
    UnknownSenders(Vec<String>),
    /// The database.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The HTTP client, the limiter or the mailers cannot be built.
    #[error("cannot set up the checks: {0}")]
    Setup(String),
}

/// Checks the senders `options` names (every sender when none) against Graph as `config`
/// configures it, on `clock`.
///
/// # Errors
/// [`VerifyError`] when the checks cannot run (an unknown address, the database, the set-up).
pub async fn verify_senders(
    config: &Config,
    pool: &PgPool,
    options: &VerifyOptions,
    clock: Arc<dyn Clock>,
) -> Result<VerifyReport, VerifyError> {
    let senders = senders_named(pool, &options.addresses).await?;
    let http = crate::mailer::http::build_http_client(config.http_timeout)
        .map_err(|e| VerifyError::Setup(e.to_string()))?;
    let sender_test = match &options.send_test_to {
        Some(to) => Some(send_test::SendTest::new(config, to, Arc::clone(&clock))?),
        None => None,
    };
    let mut reports = Vec::new();
    for sender in &senders {
        let checks = match sender.graph() {
            Some(graph) => {
                verify_graph_sender(config, &http, sender, graph, sender_test.as_ref(), &clock)
                    .await
            }
            None => vec![Check::ok(
                "provider",
                "a SendGrid sender: not checked (senders verify checks Microsoft Graph senders)",
            )],
        };
        reports.push(SenderReport {
            address: sender.mailbox().to_string(),
            sender: match sender {
                Sender::SystemMailbox(_) => "system mailbox".to_owned(),
                Sender::Tenant(t) => format!("tenant {}", t.name),
            },
            app: sender
                .graph()
                .map(|g| format!("app {} in tenant {}", g.client_id, g.graph_tenant_id)),
            checks,
        });
    }
    Ok(VerifyReport { senders: reports })
}

/// The senders at `addresses` (all when empty); every unknown address named in the error.
async fn senders_named(pool: &PgPool, addresses: &[String]) -> Result<Vec<Sender>, VerifyError> {
    if addresses.is_empty() {
        return Ok(store::senders::all(pool).await?);
    }
    let mut wanted = Vec::new();
    for raw in addresses {
        let address =
            MailboxAddress::parse(raw).map_err(|_| VerifyError::BadAddress(raw.clone()))?;
        wanted.push(address.as_str().to_owned());
    }
    let senders = store::senders::matching(pool, Some(&wanted)).await?;
    let unknown: Vec<String> = wanted
        .iter()
        .filter(|w| !senders.iter().any(|s| s.mailbox().as_str() == w.as_str()))
        .cloned()
        .collect();
    if !unknown.is_empty() {
        return Err(VerifyError::UnknownSenders(unknown));
    }
    Ok(senders)
}

/// Every check of one Graph sender, in order; those that need a token are left out after the
/// secret or the credentials failed (the failing line says so).
async fn verify_graph_sender(
    config: &Config,
    http: &reqwest::Client,
    sender: &Sender,
    graph: &GraphCredentials,
    send_test: Option<&send_test::SendTest>,
    clock: &Arc<dyn Clock>,
) -> Vec<Check> {
    let mut checks = Vec::new();
    let tail = |checks: &mut Vec<Check>| {
        checks.push(explain::address(sender.mailbox().as_str()));
        checks.push(explain::limits(
            config.rate_limit.defaults.for_sender(sender),
        ));
    };
    let reference = graph.client_secret.describe();
    let secret = match graph.client_secret.resolve() {
        Ok(secret) => {
            checks.push(Check::ok("secret", secret_found(&reference)));
            secret
        }
        Err(e) => {
            checks.push(Check::fail(
                "secret",
                format!("{e} (credentials, permissions and mailbox not checked)"),
                secret_fix(&reference, sender),
            ));
            tail(&mut checks);
            return checks;
        }
    };
    let probe = match probe(config, http, sender, graph, secret, clock) {
        Ok(probe) => probe,
        Err(e) => {
            checks.push(Check::fail(
                "credentials",
                format!("{e} (permissions and mailbox not checked)"),
                "the secret must be a client secret, or a PEM bundle with the certificate and its RSA private key",
            ));
            tail(&mut checks);
            return checks;
        }
    };
    if let Some(check) = certificate(probe.credential(), clock.now()) {
        checks.push(check);
    }
    let grant = match probe.fetch_token().await {
        Ok(grant) => {
            let with = match probe.credential() {
                Credential::Secret => "a client secret".to_owned(),
                Credential::Certificate { thumbprint, .. } => format!("certificate {thumbprint}"),
            };
            checks.push(Check::ok(
                "credentials",
                format!(
                    "a fresh token for app {} in tenant {} with {with}",
                    graph.client_id, graph.graph_tenant_id
                ),
            ));
            grant
        }
        Err(MailError {
            kind: MailErrorKind::Unauthorized(message),
            ..
        }) => {
            let mut check = explain::refused(&message);
            check
                .found
                .push_str(" (permissions and mailbox not checked)");
            checks.push(check);
            tail(&mut checks);
            return checks;
        }
        Err(e) => {
            checks.push(Check::fail(
                "credentials",
                format!("no token: {e} (permissions and mailbox not checked)"),
                "check that this host reaches GRAPH_LOGIN_BASE_URL (login.microsoftonline.com) and run the check again",
            ));
            tail(&mut checks);
            return checks;
        }
    };
    checks.push(grant::permissions_check(config, &grant));
    checks.push(grant::mailbox_check(config, &probe, &grant).await);
    if let Some(test) = send_test {
        let readable = grant.roles.as_deref().is_none_or(permissions::can_read);
        checks.push(test.run(sender, &probe, readable).await);
    }
    tail(&mut checks);
    checks
}

fn secret_found(reference: &str) -> String {
    if reference == "<literal>" {
        "a literal secret stored in the database (an env: or file: reference keeps it out of it)"
            .to_owned()
    } else {
        format!("{reference} resolves")
    }
}

fn secret_fix(reference: &str, sender: &Sender) -> String {
    let whose = match sender {
        Sender::SystemMailbox(_) => "the process running mail-worker".to_owned(),
        Sender::Tenant(t) => format!("the process running mail-worker (tenant {})", t.name),
    };
    if let Some(name) = reference.strip_prefix("env:") {
        format!(
            "set {name} in the environment of {whose} (and of every replica), or change the sender's secret with `senders import`"
        )
    } else if let Some(path) = reference.strip_prefix("file:") {
        format!(
            "make {path} readable by {whose} and not empty, or change the sender's secret with `senders import`"
        )
    } else {
        "set the sender's secret with `senders import`".to_owned()
    }
}

fn probe(
    config: &Config,
    http: &reqwest::Client,
    sender: &Sender,
    graph: &GraphCredentials,
    client_secret: SecretString,
    clock: &Arc<dyn Clock>,
) -> Result<GraphProbe, MailError> {
    let app = GraphApp {
        login_base_url: config.graph.login_base_url.clone(),
        graph_tenant_id: graph.graph_tenant_id.clone(),
        client_id: graph.client_id.clone(),
        client_secret,
        scope: graph_scope(&config.graph.api_base_url),
    };
    GraphProbe::new(
        http.clone(),
        &config.graph.api_base_url,
        app,
        sender.mailbox(),
        Arc::clone(clock),
    )
}

/// A certificate's days to expiry: `fail` when expired, `warn` under
/// [`CERTIFICATE_WARN_DAYS`]; `None` for a client secret.
fn certificate(credential: &Credential, now: chrono::DateTime<chrono::Utc>) -> Option<Check> {
    let Credential::Certificate {
        thumbprint,
        not_after,
    } = credential
    else {
        return None;
    };
    let renew = "create a new certificate, upload its public part to the app registration (Certificates & secrets), put the new bundle in the sender's secret, then remove the old certificate";
    Some(match not_after {
        Err(e) => Check::warn(
            "certificate",
            format!("certificate {thumbprint}: its expiry cannot be read: {e}"),
            "check the bundle's CERTIFICATE block",
        ),
        Ok(at) => {
            let days = (*at - now).num_days();
            let found = format!(
                "certificate {thumbprint} expires {} ({days} days)",
                at.format("%Y-%m-%d %H:%M UTC")
            );
            if *at <= now {
                Check::fail("certificate", format!("{found}: expired"), renew)
            } else if days < CERTIFICATE_WARN_DAYS {
                Check::warn(
                    "certificate",
                    format!("{found}: under {CERTIFICATE_WARN_DAYS} days"),
                    renew,
                )
            } else {
                Check::ok("certificate", found)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_warns_under_thirty_days_and_fails_when_expired() {
        let now = chrono::Utc::now();
        let cert = |days: i64| Credential::Certificate {
            thumbprint: "t".into(),
            not_after: Ok(now + chrono::Duration::days(days) + chrono::Duration::hours(1)),
        };
        assert_eq!(certificate(&cert(90), now).unwrap().outcome, Outcome::Ok);
        assert_eq!(certificate(&cert(29), now).unwrap().outcome, Outcome::Warn);
        assert_eq!(certificate(&cert(-2), now).unwrap().outcome, Outcome::Fail);
        assert!(certificate(&Credential::Secret, now).is_none());
    }
}
