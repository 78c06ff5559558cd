//! Every setting of the daemon, declared once (ADR 0040): its environment variable, `run`'s
//! flag, its default, how it is parsed and shown, whether it is secret, its one-line help and
//! the env example's text. Everything else is generated from these declarations: the typed
//! [`Settings`] that [`super::Config::from_lookup`] reads, `check-config`'s lines, `run --help`
//! (`cli::RunArgs`), `config/mail-worker.env.example` and docs/configuration.md's table
//! ([`generate`]; a test checks the committed files, `UPDATE_GENERATED=1` rewrites them).
//!
//! A setting is one entry in one group's [`settings!`] block (`limiter.rs`, `worker.rs`, …):
//! `field: Type = kind, Setting { … }`. The kind ([`kinds`]) parses the text and shows the
//! value; the default is text the kind parses, so it is written once.

use super::{ConfigError, env::Env};

pub mod generate;
mod kinds;
mod urls;
#[macro_use]
mod declare;
mod admin;
mod delivery;
mod events;
mod ingest;
mod intake;
mod limiter;
mod logs;
mod providers;
mod senders;
mod storage;
mod trace;
mod worker;

pub use admin::AdminSettings;
pub use delivery::DeliverySettings;
pub use events::EventsSettings;
pub use ingest::IngestSettings;
pub use intake::IntakeSettings;
pub(crate) use kinds::{Kind, ZERO, parse_duration, with_unit};
pub use limiter::LimiterSettings;
pub use logs::LogSettings;
pub use providers::ProviderSettings;
pub use senders::SenderSettings;
pub use storage::StorageSettings;
pub use trace::TraceSettings;
pub use worker::WorkerSettings;

#[cfg(test)]
mod tests;

/// One setting's declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// The environment variable, e.g. `SEND_LEASE`: a contract, never renamed (a new name
    /// keeps the old one as an alias).
    pub name: &'static str,
    /// `run`'s (and `admin`'s) flag for it, without the leading `--`.
    pub flag: &'static str,
    /// What an unset variable means.
    pub default: Fallback,
    /// Whether a value may hold a password or token: `check-config` and errors redact it.
    pub secret: bool,
    /// What it sets, one line: `run --help` and the docs' table.
    pub help: &'static str,
    /// The env example's comment above it (lines split at `\n`; empty: none).
    pub doc: &'static str,
    /// The env example's commented-out value for a setting without a default of its own.
    pub example: Option<&'static str>,
    /// The deprecated `*_MS` name that still sets it, in milliseconds (with a warning naming
    /// [`Self::name`]; both set is an error). Its flag is [`Self::flag`] + `-ms`.
    pub alias_ms: Option<&'static str>,
}

/// What an unset variable means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// This text, parsed as a set value would be.
    Value(&'static str),
    /// The value (or default) of the named setting.
    SameAs(&'static str),
    /// Nothing: the kind's "unset" value (`None`).
    Unset,
}

impl Setting {
    /// The fields most declarations leave as they are: secret no, no example, no alias.
    /// `name`, `flag`, `default`, `help` and `doc` are always given.
    pub const NEW: Self = Self {
        name: "",
        flag: "",
        default: Fallback::Unset,
        secret: false,
        help: "",
        doc: "",
        example: None,
        alias_ms: None,
    };

    /// The default as `run --help` and the docs show it: the text, the other setting's name,
    /// or `none`.
    pub fn default_text(&self) -> &'static str {
        match self.default {
            Fallback::Value(text) | Fallback::SameAs(text) => text,
            Fallback::Unset => "none",
        }
    }
}

/// One group of settings: a block of the env example under its title.
#[derive(Debug, Clone, Copy)]
pub struct Group {
    /// The env example's section title.
    pub title: &'static str,
    /// Its settings, in order.
    pub settings: &'static [Setting],
}

settings_root! {
    storage: StorageSettings,
    limiter: LimiterSettings,
    delivery: DeliverySettings,
    worker: WorkerSettings,
    providers: ProviderSettings,
    trace: TraceSettings,
    logs: LogSettings,
    admin: AdminSettings,
    intake: IntakeSettings,
    events: EventsSettings,
    senders: SenderSettings,
    ingest: IngestSettings,
}

/// Every declared setting, in order.
pub fn all() -> impl Iterator<Item = &'static Setting> {
    GROUPS.iter().flat_map(|group| group.settings)
}

/// The declaration of `name` (not an alias).
pub fn find(name: &str) -> Option<&'static Setting> {
    all().find(|s| s.name == name)
}

impl Env<'_> {
    /// `setting`'s value: its variable (or its deprecated alias, in milliseconds) parsed by
    /// `kind`, else its default.
    pub(crate) fn read<K: Kind>(
        &self,
        setting: &Setting,
        kind: &K,
    ) -> Result<K::Value, ConfigError> {
        let (var, text) = match self.given(setting)? {
            Some(given) => given,
            None => match self.default_text(setting) {
                Some(text) => (setting.name, text),
                None => {
                    return Ok(kind.unset().unwrap_or_else(|| {
                        panic!("{}: no default, yet its kind needs a value", setting.name)
                    }));
                }
            },
        };
        kind.parse(text.trim(), self).map_err(|bad| ConfigError {
            var,
            value: bad
                .value
                .unwrap_or_else(|| crate::domain::redact_raw(&text)),
            problem: bad.problem,
        })
    }

    /// The text an unset `setting` means.
    fn default_text(&self, setting: &Setting) -> Option<String> {
        match setting.default {
            Fallback::Value(text) => Some(text.to_owned()),
            Fallback::SameAs(other) => {
                let other = find(other).unwrap_or_else(|| panic!("{other} is not declared"));
                self.get(other.name).or_else(|| self.default_text(other))
            }
            Fallback::Unset => None,
        }
    }

    /// The variable that sets `setting` and its text: its own name, or its deprecated alias
    /// (milliseconds, given back as `<n>ms` and remembered for [`Self::deprecated`]).
    fn given(&self, setting: &Setting) -> Result<Option<(&'static str, String)>, ConfigError> {
        let own = self.get(setting.name);
        let Some(alias) = setting.alias_ms else {
            return Ok(own.map(|text| (setting.name, text)));
        };
        match (own, self.get(alias)) {
            (Some(_), Some(_)) => Err(self.error(
                setting.name,
                &format!(
                    "is set, and so is {alias} (its deprecated name, in milliseconds): set only {}",
                    setting.name
                ),
            )),
            (Some(text), None) => Ok(Some((setting.name, text))),
            (None, None) => Ok(None),
            (None, Some(ms)) => match ms.trim().parse::<u64>() {
                Ok(0) => Err(self.error(alias, "must be a positive number of milliseconds, not 0")),
                Ok(n) => {
                    self.note_alias(alias, setting.name);
                    Ok(Some((alias, format!("{n}ms"))))
                }
                Err(_) => Err(self.error(
                    alias,
                    &format!(
                        "must be a whole number of milliseconds (it is deprecated: set {} with a unit instead, e.g. 30s)",
                        setting.name
                    ),
                )),
            },
        }
    }
}
