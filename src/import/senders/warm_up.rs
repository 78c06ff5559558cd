//! A sender's `warmUp` (docs/decisions/0047-warm-up.md):
//!
//! ```json
//! "warmUp": { "startPerDay": 500, "growth": 1.5, "maxPerDay": 10000 }
//! ```
//!
//! Refused, each at its path (`systemMailboxes[0].warmUp.startPerDay`, naming the entry): a
//! field missing or unknown, a start or max that is not a positive whole number, a growth that
//! is not a number of at least 1, a start above the max, and a warm-up on a SendGrid tenant
//! (the ramp is a budget of our limiter, which books Graph senders only).

use super::checker::{Checker, Entry, kind};
use super::*;
use crate::domain::WarmUp;

/// The field's name in an entry.
pub(super) const WARM_UP: &str = "warmUp";
/// The fields of a `warmUp`.
const WARM_UP_FIELDS: &[&str] = &["startPerDay", "growth", "maxPerDay"];

/// `entry`'s `warmUp`: `Ok(None)` when absent or null, `Err(())` (errors recorded) when bad.
pub(super) fn warm_up(check: &mut Checker, entry: Entry) -> Result<Option<WarmUp>, ()> {
    let at = format!("{}.{WARM_UP}", entry.at);
    let object = match entry.object.get(WARM_UP) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(object)) => object,
        Some(other) => {
            check.fail(
                at,
                format!(
                    "must be an object {{\"startPerDay\", \"growth\", \"maxPerDay\"}}, got {}",
                    kind(other)
                ),
            );
            return Err(());
        }
    };
    let ramp = Entry { at: &at, object };
    let errors = check.errors.len();
    check.known_keys(ramp, WARM_UP_FIELDS);
    let required = |check: &mut Checker, field: &str| match check.limit(ramp, field) {
        Ok(Some(v)) => Some(v),
        Ok(None) => {
            check.fail(
                format!("{at}.{field}"),
                "is required (a positive whole number)",
            );
            None
        }
        Err(()) => None,
    };
    let start = required(check, "startPerDay");
    let max = required(check, "maxPerDay");
    let growth = match object.get("growth") {
        Some(Value::Number(n)) if n.as_f64().is_some_and(|g| g.is_finite() && g >= 1.0) => {
            n.as_f64()
        }
        other => {
            let got = other.map_or_else(|| "nothing".to_owned(), ToString::to_string);
            check.fail(
                format!("{at}.growth"),
                format!(
                    "must be a number of at least 1 (1.5: half as much again after each clean sending day), got {got}"
                ),
            );
            None
        }
    };
    if let (Some(start), Some(max)) = (start, max)
        && start > max
    {
        check.fail(
            format!("{at}.startPerDay"),
            format!(
                "{start} is above maxPerDay {max}; the ramp starts at or below the budget it ends at"
            ),
        );
    }
    match (start, growth, max) {
        (Some(start_per_day), Some(growth), Some(max_per_day)) if check.errors.len() == errors => {
            Ok(Some(WarmUp {
                start_per_day,
                growth,
                max_per_day,
            }))
        }
        _ => Err(()),
    }
}

/// Refuses a `warmUp` on a SendGrid tenant.
pub(super) fn not_for_sendgrid(check: &mut Checker, entry: Entry) {
    if entry.object.get(WARM_UP).is_some_and(|v| !v.is_null()) {
        check.fail(
            format!("{}.{WARM_UP}", entry.at),
            "is only for provider microsoft-graph (the ramp is a budget of the limiter, which books Graph senders)",
        );
    }
}
