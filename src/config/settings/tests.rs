//! The declarations are the one source: the committed env example and docs table are what the
//! generator writes (`UPDATE_GENERATED=1` rewrites them), `check-config` prints every setting,
//! the parser reads exactly the declared names, and the `*_MS` aliases behave.

use std::{cell::RefCell, collections::BTreeSet, num::NonZeroU32, time::Duration};

use super::generate::{TABLE_MARKERS, docs_table_of, env_example, env_example_of, with_docs_table};
use super::kinds::Positive;
use super::{Fallback, GROUPS, Group, Setting, all};
use crate::config::{Config, ConfigError, env::Env};

fn parse(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Config::from_lookup(|name| {
        vars.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| (*v).to_owned())
    })
}

/// `path` (from the crate's root) as committed; with `UPDATE_GENERATED=1`, first rewritten to
/// `expected`.
fn committed(path: &str, expected: &str) -> String {
    let path = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    if std::env::var("UPDATE_GENERATED").is_ok_and(|v| v == "1") {
        std::fs::write(&path, expected).unwrap_or_else(|e| panic!("{path}: {e}"));
    }
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn the_env_example_and_the_docs_table_are_generated_from_the_declarations() {
    let example = env_example();
    assert!(
        committed("config/mail-worker.env.example", &example) == example,
        "config/mail-worker.env.example differs from the declarations: run \
         `UPDATE_GENERATED=1 cargo test --lib config::settings` and commit the result"
    );
    let docs_path = format!("{}/docs/configuration.md", env!("CARGO_MANIFEST_DIR"));
    let docs = std::fs::read_to_string(&docs_path).unwrap();
    let expected = with_docs_table(&docs)
        .unwrap_or_else(|| panic!("docs/configuration.md lacks the markers {TABLE_MARKERS:?}"));
    assert!(
        committed("docs/configuration.md", &expected) == expected,
        "docs/configuration.md's settings table differs from the declarations: run \
         `UPDATE_GENERATED=1 cargo test --lib config::settings` and commit the result"
    );
}

#[test]
fn names_and_flags_are_unique_and_every_alias_is_a_duration_ending_in_ms() {
    let names: Vec<&str> = all()
        .flat_map(|s| [Some(s.name), s.alias_ms])
        .flatten()
        .collect();
    let flags: BTreeSet<&str> = all().map(|s| s.flag).collect();
    assert_eq!(
        names.iter().collect::<BTreeSet<_>>().len(),
        names.len(),
        "a name twice"
    );
    assert_eq!(flags.len(), all().count(), "a flag twice");
    for s in all() {
        if let Some(alias) = s.alias_ms {
            assert_eq!(alias, format!("{}_MS", s.name));
            assert!(!s.name.ends_with("_MS"), "{}", s.name);
        }
        assert!(!s.help.is_empty() && !s.flag.is_empty(), "{}", s.name);
    }
}

#[test]
fn the_parser_reads_exactly_the_declared_names_and_check_config_prints_each_setting() {
    let asked = RefCell::new(BTreeSet::new());
    let config = Config::from_lookup(|name| {
        asked.borrow_mut().insert(name.to_owned());
        None
    })
    .expect("the defaults parse");
    let declared: BTreeSet<String> = all()
        .flat_map(|s| [Some(s.name), s.alias_ms])
        .flatten()
        .map(str::to_owned)
        .collect();
    assert_eq!(asked.into_inner(), declared);
    let lines = config.redacted_lines();
    let printed: Vec<&str> = lines.iter().map(|l| l.split_once('=').unwrap().0).collect();
    assert_eq!(printed, all().map(|s| s.name).collect::<Vec<_>>());
    // Each default, set explicitly, reads back as the unset default ("24h" would be "1d").
    for s in all() {
        if let Fallback::Value(text) = s.default {
            let set = parse(&[(s.name, text)]).unwrap_or_else(|e| panic!("{}: {e}", s.name));
            assert_eq!(set.redacted_lines(), lines, "{}", s.name);
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
        _ => format!("redis://:hunter2@{}.example:6379", name.to_lowercase()),
    };
    let secrets: Vec<&str> = all().filter(|s| s.secret).map(|s| s.name).collect();
    assert!(
        ["ADMIN_TOKEN", "DATABASE_URL", "INGEST_TOKENS"]
            .iter()
            .all(|name| secrets.contains(name))
    );
    let config = Config::from_lookup(|name| secrets.contains(&name).then(|| secret(name)))
        .expect("the secrets parse");
    for line in config.redacted_lines() {
        assert!(!line.contains("hunter2"), "a secret printed: {line}");
    }
}

#[test]
fn a_duration_takes_units_and_the_old_ms_name_still_sets_it() {
    let new = parse(&[("SEND_LEASE", "10m")]).unwrap();
    let old = parse(&[("SEND_LEASE_MS", "600000")]).unwrap();
    assert_eq!(new.worker.send_lease, Duration::from_secs(600));
    assert_eq!(new.worker.send_lease, old.worker.send_lease);
    assert_eq!(new.redacted_lines(), old.redacted_lines());
    let c = parse(&[("HTTP_TIMEOUT", "1m"), ("SCHEDULER_INTERVAL", "500ms")]).unwrap();
    assert_eq!(c.http_timeout, Duration::from_secs(60));
    assert_eq!(c.worker.scheduler_interval, Duration::from_millis(500));
    assert!(c.redacted_lines().contains(&"HTTP_TIMEOUT=1m".to_owned()));
    assert!(new.warnings().is_empty(), "{:?}", new.warnings());
}

#[test]
fn an_alias_warns_naming_the_new_name() {
    let c = parse(&[("SEND_LEASE_MS", "600000"), ("HTTP_TIMEOUT_MS", "5000")]).unwrap();
    assert_eq!(c.http_timeout, Duration::from_secs(5));
    let warnings = c.warnings();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].starts_with("SEND_LEASE_MS is deprecated: set SEND_LEASE instead"),
        "{warnings:?}"
    );
    assert!(warnings[1].starts_with("HTTP_TIMEOUT_MS is deprecated: set HTTP_TIMEOUT instead"));
}

