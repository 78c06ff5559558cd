//! The OData query of an Inbox listing, as far as graph-sim serves it: `$filter` (clauses
//! joined by `and`: `isRead eq true|false`, `internetMessageId eq '…'`, and the message class
//! through its extended property,
//! `singleValueExtendedProperties/any(ep:ep/id eq 'String 0x001A' and ep/value eq '…')`,
//! <https://learn.microsoft.com/graph/api/singlevaluelegacyextendedproperty-get>), `$select`,
//! `$top` (default 10, at most 1,000) and `$skip` (what `@odata.nextLink` carries)
//! (<https://learn.microsoft.com/graph/query-parameters>, <https://learn.microsoft.com/graph/paging>).

/// `PidTagMessageClass` as an extended property id (`String 0x001A`).
pub(crate) const MESSAGE_CLASS_PROPERTY: &str = "String 0x001A";

/// Graph's default page size for messages.
pub(crate) const DEFAULT_TOP: usize = 10;
/// The largest `$top` graph-sim takes.
pub(crate) const MAX_TOP: usize = 1_000;

/// One clause of a `$filter`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Clause {
    IsRead(bool),
    InternetMessageId(String),
    MessageClass(String),
}

/// Splits `filter` on ` and ` outside parentheses and quotes, and reads each clause; `None` for
/// a filter graph-sim does not serve.
pub(crate) fn parse_filter(filter: &str) -> Option<Vec<Clause>> {
    let mut clauses = Vec::new();
    let (mut depth, mut quoted, mut start) = (0i32, false, 0usize);
    let bytes = filter.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\'' => quoted = !quoted,
            b'(' if !quoted => depth += 1,
            b')' if !quoted => depth -= 1,
            b' ' if !quoted
                && depth == 0
                && filter[i..].to_ascii_lowercase().starts_with(" and ") =>
            {
                clauses.push(clause(&filter[start..i])?);
                i += 5;
                start = i;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    clauses.push(clause(&filter[start..])?);
    Some(clauses)
}

/// `'it''s'` → `it's`.
fn quoted(text: &str) -> Option<String> {
    let inner = text.trim().strip_prefix('\'')?.strip_suffix('\'')?;
    Some(inner.replace("''", "'"))
}

/// `name eq value` → (name, value), names without case.
fn equality(text: &str) -> Option<(String, String)> {
    let text = text.trim();
    let lower = text.to_ascii_lowercase();
    let at = lower.find(" eq ")?;
    Some((
        lower[..at].trim().to_owned(),
        text[at + 4..].trim().to_owned(),
    ))
}

fn clause(text: &str) -> Option<Clause> {
    let text = text.trim();
    let lower = text.to_ascii_lowercase();
    if let Some(rest) = lower.strip_prefix("singlevalueextendedproperties/any(") {
        // any(ep:ep/id eq '…' and ep/value eq '…')
        let body = &text[text.len() - rest.len()..text.len().checked_sub(1)?];
        let (var, body) = body.split_once(':')?;
        let var = var.trim();
        let mut id = None;
        let mut value = None;
        for part in split_and(body) {
            let (name, v) = equality(part)?;
            if name == format!("{}/id", var.to_ascii_lowercase()) {
                id = Some(quoted(&v)?);
            } else if name == format!("{}/value", var.to_ascii_lowercase()) {
                value = Some(quoted(&v)?);
            } else {
                return None;
            }
        }
        return (id?.eq_ignore_ascii_case(MESSAGE_CLASS_PROPERTY))
            .then(|| value.map(Clause::MessageClass))
            .flatten();
    }
    let (name, value) = equality(text)?;
    match name.as_str() {
        "isread" => match value.to_ascii_lowercase().as_str() {
            "true" => Some(Clause::IsRead(true)),
            "false" => Some(Clause::IsRead(false)),
            _ => None,
        },
        "internetmessageid" => quoted(&value).map(Clause::InternetMessageId),
        _ => None,
    }
}

fn split_and(text: &str) -> Vec<&str> {
    let lower = text.to_ascii_lowercase();
    let mut out = Vec::new();
    let mut start = 0;
    while let Some(at) = lower[start..].find(" and ") {
        out.push(&text[start..start + at]);
        start += at + 5;
    }
    out.push(&text[start..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readers_filter_is_read_clause_by_clause() {
        assert_eq!(
            parse_filter(
                "singleValueExtendedProperties/any(ep:ep/id eq 'String 0x001A' and ep/value eq 'REPORT.IPM.Note.NDR') and isRead eq false"
            ),
            Some(vec![
                Clause::MessageClass("REPORT.IPM.Note.NDR".into()),
                Clause::IsRead(false)
            ])
        );
        assert_eq!(
            parse_filter("internetMessageId eq 'it''s'"),
            Some(vec![Clause::InternetMessageId("it's".into())])
        );
        assert_eq!(parse_filter("subject eq 'x'"), None);
        assert_eq!(
            parse_filter(
                "singleValueExtendedProperties/any(ep:ep/id eq 'String 0x0037' and ep/value eq 'x')"
            ),
            None
        );
    }
}
