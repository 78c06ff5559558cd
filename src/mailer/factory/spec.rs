//! What a mailer is built from, secrets resolved ([`MailerSpec`]), and its config digest, the
//! factory's cache key.

use secrecy::SecretString;
use sha2::{Digest, Sha256};

use crate::{
    domain::{
        GraphCredentials, MailboxAddress, SecretRef, Sender, SystemMailbox, Tenant, TenantTransport,
    },
    mailer::{
        MailError,
        graph::{GraphApp, graph_scope, token},
    },
    rate_limit::{RateLimiter, RateLimits, TenantBudget},
};

use super::MailerFactory;

pub(super) type ConfigDigest = [u8; 32];

/// A Graph mailer's own configuration: the mailbox, its app, our limits and the tenant's budget.
pub(super) struct GraphSpec {
    pub(super) mailbox: MailboxAddress,
    pub(super) app: GraphApp,
    pub(super) limits: RateLimits,
    pub(super) tenant_budget: Option<TenantBudget>,
}

/// A mailer's whole configuration, secrets resolved.
pub(super) enum MailerSpec {
    Graph(Box<GraphSpec>),
    SendGrid {
        from: MailboxAddress,
        api_key: SecretString,
    },
}

impl<L: RateLimiter> MailerFactory<L> {
    pub(super) async fn spec_for(&self, sender: &Sender) -> Result<MailerSpec, MailError> {
        match sender {
            Sender::Tenant(tenant) => self.tenant_spec(tenant).await,
            Sender::SystemMailbox(mailbox) => self.system_mailbox_spec(mailbox).await,
        }
    }

    /// A secret column resolved: `env:` through [`SecretEnv`], `file:` through the cache.
    async fn secret(&self, secret: &SecretRef) -> Result<SecretString, crate::domain::SecretError> {
        secret
            .resolve_cached(|n| (self.secret_env)(n), &self.secret_files)
            .await
    }

    pub(super) async fn tenant_spec(&self, tenant: &Tenant) -> Result<MailerSpec, MailError> {
        Ok(match &tenant.transport {
            TenantTransport::Graph(credentials) => MailerSpec::Graph(Box::new(GraphSpec {
                mailbox: tenant.sender_address.clone(),
                app: self
                    .app(
                        credentials,
                        &format!("tenant {}'s Graph client secret", tenant.name),
                    )
                    .await?,
                // The warm-up's cap included (ADR 0047): the limits in force are decided in
                // one place, for a tenant's sender as for a system mailbox.
                limits: self.defaults.for_tenant(tenant),
                tenant_budget: credentials.tenant_budget.clone(),
            })),
            TenantTransport::SendGrid { api_key } => MailerSpec::SendGrid {
                from: tenant.sender_address.clone(),
                api_key: self.secret(api_key).await.map_err(|e| {
                    MailError::misconfigured(format!(
                        "tenant {}'s SendGrid API key: {e}",
                        tenant.name
                    ))
                })?,
            },
        })
    }

    pub(super) async fn system_mailbox_spec(
        &self,
        mailbox: &SystemMailbox,
    ) -> Result<MailerSpec, MailError> {
        Ok(MailerSpec::Graph(Box::new(GraphSpec {
            mailbox: mailbox.address.clone(),
            app: self
                .app(
                    &mailbox.graph,
                    &format!("system mailbox {}'s Graph client secret", mailbox.address),
                )
                .await?,
            limits: self.limits_for(mailbox),
            tenant_budget: mailbox.graph.tenant_budget.clone(),
        })))
    }

    async fn app(&self, credentials: &GraphCredentials, what: &str) -> Result<GraphApp, MailError> {
        let client_secret = self
            .secret(&credentials.client_secret)
            .await
            .map_err(|e| MailError::misconfigured(format!("{what}: {e}")).caused_by(e))?;
        Ok(GraphApp {
            login_base_url: self.graph.login_base_url.clone(),
            graph_tenant_id: credentials.graph_tenant_id.clone(),
            client_id: credentials.client_id.clone(),
            client_secret,
            scope: graph_scope(&self.graph.api_base_url),
        })
    }

    /// SHA-256 over every field that shapes the mailer, each length-prefixed so no two
    /// configurations encode alike; secrets enter only as their fingerprint.
    pub(super) fn digest(&self, spec: &MailerSpec) -> ConfigDigest {
        let mut hash = Sha256::new();
        let mut field = |value: &[u8]| {
            hash.update((value.len() as u64).to_be_bytes());
            hash.update(value);
        };
        field(b"mail-worker mailer config v1");
        match spec {
            MailerSpec::Graph(spec) => {
                let GraphSpec {
                    mailbox,
                    app,
                    limits,
                    tenant_budget,
                } = &**spec;
                field(b"microsoft-graph");
                field(mailbox.as_str().as_bytes());
                field(self.graph.api_base_url.as_str().as_bytes());
                field(app.login_base_url.as_str().as_bytes());
                field(&[u8::from(self.graph.save_to_sent_items)]);
                field(self.graph.send_mode.as_str().as_bytes());
                field(&self.graph.send_settle.as_millis().to_be_bytes());
                field(app.graph_tenant_id.as_bytes());
                field(app.client_id.as_bytes());
                field(token::secret_fingerprint(&app.client_secret).as_bytes());
                field(app.scope.as_bytes());
                field(&limits.per_minute.get().to_be_bytes());
                field(&limits.recipients_per_day.get().to_be_bytes());
                field(&[limits.reserved_percent]);
                match tenant_budget {
                    None => field(b"no tenant budget"),
                    Some(budget) => {
                        field(b"tenant budget");
                        field(&budget.external_recipients_per_day.get().to_be_bytes());
                        field(&(budget.accepted_domains.len() as u64).to_be_bytes());
                        for domain in &budget.accepted_domains {
                            field(domain.as_bytes());
                        }
                    }
                }
            }
            MailerSpec::SendGrid { from, api_key } => {
                field(b"sendgrid");
                field(from.as_str().as_bytes());
                field(self.sendgrid_api_base_url.as_str().as_bytes());
                field(token::secret_fingerprint(api_key).as_bytes());
            }
        }
        hash.finalize().into()
    }
}

pub(super) fn hex(digest: &ConfigDigest) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn unbuildable(e: &MailError) -> String {
    format!("unbuildable: {e}")
}
