//! `mail-worker run`'s (and `admin`'s) flags, one per declared setting
//! ([`crate::config::settings`]), and a hidden one per deprecated `*_MS` name.

use clap::{ArgMatches, Args, FromArgMatches, parser::ValueSource};

use crate::config::settings::{self, Setting};

/// `mail-worker run`'s flags: one per setting, each read from its variable when not given
/// (clap `env`); given flags override the environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunArgs {
    /// `(variable, value)` given on the command line.
    pub overrides: Vec<(&'static str, String)>,
}

/// Every variable a flag sets: each setting's name and its deprecated alias, with the flag.
fn flags() -> impl Iterator<Item = (&'static str, String, &'static Setting)> {
    settings::all().flat_map(|s| {
        let alias = s.alias_ms.map(|alias| (alias, format!("{}-ms", s.flag), s));
        std::iter::once((s.name, s.flag.to_owned(), s)).chain(alias)
    })
}

impl FromArgMatches for RunArgs {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut overrides = Vec::new();
        for (var, ..) in flags() {
            if matches.value_source(var) == Some(ValueSource::CommandLine)
                && let Some(value) = matches.get_one::<String>(var)
            {
                overrides.push((var, value.clone()));
            }
        }
        Ok(Self { overrides })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl Args for RunArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        cmd.args(flags().map(|(var, flag, setting)| {
            let arg = clap::Arg::new(var)
                .long(flag)
                .env(var)
                .value_name("VALUE")
                // Values may hold passwords: never echo them in --help.
                .hide_env_values(true);
            if var == setting.name {
                arg.help(format!(
                    "{} [default: {}]",
                    setting.help,
                    setting.default_text()
                ))
            } else {
                // A deprecated `*_MS` name: still read, not advertised.
                arg.hide(true)
            }
        }))
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}
