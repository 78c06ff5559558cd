//! The JSON shape of a recorded body against an answer's.

use serde_json::Value;

/// Appends to `out` each place where `got` lacks the shape of `recorded`: a recorded property
/// absent, or of another JSON type; arrays compared by their first elements (when both have one);
/// a `null` on either side matches anything (Graph writes `null` for an absent value, and an
/// example's `null` says nothing of the type). Properties `got` has beyond the recording are
/// fine (Microsoft's examples are "shortened for readability").
pub fn shape_differences(recorded: &Value, got: &Value, out: &mut Vec<String>) {
    walk("", recorded, got, out);
}

fn walk(at: &str, recorded: &Value, got: &Value, out: &mut Vec<String>) {
    match (recorded, got) {
        (Value::Null, _) | (_, Value::Null) => {}
        (Value::Object(recorded), Value::Object(got)) => {
            for (name, value) in recorded {
                let here = format!("{at}/{name}");
                match got.get(name) {
                    None => out.push(format!("body {here}: recorded but absent")),
                    Some(other) => walk(&here, value, other, out),
                }
            }
        }
        (Value::Array(recorded), Value::Array(got)) => match (recorded.first(), got.first()) {
            (Some(r), Some(g)) => walk(&format!("{at}/0"), r, g, out),
            (Some(_), None) => out.push(format!("body {at}: recorded items but got none")),
            _ => {}
        },
        (r, g) if kind(r) != kind(g) => out.push(format!(
            "body {}: recorded {} but got {}",
            if at.is_empty() { "/" } else { at },
            kind(r),
            kind(g)
        )),
        _ => {}
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}
