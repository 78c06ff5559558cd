//! The senders file's `senderPools`: each pool's name, members and overflow checked against
//! the file's own senders (docs/file-formats.md, docs/decisions/0046-sender-pools.md).
//!
//! ```json
//! "senderPools": [ { "name": "invites",
//!     "members": ["events@contoso.example", "invites@contoso.example"],
//!     "overflow": { "sender": "news@adatum.example", "when": "budgetsSpent",
//!                   "externalOnly": false } } ]
//! ```
//!
//! Refused, each at its path: an unknown member (neither a system mailbox's address nor a
//! Graph tenant's `sender` in the file), a SendGrid tenant as a member (a member's slots are
//! the limiter's, which books Graph mailboxes only), a member given twice in one pool, a pool
//! name given twice, a member in two pools with different overflow rules (which rule applies
//! to its mail would depend on the line), an unknown overflow sender, or one that is a member
//! of the pool it overflows.

use std::collections::HashMap;

use super::{
    checker::{Checker, Entry, kind},
    *,
};
use crate::domain::{OverflowWhen, PoolOverflow};

/// The fields of one `senderPools[]` entry.
pub(super) const POOL_FIELDS: &[&str] = &["name", "members", "overflow"];
/// The fields of a pool's `overflow`.
const OVERFLOW_FIELDS: &[&str] = &["sender", "when", "externalOnly"];

/// A validated pool, ready to write after its members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PoolEntry {
    /// Its unique name (what a campaign line's `senderPool` names).
    pub(super) name: String,
    /// Its members' addresses, in the file's order.
    pub(super) members: Vec<MailboxAddress>,
    /// Its overflow, if any.
    pub(super) overflow: Option<PoolOverflow>,
}

/// The file's senders by address: whether each sends through Graph (a SendGrid tenant does
/// not). A system mailbox wins over a tenant with the same address, as `senders::by_address`
/// resolves it.
pub(super) type Known = HashMap<MailboxAddress, bool>;

/// Checks every `senderPools[]` entry of `root` against `known`.
pub(super) fn pools(
    check: &mut Checker,
    root: &Map<String, Value>,
    known: &Known,
) -> Vec<PoolEntry> {
    let mut good = Vec::new();
    let mut names: HashMap<String, String> = HashMap::new();
    // Each member's first pool: (its path, the overflow rule there).
    let mut rules: HashMap<MailboxAddress, (String, Option<PoolOverflow>)> = HashMap::new();
    for (at, object) in check.entries(root, "senderPools") {
        let p = Entry { at: &at, object };
        check.known_keys(p, POOL_FIELDS);
        let errors = check.errors.len();
        let name = check.string(p, "name", true);
        if let Some(n) = &name {
            if let Some(first) = names.get(n) {
                check.fail(
                    format!("{at}.name"),
                    format!(
                        "{n}: appears more than once (first at {first}); give each pool name once"
                    ),
                );
            } else {
                names.insert(n.clone(), format!("{at}.name"));
            }
        }
        let members = members(check, p, known);
        let overflow = overflow(check, p, known);
        if let Some(o) = &overflow
            && members.contains(&o.sender)
        {
            check.fail(
                format!("{at}.overflow.sender"),
                format!(
                    "{} is a member of this pool; the overflow sender must be another sender",
                    o.sender
                ),
            );
        }
        for (i, member) in members.iter().enumerate() {
            match rules.get(member) {
                Some((first, rule)) if *rule != overflow => check.fail(
                    format!("{at}.members[{i}]"),
                    format!(
                        "{member} is also in {first} with a different overflow rule; a member's pools must share one overflow rule"
                    ),
                ),
                Some(_) => {}
                None => {
                    rules.insert(member.clone(), (at.clone(), overflow.clone()));
                }
            }
        }
        if let Some(name) = name
            && check.errors.len() == errors
        {
            good.push(PoolEntry {
                name,
                members,
                overflow,
            });
        }
    }
    good
}

/// A pool's `members`: a non-empty array of known Graph senders' addresses, each once.
fn members(check: &mut Checker, p: Entry, known: &Known) -> Vec<MailboxAddress> {
    let path = format!("{}.members", p.at);
    let items = match p.object.get("members") {
        Some(Value::Array(items)) if !items.is_empty() => items,
        Some(Value::Array(_)) => {
            check.fail(path, "is empty; a pool has at least one member");
            return Vec::new();
        }
        None | Some(Value::Null) => {
            check.fail(path, "is required");
            return Vec::new();
        }
        Some(other) => {
            check.fail(
                path,
                format!("must be an array of addresses, got {}", kind(other)),
            );
            return Vec::new();
        }
    };
    let mut members: Vec<MailboxAddress> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let Value::String(raw) = item else {
            check.fail(at, format!("must be an address, got {}", kind(item)));
            continue;
        };
        let Some(address) = check.kept(at.clone(), MailboxAddress::parse(raw.trim())) else {
            continue;
        };
        match known.get(&address) {
            None => check.fail(
                at,
                format!("{address} is unknown: neither a system mailbox's address nor a tenant's sender in this file"),
            ),
            Some(false) => check.fail(
                at,
                format!("{address} is a SendGrid tenant's; a pool's members send through Microsoft Graph (name it as the overflow sender instead)"),
            ),
            Some(true) if members.contains(&address) => {
                check.fail(at, format!("{address} appears twice in this pool"));
            }
            Some(true) => members.push(address),
        }
    }
    members
}

/// A pool's optional `overflow`.
fn overflow(check: &mut Checker, p: Entry, known: &Known) -> Option<PoolOverflow> {
    let path = format!("{}.overflow", p.at);
    let object = match p.object.get("overflow") {
        None | Some(Value::Null) => return None,
        Some(Value::Object(object)) => object,
        Some(other) => {
            check.fail(path, format!("must be an object, got {}", kind(other)));
            return None;
        }
    };
    let o = Entry { at: &path, object };
    check.known_keys(o, OVERFLOW_FIELDS);
    let sender = check.mailbox(o, "sender");
    if let Some(s) = &sender
        && !known.contains_key(s)
    {
        check.fail(
            format!("{path}.sender"),
            format!("{s} is unknown: neither a system mailbox's address nor a tenant's sender in this file"),
        );
    }
    let when = check
        .string(o, "when", true)
        .and_then(|w| check.kept(format!("{path}.when"), w.parse::<OverflowWhen>()));
    let external_only = match object.get("externalOnly") {
        None | Some(Value::Null) => Some(false),
        Some(Value::Bool(b)) => Some(*b),
        Some(other) => {
            check.fail(
                format!("{path}.externalOnly"),
                format!("must be true or false, got {}", kind(other)),
            );
            None
        }
    };
    Some(PoolOverflow {
        sender: sender?,
        when: when?,
        external_only: external_only?,
    })
}
