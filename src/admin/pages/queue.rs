//! The intake queue's page: its counts and its dead-lettered jobs, with retry and discard of a
//! selection or of all, each logged: the code of `mail-worker queue stats|dead|retry|discard`
//! ([`crate::intake::dead`]); and the HTTP ingest's counts per producer over the last 24 h
//! ([`crate::store::ingest::counts`], from PostgreSQL: every replica's requests).

use super::*;
use crate::{
    intake::{self, IntakeSettings, dead},
    plural::counted,
};

/// The most dead jobs the page lists.
pub(crate) const DEAD_PAGE: usize = 200;

/// What a button does to the chosen dead jobs.
#[derive(Debug, Clone, Copy)]
pub(super) enum Action {
    /// `queue retry`: back on the queue, attempts reset.
    Retry,
    /// `queue discard`: deleted.
    Discard,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct QueueQuery {
    done: Option<String>,
    changed: Option<u64>,
}

/// One dead job as the page shows it: what `queue dead` prints (never the line itself, which
/// holds addresses).
struct DeadLine {
    task: String,
    reason: String,
    bytes: usize,
    when: String,
}

#[derive(Template)]
#[template(path = "admin/queue.html")]
struct QueuePage {
    nav: bool,
    csrf: String,
    /// `None`: `INTAKE_QUEUE=off`.
    queue: Option<String>,
    stats: dead::QueueStats,
    oldest: String,
    alive_within: u64,
    dead: Vec<DeadLine>,
    limit: usize,
    notice: Option<String>,
    /// The HTTP ingest's producers (last 24 h).
    http: Vec<crate::store::ingest::ProducerCounts>,
}

fn when(at: Option<i64>) -> String {
    at.and_then(|s| chrono::DateTime::from_timestamp(s, 0))
        .map_or_else(
            || "-".to_owned(),
            |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        )
}

/// The configured queue and a connection to its Redis; `None` when the intake is off.
async fn connect(
    state: &AdminState,
) -> Result<Option<(IntakeSettings, intake::QueueConnection)>, AdminError> {
    let Some(settings) =
        IntakeSettings::from_config(&state.config.intake, state.config.events.outbox())
    else {
        return Ok(None);
    };
    let conn = intake::connect(&state.config.redis_url).await?;
    Ok(Some((settings, conn)))
}

pub(super) async fn queue(
    State(state): State<AdminState>,
    Authed(session): Authed,
    Params(q): Params<QueueQuery>,
) -> Result<Html<String>, AdminError> {
    let notice = match (q.done.as_deref(), q.changed) {
        (Some(verb @ ("retried" | "discarded")), Some(n)) => {
            Some(format!("{} {verb}.", counted(n, "dead job", "dead jobs")))
        }
        _ => None,
    };
    let mut page = QueuePage {
        nav: true,
        csrf: session.csrf,
        queue: None,
        stats: dead::QueueStats::default(),
        oldest: "-".into(),
        alive_within: 0,
        dead: Vec::new(),
        limit: DEAD_PAGE,
        notice,
        http: crate::store::ingest::counts(&state.pool).await?,
    };
    if let Some((settings, mut conn)) = connect(&state).await? {
        let alive_within = settings.orphaned_after();
        page.dead = dead::list(&mut conn, &settings.queue, DEAD_PAGE)
            .await?
            .into_iter()
            .map(|j| DeadLine {
                when: when(j.dead_at),
                task: j.task,
                reason: j.reason,
                bytes: j.bytes,
            })
            .collect();
        // The counts after the list: a job that dies between the two reads is then counted
        // though not listed, never listed beside a count without it.
        page.stats = dead::stats(&mut conn, &settings.queue, alive_within).await?;
        page.oldest = page
            .stats
            .oldest_seconds
            .map_or_else(|| "-".to_owned(), |s| format!("{s} s"));
        page.alive_within = alive_within.as_secs();
        page.queue = Some(settings.queue);
    }
    render(&page)
}

/// Retries or discards the selected dead jobs (`id=…`, repeated) or all of them (`all=1`).
pub(super) async fn queue_act(
    State(state): State<AdminState>,
    Posted { fields, .. }: Posted,
    action: Action,
) -> Result<Response, AdminError> {
    let Some((settings, mut conn)) = connect(&state).await? else {
        return Err(AdminError::BadInput(
            "INTAKE_QUEUE is off: there is no intake queue".into(),
        ));
    };
    let ids: Vec<String> = fields.all("id").map(str::to_owned).collect();
    let (which, tasks) = match (fields.get("all").is_some(), ids.is_empty()) {
        (true, _) => (dead::Which::All, "all".to_owned()),
        (false, false) => {
            let tasks = logged_ids(&ids);
            (dead::Which::Ids(ids), tasks)
        }
        (false, true) => {
            return Err(AdminError::BadInput(
                "id: select at least one dead job, or use the button for all".into(),
            ));
        }
    };
    let queue = settings.queue.as_str();
    let (changed, verb, event) = match action {
        Action::Retry => (
            dead::retry(&mut conn, queue, which).await?,
            "retried",
            log_events::MAIL_ADMIN_QUEUE_RETRIED,
        ),
        Action::Discard => (
            dead::discard(&mut conn, queue, which).await?,
            "discarded",
            log_events::MAIL_ADMIN_QUEUE_DISCARDED,
        ),
    };
    tracing::info!(
        event,
        queue,
        tasks = %tasks,
        changed,
        "dead intake jobs {verb} in the admin UI"
    );
    Ok(Redirect::to(&format!("/queue?done={verb}&changed={changed}")).into_response())
}
