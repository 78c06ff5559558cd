//! The `event` field of graph-sim's own log lines.

/// graph-sim accepted or refused a request.
pub const SIM_REQUEST: &str = "sim.request";
/// graph-sim started listening. Fields: `listen`, `graph_base_url`, `mailboxes`.
pub const SIM_STARTED: &str = "sim.started";
/// graph-sim stopped. Fields: `reason`, `accepted`.
pub const SIM_STOPPED: &str = "sim.stopped";
