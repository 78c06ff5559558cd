//! The files generated from the declarations: `config/mail-worker.env.example` and the table
//! in docs/configuration.md. `UPDATE_GENERATED=1 cargo test --lib config::settings` rewrites
//! both; without it the test fails while a committed file differs.

use super::{Fallback, GROUPS, Group, Setting};

/// The env example's opening lines.
const HEADER: &str = "\
# mail-worker configuration. Every variable is optional; the value shown is the default.
# GENERATED from the settings' declarations (src/config/settings/): edit a declaration, then
# `UPDATE_GENERATED=1 cargo test --lib config::settings` rewrites this file and the table in
# docs/configuration.md (the test fails while either differs). A duration takes a unit: 250ms,
# 30s, 10m, 24h, 1d. A bad value stops start-up with a message naming the variable. No secrets
# belong here: sender credentials live in the database (as values or `env:NAME` / `file:/path`
# references).
";

/// Where docs/configuration.md's table starts and ends.
pub const TABLE_MARKERS: (&str, &str) = (
    "<!-- settings table start: generated, see src/config/settings/ -->\n",
    "<!-- settings table end -->",
);

/// `config/mail-worker.env.example`: each group under its title, each setting's comment, then
/// `NAME=default` (or `#NAME=example` when it has no default of its own).
pub fn env_example() -> String {
    env_example_of(GROUPS)
}

/// [`env_example`] of `groups`.
pub fn env_example_of(groups: &[Group]) -> String {
    let mut text = HEADER.to_owned();
    for group in groups {
        text += &format!("\n# --- {} ---\n", group.title);
        for setting in group.settings {
            for line in setting.doc.lines().chain(alias_note(setting).as_deref()) {
                text += &format!("# {line}\n").replace("# \n", "#\n");
            }
            text += &match setting.default {
                Fallback::Value(value) => format!("{}={value}\n", setting.name),
                Fallback::SameAs(_) | Fallback::Unset => {
                    format!("#{}={}\n", setting.name, setting.example.unwrap_or(""))
                }
            };
        }
    }
    text
}

/// "Deprecated: …" for a setting with a `*_MS` alias.
fn alias_note(setting: &Setting) -> Option<String> {
    setting.alias_ms.map(|alias| {
        format!("Was {alias} (milliseconds): still read, with a warning; both set is an error.")
    })
}

/// docs/configuration.md's table.
pub fn docs_table() -> String {
    docs_table_of(GROUPS)
}

/// [`docs_table`] of `groups`.
pub fn docs_table_of(groups: &[Group]) -> String {
    let mut table = String::from("| variable | default | secret | meaning |\n|---|---|---|---|\n");
    for setting in groups.iter().flat_map(|group| group.settings) {
        let default = match setting.default {
            Fallback::Unset => "none".to_owned(),
            _ => format!("`{}`", setting.default_text()),
        };
        let secret = if setting.secret { "yes" } else { "no" };
        let mut meaning = setting.help.replace('|', "\\|");
        if let Some(alias) = setting.alias_ms {
            meaning += &format!(" (deprecated: `{alias}`, in milliseconds)");
        }
        table += &format!(
            "| `{}` | {default} | {secret} | {meaning} |\n",
            setting.name
        );
    }
    table
}

/// `docs` with the text between [`TABLE_MARKERS`] replaced by [`docs_table`]; `None` when a
/// marker is missing.
pub fn with_docs_table(docs: &str) -> Option<String> {
    let (start, end) = TABLE_MARKERS;
    let begin = docs.find(start)? + start.len();
    let finish = begin + docs[begin..].find(end)?;
    Some(format!(
        "{}{}{}",
        &docs[..begin],
        docs_table(),
        &docs[finish..]
    ))
}
