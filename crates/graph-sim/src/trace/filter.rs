//! The `$filter` of `GET …/messageTraces` as the resource type documents it: `eq` on
//! `senderAddress`, `recipientAddress`, `messageId`, `id`, `status`, `fromIP`, `toIP`, `subject`;
//! `ge` / `le` on `receivedDateTime`; clauses joined by `and`. Anything else (`or`, `ne`, `gt`,
//! functions such as `startswith`, other properties) is Graph's `400 BadRequest`
//! (<https://learn.microsoft.com/graph/api/resources/exchangemessagetrace>). Without dates the
//! last 48 hours are searched; a window over 10 days or starting more than 90 days ago is
//! refused (<https://learn.microsoft.com/powershell/module/exchange/get-messagetracev2>).

use chrono::{DateTime, Duration, Utc};

use super::TraceRecord;

/// A parsed `$filter`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TraceFilter {
    eq: Vec<(&'static str, String)>,
    pub start: Option<DateTime<Utc>>,
    pub end: Option<DateTime<Utc>>,
}

const EQ_FIELDS: [&str; 8] = [
    "senderAddress",
    "recipientAddress",
    "messageId",
    "id",
    "status",
    "fromIP",
    "toIP",
    "subject",
];

impl TraceFilter {
    /// Parses `raw`; `Err` names what Graph refuses.
    pub(crate) fn parse(raw: &str) -> Result<Self, String> {
        let mut out = Self::default();
        if raw.trim().is_empty() {
            return Ok(out);
        }
        for clause in split_and(raw)? {
            let clause = clause.trim();
            let mut parts = clause.splitn(3, ' ');
            let (Some(field), Some(op), Some(value)) = (parts.next(), parts.next(), parts.next())
            else {
                return Err(format!("Invalid filter clause: '{clause}'."));
            };
            if field == "receivedDateTime" {
                let at = DateTime::parse_from_rfc3339(value.trim().trim_matches('\''))
                    .map_err(|_| format!("The DateTimeOffset value '{value}' is not valid."))?
                    .with_timezone(&Utc);
                match op {
                    "ge" => out.start = Some(at),
                    "le" => out.end = Some(at),
                    _ => {
                        return Err(format!(
                            "The operator '{op}' is not supported for receivedDateTime; use ge and le."
                        ));
                    }
                }
                continue;
            }
            let Some(name) = EQ_FIELDS.iter().find(|f| **f == field) else {
                return Err(format!(
                    "The property '{field}' is not supported in $filter."
                ));
            };
            if op != "eq" {
                return Err(format!(
                    "The operator '{op}' is not supported for {field}; use eq."
                ));
            }
            let value = value.trim();
            let Some(text) = value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')) else {
                return Err(format!("Invalid filter clause: '{clause}'."));
            };
            out.eq.push((name, text.replace("''", "'")));
        }
        Ok(out)
    }

    /// The window searched at `now`; `Err` when Graph refuses it.
    pub(crate) fn window(
        &self,
        now: DateTime<Utc>,
    ) -> Result<(DateTime<Utc>, DateTime<Utc>), String> {
        let end = self.end.unwrap_or(now);
        let start = self.start.unwrap_or(end - Duration::hours(48));
        if start > end {
            return Err("The start of receivedDateTime is after its end.".to_owned());
        }
        if end - start > Duration::days(10) {
            return Err("A query can cover at most 10 days of receivedDateTime.".to_owned());
        }
        if start < now - Duration::days(90) {
            return Err(
                "Message trace keeps 90 days: receivedDateTime starts too early.".to_owned(),
            );
        }
        Ok((start, end))
    }

    /// Whether `r` passes every `eq` clause (any case).
    pub(crate) fn matches(&self, r: &TraceRecord) -> bool {
        self.eq.iter().all(|(field, want)| {
            let id = r.id.to_string();
            let got = match *field {
                "senderAddress" => r.sender.as_str(),
                "recipientAddress" => r.recipient.as_str(),
                "messageId" => r.message_id.as_str(),
                "id" => id.as_str(),
                "status" => r.status.as_str(),
                "subject" => r.subject.as_str(),
                _ => "",
            };
            got.eq_ignore_ascii_case(want)
        })
    }
}

/// `raw` split on ` and ` outside quotes (any case); an ` or ` outside quotes is refused.
fn split_and(raw: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let words: Vec<&str> = raw.split(' ').collect();
    for word in words {
        if !quoted && word.eq_ignore_ascii_case("or") {
            return Err("The operator 'or' is not supported in this $filter; use and.".to_owned());
        }
        if !quoted && word.eq_ignore_ascii_case("and") {
            out.push(std::mem::take(&mut current));
            continue;
        }
        if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(word);
        quoted ^= word.matches('\'').count() % 2 == 1;
    }
    out.push(current);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_operators_parse_and_others_are_refused() {
        let f = TraceFilter::parse(
            "senderAddress eq 'a@contoso.example' and receivedDateTime ge 2026-12-01T00:00:00Z and receivedDateTime le 2026-12-02T00:00:00Z",
        )
        .unwrap();
        assert_eq!(
            f.eq,
            vec![("senderAddress", "a@contoso.example".to_owned())]
        );
        assert!(f.start.is_some() && f.end.is_some());
        for bad in [
            "senderAddress ne 'a@b.example'",
            "receivedDateTime gt 2026-12-01T00:00:00Z",
            "startswith(senderAddress,'a')",
            "senderAddress eq 'a@b.example' or senderAddress eq 'c@b.example'",
            "size eq 10",
            "senderAddress eq a@b.example",
        ] {
            assert!(TraceFilter::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn windows_over_ten_days_or_ninety_days_back_are_refused() {
        let now = Utc::now();
        let mut f = TraceFilter::default();
        assert_eq!(f.window(now).unwrap(), (now - Duration::hours(48), now));
        f.start = Some(now - Duration::days(11));
        assert!(f.window(now).is_err());
        f.start = Some(now - Duration::days(95));
        f.end = Some(now - Duration::days(94));
        assert!(f.window(now).is_err());
    }
}
