//! A sender's warm-up (issue 43 point 3, docs/decisions/0047-warm-up.md): a ramp of day
//! budgets counted in *sending days*, and the gate that decides, from the last sending day's
//! outcomes, whether the ramp steps up, holds or steps down. Pure: the store evaluates it
//! (`store::warmups`), the forecast replays it, the benchmark checks it.
//!
//! Why: a new Microsoft 365 tenant is bounced `5.7.708` / `5.7.501` while its reputation is
//! unknown, and a tenant over its threshold `5.7.705`
//! (<https://learn.microsoft.com/exchange/mail-flow-best-practices/non-delivery-reports-in-exchange-online/fix-error-code-5-7-700-through-5-7-750>):
//! warm-up here is per sender (a mailbox or a tenant's sender), not per IP address.

use std::num::NonZeroU32;

/// The enhanced status codes that say the sender's reputation is the problem: a reputation NDR
/// steps the ramp down one step.
/// - `5.7.705` (tenant over its threshold), `5.7.708` (a new tenant's IPs not trusted),
///   `5.7.501` (access denied, spam abuse detected):
///   <https://learn.microsoft.com/exchange/mail-flow-best-practices/non-delivery-reports-in-exchange-online/fix-error-code-5-7-700-through-5-7-750>
/// - `5.7.515` (sending domain does not meet the required authentication level: Outlook's
///   requirements for high-volume senders,
///   <https://techcommunity.microsoft.com/blog/microsoftdefenderforoffice365blog/strengthening-email-ecosystem-outlook%E2%80%99s-new-requirements-for-high%E2%80%90volume-senders/4399730>).
///   Microsoft files it under authentication, not reputation; the safe reading treats it as a
///   reputation signal (send less, not more, until it stops).
pub const REPUTATION_CODES: [&str; 4] = ["5.7.705", "5.7.708", "5.7.501", "5.7.515"];

/// The largest step a ramp counts to (a growth very close to 1 would otherwise count for ever).
const STEP_LIMIT: u32 = 1_000;

/// A sender's ramp, the senders file's `"warmUp": {"startPerDay", "growth", "maxPerDay"}`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WarmUp {
    /// Recipients per day at step 0 (the first sending day).
    pub start_per_day: NonZeroU32,
    /// Each clean sending day multiplies the budget by this (≥ 1).
    pub growth: f64,
    /// The budget it grows to; from there on the sender's own budget alone applies.
    pub max_per_day: NonZeroU32,
}

impl WarmUp {
    /// The day budget at `step`: min(maxPerDay, ⌊startPerDay × growth^step⌋).
    pub fn budget(&self, step: u32) -> NonZeroU32 {
        let exponent = i32::try_from(step.min(STEP_LIMIT)).unwrap_or(i32::MAX);
        let raw = f64::from(self.start_per_day.get()) * self.growth.powi(exponent);
        let max = self.max_per_day.get();
        let budget = if raw.is_finite() && raw < f64::from(max) {
            // In range: below max, at least start (growth ≥ 1).
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let floor = raw.floor() as u32;
            floor
        } else {
            max
        };
        NonZeroU32::new(budget).unwrap_or(self.max_per_day)
    }

    /// The first step whose budget is `maxPerDay` (the ramp's end); a flat ramp (growth 1)
    /// ends at step 0.
    pub fn top_step(&self) -> u32 {
        let mut step = 0;
        while step < STEP_LIMIT && self.budget(step) < self.max_per_day {
            if self.budget(step + 1) == self.budget(step) && self.growth <= 1.0 {
                return step;
            }
            step += 1;
        }
        step
    }

    /// The step after a sending day with `outcome`, and why: up one while clean (up to
    /// [`Self::top_step`]), held on a dirty day, down one after a reputation NDR.
    pub fn next(&self, step: u32, outcome: &DayOutcome, gate: WarmUpGate) -> (u32, Verdict) {
        if let Some(code) = &outcome.reputation {
            return (
                step.saturating_sub(1),
                Verdict::SteppedDown(format!("reputation NDR {code}")),
            );
        }
        if let Some(reason) = gate.dirty(outcome) {
            return (step, Verdict::Held(reason));
        }
        if step >= self.top_step() {
            return (step, Verdict::AtMax);
        }
        (step + 1, Verdict::Stepped)
    }
}

/// A sender's ramp and where it stands: what the limits in force and the forecast read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WarmUpStep {
    /// The ramp.
    pub ramp: WarmUp,
    /// The current step.
    pub step: u32,
}

impl Eq for WarmUpStep {}

impl WarmUpStep {
    /// The current step's day budget.
    pub fn day_budget(self) -> NonZeroU32 {
        self.ramp.budget(self.step)
    }

    /// The day budget `days` sending days from now, every one of them clean (the forecast's
    /// assumption).
    pub fn day_budget_after(self, days: u32) -> NonZeroU32 {
        self.ramp.budget(self.step.saturating_add(days))
    }
}

/// The thresholds of a clean sending day (`WARMUP_MAX_HARD_BOUNCE_PERCENT`,
/// `WARMUP_MAX_FILTERED_PERCENT`): a share at or under its threshold is clean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WarmUpGate {
    /// Hard bounces (a code that suppresses the recipient) per message sent, percent.
    pub max_hard_bounce_percent: u8,
    /// Recipients the message trace found filtered (junk, quarantine) per traced recipient,
    /// percent; only when the delivery trace saw the day's messages.
    pub max_filtered_percent: u8,
}