#[test]
fn every_ms_alias_sets_its_setting_in_milliseconds_and_warns_naming_it() {
    let defaults = parse(&[]).unwrap().redacted_lines();
    let mut aliases = 0;
    for s in all() {
        let Some(alias) = s.alias_ms else { continue };
        aliases += 1;
        let Fallback::Value(text) = s.default else {
            panic!("{}: an aliased duration has a default", s.name)
        };
        let ms = super::parse_duration(text).unwrap().as_millis().to_string();
        let c = parse(&[(alias, &ms)]).unwrap_or_else(|e| panic!("{alias}={ms}: {e}"));
        assert_eq!(c.redacted_lines(), defaults, "{alias}={ms}");
        assert_eq!(c.deprecated, [(alias, s.name)]);
        let warning = format!("{alias} is deprecated: set {} instead", s.name);
        assert!(c.warnings()[0].starts_with(&warning), "{:?}", c.warnings());
        // The new name takes units; a bare number is refused, naming it.
        let e = parse(&[(s.name, &ms)]).unwrap_err();
        assert_eq!((e.var, e.problem.contains("unit")), (s.name, true), "{e}");
    }
    assert_eq!(aliases, 10);
}

#[test]
fn no_setting_is_named_in_a_unit() {
    for s in all() {
        for unit in ["_MS", "_SECS", "_SECONDS", "_MINUTES"] {
            assert!(!s.name.ends_with(unit), "{}: durations take units", s.name);
        }
    }
}

