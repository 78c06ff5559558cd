//! `mail-worker run`'s flags, built from [`ENV_VARS`].

use clap::{ArgMatches, Args, FromArgMatches, parser::ValueSource};

use super::ENV_VARS;

/// `mail-worker run`'s flags: one per environment variable of [`ENV_VARS`], each read from its
/// variable when not given (clap `env`); given flags override the environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunArgs {
    /// `(variable, value)` given on the command line.
    pub overrides: Vec<(&'static str, String)>,
}

impl FromArgMatches for RunArgs {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut overrides = Vec::new();
        for var in ENV_VARS {
            if matches.value_source(var.name) == Some(ValueSource::CommandLine)
                && let Some(value) = matches.get_one::<String>(var.name)
            {
                overrides.push((var.name, value.clone()));
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
        cmd.args(ENV_VARS.iter().map(|var| {
            clap::Arg::new(var.name)
                .long(var.flag)
                .env(var.name)
                .value_name("VALUE")
                // Values may hold passwords: never echo them in --help.
                .hide_env_values(true)
                .help(format!("{} [default: {}]", var.meaning, var.default_text()))
        }))
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}
