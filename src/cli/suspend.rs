//! `mail-worker suspend` and `resume` (docs/adaptive-rules.md): an operator's suspension of a
//! mailbox, a tenant's external mail or a campaign, in the limiter's Redis (every replica
//! obeys it within 1 s) and in PostgreSQL (`operator_suspensions`: the daemon writes it back
//! after a Redis flush), ending by itself.

use std::process::ExitCode;

use anyhow::Context;
use chrono::Utc;
use sqlx::PgPool;

use super::args::{SuspendArgs, SuspendScope};
use crate::{
    config::Config,
    domain::{MailboxAddress, adaptive::ActionInForce},
    log_events,
    rate_limit::{MailRateLimiter, ScopeKey},
    store::{self, suspensions},
};

/// The limiter's scope of `scope`: a mailbox with its Graph tenant, looked up.
async fn scope_key(pool: &PgPool, scope: &SuspendScope) -> anyhow::Result<ScopeKey> {
    Ok(match (&scope.mailbox, &scope.tenant, &scope.campaign) {
        (Some(address), _, _) => {
            let mailbox = MailboxAddress::parse(address)
                .map_err(|e| anyhow::anyhow!("--mailbox {address}: {e}"))?;
            let sender = store::senders::by_address(pool, &mailbox)
                .await?
                .with_context(|| format!("--mailbox {mailbox}: no sender has this address"))?;
            let tenant = sender
                .graph()
                .map(|g| g.graph_tenant_id.to_lowercase())
                .with_context(|| {
                    format!(
                        "--mailbox {mailbox}: not a Graph sender (the limiter does not hold it)"
                    )
                })?;
            ScopeKey::Mailbox { tenant, mailbox }
        }
        (None, Some(tenant), _) => ScopeKey::Tenant(
            suspensions::graph_tenant_named(pool, tenant)
                .await?
                .with_context(|| {
                    format!(
                        "--tenant {tenant}: no Graph sender has this Graph tenant id, nor is it \
                         the name of a tenant whose sender is a Graph one"
                    )
                })?,
        ),
        (None, None, Some(campaign)) => ScopeKey::Campaign(campaign.clone()),
        (None, None, None) => anyhow::bail!("one of --mailbox, --tenant, --campaign"),
    })
}

/// `mail-worker suspend`.
///
/// # Errors
/// An unknown mailbox, PostgreSQL or the limiter's Redis failing.
pub(crate) async fn suspend(config: &Config, args: &SuspendArgs) -> anyhow::Result<ExitCode> {
    let pool = store::open(&config.database_url, 2).await?;
    let scope = scope_key(&pool, &args.scope).await?;
    let now = Utc::now();
    let until = now + chrono::Duration::from_std(args.for_)?;
    suspensions::record(
        &pool,
        &suspensions::Suspension {
            scope: scope.scope().to_owned(),
            key: scope.name().to_owned(),
            tenant: match &scope {
                ScopeKey::Mailbox { tenant, .. } => Some(tenant.clone()),
                _ => None,
            },
            suspended_at: now,
            suspended_until: until,
            reason: args.reason.clone(),
        },
    )
    .await?;
    let limiter = MailRateLimiter::new(&config.rate_limit)?;
    let action = ActionInForce::operator(
        now.timestamp_millis(),
        until.timestamp_millis(),
        args.reason.clone(),
    );
    let held = limiter.set_adaptive(&scope, &action, now).await;
    tracing::info!(
        event = log_events::MAIL_ADAPTIVE_SUSPENDED,
        scope = scope.scope(),
        key = scope.name(),
        until = %until.to_rfc3339(),
        reason = args.reason.as_deref().unwrap_or_default(),
        "suspended by an operator"
    );
    let mut note = match held {
        Ok(()) => String::new(),
        Err(e) => format!(
            " (the limiter's Redis did not take it now: {e}; the daemon writes it from PostgreSQL within 10 s)"
        ),
    };
    // A campaign may be suspended before its lines arrive; a typo should not pass unseen.
    if let ScopeKey::Campaign(campaign) = &scope
        && !store::suspensions::campaign_has_messages(&pool, campaign).await?
    {
        note.push_str(&format!(
            "\nnote: no message of campaign {campaign:?} is stored yet: the suspension holds those that come (check the campaign id)"
        ));
    }
    println!(
        "suspended {} {} until {}{note}",
        scope.scope(),
        scope.name(),
        until.format("%Y-%m-%d %H:%M:%S UTC")
    );
    Ok(ExitCode::SUCCESS)
}

/// `mail-worker resume`.
///
/// # Errors
/// An unknown mailbox, PostgreSQL or the limiter's Redis failing.
pub(crate) async fn resume(config: &Config, scope: &SuspendScope) -> anyhow::Result<ExitCode> {
    let pool = store::open(&config.database_url, 2).await?;
    let scope = scope_key(&pool, scope).await?;
    let kept = suspensions::remove(&pool, scope.scope(), scope.name()).await?;
    let limiter = MailRateLimiter::new(&config.rate_limit)?;
    limiter
        .clear_adaptive(&scope, Utc::now())
        .await
        .context("the limiter's Redis")?;
    suspensions::make_due(&pool).await?;
    tracing::info!(
        event = log_events::MAIL_ADAPTIVE_RESUMED,
        scope = scope.scope(),
        key = scope.name(),
        "resumed by an operator"
    );
    println!(
        "resumed {} {}{}",
        scope.scope(),
        scope.name(),
        if kept {
            ""
        } else {
            " (no operator suspension was kept; any rule's action is lifted)"
        }
    );
    Ok(ExitCode::SUCCESS)
}
