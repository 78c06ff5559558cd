//! A suppression CSV (`mail-worker suppressions import FILE.csv`): one entry a line,
//! `address,scope[,reason]` — the address to suppress, its scope (a system mailbox's address or a
//! tenant's name, as campaign lines name senders) and an optional reason. A first line
//! `address,scope[,reason]` is a header and skipped, as are blank lines; a field may be quoted
//! (`"…"`, `""` for a quote) so a reason may hold commas. All or nothing: every bad line is
//! named by its number, and nothing is imported while one is bad. The format:
//! `docs/file-formats.md`.

use sqlx::PgPool;

use super::{
    BadEntry,
    campaign::{SenderDirectory, lines, unknown_scope},
};
use crate::{
    domain::{SuppressionSource, suppressed_address},
    store::{
        StoreError,
        suppressions::{self, NewSuppression},
    },
};

/// Why a CSV was not imported.
#[derive(Debug, thiserror::Error)]
pub enum CsvError {
    /// Some lines are unusable; nothing was written.
    #[error("{} (nothing imported): {}", crate::plural::counted(.0.len() as u64, "bad line", "bad lines"), .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    BadLines(Vec<BadEntry>),
    /// PostgreSQL failed; nothing was written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What an import did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Imported {
    /// Entries new on the list.
    pub added: u64,
    /// Entries in the file (new or listed already).
    pub entries: usize,
}

/// One CSV line's fields (RFC 4180 quoting within the line).
fn fields(line: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        let mut field = String::new();
        while chars.peek().is_some_and(|c| *c == ' ' || *c == '\t') {
            chars.next();
        }
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    Some('"') => break,
                    Some(c) => field.push(c),
                    None => return Err("a quoted field is not closed".into()),
                }
            }
            while chars.peek().is_some_and(|c| *c != ',') {
                if !chars.next().is_some_and(char::is_whitespace) {
                    return Err("text after a quoted field".into());
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| *c != ',') {
                field.push(c);
            }
        }
        out.push(field.trim().to_owned());
        if chars.next().is_none() {
            return Ok(out);
        }
    }
}

/// The entries of a CSV's `bytes` against the stored senders, or every bad line.
///
/// # Errors
/// Every bad line, by number: not UTF-8, not 2 or 3 fields, an address that is not
/// `local@domain` (masked), an unknown scope.
pub fn parse(
    bytes: &[u8],
    senders: &SenderDirectory,
) -> Result<Vec<NewSuppression>, Vec<BadEntry>> {
    let mut entries = Vec::new();
    let mut bad = Vec::new();
    let mut first = true;
    for (number, line) in lines(bytes) {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let header = std::mem::take(&mut first);
        let entry = std::str::from_utf8(line)
            .map_err(|e| format!("is not valid UTF-8 (at column {})", e.valid_up_to() + 1))
            .and_then(fields)
            .and_then(|f| match f.as_slice() {
                [a, ..] if header && a.eq_ignore_ascii_case("address") => Ok(None),
                [address, scope] | [address, scope, _] => {
                    let reason = f.get(2).cloned().unwrap_or_default();
                    let address = suppressed_address(address)?;
                    let scope = senders.scope(scope).ok_or_else(|| unknown_scope(scope))?;
                    Ok(Some((scope, address, reason)))
                }
                _ => Err(format!(
                    "has {}; expected address,scope[,reason]",
                    crate::plural::counted(f.len() as u64, "field", "fields")
                )),
            });
        match entry {
            Ok(Some(entry)) => entries.push(entry),
            Ok(None) => {}
            Err(reason) => bad.push(BadEntry {
                location: format!("line {number}"),
                reason,
            }),
        }
    }
    if bad.is_empty() {
        Ok(entries)
    } else {
        Err(bad)
    }
}

/// Imports a CSV's `bytes` (source `import`) in one statement, or nothing.
///
/// # Errors
/// [`CsvError::BadLines`] naming every bad line; PostgreSQL errors.
pub async fn import(pool: &PgPool, bytes: &[u8]) -> Result<Imported, CsvError> {
    let directory = super::sender_directory(pool).await?;
    let entries = parse(bytes, &directory).map_err(CsvError::BadLines)?;
    let added = suppressions::add_many(pool, &entries, SuppressionSource::Import).await?;
    Ok(Imported {
        added,
        entries: entries.len(),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use uuid::Uuid;

    use super::*;
    use crate::store::messages::SenderRef;

    fn directory() -> (SenderDirectory, Uuid, Uuid) {
        let (tenant, mailbox) = (Uuid::new_v4(), Uuid::new_v4());
        let directory = SenderDirectory {
            tenants: HashMap::from([("northwind".to_owned(), tenant)]),
            system_mailboxes: HashMap::from([("events@contoso.example".to_owned(), mailbox)]),
            pools: HashMap::new(),
        };
        (directory, tenant, mailbox)
    }

    #[test]
    fn entries_are_read_with_a_header_quotes_and_a_missing_reason() {
        let (senders, tenant, mailbox) = directory();
        let csv = "\u{feff}address,scope,reason\r\n\
                   Lotte@Example.com,northwind,\"5.1.1 unknown, said the NDR\"\r\n\
                   \n\
                   guest@example.org , Events@Contoso.Example\n";
        assert_eq!(
            parse(csv.as_bytes(), &senders).unwrap(),
            vec![
                (
                    SenderRef::Tenant(tenant),
                    "lotte@example.com".to_owned(),
                    "5.1.1 unknown, said the NDR".to_owned()
                ),
                (
                    SenderRef::SystemMailbox(mailbox),
                    "guest@example.org".to_owned(),
                    String::new()
                ),
            ]
        );
    }

    #[test]
    fn every_bad_line_is_named_by_number_and_no_address_in_full() {
        let (senders, _, _) = directory();
        let csv = b"lotte@example.com,northwind\n\
                    lotte.jansen at example.com,northwind\n\
                    guest@example.org,nobody\n\
                    guest@example.org\n\
                    \"guest@example.org,northwind\n\
                    a@example.org,northwind,r,extra\n\
                    \xff@example.org,northwind\n";
        let bad = parse(csv, &senders).unwrap_err();
        let lines: Vec<&str> = bad.iter().map(|b| b.location.as_str()).collect();
        assert_eq!(
            lines,
            ["line 2", "line 3", "line 4", "line 5", "line 6", "line 7"]
        );
        assert!(
            bad[0].reason.contains("not a mailbox address"),
            "{}",
            bad[0]
        );
        assert!(!bad[0].reason.contains("jansen"), "{}", bad[0]);
        assert!(bad[1].reason.contains("\"nobody\""), "{}", bad[1]);
        assert!(bad[2].reason.contains("has 1 field;"), "{}", bad[2]);
        assert!(bad[3].reason.contains("not closed"), "{}", bad[3]);
        assert!(bad[4].reason.contains("has 4 fields"), "{}", bad[4]);
        assert!(bad[5].reason.contains("UTF-8"), "{}", bad[5]);
    }

    #[test]
    fn a_header_is_only_the_first_line() {
        let (senders, _, _) = directory();
        let bad = parse(b"a@example.org,northwind\naddress,scope\n", &senders).unwrap_err();
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].location, "line 2");
    }
}
