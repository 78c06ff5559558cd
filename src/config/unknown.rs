//! Variables that look like ours but are no setting: a misspelt `MAIL_RATE_LIMIT_PERMINUTE=5`
//! would otherwise be ignored without a word while the default applies. Warned at start-up
//! (`config.warning`) and by `check-config`, naming the closest setting.

use super::settings;

/// The prefixes only our settings use. `MAIL_WORKER_` is left out: Kubernetes writes a
/// `MAIL_WORKER_…_SERVICE_HOST`/`_PORT…` variable into every pod for each Service of that name.
const OURS: &[&str] = &["MAIL_", "GRAPH_", "INGEST_", "INTAKE_", "EVENTS_", "ADMIN_"];

/// One warning for each variable of `env` that starts like a setting, is none (nor a
/// deprecated alias) and is near a declared name: most likely a misspelling. A variable another
/// one names as a secret (`INGEST_TOKENS=crm=env:INGEST_TOKEN_CRM`) is a value, not a setting;
/// one near no setting may be a secret the senders file names (`env:GRAPH_…`): neither is
/// warned.
pub(crate) fn warnings(env: &[(String, String)]) -> Vec<String> {
    let referenced = |name: &str| {
        env.iter().any(|(_, value)| {
            value
                .split(['=', ',', ' '])
                .any(|v| v == format!("env:{name}"))
        })
    };
    let mut found: Vec<String> = env
        .iter()
        .map(|(name, _)| name.as_str())
        .filter(|name| OURS.iter().any(|prefix| name.starts_with(prefix)))
        .filter(|name| !name.starts_with("MAIL_WORKER_"))
        .filter(|name| !settings::all().any(|s| s.name == *name || s.alias_ms == Some(name)))
        .filter(|name| !referenced(name))
        .filter_map(|name| {
            closest(name)
                .map(|near| format!("{name} is not a setting and is ignored; did you mean {near}?"))
        })
        .collect();
    found.sort();
    found
}

/// The declared name nearest to `name`, if at most a third of it differs.
fn closest(name: &str) -> Option<&'static str> {
    settings::all()
        .map(|s| (strsim::levenshtein(name, s.name), s.name))
        .min()
        .filter(|(distance, _)| *distance * 3 <= name.len())
        .map(|(_, near)| near)
}

#[cfg(test)]
mod tests {
    use super::warnings;

    fn of(env: &[(&str, &str)]) -> Vec<String> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        warnings(&env)
    }

    #[test]
    fn a_misspelt_setting_is_named_with_the_closest_one() {
        assert_eq!(
            of(&[("MAIL_RATE_LIMIT_PERMINUTE", "5")]),
            [
                "MAIL_RATE_LIMIT_PERMINUTE is not a setting and is ignored; did you mean MAIL_RATE_LIMIT_PER_MINUTE?"
            ]
        );
    }

    #[test]
    fn settings_aliases_secrets_others_and_kubernetes_service_links_are_not_warned() {
        assert_eq!(
            of(&[
                ("MAIL_RATE_LIMIT_PER_MINUTE", "30"),
                ("SEND_LEASE_MS", "600000"),
                (
                    "INGEST_TOKENS",
                    "crm=env:INGEST_TOKEN_CRM,erp=env:INGEST_TOKEN_ERP"
                ),
                ("INGEST_TOKEN_CRM", "0123456789abcdef0123"),
                ("INGEST_TOKEN_ERP", "0123456789abcdef0123"),
                ("GRAPH_CONTOSO_CLIENT_SECRET", "x"),
                ("PATH", "/usr/bin"),
                ("HTTP_PROXY", "http://proxy:3128"),
                ("MAIL_WORKER_INGEST_SERVICE_HOST", "10.0.0.1"),
                ("MAIL_WORKER_PORT_9184_TCP_ADDR", "10.0.0.2"),
            ]),
            Vec::<String>::new()
        );
        // Without the reference, the token's variable looks like a misspelt INGEST_TOKENS.
        assert_eq!(of(&[("INGEST_TOKEN_CRM", "x")]).len(), 1);
    }
}
