//! The rules file (`ADAPTIVE_RULES_FILE`, docs/adaptive-rules.md): JSON
//! `{"rules": [{"name", "signal", "threshold", "window", "scope", "action", "factor"?,
//! "budgets"?, "duration", "recoverEvery", "recoverFrom"?}, …]}`, replacing the built-in
//! table. Each refusal names the rule and the field.

use std::time::Duration;

use serde_json::{Map, Value};

use super::{
    Action, Budgets, DEFAULT_RECOVER_FROM_PERMILLE, Rule, RuleTable, Scope, Signal, WHOLE,
};

/// Why a rules file was refused: which rule (its name, or its place when it has none), which
/// field, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{where_}: {problem}")]
pub struct RulesFileError {
    where_: String,
    problem: String,
}

impl RulesFileError {
    fn file(problem: impl Into<String>) -> Self {
        Self {
            where_: "the rules file".to_owned(),
            problem: problem.into(),
        }
    }
}

const FIELDS: &[&str] = &[
    "name",
    "signal",
    "threshold",
    "window",
    "scope",
    "action",
    "factor",
    "budgets",
    "duration",
    "recoverEvery",
    "recoverFrom",
];

/// Reads a rules file's text into the table it declares.
///
/// # Errors
/// The first problem, naming the rule and the field.
pub fn parse_rules(text: &str) -> Result<RuleTable, RulesFileError> {
    let root: Value =
        serde_json::from_str(text).map_err(|e| RulesFileError::file(format!("not JSON: {e}")))?;
    let Some(object) = root.as_object() else {
        return Err(RulesFileError::file("must be an object {\"rules\": [...]}"));
    };
    if let Some(other) = object.keys().find(|k| *k != "rules") {
        return Err(RulesFileError::file(format!(
            "unknown field `{other}` (only `rules`)"
        )));
    }
    let Some(list) = object.get("rules").and_then(Value::as_array) else {
        return Err(RulesFileError::file("field `rules` must be an array"));
    };
    let mut rules: Vec<Rule> = Vec::with_capacity(list.len());
    for (i, entry) in list.iter().enumerate() {
        let rule = one(i, entry)?;
        if rules.iter().any(|r| r.name == rule.name) {
            return Err(RulesFileError {
                where_: format!("rule {:?} (#{})", rule.name, i + 1),
                problem: "field `name`: another rule has this name".to_owned(),
            });
        }
        rules.push(rule);
    }
    Ok(RuleTable { rules })
}

/// One rule: entry `i` (0-based) of `rules`.
fn one(i: usize, entry: &Value) -> Result<Rule, RulesFileError> {
    let Some(fields) = entry.as_object() else {
        return Err(RulesFileError {
            where_: format!("rule #{}", i + 1),
            problem: "must be an object".to_owned(),
        });
    };
    let name = fields.get("name").and_then(Value::as_str).map(str::trim);
    let where_ = match name {
        Some(n) if !n.is_empty() => format!("rule {n:?} (#{})", i + 1),
        _ => format!("rule #{}", i + 1),
    };
    let field = Field {
        fields,
        where_: &where_,
    };
    if let Some(unknown) = fields.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(field.refuse(unknown, "unknown field"));
    }
    let name = match name {
        Some(n) if !n.is_empty() && n.len() <= 64 => n.to_owned(),
        _ => return Err(field.refuse("name", "must be a name of 1 to 64 characters")),
    };
    let signal: Signal = field.keyword("signal")?;
    let scope: Scope = field.keyword("scope")?;
    if scope == Scope::Campaign {
        return Err(field.refuse(
            "scope",
            "a rule counts per `mailbox` or `tenant` (a campaign is suspended by hand: mail-worker suspend --campaign)",
        ));
    }
    let threshold = field
        .get("threshold")?
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| (1..=10_000).contains(n))
        .ok_or_else(|| field.refuse("threshold", "must be a whole number from 1 to 10000"))?;
    let action = match field.get("action")?.as_str() {
        Some("shrink") => Action::Shrink {
            permille: field.factor("factor")?.ok_or_else(|| {
                field.refuse("factor", "a shrink needs a factor above 0 and below 1")
            })?,
            budgets: match fields.get("budgets") {
                None => Budgets::default(),
                Some(_) => field.keyword("budgets")?,
            },
        },
        Some("suspend") => {
            if fields.contains_key("factor") || fields.contains_key("budgets") {
                return Err(field.refuse(
                    "factor",
                    "a suspension holds everything: no factor nor budgets",
                ));
            }
            Action::Suspend
        }
        _ => return Err(field.refuse("action", "must be `shrink` or `suspend`")),
    };
    let recover_from_permille = match (action, field.factor("recoverFrom")?) {
        (Action::Suspend, from) => from.unwrap_or(DEFAULT_RECOVER_FROM_PERMILLE),
        (Action::Shrink { .. }, None) => DEFAULT_RECOVER_FROM_PERMILLE,
        (Action::Shrink { .. }, Some(_)) => {
            return Err(field.refuse(
                "recoverFrom",
                "only a suspension has one (a shrink recovers from its factor doubled)",
            ));
        }
    };
    Ok(Rule {
        name,
        signal,
        threshold,
        window: field.span("window")?,
        scope,
        action,
        duration: field.span("duration")?,
        recover_every: field.span("recoverEvery")?,
        recover_from_permille,
    })
}

