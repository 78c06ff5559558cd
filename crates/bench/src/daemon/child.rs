//! The daemon under test: graph-sim in process and the real `mail-worker run` binary as a child
//! process (under `/usr/bin/time -v` when it exists), its environment, its exit and its JSON log.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use graph_sim::{GraphSim, SimConfig, SimMailbox};
use mail_worker::domain::MailboxAddress;
use serde::Serialize;
use url::Url;
use uuid::Uuid;

use test_support::{
    proc_stats::{children_of, cpu_seconds, peak_rss_kib},
    process::{fail, signal},
};

use super::{CLIENT_ID, CLIENT_SECRET, GNU_TIME, MAIL_WORKER, TENANT};

/// graph-sim in process, serving `mailboxes` with Exchange Online's default limits (4
/// concurrent requests, 30 messages a rolling minute, …) for the benchmark app.
pub async fn start_sim(mailboxes: &[(MailboxAddress, Uuid)]) -> GraphSim {
    let mut config = SimConfig::new().with_app(TENANT, CLIENT_ID, CLIENT_SECRET);
    for (address, _) in mailboxes {
        // Refused, not delayed, past 30 a minute: a benchmark counts any overshoot.
        config = config.with_mailbox(SimMailbox::new(address.as_str(), TENANT).with_limits(
            graph_sim::MailboxLimits {
                minute_overflow: graph_sim::MinuteOverflow::Refuse,
                ..graph_sim::MailboxLimits::default()
            },
        ));
    }
    GraphSim::start(config)
        .await
        .unwrap_or_else(|e| fail(&format!("cannot start graph-sim: {e}")))
}

/// The environment of one `mail-worker run`: `NAME=value` pairs (nothing else of the
/// benchmark's environment is passed on).
#[derive(Debug, Clone, Default, Serialize)]
pub struct DaemonEnv(pub BTreeMap<String, String>);

