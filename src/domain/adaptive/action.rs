//! An action in force on one scope, and its factor over time: held, then doubling back.

use std::time::Duration;

use super::{Action, Budgets, Rule, WHOLE};

/// An action in force on one scope: what it holds and how it recovers. Times in ms since the
/// epoch (the limiter's clock).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionInForce {
    /// The rule that fired it, or `operator` for `mail-worker suspend`.
    pub rule: String,
    /// When it started.
    pub at_ms: i64,
    /// When its full strength ends (recovery starts).
    pub held_until_ms: i64,
    /// ‰ of the budget while it holds: 0 for a suspension.
    pub held_permille: u16,
    /// ‰ of the first step after `held_until_ms` (doubling every `recover_every_ms`).
    pub recover_from_permille: u16,
    /// How long each recovery step lasts (0: the whole budget at once, as an operator's
    /// suspension ends).
    pub recover_every_ms: i64,
    /// Which budgets a shrink lowers (`perMinute`, `perDay`, `both`).
    pub budgets: String,
    /// The operator's reason, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The operator's rule name.
pub const OPERATOR: &str = "operator";

impl ActionInForce {
    /// The action `rule` starts at `now_ms`.
    pub fn of_rule(rule: &Rule, now_ms: i64) -> Self {
        let held_until_ms = now_ms.saturating_add(ms(rule.duration));
        let (held_permille, budgets, recover_from) = match rule.action {
            Action::Shrink { permille, budgets } => {
                (permille, budgets, permille.saturating_mul(2).min(WHOLE))
            }
            Action::Suspend => (0, Budgets::Both, rule.recover_from_permille),
        };
        Self {
            rule: rule.name.clone(),
            at_ms: now_ms,
            held_until_ms,
            held_permille,
            recover_from_permille: recover_from,
            recover_every_ms: ms(rule.recover_every),
            budgets: budgets.as_str().to_owned(),
            reason: None,
        }
    }

    /// An operator's suspension from `now_ms` to `until_ms`, lifted whole when it ends.
    pub fn operator(now_ms: i64, until_ms: i64, reason: Option<String>) -> Self {
        Self {
            rule: OPERATOR.to_owned(),
            at_ms: now_ms,
            held_until_ms: until_ms,
            held_permille: 0,
            recover_from_permille: WHOLE,
            recover_every_ms: 0,
            budgets: Budgets::Both.as_str().to_owned(),
            reason,
        }
    }

    /// The factor (‰) in force at `now_ms`: the held one until `held_until_ms`, then
    /// `recover_from_permille` doubling every `recover_every_ms`, [`WHOLE`] at most.
    pub fn permille_at(&self, now_ms: i64) -> u16 {
        if now_ms < self.held_until_ms {
            return self.held_permille;
        }
        if self.recover_every_ms <= 0 {
            return WHOLE;
        }
        let steps = (now_ms - self.held_until_ms) / self.recover_every_ms;
        let mut permille = u32::from(self.recover_from_permille.max(1));
        for _ in 0..steps.min(16) {
            permille = permille.saturating_mul(2);
        }
        u16::try_from(permille.min(u32::from(WHOLE))).unwrap_or(WHOLE)
    }

    /// When the whole budget is back: the end of the last recovery step.
    pub fn ends_at_ms(&self) -> i64 {
        if self.recover_every_ms <= 0 {
            return self.held_until_ms;
        }
        let mut permille = u32::from(self.recover_from_permille.max(1));
        let mut steps = 0_i64;
        while permille < u32::from(WHOLE) {
            permille *= 2;
            steps += 1;
        }
        self.held_until_ms
            .saturating_add(steps.saturating_mul(self.recover_every_ms))
    }

    /// Whether it suspends at `now_ms` (nothing goes).
    pub fn suspends_at(&self, now_ms: i64) -> bool {
        self.permille_at(now_ms) == 0
    }

    /// Which budgets it lowers.
    pub fn budgets(&self) -> Budgets {
        self.budgets.parse().unwrap_or_default()
    }
}

/// `d` in whole ms.
fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// `budget` times `permille`‰, at least 1.
pub fn shrink(budget: u32, permille: u16) -> u32 {
    let shrunk = u64::from(budget) * u64::from(permille.min(WHOLE)) / u64::from(WHOLE);
    u32::try_from(shrunk).unwrap_or(budget).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::adaptive::RuleTable;

    #[test]
    fn a_shrink_holds_then_doubles_every_step_until_the_whole_budget() {
        let rule = &RuleTable::defaults().rules[0];
        let minute = 60_000;
        let a = ActionInForce::of_rule(rule, 0);
        // Held at ¼ for 10 min, then ½ for 5 min, then whole.
        assert_eq!(a.permille_at(0), 250);
        assert_eq!(a.permille_at(10 * minute - 1), 250);
        assert_eq!(a.permille_at(10 * minute), 500);
        assert_eq!(a.permille_at(15 * minute), 1000);
        assert_eq!(a.ends_at_ms(), 15 * minute);
        assert_eq!(shrink(30, 500), 15);
        assert_eq!(shrink(1, 500), 1);
    }

    #[test]
    fn a_suspension_recovers_from_a_quarter_in_doubling_steps() {
        let rule = RuleTable::defaults()
            .named("tenant-reputation-705")
            .cloned()
            .unwrap();
        let hour = 3_600_000;
        let a = ActionInForce::of_rule(&rule, 0);
        assert!(a.suspends_at(24 * hour - 1));
        assert_eq!(
            [24, 29, 30, 36, 42].map(|h| a.permille_at(h * hour)),
            [250, 250, 500, 1000, 1000]
        );
        assert_eq!(a.ends_at_ms(), 36 * hour);
        let op = ActionInForce::operator(0, hour, None);
        assert!(op.suspends_at(hour - 1));
        assert_eq!((op.permille_at(hour), op.ends_at_ms()), (1000, hour));
    }
}
