//! The admin UI (`mail-worker admin`).

use std::net::SocketAddr;

use super::Fallback::{Unset, Value};
use super::Setting;
use super::kinds::{Off, Optional, Secret, TRUE_FALSE};
use super::urls::Listen;
use crate::domain::SecretRef;

settings! {
    /// The admin UI (`mail-worker admin`; docs/operations.md "Admin UI").
    pub struct AdminSettings = "The admin UI (`mail-worker admin`; docs/operations.md \"Admin UI\")" {
        listen: Option<SocketAddr> = Off(Listen), Setting {
            name: "ADMIN_LISTEN",
            flag: "admin-listen",
            default: Value("127.0.0.1:9185"),
            help: "`mail-worker admin`: where the admin UI listens; `off` disables it",
            doc: "Where the admin UI listens (host:port), or off.\n\
                  In a container or pod use 0.0.0.0:9185 and keep it off the public network.",
            ..Setting::NEW
        };
        token: Option<SecretRef> = Optional(Secret, "(unset)"), Setting {
            name: "ADMIN_TOKEN",
            flag: "admin-token",
            default: Unset,
            secret: true,
            help: "`mail-worker admin`: the operators' token (at least 16 characters) or an env:NAME / file:/path reference; `admin` refuses to start without one",
            doc: "The operators' login token: at least 16 characters, or env:NAME / file:/path (e.g. a mounted\n\
                  secret). Required by `mail-worker admin`, which refuses to start without it.",
            example: Some("file:/run/secrets/admin-token"),
            ..Setting::NEW
        };
        cookie_secure: bool = TRUE_FALSE, Setting {
            name: "ADMIN_COOKIE_SECURE",
            flag: "admin-cookie-secure",
            default: Value("false"),
            help: "`mail-worker admin`: mark the session cookie Secure; set it when the UI is reached over HTTPS",
            doc: "Mark the session cookie Secure: set true whenever the UI is reached over HTTPS (e.g. behind a\n\
                  TLS-terminating ingress or proxy).",
            ..Setting::NEW
        };
    }
}
