//! mail-worker delivers campaign and system mail through Microsoft Graph (and SendGrid), run as
//! several replicas at once, with a distributed, pre-emptive per-mailbox rate limiter in Redis.
//!
//! # Layout
//! The modules follow the send path:
//!
//! ```text
//! worker (claim loop → apalis-redis queue → handler)
//!   → service (MailProviderService: send one message, write the outcome, defer with spread)
//!     → mailer::factory → mailer::rate_limited ◄── rate_limit (Lua check_and_reserve / release)
//!       → mailer::graph (OAuth2 + sendMail) | mailer::sendgrid
//! ```
//!
//! Beside them: [`config`] (env), [`domain`] (types), [`store`] (PostgreSQL), [`telemetry`] and
//! [`events`] (JSON logs), [`clock`], [`graph_sim`] (the Microsoft Graph stand-in) and [`cli`].

pub mod cli;
pub mod clock;
pub mod config;
pub mod daemon;
pub mod domain;
pub mod events;
pub mod import;
pub mod mailer;
pub mod rate_limit;
pub mod service;
pub mod store;
pub mod telemetry;
pub mod worker;
