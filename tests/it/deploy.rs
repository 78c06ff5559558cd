//! The deployment files, validated by parsing: `deploy/kubernetes/*.yaml`, `deploy/compose.yaml`,
//! the Dockerfile, `.dockerignore` and the Grafana dashboard — against the product's own
//! contracts (its environment variables, its metric names, its subcommands).

use std::{collections::BTreeSet, path::Path, time::Duration};

use clap::Parser;
use mail_worker::{cli, config::Config, ops::Metrics};
use serde_yaml::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every YAML document of `path`, parsed.
fn documents(path: &str) -> Vec<Value> {
    use serde::Deserialize;
    let text = read(path);
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{path}: {e}")))
        .collect()
}

fn kube() -> Vec<Value> {
    let mut all = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(root().join("deploy/kubernetes"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    names.sort();
    for name in names {
        all.extend(documents(&format!("deploy/kubernetes/{name}")));
    }
    all
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in deploy/kubernetes"))
}

fn named<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in deploy/kubernetes"))
}

fn known_vars() -> BTreeSet<&'static str> {
    // A deprecated `*_MS` name is still read (with a warning).
    mail_worker::config::settings::all()
        .flat_map(|s| [Some(s.name), s.alias_ms])
        .flatten()
        .collect()
}

/// The `env:` references of examples/senders.json.
fn sender_refs() -> BTreeSet<String> {
    let text = read("examples/senders.json");
    text.split("\"env:")
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap().to_owned())
        .collect()
}

