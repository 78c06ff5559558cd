//! The report of `senders verify`: per sender, one line per check — `ok`, `warn` or `fail`,
//! what was found and the fix — as text (the CLI), JSON (`--json`) and the admin UI's page.

use serde::Serialize;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// As it should be.
    Ok,
    /// Works, but something will bite (a certificate near expiry, an onmicrosoft.com sender).
    Warn,
    /// Sending will not work until it is fixed.
    Fail,
}

impl Outcome {
    /// `ok`, `warn` or `fail`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Warn => "warn",
            Self::Fail => "fail",
        }
    }
}

/// One check of one sender.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// What was checked: `secret`, `certificate`, `credentials`, `permissions`, `mailbox`,
    /// `address`, `limits`, `send test`, `provider`.
    pub name: &'static str,
    /// How it came out.
    pub outcome: Outcome,
    /// What was found.
    pub found: String,
    /// What to do, when something is to be done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    /// An `ok` line.
    pub(crate) fn ok(name: &'static str, found: impl Into<String>) -> Self {
        Self {
            name,
            outcome: Outcome::Ok,
            found: found.into(),
            fix: None,
        }
    }

    /// A `warn` line with its fix.
    pub(crate) fn warn(
        name: &'static str,
        found: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self::with_fix(name, Outcome::Warn, found.into(), fix.into())
    }

    /// A `fail` line with its fix.
    pub(crate) fn fail(
        name: &'static str,
        found: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self::with_fix(name, Outcome::Fail, found.into(), fix.into())
    }

    fn with_fix(name: &'static str, outcome: Outcome, found: String, fix: String) -> Self {
        Self {
            name,
            outcome,
            found,
            fix: Some(fix),
        }
    }

    /// The line: `fail  credentials  <found>; fix: <fix>`.
    pub fn line(&self) -> String {
        let fix = self
            .fix
            .as_deref()
            .map(|f| format!("; fix: {f}"))
            .unwrap_or_default();
        format!(
            "{:<4}  {:<11}  {}{fix}",
            self.outcome.as_str(),
            self.name,
            self.found
        )
    }
}

/// One sender's checks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SenderReport {
    /// The sending address.
    pub address: String,
    /// `system mailbox` or `tenant <name>`.
    pub sender: String,
    /// The app (client id) and Graph tenant, when it is a Graph sender.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app: Option<String>,
    /// Its checks, in the order they ran.
    pub checks: Vec<Check>,
}

impl SenderReport {
    /// The worst outcome of its checks (`ok` when there is none).
    pub fn outcome(&self) -> Outcome {
        self.checks
            .iter()
            .map(|c| c.outcome)
            .max()
            .unwrap_or(Outcome::Ok)
    }
}

/// The whole report: every sender checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// The senders, system mailboxes first, then tenants.
    pub senders: Vec<SenderReport>,
}

impl VerifyReport {
    /// Whether any check failed (the command then exits 1).
    pub fn failed(&self) -> bool {
        self.senders.iter().any(|s| s.outcome() == Outcome::Fail)
    }

    /// The text report: a heading per sender, then its check lines, then a summary line.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for sender in &self.senders {
            out.push_str(&format!("{} ({}", sender.address, sender.sender));
            if let Some(app) = &sender.app {
                out.push_str(&format!(", {app}"));
            }
            out.push_str(")\n");
            for check in &sender.checks {
                out.push_str("  ");
                out.push_str(&check.line());
                out.push('\n');
            }
        }
        let count = |o: Outcome| {
            self.senders
                .iter()
                .flat_map(|s| &s.checks)
                .filter(|c| c.outcome == o)
                .count()
        };
        out.push_str(&format!(
            "{} checked: {} ok, {} warn, {} fail\n",
            crate::plural::counted(self.senders.len() as u64, "sender", "senders"),
            count(Outcome::Ok),
            count(Outcome::Warn),
            count(Outcome::Fail)
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_says_outcome_check_finding_and_fix_and_the_worst_outcome_decides() {
        let report = VerifyReport {
            senders: vec![SenderReport {
                address: "a@contoso.example".into(),
                sender: "system mailbox".into(),
                app: Some("app 1 in tenant t".into()),
                checks: vec![
                    Check::ok("address", "custom domain"),
                    Check::fail("mailbox", "403", "scope it"),
                ],
            }],
        };
        assert!(report.failed());
        assert_eq!(
            report.text(),
            "a@contoso.example (system mailbox, app 1 in tenant t)\n  ok    address      custom domain\n  fail  mailbox      403; fix: scope it\n1 sender checked: 1 ok, 0 warn, 1 fail\n"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["senders"][0]["checks"][1]["outcome"], "fail");
        assert!(json["senders"][0]["checks"][0].get("fix").is_none());
    }
}
