//! How a setting's text becomes its value and how `check-config` shows it back: the [`Kind`]
//! of each declaration. Durations take units through `humantime` (`10m`, `30s`, `250ms`, `1d`).

use std::{fmt::Display, num::NonZeroU32, path::PathBuf, str::FromStr, time::Duration};

use crate::config::env::Env;
use crate::domain::SecretRef;

/// Why a set value cannot be used: the problem, and how to show the value if not as given
/// (redacted).
#[derive(Debug)]
pub(crate) struct Bad {
    /// What is wrong, e.g. `must be more than 0`.
    pub(crate) problem: String,
    /// The value as the error shows it; `None`: the text, passwords hidden.
    pub(crate) value: Option<String>,
}

impl From<String> for Bad {
    fn from(problem: String) -> Self {
        Self {
            problem,
            value: None,
        }
    }
}

impl From<&str> for Bad {
    fn from(problem: &str) -> Self {
        problem.to_owned().into()
    }
}

/// A setting's type: how its (trimmed, non-empty) text is parsed, and how its value is shown.
pub(crate) trait Kind {
    /// The typed value.
    type Value;
    /// `raw` as a value; `env` gives the other variables a rule may depend on.
    fn parse(&self, raw: &str, env: &Env<'_>) -> Result<Self::Value, Bad>;
    /// The value as `check-config` prints it (passwords hidden).
    fn show(&self, value: &Self::Value) -> String;
    /// The value of a setting that is unset and has no default; `None`: the kind needs one.
    fn unset(&self) -> Option<Self::Value> {
        None
    }
}

/// A whole number from 1.
pub(crate) struct Positive;

impl Kind for Positive {
    type Value = NonZeroU32;
    fn parse(&self, raw: &str, _: &Env<'_>) -> Result<NonZeroU32, Bad> {
        raw.parse::<u32>()
            .ok()
            .and_then(NonZeroU32::new)
            .ok_or_else(|| "must be a whole number from 1 to 4294967295".into())
    }
    fn show(&self, value: &NonZeroU32) -> String {
        value.to_string()
    }
}

/// A duration with a unit ([`parse_duration`]), shown in its largest exact unit.
pub(crate) struct Span;

impl Kind for Span {
    type Value = Duration;
    fn parse(&self, raw: &str, _: &Env<'_>) -> Result<Duration, Bad> {
        parse_duration(raw).map_err(Bad::from)
    }
    fn show(&self, value: &Duration) -> String {
        with_unit(*value)
    }
}

/// A duration of at least `.0`; `.1` says why not less.
pub(crate) struct SpanAtLeast(pub(crate) Duration, pub(crate) &'static str);

impl Kind for SpanAtLeast {
    type Value = Duration;
    fn parse(&self, raw: &str, env: &Env<'_>) -> Result<Duration, Bad> {
        let d = Span.parse(raw, env)?;
        if d < self.0 {
            return Err(self.1.into());
        }
        Ok(d)
    }
    fn show(&self, value: &Duration) -> String {
        with_unit(*value)
    }
}

/// Text as given (trimmed).
pub(crate) struct Text;

impl Kind for Text {
    type Value = String;
    fn parse(&self, raw: &str, _: &Env<'_>) -> Result<String, Bad> {
        Ok(raw.to_owned())
    }
    fn show(&self, value: &String) -> String {
        value.clone()
    }
}

/// A file's path, as given (trimmed); read when the daemon starts, not here.
pub(crate) struct FilePath;

impl Kind for FilePath {
    type Value = PathBuf;
    fn parse(&self, raw: &str, _: &Env<'_>) -> Result<PathBuf, Bad> {
        Ok(PathBuf::from(raw))
    }
    fn show(&self, value: &PathBuf) -> String {
        value.display().to_string()
    }
}

/// A secret: a value or an `env:NAME` / `file:/path` reference, shown as `<literal>` or the
/// reference.
pub(crate) struct Secret;

impl Kind for Secret {
    type Value = SecretRef;
    fn parse(&self, raw: &str, _: &Env<'_>) -> Result<SecretRef, Bad> {
        Ok(SecretRef::new(raw))
    }
    fn show(&self, value: &SecretRef) -> String {
        value.describe()
    }
}

/// A keyword enum (`FromStr` with the error "must be …", `Display` the keyword).
pub(crate) struct Keyword<T>(pub(crate) std::marker::PhantomData<T>);

/// [`Keyword`] of `T`.
pub(crate) const fn keyword<T>() -> Keyword<T> {
    Keyword(std::marker::PhantomData)
}

impl<T: FromStr<Err = String> + Display> Kind for Keyword<T> {
    type Value = T;
    fn parse(&self, raw: &str, _: &Env<'_>) -> Result<T, Bad> {
        raw.parse().map_err(Bad::from)
    }
    fn show(&self, value: &T) -> String {
        value.to_string()
    }
}

/// A kind written as two functions.
pub(crate) struct Custom<T> {
    /// The text as a value, or the problem.
    pub(crate) parse: fn(&str) -> Result<T, &'static str>,
    /// The value as shown.
    pub(crate) show: fn(&T) -> String,
}

impl<T> Kind for Custom<T> {
    type Value = T;
    fn parse(&self, raw: &str, _: &Env<'_>) -> Result<T, Bad> {
        (self.parse)(raw).map_err(Bad::from)
    }
    fn show(&self, value: &T) -> String {
        (self.show)(value)
    }
}

/// `true` or `false`, any case.
pub(crate) const TRUE_FALSE: Custom<bool> = Custom {
    parse: |raw| match raw.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err("must be `true` or `false`"),
    },
    show: |v| v.to_string(),
};

/// `on` or `off`, any case.
pub(crate) const ON_OFF: Custom<bool> = Custom {
    parse: |raw| match raw.to_ascii_lowercase().as_str() {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err("must be `on` or `off`"),
    },
    show: |v| if *v { "on" } else { "off" }.to_owned(),
};

/// `K`, or `off` in any case (`None`, shown `off`).
pub(crate) struct Off<K>(pub(crate) K);

impl<K: Kind> Kind for Off<K> {
    type Value = Option<K::Value>;
    fn parse(&self, raw: &str, env: &Env<'_>) -> Result<Self::Value, Bad> {
        if raw.eq_ignore_ascii_case("off") {
            return Ok(None);
        }
        self.0.parse(raw, env).map(Some).map_err(|bad| Bad {
            problem: format!("{}, or off", bad.problem),
            ..bad
        })
    }
    fn show(&self, value: &Self::Value) -> String {
        value
            .as_ref()
            .map_or_else(|| "off".to_owned(), |v| self.0.show(v))
    }
}

/// `K`, or nothing when unset (`None`, shown as `.1`: `none`, `(unset)`).
pub(crate) struct Optional<K>(pub(crate) K, pub(crate) &'static str);

impl<K: Kind> Kind for Optional<K> {
    type Value = Option<K::Value>;
    fn parse(&self, raw: &str, env: &Env<'_>) -> Result<Self::Value, Bad> {
        self.0.parse(raw, env).map(Some)
    }
    fn show(&self, value: &Self::Value) -> String {
        value
            .as_ref()
            .map_or_else(|| self.1.to_owned(), |v| self.0.show(v))
    }
    fn unset(&self) -> Option<Self::Value> {
        Some(None)
    }
}

/// What [`parse_duration`] says of a duration of 0.
pub(crate) const ZERO: &str = "must be more than 0";

/// A duration with a unit, as `humantime` reads it (`500ms`, `30s`, `15m`, `24h`, `1d`,
/// `1h30m`; any case but `M`, which some read as a month), not 0, at most `36500d`: every
/// duration setting and `messages purge --older-than` take it.
///
/// # Errors
/// What is wrong with `raw`.
pub(crate) fn parse_duration(raw: &str) -> Result<Duration, String> {
    if raw.contains('M') {
        return Err(
            "must be a whole number with a unit: ms, s, m, h or d (`M` is refused: \
                    minutes are `m`, a month is `30d`)"
                .into(),
        );
    }
    // A larger one overflows the time arithmetic it feeds (now − retention, …).
    const MAX: Duration = Duration::from_secs(36_500 * 86_400);
    let too_long = "is too long: at most 36500d (100 years)";
    match humantime::parse_duration(&raw.to_ascii_lowercase()) {
        Ok(d) if d.is_zero() => Err(ZERO.into()),
        Ok(d) if d <= MAX => Ok(d),
        Ok(_) | Err(humantime::DurationError::NumberOverflow) => Err(too_long.into()),
        Err(e) => Err(format!(
            "must be a whole number with a unit: ms, s, m, h or d, e.g. 30s, 10m, 1h30m ({e})"
        )),
    }
}

/// `d` in the largest unit that shows it exactly: `24h`, `90m`, `1500ms` (what a duration
/// setting reads back; `check-config` prints it).
pub(crate) fn with_unit(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, per) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms.is_multiple_of(per) {
            return format!("{}{unit}", ms / per);
        }
    }
    format!("{ms}ms")
}
