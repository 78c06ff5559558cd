//! Bounce reading's variables (`GRAPH_READ_BOUNCES`, `GRAPH_BOUNCE_INTERVAL`,
//! `GRAPH_BOUNCE_FOLDER`) into [`BounceSettings`].

use std::time::Duration;

use super::{ConfigError, env::Env};
use crate::bounces::BounceSettings;

/// The shortest `GRAPH_BOUNCE_INTERVAL`: 1 s (each read costs at least one Graph request).
const MIN_INTERVAL: Duration = Duration::from_secs(1);

pub(super) fn read<F: Fn(&str) -> Option<String>>(
    env: &Env<'_, F>,
) -> Result<BounceSettings, ConfigError> {
    let defaults = BounceSettings::default();
    let enabled = env.parsed("GRAPH_READ_BOUNCES", false, |raw| {
        match raw.to_ascii_lowercase().as_str() {
            "on" => Ok(true),
            "off" => Ok(false),
            _ => Err("must be `on` or `off`"),
        }
    })?;
    let interval = env.duration("GRAPH_BOUNCE_INTERVAL", defaults.interval)?;
    if interval < MIN_INTERVAL {
        return Err(env.error("GRAPH_BOUNCE_INTERVAL", "must be at least 1s"));
    }
    let folder = match env.get("GRAPH_BOUNCE_FOLDER") {
        None => None,
        Some(f) if f.trim().contains(['/', '?', '#']) => {
            return Err(env.error(
                "GRAPH_BOUNCE_FOLDER",
                "must be a well-known folder name (deleteditems, archive, …) or a folder id",
            ));
        }
        Some(f) => Some(f.trim().to_owned()),
    };
    Ok(BounceSettings {
        enabled,
        interval,
        folder,
    })
}