#[test]
fn both_names_set_is_an_error_naming_both() {
    let e = parse(&[("SEND_LEASE", "10m"), ("SEND_LEASE_MS", "600000")]).unwrap_err();
    assert_eq!(e.var, "SEND_LEASE");
    assert!(
        e.problem.contains("SEND_LEASE_MS") && e.problem.contains("set only SEND_LEASE"),
        "{e}"
    );
    // Every bad variable at once: both reported, each once.
    let all = Config::from_lookup_all(|name| match name {
        "SEND_LEASE" => Some("10m".into()),
        "SEND_LEASE_MS" => Some("600000".into()),
        _ => None,
    });
    assert_eq!(all.err().map(|e| e.len()), Some(1));
}

#[test]
fn a_bad_duration_names_the_setting_and_what_is_wrong_with_the_value() {
    for (var, value, needle) in [
        ("SEND_LEASE", "10", "time unit needed"),
        ("SEND_LEASE", "ten minutes", "ms, s, m, h or d"),
        ("SEND_LEASE", "10x", "unknown time unit \"x\""),
        ("SEND_LEASE", "0s", "must be more than 0"),
        ("SEND_LEASE", "1M", "`M` is refused"),
        ("METRICS_REFRESH", "36501d", "at most 36500d"),
        ("SEND_LEASE_MS", "10m", "whole number of milliseconds"),
        ("SEND_LEASE_MS", "0", "not 0"),
    ] {
        let e = parse(&[(var, value)]).unwrap_err();
        assert_eq!(e.var, var, "{e}");
        assert_eq!(e.value, value, "{e}");
        assert!(e.problem.contains(needle), "{var}={value}: {e}");
    }
    let e = parse(&[("SEND_LEASE_MS", "10m")]).unwrap_err();
    assert!(e.problem.contains("set SEND_LEASE with a unit"), "{e}");
}

#[test]
fn the_lease_rule_names_the_setting_given_by_either_name() {
    let e = parse(&[("SEND_LEASE", "50s")]).unwrap_err();
    assert_eq!(e.var, "SEND_LEASE");
    assert!(
        e.problem.contains("at least twice HTTP_TIMEOUT (30s)"),
        "{e}"
    );
    let e = parse(&[("SEND_LEASE_MS", "50000")]).unwrap_err();
    assert_eq!(e.var, "SEND_LEASE_MS");
    let e = parse(&[("HTTP_TIMEOUT", "6m")]).unwrap_err();
    assert_eq!(e.var, "HTTP_TIMEOUT");
    assert!(e.problem.contains("SEND_LEASE (10m, its default)"), "{e}");
}

settings! {
    /// A group as another helper would add it: one declaration, nothing else.
    pub struct ProbeSettings = "Probe" {
        batch: NonZeroU32 = Positive, Setting {
            name: "INGEST_PROBE_BATCH",
            flag: "ingest-probe-batch",
            default: Fallback::Value("5"),
            help: "a probe setting's one line",
            doc: "A probe setting, declared in one place.",
            ..Setting::NEW
        };
    }
}

#[test]
fn a_setting_declared_in_one_place_is_read_printed_and_documented() {
    let groups: Vec<Group> = GROUPS
        .iter()
        .copied()
        .chain([Group {
            title: ProbeSettings::TITLE,
            settings: ProbeSettings::SETTINGS,
        }])
        .collect();
    let example = env_example_of(&groups);
    assert!(
        example.ends_with(
            "\n# --- Probe ---\n# A probe setting, declared in one place.\nINGEST_PROBE_BATCH=5\n"
        ),
        "{example}"
    );
    assert!(
        docs_table_of(&groups)
            .ends_with("| `INGEST_PROBE_BATCH` | `5` | no | a probe setting's one line |\n")
    );
    let lookup = |name: &str| (name == "INGEST_PROBE_BATCH").then(|| "7".to_owned());
    let env = Env::new(&lookup);
    let probe = ProbeSettings::read(&env).unwrap();
    assert_eq!(probe.batch.get(), 7);
    assert_eq!(probe.lines(), ["INGEST_PROBE_BATCH=7"]);
    let unset = ProbeSettings::read(&Env::new(&|_: &str| None)).unwrap();
    assert_eq!(unset.lines(), ["INGEST_PROBE_BATCH=5"]);
}
