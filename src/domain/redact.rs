//! Passwords out of what is printed: a URL's userinfo password and `password` query parameter
//! become `***` (logs, `check-config`, the errors of bad values).

use url::Url;

/// `url` with its password (if any) replaced by `***`, for logs and `check-config`: the
/// userinfo password and a `password` query parameter.
pub(crate) fn redact_url(url: &Url) -> String {
    let mut url = url.clone();
    if url.password().is_some() && url.set_password(Some("***")).is_err() {
        // A URL without a host cannot carry a replaced password: show nothing of it.
        return format!("{}:***", url.scheme());
    }
    if url
        .query_pairs()
        .any(|(k, _)| k.eq_ignore_ascii_case("password"))
    {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| {
                let v = if k.eq_ignore_ascii_case("password") {
                    "***".into()
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        url.query_pairs_mut().clear().extend_pairs(pairs);
    }
    url.to_string()
}

/// `raw` with its password replaced by `***`, whether it parses as a URL or not.
pub(crate) fn redact_raw(raw: &str) -> String {
    match Url::parse(raw) {
        // Without `://` a URL has no authority, so no password the parser would know of.
        // An `@` after the host: a password with an unencoded `/`, `?` or `#` (the parser took
        // part of it for the host or the path), so mask as unparsed.
        Ok(url) if raw.contains("://") && !url[url::Position::BeforePath..].contains('@') => {
            redact_url(&url)
        }
        _ => redact_unparsed(raw),
    }
}

/// A string that failed to parse as a URL, with anything between `://` and the last `@`
/// (where a password would be) replaced by `***`.
fn redact_unparsed(raw: &str) -> String {
    match (raw.find("://"), raw.rfind('@')) {
        (Some(start), Some(at)) if at > start + 3 => {
            format!("{}***{}", &raw[..start + 3], &raw[at..])
        }
        // Not even `scheme://`: whatever comes before an `@` may be a password.
        (None, Some(at)) => format!("***{}", &raw[at..]),
        _ => raw.to_owned(),
    }
}
