//! mail-worker delivers campaign and system mail through Microsoft Graph (and SendGrid), run as
//! several replicas at once, with a distributed, pre-emptive per-mailbox rate limiter in Redis.
//!
//! # Layout
//! The modules follow the send path: [`intake`] → [`store`] (PostgreSQL is the schedule) →
//! [`worker`] → [`service`] → [`mailer`] (wrapped by the [`rate_limit`]er) → Microsoft Graph.
//! The one diagram of that path, and where to add a setting, a provider, a limiter algorithm, a
//! metric or an admin page: docs/architecture.md. Each module's own doc lists its files.
//!
//! # Who each public module is for
//! This crate is the product: the library and the `mail-worker` binary, what runs in production.
//! Items are `pub(crate)` unless something outside the crate uses them; a module is `pub` for
//! these readers only (none of them is a stable API: the contracts are the env vars, the
//! commands, the HTTP routes, the metric and log event names, and the file formats):
//!
//! | module | used outside the crate by |
//! |---|---|
//! | [`cli`] | the binary (`src/main.rs`: [`cli::main`]), the bench lab's daemon, `tests/it` |
//! | [`daemon`], [`config`], [`store`], [`worker`], [`intake`], [`ops`], [`clock`] | the demo and the bench lab (which run the daemon in process), `tests/it` |
//! | [`domain`], [`import`], [`mailer`] | the above, and the fuzz targets (`fuzz/`) |
//! | [`reports`], [`forecast`], [`rate_limit`], [`service`] | the demo's forecast, the benchmarks, `tests/it` |
//! | [`admin`] | `tests/it` and `tests/browser.rs` (the UI over HTTP) |
//! | [`bounces`], [`delivery`], [`ingest`], [`outbox`] | `tests/it` |
//! | [`log_events`] | dashboards and alerts key on its strings; `tests/it` and the benchmarks read the log lines by them |
//! | [`telemetry`] | the demo (its log file) |
//! | [`supervise`], [`shutdown`] | the daemon's parts as supervised tasks (one that stops on its own stops the process) and the `CancellationToken` their loops and `intake::run` take; the demo and `tests/it` (which adds one through [`daemon::Options`]) |
//!
//! Inside the crate, production depends only downwards: the admin UI ([`admin`]), the commands
//! ([`cli`]) and the daemon ([`daemon`]) are three front ends over the same layers, and what two
//! of them share lives in a layer ([`reports`], [`store`], [`service`]), never in a front end.
//!
//! Choices a reader might not expect, and why (history: docs/decisions/):
//! - *PostgreSQL is the scheduler*: a claim moves due rows straight to `SENDING` for this
//!   replica's own free slots; the Redis queue ([`intake`]) only feeds PostgreSQL, it is not in
//!   the send path (less state, one row write less, no poll delay).
//! - *`anyhow` only at the top*: [`cli`] and [`daemon`] return `anyhow::Result`; they live in the
//!   library so that the benchmarks' daemon runs the same entry point.

pub mod admin;
mod backoff;
pub mod bounces;
pub mod cli;
pub mod clock;
pub mod config;
pub mod daemon;
mod debug_showing;
pub mod delivery;
pub mod domain;
pub mod forecast;
pub mod import;
pub mod ingest;
pub mod intake;
pub mod log_events;
pub mod mailer;
pub mod ops;
pub mod outbox;
mod plural;
pub mod rate_limit;
pub mod replica_reader;
pub mod reports;
pub mod service;
pub mod shutdown;
pub mod store;
pub mod supervise;
pub mod telemetry;
pub mod worker;

/// The version this build reports (`mail-worker --version`, the `daemon.started` line's
/// `version`): Cargo.toml's version, plus the git commit when built from a checkout
/// (`0.1.0 (3be3ae5c1f2a)`; build.rs). What changed between two versions: CHANGELOG.md.
pub const VERSION: &str = env!("MAIL_WORKER_VERSION");