impl DaemonEnv {
    /// Runs `mail-worker <args>` with this environment only, to its end; [`fail`]s when it
    /// cannot start or exits unsuccessfully (with its stderr). Returns its stdout.
    pub fn run_cli(&self, args: &[&str]) -> Vec<u8> {
        let what = args.join(" ");
        let out = std::process::Command::new(&*MAIL_WORKER)
            .args(args)
            .env_clear()
            .envs(&self.0)
            .output()
            .unwrap_or_else(|e| fail(&format!("{what}: {e}")));
        if !out.status.success() {
            fail(&format!(
                "{what} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        out.stdout
    }

    /// The daemon's configuration for `db`, the queue on `queue_redis`, the limiter on
    /// `limiter_redis`, graph-sim `sim`; JSON logs at `info`; every other variable at its
    /// default (config/mail-worker.env.example).
    pub fn new(db: &Url, queue_redis: &Url, limiter_redis: &Url, sim: &GraphSim) -> Self {
        let mut env = BTreeMap::new();
        let mut set = |k: &str, v: String| {
            env.insert(k.to_owned(), v);
        };
        set("DATABASE_URL", db.to_string());
        set("REDIS_URL", queue_redis.to_string());
        set("MAIL_RATE_LIMIT_REDIS_URL", limiter_redis.to_string());
        set("GRAPH_API_BASE_URL", sim.graph_base_url().to_string());
        set("GRAPH_LOGIN_BASE_URL", sim.login_base_url().to_string());
        set("LOG_FORMAT", "json".into());
        set("RUST_LOG", "info".into());
        set("SHUTDOWN_GRACE", "5s".into());
        // Several daemons run at once here: none of them serves metrics (the default port
        // would be taken by the first).
        set("METRICS_LISTEN", "off".into());
        set("HOSTNAME", "bench".into());
        // The send path's figures: no intake consumer polling the queue's Redis beside it.
        set("INTAKE_QUEUE", "off".into());
        Self(env)
    }

    /// Sets `name` to `value`.
    pub fn set(&mut self, name: &str, value: impl ToString) -> &mut Self {
        self.0.insert(name.to_owned(), value.to_string());
        self
    }

    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }
}

/// A running `mail-worker run`.
pub struct Daemon {
    /// `/usr/bin/time -v mail-worker run`, or `mail-worker run` itself without GNU time.
    child: tokio::process::Child,
    /// The daemon's own process id.
    pub pid: u32,
    /// Where its stderr (the JSON log) goes.
    pub log: PathBuf,
    /// GNU time's report, if it runs under GNU time.
    time_report: Option<PathBuf>,
    /// When it was started.
    pub started: Instant,
}

/// How a daemon ended and what it used.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DaemonExit {
    /// `exit 0`, `signal 9`, … as GNU time or the wait reported it.
    pub status: String,
    /// User + system CPU seconds over its whole life.
    pub cpu_s: f64,
    /// Of which user CPU seconds (GNU time only).
    pub user_s: Option<f64>,
    /// Of which system CPU seconds (GNU time only).
    pub system_s: Option<f64>,
    /// Peak resident set size, KiB.
    pub max_rss_kib: u64,
    /// Voluntary context switches (GNU time only).
    pub voluntary_switches: Option<u64>,
    /// Involuntary context switches (GNU time only).
    pub involuntary_switches: Option<u64>,
    /// `/usr/bin/time -v`, or `/proc` (read just before the stop) without GNU time.
    pub source: &'static str,
}

impl Daemon {
    /// Starts `mail-worker run` with exactly `env`, its stderr to `log`, under `/usr/bin/time
    /// -v -o <log>.time` when GNU time exists.
    pub async fn spawn(env: &DaemonEnv, log: &Path) -> Self {
        let log_file = std::fs::File::create(log)
            .unwrap_or_else(|e| fail(&format!("cannot create {}: {e}", log.display())));
        let timed = Path::new(GNU_TIME).exists();
        let time_report = timed.then(|| log.with_extension("time"));
        let mut command = match &time_report {
            Some(report) => {
                let mut c = tokio::process::Command::new(GNU_TIME);
                c.arg("-v").arg("-o").arg(report).arg(&*MAIL_WORKER);
                c
            }
            None => tokio::process::Command::new(&*MAIL_WORKER),
        };
        command
            .arg("run")
            .env_clear()
            .envs(&env.0)
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .kill_on_drop(true);
        let started = Instant::now();
        let child = command
            .spawn()
            .unwrap_or_else(|e| fail(&format!("cannot start {}: {e}", MAIL_WORKER.display())));
        let outer = child.id().unwrap_or(0);
        let pid = if timed {
            // GNU time forks the daemon at once; find it by its parent id.
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                if let Some(&pid) = children_of(outer).first() {
                    break pid;
                }
                if Instant::now() > deadline {
                    fail("GNU time did not start mail-worker within 5 s");
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        } else {
            outer
        };
        crate::register_child(pid, "KILL");
        Self {
            child,
            pid,
            log: log.to_owned(),
            time_report,
            started,
        }
    }

    /// CPU seconds the daemon has used so far.
    pub fn cpu_seconds(&self) -> Option<f64> {
        cpu_seconds(self.pid)
    }

    /// Sends SIGTERM (a graceful stop: in-flight sends finish) and waits up to `timeout` for
    /// the exit, then SIGKILL. Returns what it used.
    pub async fn stop(mut self, timeout: Duration) -> DaemonExit {
        let from_proc = DaemonExit {
            status: String::new(),
            cpu_s: cpu_seconds(self.pid).unwrap_or(0.0),
            user_s: None,
            system_s: None,
            max_rss_kib: peak_rss_kib(self.pid).unwrap_or(0),
            voluntary_switches: None,
            involuntary_switches: None,
            source: "/proc, just before the stop",
        };
        signal(self.pid, "TERM");
        let waited = tokio::time::timeout(timeout, self.child.wait()).await;
        let status = match waited {
            Ok(Ok(s)) => s.to_string(),
            Ok(Err(e)) => format!("wait failed: {e}"),
            Err(_) => {
                eprintln!(
                    "warning: mail-worker {} did not stop within {timeout:?}; killing it",
                    self.pid
                );
                signal(self.pid, "KILL");
                let _ = self.child.wait().await;
                "killed after the stop timeout".into()
            }
        };
        crate::unregister_child(self.pid);
        match self
            .time_report
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
        {
            Some(report) => parse_time_report(&report),
            None => DaemonExit {
                status,
                ..from_proc
            },
        }
    }
}

/// Parses GNU time's `-v` report.
pub fn parse_time_report(report: &str) -> DaemonExit {
    let field = |name: &str| {
        report
            .lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .map(|v| v.trim_start_matches(':').trim().to_owned())
    };
    let num = |name: &str| field(name).and_then(|v| v.parse::<f64>().ok());
    let int = |name: &str| field(name).and_then(|v| v.parse::<u64>().ok());
    let status = match (
        field("Exit status"),
        report.lines().find(|l| l.contains("terminated by signal")),
    ) {
        (_, Some(signal)) => signal.trim().to_owned(),
        (Some(code), None) => format!("exit {code}"),
        (None, None) => "unknown".into(),
    };
    let user_s = num("User time (seconds)");
    let system_s = num("System time (seconds)");
    DaemonExit {
        status,
        cpu_s: user_s.unwrap_or(0.0) + system_s.unwrap_or(0.0),
        user_s,
        system_s,
        max_rss_kib: int("Maximum resident set size (kbytes)").unwrap_or(0),
        voluntary_switches: int("Voluntary context switches"),
        involuntary_switches: int("Involuntary context switches"),
        source: "/usr/bin/time -v",
    }
}

/// One JSON log line of the daemon.
#[derive(Debug, Clone)]
pub struct LogLine {
    /// Its `timestamp`.
    pub at: DateTime<Utc>,
    /// Its `level` (`INFO`, `WARN`, `ERROR`, …).
    pub level: String,
    /// Its `event` field, if any.
    pub event: Option<String>,
    /// The whole object.
    pub json: serde_json::Value,
}

/// Reads a daemon's JSON log; lines that are not JSON objects with a timestamp are skipped.
pub fn read_log(path: &Path) -> Vec<LogLine> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let json: serde_json::Value = serde_json::from_str(line).ok()?;
            let at = json
                .get("timestamp")?
                .as_str()?
                .parse::<DateTime<Utc>>()
                .ok()?;
            Some(LogLine {
                at,
                level: json
                    .get("level")
                    .and_then(|v| v.as_str())
                    .unwrap_or("")
                    .to_owned(),
                event: json
                    .get("event")
                    .and_then(|v| v.as_str())
                    .map(str::to_owned),
                json,
            })
        })
        .collect()
}

/// `<workspace root>/bench-results/<file>` (the directory is created), for daemon logs.
pub fn results_path(file: &str) -> PathBuf {
    let dir = crate::results_dir();
    if let Err(e) = std::fs::create_dir_all(&dir) {
        fail(&format!("cannot create {}: {e}", dir.display()));
    }
    dir.join(file)
}
