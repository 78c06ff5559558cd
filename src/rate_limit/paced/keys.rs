//! The `paced` keys (a contract: `mailbox usage`, benchmarks and tests read them):
//!
//! ```text
//! <prefix>:{<tenant>}:<mailbox>            hash: tat (next free slot, ms), cool (cooldown until),
//!                                          total (recipients in the 24 h window), d:<minute>
//!                                          (recipients per one-minute bucket), H:<hour> (their
//!                                          sum per hour), b:<id> (bookings), seeded (when it was
//!                                          rebuilt from PostgreSQL), ttl (when the keys' TTLs
//!                                          were last refreshed), hs (hour sums kept), lo (no
//!                                          older bucket), bmin (no earlier booking; - none),
//!                                          held (a limit pause's end: sends wait, reads do not)
//! <prefix>:{<tenant>}:<mailbox>:days       zset: the minute buckets holding recipients
//! <prefix>:{<tenant>}:<mailbox>:booked     zset: message id -> booked slot (ms)
//! <prefix>:{<tenant>}:<mailbox>:sent       zset: reservations of the last 60 s
//! <prefix>:{<tenant>}:<mailbox>:inflight   zset: message id -> lease expiry (ms)
//! <prefix>:{<tenant>}:tenant               hash: the tenant's external recipients (total, d:<minute>, H:<hour>, hs),
//!                                          held (a limit pause's end: external bookings before it wait)
//! <prefix>:{<tenant>}:tenant:days          zset: its minute buckets
//! ```
//!
//! `<tenant>` is the mailbox's Graph tenant (lower case): the Redis Cluster hash tag, so one
//! script reaches the mailbox's and its tenant's keys in one slot. Every key lives at least
//! 24 h after its last write (25 h TTLs, refreshed at most every 30 min, and set when a write
//! creates a key).

use crate::domain::MailboxAddress;

/// The seven keys of one mailbox (and its tenant), in the scripts' `KEYS` order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PacedKeys {
    /// `KEYS[1..=7]`.
    pub keys: [String; 7],
}

impl PacedKeys {
    /// The keys of `mailbox` in Graph tenant `tenant` under `prefix`.
    pub fn new(prefix: &str, tenant: &str, mailbox: &MailboxAddress) -> Self {
        let state = format!("{prefix}:{{{}}}:{mailbox}", Self::tag(tenant));
        let tenant = Self::tenant_state(prefix, tenant);
        Self {
            keys: [
                state.clone(),
                format!("{state}:days"),
                format!("{state}:booked"),
                format!("{state}:sent"),
                format!("{state}:inflight"),
                tenant.clone(),
                format!("{tenant}:days"),
            ],
        }
    }

    /// The hash tag of Graph tenant `tenant`: lower case, without braces.
    fn tag(tenant: &str) -> String {
        tenant
            .chars()
            .filter(|c| *c != '{' && *c != '}')
            .flat_map(char::to_lowercase)
            .collect()
    }

    /// The state hash of Graph tenant `tenant`'s external-recipient budget under `prefix`.
    pub(crate) fn tenant_state(prefix: &str, tenant: &str) -> String {
        format!("{prefix}:{{{}}}:tenant", Self::tag(tenant))
    }

    /// The mailbox's state hash.
    pub fn state(&self) -> &str {
        &self.keys[0]
    }

    /// Bookings.
    pub fn booked(&self) -> &str {
        &self.keys[2]
    }

    /// Reservations of the last 60 s.
    pub fn sent(&self) -> &str {
        &self.keys[3]
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> &str {
        &self.keys[4]
    }

    /// All seven, as `&str`.
    pub fn all(&self) -> [&str; 7] {
        self.keys.each_ref().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_shares_the_tenant_hash_tag() {
        let mailbox = MailboxAddress::parse("Events@Contoso.Example").unwrap();
        let keys = PacedKeys::new("mail:rl", "Contoso.Example", &mailbox);
        assert_eq!(
            keys.state(),
            "mail:rl:{contoso.example}:events@contoso.example"
        );
        assert_eq!(keys.keys[6], "mail:rl:{contoso.example}:tenant:days");
        for key in keys.all() {
            assert!(key.starts_with("mail:rl:{contoso.example}:"), "{key}");
        }
    }
}
