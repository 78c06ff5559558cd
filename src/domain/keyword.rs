//! Enums written in settings and files as one of a few keywords (`paced`, `draft`,
//! `microsoft-graph`, …): [`keywords!`] gives each its `as_str`, `Display` and `FromStr`.

/// Implements, for a fieldless enum, `as_str` (the keyword), `ALL` (every variant), `Display`
/// (the keyword) and `FromStr` (the exact keyword, else the error "must be `a` or `b`").
///
/// ```ignore
/// keywords!(Algorithm { Paced => "paced", FixedWindow => "fixed-window" });
/// ```
macro_rules! keywords {
    ($ty:ident { $($variant:ident => $word:literal),+ $(,)? }) => {
        impl $ty {
            /// Every variant, in declaration order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];

            /// The keyword.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $word,)+
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $ty {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::ALL
                    .iter()
                    .copied()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| $crate::domain::keyword::must_be(&[$($word),+]))
            }
        }
    };
}
pub(crate) use keywords;

/// "must be `a` or `b`", "must be `a`, `b` or `c`".
pub(crate) fn must_be(words: &[&str]) -> String {
    let quoted: Vec<String> = words.iter().map(|w| format!("`{w}`")).collect();
    match quoted.split_last() {
        Some((last, [])) => format!("must be {last}"),
        Some((last, rest)) => format!("must be {} or {last}", rest.join(", ")),
        None => "must be nothing".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Mode {
        Draft,
        SendMail,
        Other,
    }
    keywords!(Mode { Draft => "draft", SendMail => "sendmail", Other => "other" });

    #[test]
    fn keywords_round_trip_and_anything_else_is_refused_naming_them() {
        for &mode in Mode::ALL {
            assert_eq!(mode.as_str().parse::<Mode>(), Ok(mode));
            assert_eq!(mode.to_string(), mode.as_str());
        }
        assert_eq!(
            "Draft".parse::<Mode>(),
            Err("must be `draft`, `sendmail` or `other`".into())
        );
        assert_eq!(
            must_be(&["paced", "fixed-window"]),
            "must be `paced` or `fixed-window`"
        );
    }
}
