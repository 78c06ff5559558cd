//! The logs: their format and filter.

use super::Fallback::Value;
use super::Setting;
use super::kinds::{Custom, Text};
use crate::config::LogFormat;

/// `LOG_FORMAT`: `json` or `pretty`.
const LOG_FORMATS: Custom<LogFormat> = Custom {
    parse: |raw| match raw {
        "json" => Ok(LogFormat::Json),
        "pretty" => Ok(LogFormat::Pretty),
        _ => Err("must be `json` or `pretty`"),
    },
    show: |f| {
        match f {
            LogFormat::Json => "json",
            LogFormat::Pretty => "pretty",
        }
        .to_owned()
    },
};

settings! {
    /// Logs.
    pub struct LogSettings = "Logs" {
        format: LogFormat = LOG_FORMATS, Setting {
            name: "LOG_FORMAT",
            flag: "log-format",
            default: Value("json"),
            help: "`json` or `pretty`",
            doc: "json (one object per line) or pretty.",
            ..Setting::NEW
        };
        filter: String = Text, Setting {
            name: "RUST_LOG",
            flag: "log",
            default: Value("info"),
            help: "log filter",
            doc: "The log filter (tracing-subscriber's EnvFilter syntax, e.g. info,mail_worker=debug).",
            ..Setting::NEW
        };
    }
}
