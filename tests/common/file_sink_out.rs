//! Reading what a `file` sink wrote: every complete NDJSON line of its
//! output directory, in file order (all at once, or as it grows), and the
//! OTLP/JSON attributes inside.
//!
//! The sink may be writing while a test reads: a last line without its
//! newline is not written yet (the sink cuts a torn one off on restart), so
//! it is left out.
//!
//! Included with `#[path = "common/file_sink_out.rs"] mod file_sink_out;`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The output's files, oldest first (their names sort in log order).
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<_> = entries
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "ndjson"))
        .collect();
    files.sort();
    files
}

fn parse(f: &Path, complete: &str, out: &mut Vec<Value>) {
    for l in complete.lines() {
        out.push(
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{}: not JSON ({e}): {l}", f.display())),
        );
    }
}

/// Reads an output directory as it grows: each call returns only the lines
/// completed since the last one, so a test that polls a million lines does
/// not parse them all again at every poll. A line is taken once it ends in
/// its newline, which the sink never takes back (it cuts only a torn last
/// line, one without its newline, on restart).
pub struct Tail {
    dir: PathBuf,
    /// Bytes of each file already returned.
    read: BTreeMap<PathBuf, u64>,
}

impl Tail {
    pub fn new(dir: &Path) -> Tail {
        Tail {
            dir: dir.to_path_buf(),
            read: BTreeMap::new(),
        }
    }

    /// The lines completed since the last call, in file order.
    pub fn new_lines(&mut self) -> Vec<Value> {
        let mut out = Vec::new();
        for f in files(&self.dir) {
            let done = self.read.entry(f.clone()).or_insert(0);
            // Removed by the sink's retention between the listing and the open.
            let Ok(mut file) = std::fs::File::open(&f) else {
                continue;
            };
            file.seek(SeekFrom::Start(*done)).unwrap();
            let mut buf = Vec::new();
            file.read_to_end(&mut buf).unwrap();
            let Some(end) = buf.iter().rposition(|&b| b == b'\n') else {
                continue;
            };
            *done += end as u64 + 1;
            let text = std::str::from_utf8(&buf[..end]).expect("the sink writes UTF-8");
            parse(&f, text, &mut out);
        }
        out
    }
}

/// Every complete line of every `holdfast-*.ndjson` file in `dir`, oldest
/// file first; none if the directory does not exist yet.
pub fn lines(dir: &Path) -> Vec<Value> {
    Tail::new(dir).new_lines()
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
