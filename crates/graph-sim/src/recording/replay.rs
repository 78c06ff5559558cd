//! Replaying a recording against a running graph-sim.

use std::collections::BTreeMap;

use reqwest::{Client, Method};
use serde_json::Value;

use super::{Recording, fill, fill_json};

/// Replays `recording` step by step against the graph-sim at `origin` (its token endpoint and
/// API share it), sending `bearer` on API requests and filling placeholders from `values`
/// (which the steps' captures extend). Returns the differences, each naming its step; a step
/// with `skip_replay` is not sent.
pub async fn replay(
    origin: &url::Url,
    bearer: &str,
    recording: &Recording,
    mut values: BTreeMap<String, String>,
) -> Vec<String> {
    let http = Client::new();
    let mut out = Vec::new();
    for step in &recording.steps {
        if step.skip_replay.is_some() {
            continue;
        }
        let path = fill(&step.request.path, &values);
        let url = format!("{}{}", origin.as_str().trim_end_matches('/'), path);
        let Ok(method) = Method::from_bytes(step.request.method.as_bytes()) else {
            out.push(format!("step {:?}: no such method", step.name));
            continue;
        };
        let mut request = http.request(method, &url);
        if !step.request.login {
            request = request.bearer_auth(bearer);
        }
        for (name, value) in &step.request.headers {
            request = request.header(name, fill(value, &values));
        }
        if let Some(body) = &step.request.body {
            request = request.body(fill_json(body, &values).to_string());
        } else if let Some(text) = &step.request.text {
            request = request.body(fill(text, &values));
        } else if let Some(form) = &step.request.form {
            let form: Vec<(String, String)> = form
                .iter()
                .map(|(k, v)| (k.clone(), fill(v, &values)))
                .collect();
            request = request.form(&form);
        } else if step.request.method == "POST" {
            request = request.header("Content-Length", "0");
        }
        let answer = match request.send().await {
            Ok(answer) => answer,
            Err(e) => {
                out.push(format!("step {:?}: no answer: {e}", step.name));
                continue;
            }
        };
        let status = answer.status().as_u16();
        let headers: Vec<(String, String)> = answer
            .headers()
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or_default().to_owned()))
            .collect();
        let text = answer.text().await.unwrap_or_default();
        let body: Option<Value> = serde_json::from_str(&text).ok();
        for difference in step.response.differences(status, &headers, body.as_ref()) {
            out.push(format!("step {:?}: {difference}", step.name));
        }
        if status != step.response.status
            && let Some(error) = body.as_ref().and_then(|b| b.get("error"))
        {
            out.push(format!("step {:?}: graph-sim said {error}", step.name));
        }
        for (name, pointer) in &step.capture {
            match body
                .as_ref()
                .and_then(|b| b.pointer(pointer))
                .and_then(Value::as_str)
            {
                Some(value) => {
                    values.insert(name.clone(), value.to_owned());
                }
                None => out.push(format!(
                    "step {:?}: nothing at {pointer} to capture",
                    step.name
                )),
            }
        }
    }
    out
}
