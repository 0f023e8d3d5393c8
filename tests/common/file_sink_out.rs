//! Reading what a `file` sink wrote: every complete NDJSON line of its
//! output directory, in file order, and the OTLP/JSON attributes inside.
//!
//! The sink may be writing while a test reads: a last line without its
//! newline is not written yet (the sink cuts a torn one off on restart), so
//! it is left out.
//!
//! Included with `#[path = "common/file_sink_out.rs"] mod file_sink_out;`.
#![allow(dead_code)]

use std::path::Path;

use serde_json::Value;

/// Every complete line of every `holdfast-*.ndjson` file in `dir`, oldest
/// file first; none if the directory does not exist yet.
pub fn lines(dir: &Path) -> Vec<Value> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<_> = entries
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "ndjson"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        // Removed by the sink's retention between the listing and the read.
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        let complete = text.rfind('\n').map_or("", |i| &text[..i]);
        for l in complete.lines() {
            out.push(
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("{}: not JSON ({e}): {l}", f.display())),
            );
        }
    }
    out
}

/// The string value of the first attribute named `key` anywhere inside `v`
/// (record, data point, resource): OTLP/JSON writes each as
/// `{"key": …, "value": {"stringValue": …}}`.
pub fn string_attr(v: &Value, key: &str) -> Option<String> {
    match v {
        Value::Object(o) => {
            if o.get("key").and_then(Value::as_str) == Some(key) {
                if let Some(s) = o
                    .get("value")
                    .and_then(|v| v.get("stringValue"))
                    .and_then(Value::as_str)
                {
                    return Some(s.to_string());
                }
            }
            o.values().find_map(|v| string_attr(v, key))
        }
        Value::Array(a) => a.iter().find_map(|v| string_attr(v, key)),
        _ => None,
    }
}
