//! mail-worker delivers campaign and system mail through Microsoft Graph (and SendGrid), run as
//! several replicas at once, with a distributed, pre-emptive per-mailbox rate limiter in Redis.
//!
//! # Layout
//! The modules follow the send path:
//!
//! ```text
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
//! [`daemon`] (the composition root), [`ops`] (metrics, health and readiness on
//! `METRICS_LISTEN`), [`admin`] (the admin UI, `mail-worker admin` on `ADMIN_LISTEN`, and the
//! usage report it shares with `mailbox usage`) and [`cli`] (the binary's commands,
//! [`cli::main`]).
//!
//! This crate is the product only: the library and the `mail-worker` binary, what runs in
//! production. The workspace beside it (README "Layout"): `crates/graph-sim` (the Microsoft
//! Graph and SendGrid stand-in, library + `graph-sim` binary), `crates/demo` (the demo,
//! `cargo demo`), `crates/bench` (the benchmark lab and its harness, a library). This crate
//! depends on none of them except as dev-dependencies (`graph-sim` and the bench lab's
//! `unlink_prefix`, for `tests/it`).
//!
//! Choices a reader might not expect, and why:
//! - *A workspace of four crates* (crates.io's `crates/*` habit), not one package with several
//!   bins: the demo needs the stand-in in process and a progress bar, the benchmarks need both;
//!   in one package these would be dependencies of the daemon. `cargo tree -e normal -p
//!   mail-worker` shows what ships (axum included since [`ops`]: the metrics and health
//!   listener). The stand-in's HTTP tests live with it (`crates/graph-sim/tests`).
//! - *One integration binary* (`tests/it`, harness in `tests/it/support`, zero2prod's
//!   `spawn_app()`), plus one small test binary per other crate for what that crate owns.
//!   `TestApp` drops its database and Redis keys in `Drop`.
//! - *`anyhow` only at the top*: [`cli`] and [`daemon`] return `anyhow::Result`; they are the
//!   binary's top level, in the library so that `bench-mail-worker` (the benchmarks' daemon)
//!   runs the same entry point.
//! - *PostgreSQL is the queue*: a claim moves due rows straight to `SENDING` for this replica's
//!   own free slots, with no job queue between the claim and the worker (measured against
//!   apalis-redis in BENCHMARKS.md: less Redis state, one write less per message, no poll
//!   delay). The Redis in `REDIS_URL` is only the limiter's default.
//! - *Items are `pub(crate)` by default*, so `dead_code` fires on what nothing calls. What is
//!   `pub` is what something outside this crate uses: the binary (`main.rs`), the integration
//!   tests (`tests/it`, which drive the real parts in process, zero2prod-style, rather than only
//!   over HTTP), the demo, the bench lab and the fuzz targets. Modules stay `pub` at the top so
//!   that those users can reach them; inside, visibility is per item.

pub mod admin;
mod backoff;
pub mod cli;
pub mod clock;
pub mod config;
pub mod daemon;
pub mod domain;
pub mod events;
pub mod import;
pub mod mailer;
pub mod ops;
pub mod rate_limit;
pub mod service;
pub mod store;
pub mod telemetry;
pub mod worker;
