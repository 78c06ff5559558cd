//! The messages page: a filter, and retry or cancel of the selected rows, each logged; a
//! message's page with each recipient's fate.

use super::*;

#[derive(Debug, Default, Deserialize)]
pub(super) struct MessagesQuery {
    sender: Option<String>,
    status: Option<String>,
    error: Option<String>,
    done: Option<String>,
    matched: Option<u64>,
    changed: Option<u64>,
}

impl MessagesQuery {
    fn filter(&self) -> Result<ops::MessageFilter, AdminError> {
        let text = |v: &Option<String>| {
            v.as_deref()
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        };
        Ok(ops::MessageFilter {
            sender: text(&self.sender).map(|s| s.to_lowercase()),
            status: match text(&self.status) {
                None => None,
                Some(s) => Some(
                    s.to_ascii_uppercase()
                        .parse::<MessageStatus>()
                        .map_err(|_| {
                            AdminError::BadInput(format!(
                                "status: {s:?} is not one of {}",
                                MessageStatus::NAMES
                            ))
                        })?,
                ),
            },
            error_like: text(&self.error),
            ids: Vec::new(),
        })
    }

    /// The filter part as a query string (for links and the redirect after an action).
    fn query(&self) -> String {
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("sender", &self.sender),
            ("status", &self.status),
            ("error", &self.error),
        ] {
            if let Some(v) = v.as_deref().filter(|v| !v.trim().is_empty()) {
                q.append_pair(k, v);
            }
        }
        q.finish()
    }
}

#[derive(Template)]
#[template(path = "admin/messages.html")]
struct MessagesPage {
    nav: bool,
    csrf: String,
    sender: String,
    status: String,
    error: String,
    /// Every sender, and whether it is the one filtered on.
    senders: Vec<(String, bool)>,
    /// Every status, and whether it is the one filtered on.
    statuses: Vec<(&'static str, bool)>,
    notice: Option<String>,
    messages: Vec<ops::MessageLine>,
    limit: u32,
    select: bool,
}

pub(super) async fn messages(
    State(state): State<AdminState>,
    Authed(session): Authed,
    Params(q): Params<MessagesQuery>,
) -> Result<Html<String>, AdminError> {
    let filter = q.filter()?;
    let notice = match (q.done.as_deref(), q.matched, q.changed) {
        (Some(verb @ ("retried" | "cancelled")), Some(matched), Some(changed)) => Some(format!(
            "{changed} {} {verb} ({matched} of the selection matched).",
            if changed == 1 { "message" } else { "messages" }
        )),
        _ => None,
    };
    let sender = filter.sender.clone().unwrap_or_default();
    let status = filter.status.map(MessageStatus::as_str).unwrap_or_default();
    render(&MessagesPage {
        nav: true,
        csrf: session.csrf,
        senders: senders::addresses(&state.pool)
            .await?
            .into_iter()
            .map(|a| {
                let on = a == sender;
                (a, on)
            })
            .collect(),
        statuses: MessageStatus::ALL_NAMES
            .into_iter()
            .map(|s| (s, s == status))
            .collect(),
        sender,
        status: status.to_owned(),
        error: filter.error_like.clone().unwrap_or_default(),
        notice,
        messages: ops::list(&state.pool, &filter, MESSAGES_PAGE).await?,
        limit: MESSAGES_PAGE,
        select: true,
    })
}

#[derive(Template)]
#[template(path = "admin/message.html")]
struct MessagePage {
    nav: bool,
    csrf: String,
    m: ops::MessageLine,
    fates: Vec<crate::store::outcomes::RecipientFate>,
}

/// One message and each recipient's fate (what `messages show` prints).
pub(super) async fn message_page(
    State(state): State<AdminState>,
    Authed(session): Authed,
    Path(id): Path<String>,
) -> Result<Html<String>, AdminError> {
    let id = uuid::Uuid::parse_str(&id)
        .map_err(|_| AdminError::BadInput(format!("{id:?} is not a message id")))?;
    let filter = ops::MessageFilter {
        ids: vec![id],
        ..Default::default()
    };
    let m = ops::list(&state.pool, &filter, 1)
        .await?
        .pop()
        .ok_or_else(|| AdminError::NotFound(format!("message {id}")))?;
    render(&MessagePage {
        nav: true,
        csrf: session.csrf,
        m,
        fates: crate::store::outcomes::of_message(&state.pool, id).await?,
    })
}

/// Retries or cancels the selected messages: the code of `messages retry|cancel`, with the
/// selection as `--id`s and the page's status filter as `--status`.
pub(super) async fn act(
    State(state): State<AdminState>,
    Posted { fields, .. }: Posted,
    action: ops::BulkAction,
) -> Result<Response, AdminError> {
    let ids = fields
        .all("id")
        .map(|id| {
            uuid::Uuid::parse_str(id)
                .map_err(|_| AdminError::BadInput(format!("id: {id:?} is not a message id")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if ids.is_empty() {
        return Err(AdminError::BadInput(
            "id: select at least one message".into(),
        ));
    }
    let query = MessagesQuery {
        sender: fields.get("sender").map(str::to_owned),
        status: fields.get("status").map(str::to_owned),
        error: fields.get("error").map(str::to_owned),
        ..MessagesQuery::default()
    };
    let mut filter = query.filter()?;
    // The page may list any status; each action takes the statuses its command accepts and
    // falls back to its default (retry: ERROR, cancel: SCHEDULED) for the others.
    filter.status = filter.status.filter(|s| action.accepted().contains(s));
    filter.ids = ids;
    let selected = filter.ids.len();
    let ids = logged_ids(&filter.ids);
    let changed = action
        .apply(&state.pool, &filter, false, state.config.events.outbox())
        .await?;
    crate::reports::bookings::unbook_messages(&state.config, &state.pool, &changed.changed_ids)
        .await?;
    let (verb, event, after) = match action {
        ops::BulkAction::Retry => (
            "retried",
            log_events::MAIL_ADMIN_MESSAGES_RETRIED,
            "SCHEDULED",
        ),
        ops::BulkAction::Cancel => (
            "cancelled",
            log_events::MAIL_ADMIN_MESSAGES_CANCELLED,
            "ERROR",
        ),
    };
    let before: BTreeMap<String, u64> = changed.by_status.clone();
    let before = serde_json::to_string(&before).unwrap_or_default();
    tracing::info!(
        event,
        message.ids = %ids,
        selected,
        matched = changed.matched,
        changed = changed.changed,
        before = %before,
        after,
        "messages {verb} in the admin UI"
    );
    let filters = query.query();
    Ok(Redirect::to(&format!(
        "/messages?{filters}{}done={verb}&matched={}&changed={}",
        if filters.is_empty() { "" } else { "&" },
        changed.matched,
        changed.changed
    ))
    .into_response())
}