/// A rule's fields, for reading each with an error that names it.
struct Field<'a> {
    fields: &'a Map<String, Value>,
    where_: &'a str,
}

impl Field<'_> {
    fn refuse(&self, field: &str, problem: &str) -> RulesFileError {
        RulesFileError {
            where_: self.where_.to_owned(),
            problem: format!("field `{field}`: {problem}"),
        }
    }

    fn get(&self, field: &str) -> Result<&Value, RulesFileError> {
        self.fields
            .get(field)
            .ok_or_else(|| self.refuse(field, "missing"))
    }

    fn keyword<T: std::str::FromStr<Err = String>>(
        &self,
        field: &str,
    ) -> Result<T, RulesFileError> {
        let text = self
            .get(field)?
            .as_str()
            .ok_or_else(|| self.refuse(field, "must be a string"))?;
        text.parse().map_err(|e: String| self.refuse(field, &e))
    }

    /// A duration with a unit (`10m`, `24h`), from 1 s to 7 days.
    fn span(&self, field: &str) -> Result<Duration, RulesFileError> {
        let text = self
            .get(field)?
            .as_str()
            .ok_or_else(|| self.refuse(field, "must be a duration with a unit, e.g. \"10m\""))?;
        humantime::parse_duration(text.trim())
            .ok()
            .filter(|d| *d >= Duration::from_secs(1) && *d <= Duration::from_secs(7 * 86_400))
            .ok_or_else(|| {
                self.refuse(
                    field,
                    "must be a duration with a unit from 1s to 7d, e.g. \"10m\"",
                )
            })
    }

    /// A factor above 0 and below 1, in ‰; `None` when absent.
    fn factor(&self, field: &str) -> Result<Option<u16>, RulesFileError> {
        let Some(value) = self.fields.get(field) else {
            return Ok(None);
        };
        value
            .as_f64()
            .filter(|f| *f > 0.0 && *f < 1.0)
            .map(|f| {
                // Within (0, 1): at least 1‰, below the whole.
                let permille = (f * f64::from(WHOLE)).round().clamp(1.0, 999.0);
                Some(u16::try_from(permille as i64).unwrap_or(1))
            })
            .ok_or_else(|| self.refuse(field, "must be a number above 0 and below 1"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"rules": [
        {"name": "storm", "signal": "429:MailboxConcurrency", "threshold": 3, "window": "10m",
         "scope": "mailbox", "action": "shrink", "factor": 0.5, "budgets": "perMinute",
         "duration": "10m", "recoverEvery": "5m"},
        {"name": "reputation", "signal": "5.7.705", "threshold": 1, "window": "1h",
         "scope": "tenant", "action": "suspend", "duration": "2h", "recoverEvery": "30m",
         "recoverFrom": 0.125}
    ]}"#;

    #[test]
    fn a_good_file_reads_as_its_rules() {
        let table = parse_rules(GOOD).unwrap();
        assert_eq!(table.rules.len(), 2);
        assert_eq!(
            table.rules[0].action,
            Action::Shrink {
                permille: 500,
                budgets: Budgets::PerMinute
            }
        );
        assert_eq!(table.rules[1].recover_from_permille, 125);
        assert_eq!(table.rules[1].duration, Duration::from_secs(7200));
    }

    #[test]
    fn each_refusal_names_the_rule_and_the_field() {
        let cases = [
            (
                "factor\": 0.5",
                "factor\": 1.5",
                "rule \"storm\" (#1): field `factor`",
            ),
            (
                "\"threshold\": 3",
                "\"threshold\": 0",
                "rule \"storm\" (#1): field `threshold`",
            ),
            (
                "\"window\": \"10m\"",
                "\"window\": \"ten\"",
                "rule \"storm\" (#1): field `window`",
            ),
            (
                "429:MailboxConcurrency",
                "429:Other",
                "rule \"storm\" (#1): field `signal`",
            ),
            (
                "\"scope\": \"tenant\"",
                "\"scope\": \"campaign\"",
                "rule \"reputation\" (#2): field `scope`",
            ),
            (
                "\"action\": \"suspend\"",
                "\"action\": \"pause\"",
                "rule \"reputation\" (#2): field `action`",
            ),
            (
                "\"name\": \"reputation\"",
                "\"name\": \"storm\"",
                "rule \"storm\" (#2): field `name`",
            ),
            (
                "\"recoverEvery\": \"5m\"",
                "\"recoverEvery\": \"5m\", \"colour\": 1",
                "rule \"storm\" (#1): field `colour`",
            ),
        ];
        for (from, to, expected) in cases {
            let text = GOOD.replacen(from, to, 1);
            let error = parse_rules(&text).unwrap_err().to_string();
            assert!(error.starts_with(expected), "{to}: {error}");
        }
        assert!(
            parse_rules("[]")
                .unwrap_err()
                .to_string()
                .starts_with("the rules file")
        );
    }
}
