//! The delivery reconciler's variables (`GRAPH_TRACE_DELIVERY`, `GRAPH_TRACE_INTERVAL`,
//! `GRAPH_TRACE_LAG`, `GRAPH_TRACE_GIVE_UP`, `GRAPH_TRACE_PROBE`) into [`TraceSettings`].

use std::time::Duration;

use super::{ConfigError, env::Env};
use crate::delivery::TraceSettings;

/// The shortest `GRAPH_TRACE_INTERVAL` and `GRAPH_TRACE_PROBE`: 1 s.
const MIN_INTERVAL: Duration = Duration::from_secs(1);

pub(super) fn read<F: Fn(&str) -> Option<String>>(
    env: &Env<'_, F>,
) -> Result<TraceSettings, ConfigError> {
    let defaults = TraceSettings::default();
    let enabled = env.parsed("GRAPH_TRACE_DELIVERY", false, |raw| {
        match raw.to_ascii_lowercase().as_str() {
            "on" => Ok(true),
            "off" => Ok(false),
            _ => Err("must be `on` or `off`"),
        }
    })?;
    let interval = env.duration("GRAPH_TRACE_INTERVAL", defaults.interval)?;
    let probe = env.duration("GRAPH_TRACE_PROBE", defaults.probe)?;
    for (name, value) in [
        ("GRAPH_TRACE_INTERVAL", interval),
        ("GRAPH_TRACE_PROBE", probe),
    ] {
        if value < MIN_INTERVAL {
            return Err(env.error(name, "must be at least 1s"));
        }
    }
    Ok(TraceSettings {
        enabled,
        interval,
        lag: env.duration("GRAPH_TRACE_LAG", defaults.lag)?,
        give_up: env.duration("GRAPH_TRACE_GIVE_UP", defaults.give_up)?,
        probe,
    })
}