#[test]
fn every_kubernetes_manifest_parses_and_the_deployment_follows_the_daemons_contracts() {
    let docs = kube();
    for doc in &docs {
        assert!(doc["apiVersion"].is_string(), "{doc:?}");
        assert!(doc["kind"].is_string(), "{doc:?}");
        if doc["kind"] != "Kustomization" {
            assert!(doc["metadata"]["name"].is_string(), "{doc:?}");
        }
    }
    let kinds: BTreeSet<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    for kind in [
        "ConfigMap",
        "Secret",
        "Deployment",
        "PodDisruptionBudget",
        "Job",
        "Service",
        "ServiceMonitor",
        "NetworkPolicy",
        "Kustomization",
    ] {
        assert!(kinds.contains(kind), "{kind} missing: {kinds:?}");
    }

    let config_map = &of_kind(&docs, "ConfigMap")["data"];
    let secret = &of_kind(&docs, "Secret")["stringData"];
    let vars = known_vars();
    let refs = sender_refs();
    for (key, _) in config_map.as_mapping().unwrap() {
        let key = key.as_str().unwrap();
        assert!(
            vars.contains(key),
            "ConfigMap key {key} is no variable of the daemon"
        );
    }
    for (key, _) in secret.as_mapping().unwrap() {
        let key = key.as_str().unwrap();
        assert!(
            vars.contains(key) || refs.contains(key),
            "Secret key {key} is neither a variable nor an env: reference of senders.json"
        );
    }
    // The ConfigMap and the Secret together are a configuration the daemon accepts.
    let lookup = |name: &str| {
        config_map[name]
            .as_str()
            .or_else(|| secret[name].as_str())
            .map(str::to_owned)
    };
    let config = Config::from_lookup(lookup).expect("the manifests' environment parses");
    let listen = config.metrics_listen.expect("METRICS_LISTEN is on");

    let deployment = named(&docs, "Deployment", "mail-worker");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"]["spec"];
    let grace_s = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    assert!(
        Duration::from_secs(grace_s) > config.shutdown_grace,
        "terminationGracePeriodSeconds {grace_s} must exceed SHUTDOWN_GRACE {:?}",
        config.shutdown_grace
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let container = &pod["containers"][0];
    assert_eq!(container["args"][0], "run");
    assert_eq!(
        container["ports"][0]["containerPort"],
        u64::from(listen.port())
    );
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    for part in ["requests", "limits"] {
        assert!(container["resources"][part]["memory"].is_string(), "{part}");
        assert!(!container["resources"][part]["cpu"].is_null(), "{part}");
    }
    let env_from: Vec<&str> = container["envFrom"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|e| {
            e["configMapRef"]["name"]
                .as_str()
                .or(e["secretRef"]["name"].as_str())
        })
        .collect();
    assert_eq!(env_from, ["mail-worker-env", "mail-worker-credentials"]);
    assert_eq!(
        deployment["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"],
        listen.port().to_string()
    );

    let job = of_kind(&docs, "Job");
    assert_eq!(
        job["spec"]["template"]["spec"]["containers"][0]["args"][0],
        "migrate"
    );
    // Each version its own migrate Job (its pod template is immutable), and every image is this
    // version's: a release bumps them together (docs/upgrading.md).
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        job["metadata"]["name"],
        format!("mail-worker-migrate-{}", version.replace('.', "-"))
    );
    for doc in docs
        .iter()
        .filter(|d| d["kind"] == "Deployment" || d["kind"] == "Job")
    {
        assert_eq!(
            doc["spec"]["template"]["spec"]["containers"][0]["image"],
            format!("mail-worker:{version}"),
            "{:?}",
            doc["metadata"]["name"]
        );
    }
    // SENDERS_FILE: the generated ConfigMap's file, mounted where the variable points, a file
    // the import accepts whose `env:` references the Secret sets.
    let senders_file = config.senders_file.clone().expect("SENDERS_FILE set");
    let mount = pod["containers"][0]["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "senders")
        .expect("the senders volume mounted");
    assert_eq!(
        senders_file.parent().unwrap().to_str().unwrap(),
        mount["mountPath"].as_str().unwrap()
    );
    let volume = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "senders")
        .unwrap();
    let generator = &of_kind(&docs, "Kustomization")["configMapGenerator"][0];
    assert_eq!(volume["configMap"]["name"], generator["name"]);
    let file_name = senders_file.file_name().unwrap().to_str().unwrap();
    assert_eq!(generator["files"][0], file_name);
    let senders_json = read(&format!("deploy/kubernetes/{file_name}"));
    mail_worker::import::senders::check(&senders_json).expect("deploy's senders.json imports");
    for reference in senders_json.split("\"env:").skip(1) {
        let name = reference.split('"').next().unwrap();
        assert!(secret[name].is_string(), "env:{name} is not in the Secret");
    }
    let pdb = of_kind(&docs, "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    // Every file is listed in the kustomization but the examples: the Secrets (created once by
    // the user, so `apply -k` never resets them) and the optional Ingress.
    let listed: BTreeSet<&str> = of_kind(&docs, "Kustomization")["resources"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(listed.len(), 7, "{listed:?}");
    // The image kustomize puts in every pod: this version's, from the placeholder registry the
    // user replaces (docs/operations.md, step 1).
    let images = &of_kind(&docs, "Kustomization")["images"][0];
    assert_eq!(images["name"], "mail-worker");
    assert_eq!(images["newTag"], version);
    // No pod calls the Kubernetes API: none gets a service account token.
    for doc in docs
        .iter()
        .filter(|d| d["kind"] == "Deployment" || d["kind"] == "Job")
    {
        assert_eq!(
            doc["spec"]["template"]["spec"]["automountServiceAccountToken"], false,
            "{:?}",
            doc["metadata"]["name"]
        );
    }
    for name in std::fs::read_dir(root().join("deploy/kubernetes")).unwrap() {
        let name = name.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".yaml") && name != "kustomization.yaml" {
            assert_eq!(
                listed.contains(name.as_str()),
                !name.ends_with(".example.yaml"),
                "{name}"
            );
        }
    }
    for name in &listed {
        let secrets = documents(&format!("deploy/kubernetes/{name}"))
            .iter()
            .filter(|d| d["kind"] == "Secret")
            .count();
        assert_eq!(secrets, 0, "{name} holds a Secret: apply -k would reset it");
    }
    ingest_is_wired_from_the_configmap_to_the_ingress(&docs, &config, deployment);

    // The admin UI: its own Deployment and Service, the token from the Secret, listening on
    // the port its container and Service name; the placeholder token is refused at start-up.
    let admin = named(&docs, "Deployment", "mail-worker-admin");
    let container = &admin["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["args"][0], "admin");
    assert_eq!(
        container["envFrom"][0],
        deployment["spec"]["template"]["spec"]["containers"][0]["envFrom"][0],
        "the daemon's ConfigMap"
    );
    assert!(container["envFrom"][1].is_null(), "not the whole Secret");
    let mut from_secret = Vec::new();
    let mut env = Vec::new();
    for e in container["env"].as_sequence().unwrap() {
        let name = e["name"].as_str().unwrap();
        assert!(vars.contains(name), "{name} is no variable of the daemon");
        match e["value"].as_str() {
            Some(value) => env.push((name, value)),
            None => {
                let key = &e["valueFrom"]["secretKeyRef"];
                assert_eq!(key["name"], "mail-worker-credentials");
                assert_eq!(key["key"], name);
                from_secret.push(name);
            }
        }
    }
    assert_eq!(from_secret, ["DATABASE_URL", "ADMIN_TOKEN"]);
    let admin_listen = env
        .iter()
        .find(|(name, _)| *name == "ADMIN_LISTEN")
        .map(|(_, value)| value.parse::<std::net::SocketAddr>().unwrap())
        .expect("ADMIN_LISTEN set");
    assert_eq!(
        container["ports"][0]["containerPort"],
        u64::from(admin_listen.port())
    );
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/login");
    let service = named(&docs, "Service", "mail-worker-admin");
    assert_eq!(
        service["spec"]["selector"],
        admin["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "admin");
    let token = secret["ADMIN_TOKEN"]
        .as_str()
        .expect("ADMIN_TOKEN in the Secret");
    assert!(
        token.chars().count() < 16,
        "a placeholder that cannot start"
    );
}

/// The element of the sequence `list` whose `name` is `name`.
fn by_name<'a>(list: &'a Value, name: &str) -> &'a Value {
    list.as_sequence()
        .unwrap_or_else(|| panic!("{list:?} is no list"))
        .iter()
        .find(|item| item["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {list:?}"))
}

/// The HTTP ingest in deploy/kubernetes: INGEST_LISTEN's port is the container's `ingest` port,
/// the Service's and the example Ingress's; each INGEST_TOKENS `file:` reference is a key of the
/// token Secret mounted where it points (a placeholder short enough to stop start-up); the
/// NetworkPolicy lets the port in; the ServiceMonitor selects the metrics Service only.
fn ingest_is_wired_from_the_configmap_to_the_ingress(
    docs: &[Value],
    config: &Config,
    deployment: &Value,
) {
    let listen = config.ingest.listen.expect("INGEST_LISTEN is on");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let port = by_name(&container["ports"], "ingest");
    assert_eq!(port["containerPort"], u64::from(listen.port()));
    let mount = by_name(&container["volumeMounts"], "ingest-tokens");
    let volume = by_name(&pod["volumes"], "ingest-tokens");
    let secret_name = volume["secret"]["secretName"].as_str().unwrap();
    let secret = &named(docs, "Secret", secret_name)["stringData"];
    assert!(!config.ingest.tokens.is_empty());
    for (name, reference) in &config.ingest.tokens {
        let described = reference.describe();
        let path = described
            .strip_prefix("file:")
            .unwrap_or_else(|| panic!("{name}: {described} is not a file: reference"));
        let path = Path::new(path);
        assert_eq!(
            path.parent().unwrap(),
            Path::new(mount["mountPath"].as_str().unwrap())
        );
        let key = path.file_name().unwrap().to_str().unwrap();
        let placeholder = secret[key]
            .as_str()
            .unwrap_or_else(|| panic!("{key} is not a key of Secret {secret_name}"));
        assert!(
            placeholder.len() < 16,
            "a placeholder the token check refuses"
        );
    }
    let service = named(docs, "Service", "mail-worker-ingest");
    assert_eq!(
        service["spec"]["selector"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "ingest");
    assert_eq!(
        service["spec"]["ports"][0]["port"],
        u64::from(listen.port())
    );
    let ingress = named(docs, "Ingress", "mail-worker-ingest");
    let backend = &ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"];
    assert_eq!(backend["name"], "mail-worker-ingest");
    assert_eq!(backend["port"]["name"], service["spec"]["ports"][0]["name"]);
    assert!(
        ingress["spec"]["tls"][0]["secretName"].is_string(),
        "TLS at the ingress"
    );
    let body = ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-body-size"]
        .as_str()
        .unwrap();
    let mib: u32 = body.trim_end_matches('m').parse().unwrap();
    assert_eq!(
        mib << 20,
        config.ingest.max_body_bytes.get(),
        "the proxy's limit is the daemon's"
    );
    let policy = named(docs, "NetworkPolicy", "mail-worker");
    let open: Vec<&Value> = policy["spec"]["ingress"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|rule| rule["ports"].as_sequence().unwrap())
        .map(|p| &p["port"])
        .collect();
    assert!(open.contains(&&Value::from(listen.port())), "{open:?}");
    let selector = named(docs, "ServiceMonitor", "mail-worker")["spec"]["selector"]["matchLabels"]
        .as_mapping()
        .unwrap();
    let selects = |svc: &Value| {
        selector
            .iter()
            .all(|(k, v)| svc["metadata"]["labels"].get(k) == Some(v))
    };
    assert!(selects(named(docs, "Service", "mail-worker-metrics")));
    assert!(
        !selects(service),
        "the ServiceMonitor scrapes the metrics Service only"
    );
}

#[test]
fn the_compose_file_runs_migrate_once_and_two_replicas_against_the_stand_in() {
    let docs = documents("deploy/compose.yaml");
    assert_eq!(docs.len(), 1);
    let services = docs[0]["services"].as_mapping().unwrap();
    let names: BTreeSet<&str> = services.keys().filter_map(Value::as_str).collect();
    for name in ["postgres", "redis", "graph-sim", "migrate", "seed"] {
        assert!(names.contains(name), "{name} missing: {names:?}");
    }
    let replicas: Vec<&str> = services
        .iter()
        .filter(|(_, s)| s["command"][0] == "run")
        .map(|(n, _)| n.as_str().unwrap())
        .collect();
    assert_eq!(replicas.len(), 2, "{replicas:?}");
    for name in &replicas {
        let service = &services[*name];
        assert_eq!(
            service["depends_on"]["migrate"]["condition"], "service_completed_successfully",
            "{name}"
        );
    }
    assert_eq!(services["migrate"]["command"][0], "migrate");
    let env = docs[0]["x-mail-worker-env"].as_mapping().unwrap();
    let vars = known_vars();
    let refs = sender_refs();
    for key in env.keys().filter_map(Value::as_str) {
        assert!(vars.contains(key) || refs.contains(key), "{key}");
    }
    for reference in &refs {
        assert!(
            env.contains_key(reference.as_str()),
            "env:{reference} is not set"
        );
    }
    let lookup = |name: &str| env.get(name).and_then(Value::as_str).map(str::to_owned);
    let config = Config::from_lookup(lookup).expect("the compose environment parses");
    assert_eq!(
        config.graph.api_base_url.as_str(),
        "http://graph-sim:8025/v1.0"
    );
    // The admin UI: the replicas' environment (a YAML merge) plus its listener and a token the
    // admin accepts.
    let admin = &services["admin"];
    assert_eq!(admin["command"][0], "admin");
    let mut admin_env = admin["environment"].clone();
    admin_env.apply_merge().unwrap();
    let admin_env = admin_env.as_mapping().unwrap();
    for key in env.keys() {
        assert_eq!(admin_env.get(key), env.get(key), "{key:?}");
    }
    assert_eq!(admin_env["ADMIN_LISTEN"], "0.0.0.0:9185");
    // The HTTP ingest: each replica's INGEST_LISTEN published on a host port of its own.
    let ingest = config.ingest.listen.expect("INGEST_LISTEN in compose");
    let mut published = BTreeSet::new();
    for name in &replicas {
        let ports: Vec<&str> = services[*name]["ports"]
            .as_sequence()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let host = ports
            .iter()
            .find_map(|p| p.strip_suffix(&format!(":{}", ingest.port())))
            .unwrap_or_else(|| panic!("{name} does not publish {ingest}: {ports:?}"));
        published.insert(host.to_owned());
    }
    assert_eq!(published.len(), replicas.len(), "{published:?}");
    assert!(admin_env["ADMIN_TOKEN"].as_str().unwrap().chars().count() >= 16);
    assert_eq!(admin["ports"][0], "9186:9185");
}

#[test]
fn the_dockerfile_exposes_the_metrics_port_and_checks_health_with_a_real_subcommand() {
    let dockerfile = read("Dockerfile");
    let port = Config::from_lookup(|_| None)
        .unwrap()
        .metrics_listen
        .unwrap()
        .port();
    assert!(
        dockerfile
            .lines()
            .any(|l| l.trim() == format!("EXPOSE {port}")),
        "{dockerfile}"
    );
    let check = dockerfile
        .lines()
        .skip_while(|l| !l.starts_with("HEALTHCHECK"))
        .nth(1)
        .expect("a HEALTHCHECK with its CMD on the next line");
    let argv: Vec<String> = serde_json::from_str(check.trim().trim_start_matches("CMD ")).unwrap();
    assert_eq!(argv[0], "mail-worker");
    cli::Cli::try_parse_from(&argv).expect("the HEALTHCHECK command is one the binary knows");
    assert!(dockerfile.contains("USER 10001"));
    // Every base image pinned by digest; the release target (the last stage, the default)
    // copies mail-worker alone.
    for from in dockerfile.lines().filter(|l| l.starts_with("FROM ")) {
        let image = from.split_whitespace().nth(1).unwrap();
        let is_stage = dockerfile
            .lines()
            .any(|l| l.starts_with("FROM ") && l.ends_with(&format!(" AS {image}")));
        assert!(is_stage || image.contains("@sha256:"), "{from}");
    }
    let release = dockerfile.rsplit("\nFROM ").next().expect("a last stage");
    assert!(release.starts_with("runtime AS release"), "{release}");
    let copies: Vec<&str> = release.lines().filter(|l| l.starts_with("COPY")).collect();
    assert_eq!(
        copies,
        ["COPY --from=build /src/target/release/mail-worker /usr/local/bin/"]
    );
    let ignore = read(".dockerignore");
    assert!(ignore.lines().any(|l| l.trim() == "target/"), "{ignore}");
}

/// Every metric name a daemon exports (each family touched once, so labelled ones appear).
fn exported() -> BTreeSet<String> {
    let m = Metrics::new();
    m.send("graph", mail_worker::ops::metrics::OutcomeLabel::Sent);
    m.rate_limit_decision("allowed", Duration::from_millis(1));
    m.provider_request("graph", "accepted", Duration::from_millis(1));
    m.set_messages(&[]);
    m.claimed(1);
    m.set_paused("mb@example.org", false);
    m.set_limit_pauses(&[("mailbox".into(), "mb@example.org".into(), "5.1.90".into())]);
    m.recipients_suppressed("intake", 1);
    m.bounced("5.1");
    m.set_budget_used("mb@example.org", 0.1, 0.2);
    m.set_tenant_budget_used("contoso.example", 0.3);
    m.ingest_request(200, Duration::from_millis(1));
    m.ingest_lines(mail_worker::ops::ingest::IngestOutcome::Stored, 1);
    m.failed_for("mb@example.org");
    m.recipient_outcome("mb@example.org", "delivered");
    m.set_waiting(&[("day", 1)]);
    m.set_warmup_day_budgets(&[("mb@example.org".into(), 500)]);
    let on = mail_worker::rate_limit::AdaptiveOn {
        tenant: "contoso.example",
        mailbox: "mb@example.org",
    };
    m.adaptive_fired("mailbox-concurrency", "mailbox", on);
    m.set_adaptive_factor("mailbox-concurrency", "mailbox", on, 250);
    m.encode()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(['{', ' ']).next().unwrap().to_owned())
        .collect()
}

/// The `mail_worker_*` names `expr` uses, each checked against `exported`.
fn check_metric_names(expr: &str, exported: &BTreeSet<String>) -> usize {
    let mut used = 0;
    for (i, _) in expr.match_indices("mail_worker_") {
        let name: String = expr[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        assert!(
            exported.contains(&name),
            "{name} (in {expr:?}) is not exported: {exported:?}"
        );
        used += 1;
    }
    used
}

#[test]
fn the_dashboard_queries_only_metrics_the_daemon_exports() {
    let dashboard: serde_json::Value =
        serde_json::from_str(&read("deploy/grafana/mail-worker.json")).unwrap();
    let exported = exported();
    let panels = dashboard["panels"].as_array().unwrap();
    assert!(panels.len() >= 6);
    let mut used = 0;
    for panel in panels {
        for target in panel["targets"].as_array().unwrap() {
            used += check_metric_names(target["expr"].as_str().unwrap(), &exported);
        }
    }
    assert!(used >= 10, "{used}");
}

#[test]
fn the_alerts_query_only_metrics_the_daemon_exports() {
    let exported = exported();
    let rules = &documents("deploy/prometheus/alerts.yaml")[0]["groups"][0]["rules"];
    let mut alerts = BTreeSet::new();
    for rule in rules.as_sequence().unwrap() {
        let expr = rule["expr"].as_str().unwrap();
        assert!(check_metric_names(expr, &exported) > 0, "{expr}");
        alerts.insert(rule["alert"].as_str().unwrap().to_owned());
    }
    for alert in [
        "MailWorkerNoReplicaUp",
        "MailWorkerWebhookEventsDead",
        "MailWorkerWebhookBatchesFailing",
        "MailWorkerIngestUnavailable",
    ] {
        assert!(alerts.contains(alert), "{alert}: {alerts:?}");
    }
}
