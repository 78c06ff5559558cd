//! The rules between settings, checked after each was read alone: a set-but-empty value that
//! would silently be the default, `SEND_LEASE` against `HTTP_TIMEOUT`, the intake queue's hash
//! tag on a Redis Cluster, the webhooks' secret with a URL, the ingest's listener with a token.

use super::ConfigError;
use super::env::{Env, has_hash_tag};
use super::settings::{self, Setting, Settings, with_unit};

/// Every rule between two settings.
pub(super) fn check(env: &Env<'_>, s: &Settings) -> Result<(), ConfigError> {
    check_send_lease(env, s)?;
    check_intake_queue(env, s)?;
    check_events_secret(env, &s.events)?;
    check_ingest_tokens(env, &s.ingest)
}

/// Set but empty would silently be the default: refused, naming what to write.
pub(super) fn refuse_empty(env: &Env<'_>) -> Result<(), ConfigError> {
    let default = |name| settings::find(name).map_or("", Setting::default_text);
    for (var, problem) in [
        (
            "INTAKE_QUEUE",
            format!(
                "is set but empty: give a queue name (the default is {}), or `off` to turn the intake queue off",
                default("INTAKE_QUEUE")
            ),
        ),
        (
            "MAIL_RATE_LIMIT_KEY_PREFIX",
            format!(
                "is set but empty: an empty prefix is refused; give one (the default is {}), or unset it",
                default("MAIL_RATE_LIMIT_KEY_PREFIX")
            ),
        ),
    ] {
        if env.set_but_empty(var) {
            return Err(env.error(var, &problem));
        }
    }
    Ok(())
}

/// The name `setting` was set by: its own, its deprecated alias, or `None` (its default).
fn set_by(env: &Env<'_>, setting: &Setting) -> Option<&'static str> {
    std::iter::once(setting.name)
        .chain(setting.alias_ms)
        .find(|name| env.get(name).is_some())
}

/// `SEND_LEASE` at least twice `HTTP_TIMEOUT`: an attempt renews its lease every quarter of it
/// and stops at the lease minus a margin when PostgreSQL cannot confirm it, so a lease under
/// two request timeouts would cut attempts whose requests are merely slow (service::lease).
/// Blames the variable the operator set: `SEND_LEASE` when given, else the `HTTP_TIMEOUT` that
/// outgrew `SEND_LEASE`'s default.
fn check_send_lease(env: &Env<'_>, s: &Settings) -> Result<(), ConfigError> {
    let (lease, timeout) = (s.worker.send_lease, s.providers.http_timeout);
    if lease >= timeout * 2 {
        return Ok(());
    }
    let [lease_setting, timeout_setting] =
        ["SEND_LEASE", "HTTP_TIMEOUT"].map(|name| settings::find(name).expect("declared"));
    let (var, problem) = match set_by(env, lease_setting) {
        Some(var) => (
            var,
            format!(
                "must be at least twice HTTP_TIMEOUT ({}): an attempt that cannot renew its lease stops before the lease ends, and one request plus the outcome write must fit",
                with_unit(timeout)
            ),
        ),
        None => (
            set_by(env, timeout_setting).unwrap_or(timeout_setting.name),
            format!(
                "must be at most half of SEND_LEASE ({}, its default): an attempt that cannot renew its lease stops before the lease ends; raise SEND_LEASE too",
                with_unit(lease)
            ),
        ),
    };
    Err(env.error(var, &problem))
}

/// A queue name with a hash tag when `REDIS_URL` lists Redis Cluster seeds.
fn check_intake_queue(env: &Env<'_>, s: &Settings) -> Result<(), ConfigError> {
    match &s.intake.queue {
        Some(name) if s.storage.redis_url.is_cluster() && !has_hash_tag(name) => Err(env.error(
            "INTAKE_QUEUE",
            &format!("REDIS_URL lists Redis Cluster seeds, so the queue's name needs a hash tag (braces, e.g. {{{name}}}) to keep all its keys in one slot"),
        )),
        _ => Ok(()),
    }
}

/// `EVENTS_WEBHOOK_SECRET` is required with a webhook URL, and must be usable: receivers
/// verify each POST's signature with it.
fn check_events_secret(
    env: &Env<'_>,
    events: &settings::EventsSettings,
) -> Result<(), ConfigError> {
    if !events.webhook_urls.is_empty() && events.secret.is_none() {
        return Err(env.error(
            "EVENTS_WEBHOOK_SECRET",
            "must be set when EVENTS_WEBHOOK_URL is: receivers verify each POST's signature with it (`whsec_` and base64 of 24 to 64 bytes, e.g. `echo whsec_$(openssl rand -base64 32)`, or a raw one of at least 16 characters)",
        ));
    }
    if let Some(secret) = &events.secret {
        // Never the value itself: `<literal>`, or the reference.
        crate::domain::SecretRef::check(secret.raw()).map_err(|e| ConfigError {
            var: "EVENTS_WEBHOOK_SECRET",
            value: secret.describe(),
            problem: e.to_string(),
        })?;
    }
    Ok(())
}

/// `INGEST_LISTEN` needs someone who may post: `INGEST_TOKENS` or `INGEST_TOKENS_FILE`.
fn check_ingest_tokens(
    env: &Env<'_>,
    ingest: &settings::IngestSettings,
) -> Result<(), ConfigError> {
    if ingest.listen.is_some() && ingest.tokens.is_empty() && ingest.tokens_file.is_none() {
        return Err(env.error(
            "INGEST_LISTEN",
            "is set but no producer may post: set INGEST_TOKENS (name=secret,…) or INGEST_TOKENS_FILE",
        ));
    }
    Ok(())
}
