//! Reading `perf` output for benchmark 5: lines of `perf report --stdio`, the crate a symbol
//! belongs to, and samples of `perf script` shared out by component of the daemon.

use std::collections::BTreeMap;

/// Components of the daemon, by the crate of a sample's innermost frame that belongs to one
/// (walking from the leaf towards the root, frames of std, libc, the kernel, futures, tracing's
/// `Instrumented` wrapper and tokio are passed over, so a `write(2)` under sqlx counts as
/// sqlx). Samples with no such frame in their (possibly truncated) stack count as the tokio
/// runtime if a tokio frame is there, else as unattributed.
pub const COMPONENTS: &[(&str, &[&str])] = &[
    (
        "PostgreSQL client: sqlx (queries, pool, connect)",
        &["sqlx_core", "sqlx_postgres"],
    ),
    ("Redis client: redis-rs (limiter and queue)", &["redis"]),
    (
        "HTTP client: reqwest, hyper (Graph sendMail)",
        &[
            "reqwest",
            "hyper",
            "hyper_util",
            "h2",
            "http",
            "http_body",
            "http_body_util",
        ],
    ),
    (
        "log lines: tracing-subscriber JSON",
        &["tracing_subscriber", "tracing_core", "tracing_serde"],
    ),
    ("JSON: serde_json", &["serde_json"]),
    ("OAuth2 token client", &["oauth2"]),
    ("mailer cache: moka", &["moka"]),
    ("mail-worker's own code", &["mail_worker"]),
];

/// Crates whose frames are passed over when looking for a sample's component.
pub const TRANSPARENT: &[&str] = &[
    "Rust std (alloc, fmt, collections)",
    "[kernel]",
    "libc.so.6",
    "libm.so.6",
    "[vdso]",
    "futures_util",
    "futures_core",
    "futures_channel",
    "tracing",
    "tower",
    "tower_service",
    "pin_project_lite",
    "unresolved",
];

/// One line of `perf report --stdio --no-children --sort dso,sym`: self time, object, symbol.
pub struct Sample {
    /// Self time, % of all samples.
    pub own: f64,
    /// The shared object (`mail-worker`, `[kernel.kallsyms]`, `libc.so.6`).
    pub dso: String,
    /// The demangled symbol.
    pub symbol: String,
}

/// `  12.34%  mail-worker  [.] symbol` → a [`Sample`].
pub fn parse_report_line(line: &str) -> Option<Sample> {
    let (percent, rest) = line.trim_start().split_once('%')?;
    let own = percent.trim().parse::<f64>().ok()?;
    let (dso, symbol) = rest.trim_start().split_once(" [")?;
    let symbol = symbol.get(3..)?.trim();
    Some(Sample {
        own,
        dso: dso.trim().to_owned(),
        symbol: symbol.to_owned(),
    })
}

/// The crate a symbol belongs to: the first path segment of the innermost type or function
/// (`<tokio::…>`, `core::ptr::drop_in_place<sqlx_core::…>` → `tokio`, `sqlx_core`);
/// `[kernel]` and C libraries by their object.
pub fn crate_of(dso: &str, symbol: &str) -> String {
    if dso.contains("kernel") {
        return "[kernel]".into();
    }
    if !dso.starts_with("mail-worker") {
        return dso.to_owned();
    }
    let mut s = symbol;
    for wrapper in ["core::ptr::drop_in_place<", "<", "&", "mut ", "dyn "] {
        while let Some(inner) = s.strip_prefix(wrapper) {
            s = inner;
        }
    }
    let name = s.split("::").next().unwrap_or(s);
    match name {
        "core" | "alloc" | "std" => "Rust std (alloc, fmt, collections)".into(),
        n if n.starts_with("_ZN") || n.is_empty() => "unresolved".into(),
        n => n.to_owned(),
    }
}

/// Shares out the samples of `perf script -F ip,sym,dso` output (call chains, leaf first,
/// samples separated by blank lines) by [`component_of`], in %, largest first.
///
/// # Errors
/// No samples in `text`.
pub fn components_of_script(text: &str) -> Result<Vec<(String, f64)>, String> {
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut total = 0u64;
    let mut frames: Vec<(String, String)> = Vec::new();
    let mut flush = |frames: &mut Vec<(String, String)>| {
        if frames.is_empty() {
            return;
        }
        total += 1;
        *counts.entry(component_of(frames)).or_default() += 1;
        frames.clear();
    };
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() {
            flush(&mut frames);
            continue;
        }
        // `<hex ip> <symbol> (<dso>)`
        let Some((_, rest)) = line.split_once(' ') else {
            continue;
        };
        let Some(open) = rest.rfind(" (") else {
            continue;
        };
        let symbol = rest[..open].trim().to_owned();
        let dso = rest[open + 2..].trim_end_matches(')').to_owned();
        let dso = dso.rsplit('/').next().unwrap_or(&dso).to_owned();
        frames.push((dso, symbol));
    }
    flush(&mut frames);
    if total == 0 {
        return Err("perf script found no samples".into());
    }
    let mut shares: Vec<(String, f64)> = counts
        .into_iter()
        .map(|(k, n)| (k, n as f64 * 100.0 / total as f64))
        .collect();
    shares.sort_by(|a, b| b.1.total_cmp(&a.1));
    Ok(shares)
}

/// The component of one sample's frames (leaf first).
pub fn component_of(frames: &[(String, String)]) -> String {
    let mut saw_tokio = false;
    for (dso, symbol) in frames {
        // Frames perf recovered from inlining carry `(inlined)` instead of an object.
        let dso = if dso == "inlined" {
            "mail-worker"
        } else {
            dso.as_str()
        };
        let krate = crate_of(dso, symbol);
        if krate == "tokio" {
            saw_tokio = true;
            continue;
        }
        if TRANSPARENT.contains(&krate.as_str())
            || !dso.starts_with("mail-worker") && dso != "[unknown]"
        {
            continue;
        }
        if let Some((name, _)) = COMPONENTS
            .iter()
            .find(|(_, crates)| crates.contains(&krate.as_str()))
        {
            return (*name).to_owned();
        }
    }
    if saw_tokio {
        "tokio runtime: scheduler, I/O driver, timers".into()
    } else {
        "unattributed (kernel, libc or std with no library frame above)".into()
    }
}
