//! The integration tests: one binary, one module per area, against the real PostgreSQL and
//! Redis on 127.0.0.1 (start them with `scripts/services.sh`) and graph-sim in-process.

mod admin;
mod attachments;
mod bad_input;
mod bounces;
mod budgets;
mod claim_round;
mod cli;
mod daemon;
mod day_window;
mod deploy;
mod events;
mod exactly_once;
mod forecast;
mod headroom;
mod import;
mod intake;
mod intake_cluster;
mod intake_recovery;
mod limiter_cold_start;
mod mailer;
mod ops;
mod overlap;
mod priority;
mod quota_pause;
mod rate_limit;
mod real_campaign;
mod retention;
mod sender_faults;
mod service;
mod store;
mod support;
mod suppressions;
mod tenant_budget;
mod verify;
