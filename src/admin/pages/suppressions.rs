//! The suppression list's page: the entries (a scope and address filter, paged), an entry
//! added, an entry removed, each logged with the address masked: the code of `mail-worker
//! suppressions list|add|remove` ([`crate::store::suppressions`]).

use super::*;
use crate::{
    domain::{SuppressionSource, mask_address, match_key},
    import::{self, campaign::unknown_scope},
    store::{messages::SenderRef, suppressions},
};

/// Entries per page.
pub(crate) const SUPPRESSIONS_PAGE: i64 = 100;

#[derive(Debug, Default, Deserialize)]
pub(super) struct SuppressionsQuery {
    scope: Option<String>,
    address: Option<String>,
    page: Option<i64>,
    done: Option<String>,
}

#[derive(Template)]
#[template(path = "admin/suppressions.html")]
struct SuppressionsPage {
    nav: bool,
    csrf: String,
    address: String,
    /// Every scope (system mailboxes' addresses, then tenants' names), and whether it is the
    /// one filtered on.
    scopes: Vec<(String, bool)>,
    entries: Vec<suppressions::Suppression>,
    total: i64,
    page: i64,
    pages: i64,
    /// The filter as a query string, for the paging links.
    filters: String,
    notice: Option<String>,
}

/// `text` trimmed, `None` when blank.
fn given(text: Option<&str>) -> Option<&str> {
    text.map(str::trim).filter(|t| !t.is_empty())
}

/// The scope named `name` among the stored senders.
async fn scope_of(state: &AdminState, name: &str) -> Result<SenderRef, AdminError> {
    import::sender_directory(&state.pool)
        .await?
        .scope(name)
        .ok_or_else(|| AdminError::BadInput(format!("scope: {}", unknown_scope(name))))
}

pub(super) async fn suppressions_page(
    State(state): State<AdminState>,
    Authed(session): Authed,
    Params(q): Params<SuppressionsQuery>,
) -> Result<Html<String>, AdminError> {
    let directory = import::sender_directory(&state.pool).await?;
    let scope = given(q.scope.as_deref()).unwrap_or_default().to_owned();
    let address = given(q.address.as_deref()).unwrap_or_default().to_owned();
    let filter =
        suppressions::Filter {
            scope: match given(Some(&scope)) {
                Some(name) => Some(directory.scope(name).ok_or_else(|| {
                    AdminError::BadInput(format!("scope: {}", unknown_scope(name)))
                })?),
                None => None,
            },
            address_contains: given(Some(&address)),
        };
    let total = suppressions::count(&state.pool, filter).await?;
    let pages = ((total + SUPPRESSIONS_PAGE - 1) / SUPPRESSIONS_PAGE).max(1);
    let page = q.page.unwrap_or(1).clamp(1, pages);
    let entries = suppressions::list(
        &state.pool,
        filter,
        SUPPRESSIONS_PAGE,
        (page - 1) * SUPPRESSIONS_PAGE,
    )
    .await?;
    let mut names: Vec<String> = directory.system_mailboxes.keys().cloned().collect();
    names.sort();
    let mut tenants: Vec<String> = directory.tenants.keys().cloned().collect();
    tenants.sort();
    names.extend(tenants);
    let mut filters = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in [("scope", &scope), ("address", &address)] {
        if !v.is_empty() {
            filters.append_pair(k, v);
        }
    }
    let notice = match q.done.as_deref() {
        Some("added") => Some(
            "Suppressed: new messages to it are dropped, and so are sends not yet made.".to_owned(),
        ),
        Some("listed") => Some("It was suppressed already; its entry is kept.".to_owned()),
        Some("removed") => Some("Removed: messages to it are sent again.".to_owned()),
        Some("absent") => Some("It was not on the list.".to_owned()),
        _ => None,
    };
    render(&SuppressionsPage {
        nav: true,
        csrf: session.csrf,
        scopes: names
            .into_iter()
            .map(|n| {
                let on = n == scope;
                (n, on)
            })
            .collect(),
        address,
        entries,
        total,
        page,
        pages,
        filters: filters.finish(),
        notice,
    })
}

/// What a form does to one entry.
#[derive(Debug, Clone, Copy)]
pub(super) enum Change {
    /// `suppressions add`.
    Add,
    /// `suppressions remove`.
    Remove,
}

/// Adds or removes the entry of fields `address` and `scope` (`reason` for an add), logged
/// with the address masked; back to the page filtered on the scope.
pub(super) async fn suppressions_change(
    State(state): State<AdminState>,
    Posted { fields, .. }: Posted,
    change: Change,
) -> Result<Response, AdminError> {
    let address = given(fields.get("address"))
        .ok_or_else(|| AdminError::BadInput("address: give the recipient's address".into()))?;
    let name = given(fields.get("scope"))
        .ok_or_else(|| AdminError::BadInput("scope: choose a system mailbox or a tenant".into()))?;
    let scope = scope_of(&state, name).await?;
    let masked = mask_address(&match_key(address));
    let done = match change {
        Change::Add => {
            let reason = fields.get("reason").unwrap_or_default();
            let added = suppressions::add(
                &state.pool,
                scope,
                address,
                reason,
                SuppressionSource::Manual,
            )
            .await?;
            tracing::info!(
                event = log_events::MAIL_ADMIN_SUPPRESSION_ADDED,
                scope = name,
                address = %masked,
                added,
                "suppression added in the admin UI"
            );
            if added { "added" } else { "listed" }
        }
        Change::Remove => {
            let removed = suppressions::remove(&state.pool, scope, address).await?;
            tracing::info!(
                event = log_events::MAIL_ADMIN_SUPPRESSION_REMOVED,
                scope = name,
                address = %masked,
                removed,
                "suppression removed in the admin UI"
            );
            if removed { "removed" } else { "absent" }
        }
    };
    let back: String = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("scope", name)
        .append_pair("done", done)
        .finish();
    Ok(Redirect::to(&format!("/suppressions?{back}")).into_response())
}
