//! mail-worker delivers campaign and system mail through Microsoft Graph (and SendGrid), run as
//! several replicas at once, with a distributed, pre-emptive per-mailbox rate limiter in Redis.
//!
//! # Layout
//! The modules follow the send path:
//!
//! ```text
//! intake (apalis-redis queue of campaign lines → one multi-row INSERT per batch → SCHEDULED rows)
//! worker (claim loop: due rows → SENDING for this replica's free slots → handler)
//!   → service (MailProviderService: send one message, write the outcome, defer with spread)
//!     → mailer::factory → mailer::rate_limited ◄── rate_limit (Lua check_and_reserve / release)
//!       → mailer::graph (OAuth2 secret or certificate assertion; GRAPH_SEND_MODE draft:
//!                        create draft → send, checked before any resend | sendmail)
//!         | mailer::sendgrid
//! ```
//!
//! Beside them: [`config`] (env), [`domain`] (types), [`store`] (PostgreSQL), [`import`] (the
//! producer files and [`import::enqueue`]), [`telemetry`] and [`events`] (JSON logs), [`clock`],
//! [`daemon`] (the composition root), [`shutdown`] (the stop its loops wait for), [`ops`]
//! (metrics, health and readiness on `METRICS_LISTEN`), [`admin`] (the admin UI, `mail-worker
//! admin` on `ADMIN_LISTEN`, and the usage report it shares with `mailbox usage`) and [`cli`]
//! (the binary's commands, [`cli::main`]).
//!
//! This crate is the product only: the library and the `mail-worker` binary, what runs in
//! production. The workspace beside it (docs/architecture.md, "The workspace"):
//! `crates/graph-sim` (the Microsoft Graph and SendGrid stand-in), `crates/demo` (`cargo
//! demo`), `crates/bench` (the benchmark lab); this crate uses them only as dev-dependencies.
//!
//! Choices a reader might not expect, and why (history: docs/decisions/):
//! - *PostgreSQL is the scheduler*: a claim moves due rows straight to `SENDING` for this
//!   replica's own free slots; the Redis queue ([`intake`]) only feeds PostgreSQL, it is not in
//!   the send path (less state, one row write less, no poll delay).
//! - *`anyhow` only at the top*: [`cli`] and [`daemon`] return `anyhow::Result`; they live in the
//!   library so that the benchmarks' daemon runs the same entry point.
//! - *Items are `pub(crate)` by default*, so `dead_code` fires on what nothing calls; what is
//!   `pub` is used outside the crate (the binary, `tests/it`, the demo, the bench lab, the fuzz
//!   targets).

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
pub mod events;
pub mod forecast;
pub mod import;
pub mod intake;
pub mod mailer;
pub mod ops;
pub mod outbox;
mod plural;
pub mod rate_limit;
pub mod service;
pub mod shutdown;
pub mod store;
pub mod telemetry;
pub mod worker;

/// The version this build reports (`mail-worker --version`, the `daemon.started` line's
/// `version`): Cargo.toml's version, plus the git commit when built from a checkout
/// (`0.1.0 (3be3ae5c1f2a)`; build.rs). What changed between two versions: CHANGELOG.md.
pub const VERSION: &str = env!("MAIL_WORKER_VERSION");
