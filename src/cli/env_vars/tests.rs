//! [`ENV_VARS`] is the one table of settings: these tests fail on any drift between it and the
//! config parser (the names it asks for), `check-config` (what it prints, defaults, redaction),
//! `config/mail-worker.env.example` and the table in docs/configuration.md.

use std::{cell::RefCell, collections::BTreeSet};

use super::{ENV_VARS, EnvVar};
use crate::config::Config;

/// Variables `check-config` does not print, and why.
const NOT_PRINTED: &[&str] = &[
    // Only consulted while the provider URLs are parsed; the URLs it let through are printed.
    "PROVIDER_CLEARTEXT_HOSTS",
];

fn names() -> Vec<&'static str> {
    ENV_VARS.iter().map(|var| var.name).collect()
}

fn read(path: &str) -> String {
    let path = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The variable a default refers to ("unset = that variable's value"), if it does.
fn refers_to(var: &EnvVar) -> Option<&'static EnvVar> {
    let default = var.default?;
    ENV_VARS.iter().find(|other| other.name == default)
}

#[test]
fn names_and_flags_are_unique() {
    let names: BTreeSet<_> = ENV_VARS.iter().map(|var| var.name).collect();
    let flags: BTreeSet<_> = ENV_VARS.iter().map(|var| var.flag).collect();
    assert_eq!(names.len(), ENV_VARS.len(), "a variable is listed twice");
    assert_eq!(flags.len(), ENV_VARS.len(), "a flag is listed twice");
}

#[test]
fn the_config_parser_reads_exactly_the_tables_variables() {
    let asked = RefCell::new(BTreeSet::new());
    Config::from_lookup(|name| {
        asked.borrow_mut().insert(name.to_owned());
        None
    })
    .expect("the defaults parse");
    let asked = asked.into_inner();
    let listed: BTreeSet<String> = names().into_iter().map(str::to_owned).collect();
    assert_eq!(
        asked.difference(&listed).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "read by src/config but missing from ENV_VARS"
    );
    assert_eq!(
        listed.difference(&asked).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "in ENV_VARS but never read by src/config"
    );
}

#[test]
fn check_config_prints_every_variable_with_the_tables_default() {
    let lines = Config::from_lookup(|_| None).unwrap().redacted_lines();
    let printed: Vec<(&str, &str)> = lines
        .iter()
        .map(|line| line.split_once('=').expect("NAME=value"))
        .collect();
    let value_of = |name: &str| printed.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
    let printed_names: BTreeSet<&str> = printed.iter().map(|(n, _)| *n).collect();
    let expected: BTreeSet<&str> = names()
        .into_iter()
        .filter(|name| !NOT_PRINTED.contains(name))
        .collect();
    assert_eq!(
        printed_names, expected,
        "check-config's names against ENV_VARS"
    );
    for var in ENV_VARS
        .iter()
        .filter(|var| !NOT_PRINTED.contains(&var.name))
    {
        let shown = value_of(var.name).unwrap();
        match (var.default, refers_to(var)) {
            (_, Some(other)) => assert_eq!(Some(shown), value_of(other.name), "{}", var.name),
            (Some(default), None) => {
                // Set to the table's default, it must read back as when unset ("24h" is "1d").
                let set =
                    Config::from_lookup(|name| (name == var.name).then(|| default.to_owned()))
                        .unwrap_or_else(|e| {
                            panic!("{}: the table's default {default:?}: {e}", var.name)
                        })
                        .redacted_lines();
                let line = format!("{}={shown}", var.name);
                assert!(
                    set.contains(&line),
                    "{}: ENV_VARS's default {default:?} is not check-config's {shown:?}",
                    var.name
                );
            }
            (None, None) => assert!(
                ["none", "(unset)"].contains(&shown),
                "{}: unset by default, check-config shows {shown:?}",
                var.name
            ),
        }
    }
}

#[test]
fn check_config_redacts_every_secret() {
    let secret = |name: &str| match name {
        "DATABASE_URL" => "postgres://app:hunter2@db.example:5432/mail".to_owned(),
        "ADMIN_TOKEN" | "EVENTS_WEBHOOK_SECRET" => "hunter2-hunter2-hunter2".to_owned(),
        "INGEST_TOKENS" => "crm=hunter2-hunter2-hunter2".to_owned(),
        "EVENTS_WEBHOOK_URL" => {
            "https://hooks:hunter2@hooks.example/in?token=hunter2,https://b.example/x".to_owned()
        }
        name if name.ends_with("_BASE_URL") => {
            format!("https://gw:hunter2@{}.example/", name.to_lowercase())
        }
        _ => format!("redis://:hunter2@{}.example:6379", name.to_lowercase()),
    };
    let secrets: Vec<&str> = ENV_VARS
        .iter()
        .filter(|var| var.secret)
        .map(|var| var.name)
        .collect();
    assert!(secrets.contains(&"ADMIN_TOKEN") && secrets.contains(&"DATABASE_URL"));
    let config = Config::from_lookup(|name| secrets.contains(&name).then(|| secret(name)))
        .expect("the secrets parse");
    for line in config.redacted_lines() {
        assert!(!line.contains("hunter2"), "a secret printed: {line}");
    }
}

/// `(name, value, commented out)` of every `NAME=value` line of the env example.
fn example_lines(text: &str) -> Vec<(String, String, bool)> {
    text.lines()
        .filter_map(|line| {
            let commented = line.starts_with('#');
            let (name, value) = line.trim_start_matches('#').trim().split_once('=')?;
            let is_name = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
            is_name.then(|| (name.to_owned(), value.to_owned(), commented))
        })
        .collect()
}

#[test]
fn the_env_example_lists_every_variable_in_order_with_its_default() {
    let lines = example_lines(&read("config/mail-worker.env.example"));
    let in_example: Vec<&str> = lines.iter().map(|(name, ..)| name.as_str()).collect();
    assert_eq!(
        in_example,
        names(),
        "config/mail-worker.env.example against ENV_VARS"
    );
    for (var, (_, value, commented)) in ENV_VARS.iter().zip(&lines) {
        match (var.default, refers_to(var)) {
            (Some(default), None) => {
                assert!(
                    !commented,
                    "{}: its default is set, not commented out",
                    var.name
                );
                assert_eq!(value, default, "{}: the example's default", var.name);
            }
            _ => assert!(
                commented,
                "{}: no default of its own, so commented out",
                var.name
            ),
        }
    }
}

/// docs/configuration.md's table as ENV_VARS renders it.
fn markdown_table() -> String {
    let mut table = String::from("| variable | default | secret | meaning |\n|---|---|---|---|\n");
    for var in ENV_VARS {
        let default = var
            .default
            .map_or_else(|| "none".to_owned(), |d| format!("`{d}`"));
        let secret = if var.secret { "yes" } else { "no" };
        let meaning = var.meaning.replace('|', "\\|");
        table += &format!("| `{}` | {default} | {secret} | {meaning} |\n", var.name);
    }
    table
}

#[test]
fn the_docs_table_is_the_table() {
    let docs = read("docs/configuration.md");
    let (start, end) = (
        "<!-- ENV_VARS table start -->\n",
        "<!-- ENV_VARS table end -->",
    );
    let begin = docs
        .find(start)
        .expect("docs/configuration.md: the table's start marker");
    let rest = &docs[begin + start.len()..];
    let table = &rest[..rest.find(end).expect("the table's end marker")];
    let expected = markdown_table();
    assert!(
        table == expected,
        "docs/configuration.md's table drifted from ENV_VARS (src/cli/env_vars.rs); \
         between the markers it should read:\n{expected}"
    );
}