impl Default for WarmUpGate {
    fn default() -> Self {
        Self {
            max_hard_bounce_percent: 5,
            max_filtered_percent: 10,
        }
    }
}

impl WarmUpGate {
    /// Why `outcome` is not clean, if it is not (the reputation NDR apart).
    pub fn dirty(self, outcome: &DayOutcome) -> Option<String> {
        // `what` is `part` of `whole` (`whole_what`): over `percent`, the sentence saying so.
        let over = |what: &str, part: u32, whole: u32, whole_what: &str, percent: u8| {
            (whole > 0 && u64::from(part) * 100 > u64::from(percent) * u64::from(whole)).then(
                || {
                    let share = f64::from(part) * 100.0 / f64::from(whole);
                    format!("{what} {share:.1}% > {percent}% ({part} of {whole}{whole_what})")
                },
            )
        };
        over(
            "hard bounces",
            outcome.hard_bounced,
            outcome.sent,
            "",
            self.max_hard_bounce_percent,
        )
        .or_else(|| {
            over(
                "filtered",
                outcome.filtered,
                outcome.traced,
                " traced",
                self.max_filtered_percent,
            )
        })
    }
}

/// What one sending day of a sender came to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DayOutcome {
    /// Messages sent that day.
    pub sent: u32,
    /// Of them, bounced with a hard code (`domain::classify`).
    pub hard_bounced: u32,
    /// A reputation NDR ([`REPUTATION_CODES`]) seen since the last evaluation, its code.
    pub reputation: Option<String>,
    /// Recipients of the day's messages whose fate the delivery trace told (0: trace off).
    pub traced: u32,
    /// Of them, filtered (junk or quarantine).
    pub filtered: u32,
}

/// What an evaluation did to the ramp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Clean: one step up.
    Stepped,
    /// Dirty: the step holds, with why.
    Held(String),
    /// A reputation NDR: one step down, with the code.
    SteppedDown(String),
    /// Clean, and the ramp is at its end already.
    AtMax,
}

impl Verdict {
    /// `stepped`, `held`, `steppedDown`, `atMax` (stored and shown).
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Stepped => "stepped",
            Self::Held(_) => "held",
            Self::SteppedDown(_) => "steppedDown",
            Self::AtMax => "atMax",
        }
    }

    /// Why it held or stepped down (`None` when it stepped up or is at its end).
    pub fn reason(&self) -> Option<&str> {
        match self {
            Self::Held(r) | Self::SteppedDown(r) => Some(r),
            Self::Stepped | Self::AtMax => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(start: u32, growth: f64, max: u32) -> WarmUp {
        WarmUp {
            start_per_day: NonZeroU32::new(start).unwrap(),
            growth,
            max_per_day: NonZeroU32::new(max).unwrap(),
        }
    }

    #[test]
    fn budgets_grow_by_the_factor_up_to_the_max() {
        let r = ramp(500, 1.5, 10_000);
        let budgets: Vec<u32> = (0..10).map(|s| r.budget(s).get()).collect();
        assert_eq!(
            budgets,
            [500, 750, 1125, 1687, 2531, 3796, 5695, 8542, 10_000, 10_000]
        );
        assert_eq!(r.top_step(), 8);
        assert_eq!(ramp(10, 1.0, 100).top_step(), 0);
        assert_eq!(ramp(100, 2.0, 100).top_step(), 0);
        assert_eq!(ramp(100, 2.0, 100).budget(u32::MAX).get(), 100);
    }

    #[test]
    fn clean_days_step_up_dirty_days_hold_reputation_steps_down() {
        let r = ramp(500, 1.5, 10_000);
        let gate = WarmUpGate::default();
        let clean = DayOutcome {
            sent: 100,
            hard_bounced: 5,
            traced: 100,
            filtered: 10,
            ..DayOutcome::default()
        };
        assert_eq!(r.next(2, &clean, gate), (3, Verdict::Stepped));
        let bounced = DayOutcome {
            hard_bounced: 6,
            ..clean.clone()
        };
        assert_eq!(
            r.next(2, &bounced, gate),
            (2, Verdict::Held("hard bounces 6.0% > 5% (6 of 100)".into()))
        );
        let filtered = DayOutcome {
            filtered: 11,
            ..clean.clone()
        };
        assert_eq!(r.next(2, &filtered, gate).0, 2);
        let blocked = DayOutcome {
            reputation: Some("5.7.708".into()),
            ..clean.clone()
        };
        assert_eq!(
            r.next(2, &blocked, gate),
            (1, Verdict::SteppedDown("reputation NDR 5.7.708".into()))
        );
        assert_eq!(r.next(0, &blocked, gate).0, 0);
        assert_eq!(r.next(8, &clean, gate), (8, Verdict::AtMax));
        // Trace off: nothing traced, the filtered share does not apply.
        let untraced = DayOutcome {
            sent: 10,
            ..DayOutcome::default()
        };
        assert_eq!(r.next(0, &untraced, gate), (1, Verdict::Stepped));
    }
}
