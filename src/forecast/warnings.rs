//! Why a forecast deserves a second look: after the deadline, past the day budget, too large
//! for it, or past the tenant's external budget.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{Finish, Limits, usable_budget};
use crate::domain::Priority;

/// Why a forecast deserves a second look.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Warning {
    /// The finish is after the deadline `--by`.
    AfterDeadline {
        /// The deadline.
        by: DateTime<Utc>,
    },
    /// The sender's share with what its mailbox already counts exceeds its day budget: this
    /// many messages wait for the next day(s).
    DayBudget {
        /// Messages past the budget.
        spilled: u64,
        /// The day budget (recipients).
        recipients_per_day: u32,
    },
    /// Messages forecast after their own `by` (the campaign line's).
    MissesBy {
        /// How many.
        messages: u64,
    },
    /// Messages with more recipients than the whole day budget (never sent).
    TooLarge {
        /// How many.
        messages: u64,
    },
    /// The Graph tenant's external recipients (already counted + this campaign's) exceed its
    /// external budget: the tenant's mail outside its domains waits for the next day(s).
    TenantBudget {
        /// The Graph tenant.
        tenant: String,
        /// External recipients the tenant's window would hold.
        external: u64,
        /// Its budget.
        external_recipients_per_day: u32,
    },
    /// An operator's `suspend` or an adaptive rule's suspension holds the mailbox (`mailbox`:
    /// nothing goes before `until`, and the forecast starts then) or its Graph tenant's
    /// external mail (`tenant`: its external recipients wait until then).
    Suspended {
        /// `mailbox` or `tenant`.
        scope: &'static str,
        /// What holds it: the rule's name, or `operator`.
        rule: String,
        /// When it ends (the budget may then come back in steps).
        until: DateTime<Utc>,
    },
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::AfterDeadline { by } => {
                write!(
                    f,
                    "finishes after --by {}",
                    by.format("%Y-%m-%d %H:%M:%S UTC")
                )
            }
            Self::DayBudget {
                spilled,
                recipients_per_day,
            } => write!(
                f,
                "{spilled} messages exceed the mailbox's day budget of {recipients_per_day} recipients and spill into the next day"
            ),
            Self::MissesBy { messages } => {
                if *messages == 1 {
                    write!(f, "1 message is forecast after its own `by`")
                } else {
                    write!(f, "{messages} messages are forecast after their own `by`")
                }
            }
            Self::TooLarge { messages } => write!(
                f,
                "{messages} messages have more recipients than the whole day budget and will fail"
            ),
            Self::TenantBudget {
                tenant,
                external,
                external_recipients_per_day,
            } => write!(
                f,
                "tenant {tenant}: {external} external recipients exceed its budget of {external_recipients_per_day} a day; its external mail spills into the next day"
            ),
            Self::Suspended { scope, rule, until } => {
                let until = until.format("%Y-%m-%d %H:%M:%S UTC");
                if *scope == "mailbox" {
                    write!(
                        f,
                        "suspended ({rule}) until {until}: nothing goes before then, and the forecast starts then"
                    )
                } else {
                    write!(
                        f,
                        "its Graph tenant's external mail is suspended ({rule}) until {until}: external recipients wait until then (not in this forecast)"
                    )
                }
            }
        }
    }
}

/// The sender's warnings for `finish` (the tenant's are [`tenant_warning`]'s).
pub fn warnings(finish: &Finish, limits: Limits, by: Option<DateTime<Utc>>) -> Vec<Warning> {
    let mut out = Vec::new();
    if let Some(by) = by.filter(|by| finish.finish > *by) {
        out.push(Warning::AfterDeadline { by });
    }
    if finish.missed_by > 0 {
        out.push(Warning::MissesBy {
            messages: finish.missed_by,
        });
    }
    if finish.spilled > 0 {
        out.push(Warning::DayBudget {
            spilled: finish.spilled,
            recipients_per_day: limits.recipients_per_day,
        });
    }
    if finish.too_large > 0 {
        out.push(Warning::TooLarge {
            messages: finish.too_large,
        });
    }
    out
}

/// A warning when `used` + `adding` external recipients exceed the Graph tenant's usable
/// external budget `per_day` (for `priority`, as [`usable_budget`] shares a mailbox's).
pub fn tenant_warning(
    tenant: &str,
    used: u64,
    adding: u64,
    (per_day, reserved_percent): (u32, u8),
    priority: Priority,
) -> Option<Warning> {
    let usable = usable_budget(
        Limits {
            per_minute: 1,
            recipients_per_day: per_day,
            reserved_percent,
        },
        priority,
    )
    .recipients_per_day;
    (adding > 0 && used + adding > u64::from(usable)).then(|| Warning::TenantBudget {
        tenant: tenant.to_owned(),
        external: used + adding,
        external_recipients_per_day: usable,
    })
}
