//! `SENDERS_FILE`: the senders file `run` imports at start-up, as `mail-worker senders import`
//! does (upserts by address and name, the stale bookings of changed limits dropped), so a
//! ConfigMap or Secret mounted in every replica is the senders' source of truth. Read and
//! checked whole before the database is opened: a bad file stops start-up with every error.

use std::path::{Path, PathBuf};

use anyhow::Context;
use sqlx::PgPool;

use crate::{config::Config, import::senders::SendersFile, log_events};

/// The checked senders file of `SENDERS_FILE`, not yet written.
pub(crate) struct Checked {
    path: PathBuf,
    file: SendersFile,
}

/// Reads and checks `path` (every entry, nothing written).
///
/// # Errors
/// An unreadable file or any bad entry, named with `SENDERS_FILE` and the path.
pub(crate) fn check(path: &Path) -> anyhow::Result<Checked> {
    let context = || format!("SENDERS_FILE ({})", path.display());
    let text = std::fs::read_to_string(path).with_context(context)?;
    let file = crate::import::senders::check(&text).with_context(context)?;
    Ok(Checked {
        path: path.to_owned(),
        file,
    })
}

/// Imports `checked` into `pool` and logs `senders.imported`.
///
/// # Errors
/// The database's.
pub(super) async fn import(
    config: &Config,
    pool: &PgPool,
    checked: &Checked,
) -> anyhow::Result<()> {
    let (report, bookings_dropped, messages_due) =
        crate::reports::bookings::import_senders(config, pool, &checked.file)
            .await
            .with_context(|| format!("SENDERS_FILE ({})", checked.path.display()))?;
    tracing::info!(
        event = log_events::SENDERS_IMPORTED,
        file = %checked.path.display(),
        tenants = report.tenants,
        system_mailboxes = report.system_mailboxes,
        limits_changed = report.limits_changed.len(),
        bookings_dropped,
        messages_due,
        "senders imported from SENDERS_FILE"
    );
    Ok(())
}
