//! A message's priority: which of a sender's due rows a claim takes first (`high`, then
//! `normal`, then `bulk`; a lower one is still claimed whenever no higher one is due).

use crate::domain::keyword::keywords;

/// `messages.priority`: `high` | `normal` | `bulk`; `normal` when a producer gives none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Priority {
    /// Claimed before every other due row of its sender (alerts, password resets).
    High,
    /// The default.
    #[default]
    Normal,
    /// Claimed only when no `high` or `normal` row of its sender is due (campaigns).
    Bulk,
}
keywords!(Priority { High => "high", Normal => "normal", Bulk => "bulk" });

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_keywords_and_default() {
        assert_eq!(Priority::default(), Priority::Normal);
        assert_eq!("bulk".parse::<Priority>(), Ok(Priority::Bulk));
        assert_eq!(
            "urgent".parse::<Priority>(),
            Err("must be `high`, `normal` or `bulk`".into())
        );
        assert!(Priority::High < Priority::Normal && Priority::Normal < Priority::Bulk);
    }
}
