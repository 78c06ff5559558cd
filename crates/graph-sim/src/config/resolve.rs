//! Checking a [`SimConfig`] and resolving its mailboxes (lower-cased address, id) before
//! graph-sim serves.

use std::collections::HashSet;

use uuid::Uuid;

use super::{MailboxLimits, SimConfig};
use crate::SimError;
use crate::address::Address as MailboxAddress;

impl SimConfig {
    /// Checks the configuration and resolves every mailbox (lower-cased address, id).
    ///
    /// # Errors
    /// [`SimError::Config`] naming the first problem: a bad or duplicate mailbox address or id,
    /// a duplicate client id, a mailbox app that does not exist in the mailbox's tenant, a zero
    /// limit or token lifetime.
    pub(crate) fn resolve(&self) -> Result<Vec<ResolvedMailbox>, SimError> {
        for tenant in &self.tenants {
            if tenant.external_recipients_per_day == 0 || tenant.accepted_domains.is_empty() {
                return Err(SimError::Config(format!(
                    "tenant {:?}: external_recipients_per_day must be at least 1 and accepted_domains not empty",
                    tenant.tenant_id
                )));
            }
            if let Some(new) = &tenant.new_tenant
                && !super::REPUTATION_CODES.contains(&new.code.as_str())
            {
                return Err(SimError::Config(format!(
                    "tenant {:?}: new_tenant.code {:?} must be one of 5.7.705, 5.7.708, 5.7.501",
                    tenant.tenant_id, new.code
                )));
            }
        }
        if let Some(bad) = self
            .bounces
            .unknown_recipients
            .iter()
            .find(|u| !u.code_is_permanent() || !u.address.contains('@'))
        {
            return Err(SimError::Config(format!(
                "bounces.unknown_recipients: {:?} with code {:?}: the address must be user@domain or *@domain and the code a permanent DSN code like 5.1.1",
                bad.address, bad.code
            )));
        }
        if self.token_lifetime_s == 0 {
            return Err(SimError::Config(
                "token_lifetime_s must be at least 1".into(),
            ));
        }
        let mut client_ids = HashSet::new();
        for app in &self.apps {
            if app.client_id.trim().is_empty() || app.tenant_id.trim().is_empty() {
                return Err(SimError::Config(
                    "every app needs a tenant_id and a client_id".into(),
                ));
            }
            if !client_ids.insert(app.client_id.clone()) {
                return Err(SimError::Config(format!(
                    "client_id {:?} appears twice",
                    app.client_id
                )));
            }
        }
        let mut seen_addresses = HashSet::new();
        let mut seen_ids = HashSet::new();
        let mut out = Vec::with_capacity(self.mailboxes.len());
        for mailbox in &self.mailboxes {
            let address = MailboxAddress::parse(&mailbox.address)
                .map_err(|e| SimError::Config(format!("mailbox: {e}")))?;
            if !seen_addresses.insert(address.clone()) {
                return Err(SimError::Config(format!("mailbox {address} appears twice")));
            }
            let id = mailbox.id.unwrap_or_else(Uuid::new_v4);
            if !seen_ids.insert(id) {
                return Err(SimError::Config(format!("mailbox id {id} appears twice")));
            }
            for client_id in &mailbox.apps {
                let known = self.apps.iter().any(|a| {
                    &a.client_id == client_id
                        && a.tenant_id.eq_ignore_ascii_case(&mailbox.tenant_id)
                });
                if !known {
                    return Err(SimError::Config(format!(
                        "mailbox {address}: app {client_id:?} is not an app of tenant {:?}",
                        mailbox.tenant_id
                    )));
                }
            }
            mailbox.limits.check(&address)?;
            out.push(ResolvedMailbox {
                address,
                id,
                tenant_id: mailbox.tenant_id.clone(),
                apps: mailbox.apps.clone(),
                limits: mailbox.limits.clone(),
                licensed: mailbox.licensed,
            });
        }
        Ok(out)
    }
}

impl MailboxLimits {
    fn check(&self, address: &MailboxAddress) -> Result<(), SimError> {
        let zero = [
            ("concurrent_requests", u64::from(self.concurrent_requests)),
            ("messages_per_minute", u64::from(self.messages_per_minute)),
            ("recipients_per_day", self.recipients_per_day),
            (
                "requests_per_10_minutes",
                u64::from(self.requests_per_10_minutes),
            ),
            (
                "recipients_per_message",
                u64::from(self.recipients_per_message),
            ),
        ]
        .into_iter()
        .find(|(_, v)| *v == 0);
        match zero {
            Some((name, _)) => Err(SimError::Config(format!(
                "mailbox {address}: limits.{name} must be at least 1"
            ))),
            None => Ok(()),
        }
    }
}

/// A checked mailbox.
#[derive(Debug, Clone)]
pub(crate) struct ResolvedMailbox {
    pub address: MailboxAddress,
    pub id: Uuid,
    pub tenant_id: String,
    pub apps: Vec<String>,
    pub limits: MailboxLimits,
    pub licensed: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_configurations_are_refused_by_name() {
        let cases = [
            (
                r#"{"mailboxes":[{"address":"not-an-address","tenant_id":"t"}]}"#,
                "not an SMTP address",
            ),
            (
                r#"{"mailboxes":[{"address":"a@b.example","tenant_id":"t"},{"address":"A@b.example","tenant_id":"t"}]}"#,
                "appears twice",
            ),
            (
                r#"{"mailboxes":[{"address":"a@b.example","tenant_id":"t","apps":["nope"]}]}"#,
                "is not an app of tenant",
            ),
            (
                r#"{"mailboxes":[{"address":"a@b.example","tenant_id":"t","limits":{"messages_per_minute":0}}]}"#,
                "limits.messages_per_minute must be at least 1",
            ),
            (r#"{"token_lifetime_s":0}"#, "token_lifetime_s"),
        ];
        for (json, expected) in cases {
            let err = SimConfig::from_json_str(json)
                .unwrap()
                .resolve()
                .unwrap_err();
            assert!(err.to_string().contains(expected), "{json}: {err}");
        }
        let err = SimConfig::from_json_str(r#"{"mailbox":[]}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `mailbox`"), "{err}");
    }
}
