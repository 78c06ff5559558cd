//! A sender's warm-up as `mailbox usage` and the admin UI show it (docs/decisions/0047-warm-up.md):
//! its step, its day budget, the sending days counted and why it held.

use serde::Serialize;

use crate::store::warmups::WarmUpState;

/// A sender's warm-up in `mailbox usage` (its `--json` shape is stable: `warmUp`).
/// In `mailbox usage --json` as `warm_up`, snake_case as the rest of that report (the senders
/// file's `warmUp` names are camelCase; a trial found both casings in one report).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WarmUpUsage {
    /// The ramp's `startPerDay`.
    pub start_per_day: u32,
    /// The ramp's `growth`.
    pub growth: f64,
    /// The ramp's `maxPerDay`.
    pub max_per_day: u32,
    /// The current step (0: the first sending day's budget).
    pub step: u32,
    /// The step the ramp ends at (its budget is `maxPerDay`).
    pub top_step: u32,
    /// The current step's recipients per day (the budget in force is the lower of this and
    /// the sender's own).
    pub day_budget: u32,
    /// Sending days counted (a UTC day without sends does not count).
    pub sending_days: u32,
    /// The last sending day counted.
    pub last_sending_day: Option<chrono::NaiveDate>,
    /// What that day did: `stepped`, `held`, `steppedDown`, `atMax`.
    pub verdict: Option<String>,
    /// Why it held or stepped down.
    pub held_reason: Option<String>,
}

impl From<WarmUpState> for WarmUpUsage {
    fn from(s: WarmUpState) -> Self {
        Self {
            start_per_day: s.ramp.start_per_day.get(),
            growth: s.ramp.growth,
            max_per_day: s.ramp.max_per_day.get(),
            step: s.step,
            top_step: s.ramp.top_step(),
            day_budget: s.day_budget,
            sending_days: s.sending_days,
            last_sending_day: s.last_sending_day,
            verdict: s.verdict,
            held_reason: s.held_reason,
        }
    }
}

impl WarmUpUsage {
    /// One line: `step 2 of 8, 1125 recipients a day (500 × 1.5^step up to 10000), 3 sending
    /// days; last (2026-12-01): held: hard bounces 6.0% > 5% (6 of 100)`.
    pub fn describe(&self) -> String {
        let mut line = format!(
            "step {} of {}, {} recipients a day ({} × {}^step up to {}), {} sending day{}",
            self.step,
            self.top_step,
            self.day_budget,
            self.start_per_day,
            self.growth,
            self.max_per_day,
            self.sending_days,
            if self.sending_days == 1 { "" } else { "s" }
        );
        if let (Some(day), Some(verdict)) = (self.last_sending_day, &self.verdict) {
            line.push_str(&format!("; last ({day}): {verdict}"));
            if let Some(reason) = &self.held_reason {
                line.push_str(&format!(": {reason}"));
            }
        }
        line
    }
}
