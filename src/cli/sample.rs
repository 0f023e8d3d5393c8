//! `holdfast check --sample FILE --source NAME`: a source's processing
//! chain run over the lines of a sample file, each result printed as one
//! JSON line, so an operator can try a parser or a filter before deploying
//! it. Nothing is appended anywhere; the chain is the one the daemon would
//! run (`src/process/`).
//!
//! Ids here are those of the sample file's lines at their offsets (the
//! file's identity taken as 0), so a `sample` step's decisions show its
//! rate but not which exact lines the daemon will keep.

use std::borrow::Cow;
use std::io::Write;
use std::path::Path;

use anyhow::Context;
use serde_json::{json, Map, Value as Json};

use crate::event::EventId;
use crate::process::{Chain, Event, Value};

/// What a sample run found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub lines: u64,
    pub kept: u64,
    pub dropped: u64,
    pub unparsed: u64,
}

fn value_json(v: &Value) -> Json {
    match v {
        Value::Str(s) => Json::String(s.clone()),
        Value::Int(i) => json!(i),
        Value::Double(d) => json!(d),
        Value::Bool(b) => json!(b),
        Value::Any(a) => serde_json::to_value(a).unwrap_or(Json::Null),
    }
}

/// Runs `chain` over each line of `input`, writing one JSON object per
/// line to `out`.
pub fn run(chain: &Chain, input: &Path, out: &mut impl Write) -> anyhow::Result<Summary> {
    let text = std::fs::read(input).with_context(|| format!("reading {}", input.display()))?;
    let mut s = Summary::default();
    let mut counts = vec![0u64; chain.steps.len()];
    let mut offset = 0u64;
    for (n, raw) in text.split_inclusive(|b| *b == b'\n').enumerate() {
        let start = offset;
        offset += raw.len() as u64;
        let line = raw.strip_suffix(b"\n").unwrap_or(raw);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        s.lines += 1;
        let body = String::from_utf8_lossy(line);
        let mut ev = Event::new(
            Cow::Borrowed(body.as_ref()),
            EventId::for_file_line(0, 0, start),
        );
        let before: Vec<u64> = counts.clone();
        let kept = chain.run(&mut ev, &mut counts);
        let rule = chain
            .steps
            .iter()
            .zip(counts.iter().zip(&before))
            .rev()
            .find(|(_, (a, b))| a > b)
            .map(|(st, _)| st.name.clone());
        let mut o = Map::new();
        o.insert("line".into(), json!(n + 1));
        if !kept {
            s.dropped += 1;
            o.insert("dropped_by".into(), json!(rule));
            o.insert("input".into(), json!(body));
        } else {
            s.kept += 1;
            let mut attrs = Map::new();
            for (k, v) in &chain.labels.attributes {
                attrs.insert(k.clone(), json!(v));
            }
            for (k, v) in &ev.attrs {
                attrs.insert(k.clone(), value_json(v));
            }
            if ev.attr(crate::process::ATTR_UNPARSED).is_some() {
                s.unparsed += 1;
            }
            if ev.time_unix_nano != 0 {
                o.insert("timeUnixNano".into(), json!(ev.time_unix_nano.to_string()));
            }
            if ev.severity_number != 0 {
                o.insert("severityNumber".into(), json!(ev.severity_number));
                o.insert("severityText".into(), json!(ev.severity_text));
            }
            o.insert("body".into(), json!(ev.body));
            o.insert("attributes".into(), Json::Object(attrs));
            if !chain.labels.resource.is_empty() {
                let r: Map<String, Json> = chain
                    .labels
                    .resource
                    .iter()
                    .map(|(k, v)| (k.clone(), json!(v)))
                    .collect();
                o.insert("resource".into(), Json::Object(r));
            }
        }
        writeln!(out, "{}", Json::Object(o))?;
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::filter::Condition;
    use crate::process::parse::Format;
    use crate::process::testing::{drop_when, parse, step};

    #[test]
    fn prints_each_line_as_the_chain_leaves_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("s.log");
        std::fs::write(
            &f,
            "{\"msg\":\"a\",\"n\":1}\nnope\r\n\n{\"msg\":\"drop me\"}\n",
        )
        .expect("write");
        let chain = Chain {
            labels: Default::default(),
            steps: vec![
                step(
                    "json",
                    parse(
                        Format::Json {
                            max_depth: crate::process::parse::json::MAX_DEPTH,
                        },
                        Some("msg"),
                    ),
                ),
                step(
                    "no_drop_me",
                    drop_when(Condition {
                        body: Some(regex::Regex::new("drop").expect("regex")),
                        ..Default::default()
                    }),
                ),
            ],
        };
        let mut out = Vec::new();
        let s = run(&chain, &f, &mut out).expect("runs");
        assert_eq!(
            s,
            Summary {
                lines: 3,
                kept: 2,
                dropped: 1,
                unparsed: 1
            }
        );
        let lines: Vec<Json> = String::from_utf8(out)
            .expect("utf8")
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        assert_eq!(lines[0]["body"], "a");
        assert_eq!(lines[0]["attributes"]["n"], 1);
        assert_eq!(lines[1]["attributes"]["holdfast.unparsed"], "json");
        assert_eq!(lines[2]["dropped_by"], "no_drop_me");
        assert_eq!(lines[2]["line"], 4);
    }
}
