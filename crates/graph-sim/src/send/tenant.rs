//! A tenant's checks of an accepted send, both answered `202` and then bounced for the
//! message's external recipients (recipients outside the tenant's accepted domains):
//! - a new tenant (`new_tenant`) past the external recipients it is trusted with per rolling
//!   24 h: a reputation NDR `550 5.7.705` / `5.7.708` / `5.7.501`
//!   (<https://learn.microsoft.com/exchange/mail-flow-best-practices/non-delivery-reports-in-exchange-online/fix-error-code-5-7-700-through-5-7-750>);
//! - its external recipient rate limit (TERRL): `550 5.7.233`
//!   (<https://learn.microsoft.com/office365/servicedescriptions/exchange-online-service-description/exchange-online-limits#sending-limits>).
//!
//! A bounced message counts in neither window.

use crate::{
    config::SimTenant, limits::TenantWindow, ndr::Failure, records::RefusalCause, state::Inner,
    state::SimState, validate::ParsedMessage,
};

/// A message the tenant's checks bounced: why, and its failed (external) recipients.
pub(super) struct Bounced {
    pub cause: RefusalCause,
    pub failures: Vec<Failure>,
}

/// Whether the message of mailbox `idx`, sent at `now_ms`, bounces by its tenant's checks;
/// counts its external recipients in the tenant's windows when it does not.
pub(super) fn over(
    state: &SimState,
    inner: &mut Inner,
    idx: usize,
    message: &ParsedMessage,
    now_ms: i64,
) -> Option<Bounced> {
    let tenant_id = &state.mailboxes[idx].tenant_id;
    let tenant = state
        .tenants
        .iter()
        .find(|t| t.tenant_id.eq_ignore_ascii_case(tenant_id))?;
    let recipients = || message.to.iter().chain(&message.cc).chain(&message.bcc);
    let external = tenant.external(recipients());
    if external == 0 {
        return None;
    }
    let key = tenant.tenant_id.to_lowercase();
    let failed = |make: &dyn Fn(&str) -> Failure| -> Vec<Failure> {
        recipients()
            .filter(|a| !tenant.accepts(a))
            .map(|a| make(a))
            .collect()
    };
    let reputation = tenant.new_tenant.as_ref();
    if let Some(new) = reputation
        && !window(&mut inner.reputation_windows, &key).fits(now_ms, external, new.external_per_day)
    {
        return Some(Bounced {
            cause: RefusalCause::TenantReputation,
            failures: failed(&|a| Failure::reputation(a, &new.code)),
        });
    }
    if !window(&mut inner.tenant_windows, &key).fits(
        now_ms,
        external,
        tenant.external_recipients_per_day,
    ) {
        return Some(Bounced {
            cause: RefusalCause::TenantExternalLimit,
            failures: failed(&|a| Failure::tenant_limit(a)),
        });
    }
    count(inner, tenant, &key, now_ms, external);
    None
}

/// Counts a message that passed both checks in both windows.
fn count(inner: &mut Inner, tenant: &SimTenant, key: &str, now_ms: i64, external: u32) {
    if let Some(new) = &tenant.new_tenant {
        window(&mut inner.reputation_windows, key).try_count(
            now_ms,
            external,
            new.external_per_day,
        );
    }
    window(&mut inner.tenant_windows, key).try_count(
        now_ms,
        external,
        tenant.external_recipients_per_day,
    );
}

fn window<'a>(
    windows: &'a mut std::collections::HashMap<String, TenantWindow>,
    key: &str,
) -> &'a mut TenantWindow {
    windows.entry(key.to_owned()).or_default()
}
