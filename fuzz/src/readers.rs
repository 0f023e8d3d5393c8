//! The checks of the fuzz targets over what holdfast reads from lines,
//! journal entries and its own quarantine (issue 26): the `process` parse
//! steps, the journald mapping, the file source's line splitting and
//! multiline join, and the quarantine's NDJSON reader. Each compares with
//! an independent reading of the same input where one is cheap; see
//! `docs/fuzzing.md`. Also compiled into `tests/fuzz_regressions.rs`.

pub mod process_parse {
    //! The parse steps (`json`, `logfmt`, `regex`, `syslog`) over one line.

    use std::borrow::Cow;

    use holdfast::calendar::TimeZone;
    use holdfast::event::EventId;
    use holdfast::process::parse::regex::RegexParser;
    use holdfast::process::parse::{Format, Parser};
    use holdfast::process::{Event, Flow, Value};
    use holdfast::syslog_format::severity;

    const REGEX: &str = r"^(?P<key>[a-z]+)=(?P<value>\S*)(?: (?P<rest>.*))?$";
    const DEPTHS: [usize; 4] = [1, 2, 8, 32];

    /// The pattern, compiled once per process (compiling it per input
    /// would cost more than the step).
    fn regex() -> &'static regex::Regex {
        static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
        RE.get_or_init(|| regex::Regex::new(REGEX).expect("a valid pattern"))
    }

    /// Objects and arrays nested in `v` (a scalar is 0).
    fn depth(v: &serde_json::Value) -> usize {
        match v {
            serde_json::Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
            serde_json::Value::Object(o) => 1 + o.values().map(depth).max().unwrap_or(0),
            _ => 0,
        }
    }

    /// What the step stores for a JSON scalar.
    fn scalar(v: &serde_json::Value) -> Option<Value> {
        Some(match v {
            serde_json::Value::String(s) => Value::Str(s.clone()),
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                (Some(i), _, _) => Value::Int(i),
                (None, Some(u), _) => Value::Double(u as f64),
                (None, None, Some(f)) => Value::Double(f),
                _ => return None,
            },
            _ => return None,
        })
    }

    /// Byte 0 picks the format (`% 4`: json, logfmt, regex, syslog),
    /// whether `msg` is the body key (`/ 4 % 2`, not for syslog) and the
    /// json step's `max_depth` (`/ 8 % 4`: 1, 2, 8, 32); the rest, read
    /// as UTF-8 (lossily), is the line.
    pub fn check(data: &[u8]) {
        let Some((&sel, rest)) = data.split_first() else {
            return;
        };
        let input = String::from_utf8_lossy(rest);
        let max_depth = DEPTHS[usize::from(sel / 8 % 4)];
        let regex = regex();
        let format = match sel % 4 {
            0 => Format::Json { max_depth },
            1 => Format::Logfmt,
            2 => Format::Regex(RegexParser::new(regex.clone())),
            _ => Format::Syslog(TimeZone::Utc),
        };
        let syslog = matches!(format, Format::Syslog(_));
        let body_key = (sel / 4 % 2 == 1 && !syslog).then(|| "msg".to_string());
        let parser = Parser {
            format,
            field: None,
            body_key: body_key.clone(),
        };
        let mut ev = Event::new(Cow::Borrowed(input.as_ref()), EventId([7; 16]));
        let flow = parser.apply(&mut ev);

        // A key set again replaces its value: never two of one name.
        for (i, (k, _)) in ev.attrs.iter().enumerate() {
            assert!(!ev.attrs[..i].iter().any(|(k2, _)| k2 == k), "{k} twice");
        }
        match flow {
            Flow::Unparsed => {
                // Kept whole: nothing of a half-read line stays behind.
                assert_eq!(ev.body, input);
                assert!(ev.attrs.is_empty());
                assert_eq!((ev.time_unix_nano, ev.severity_number), (0, 0));
            }
            Flow::Next => {
                if body_key.is_none() && !syslog {
                    assert_eq!(ev.body, input);
                }
            }
            other => panic!("a parse step gave {other:?}"),
        }
        if let Some(k) = &body_key {
            assert!(ev.attr(k).is_none(), "the body key stays an attribute");
        }

        match sel % 4 {
            0 => {
                // serde_json's own reading decides: one object, nested at
                // most max_depth deep.
                let oracle = serde_json::from_str::<serde_json::Value>(&input);
                let fits = matches!(&oracle, Ok(v) if v.is_object() && depth(v) <= max_depth);
                assert_eq!(flow == Flow::Next, fits, "json: {oracle:?}");
                let Ok(serde_json::Value::Object(members)) = &oracle else {
                    return;
                };
                if flow != Flow::Next {
                    return;
                }
                for (k, v) in members {
                    if v.is_null() {
                        continue;
                    }
                    if body_key.as_deref() == Some(k.as_str()) {
                        if let serde_json::Value::String(s) = v {
                            assert_eq!(ev.body, *s);
                        }
                        continue;
                    }
                    let got = ev.attr(k).unwrap_or_else(|| panic!("member {k} lost"));
                    match scalar(v) {
                        Some(want) => assert_eq!(*got, want, "member {k}"),
                        None => assert!(matches!(got, Value::Any(_)), "member {k}"),
                    }
                }
            }
            1 => {
                for (k, v) in &ev.attrs {
                    assert!(
                        !k.is_empty() && input.contains(k.as_str()),
                        "logfmt key {k}"
                    );
                    // Strings, and `true` for a bare key.
                    assert!(
                        matches!(v, Value::Str(_) | Value::Bool(true)),
                        "logfmt gave {v:?}"
                    );
                }
            }
            2 => {
                let caps = regex.captures(&input);
                assert_eq!(flow == Flow::Next, caps.is_some(), "regex");
                if let Some(c) = caps {
                    for name in ["key", "value", "rest"] {
                        let Some(m) = c.name(name) else { continue };
                        if body_key.as_deref() == Some(name) {
                            continue;
                        }
                        assert_eq!(ev.attr(name), Some(&Value::Str(m.as_str().to_string())));
                    }
                }
            }
            _ => {
                if flow == Flow::Next {
                    // MSG is a part of the line.
                    assert!(
                        input.contains(ev.body.as_ref()),
                        "syslog body {:?}",
                        ev.body
                    );
                }
                if ev.severity_number != 0 {
                    let code = match ev.attr("syslog.severity") {
                        Some(Value::Int(s)) => u8::try_from(*s).expect("a severity 0-7"),
                        other => panic!("a severity without syslog.severity: {other:?}"),
                    };
                    assert_eq!(
                        severity::otel(code),
                        Some((ev.severity_number, ev.severity_text.as_ref())),
                        "one severity table"
                    );
                }
            }
        }
    }
}

pub mod journald_mapping {
    //! The journald source's mapping of entries into one batch, read back
    //! with the log's own decoder.

    use holdfast::event::{Decoder, Record};
    use holdfast::fuzzing::{journald_batch, JournalEntry, JOURNALD_DEFAULT_FIELDS};
    use holdfast::syslog_format::severity;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue};

    const EXTRA: [&str; 3] = ["X_TRACE", "MESSAGE", "_PID"];

    /// Entries are separated by `0x1e`, at most 8; an entry's first line
    /// is its cursor, each next line a `NAME=value` field (value bytes
    /// until the line's end).
    pub fn entries(data: &[u8]) -> Vec<JournalEntry> {
        data.split(|&b| b == 0x1e)
            .take(8)
            .enumerate()
            .map(|(i, e)| {
                let mut lines = e.split(|&b| b == b'\n');
                let cursor = String::from_utf8_lossy(lines.next().unwrap_or_default()).into_owned();
                let fields = lines
                    .filter_map(|l| {
                        let eq = l.iter().position(|&b| b == b'=')?;
                        Some((l[..eq].to_vec(), l[eq + 1..].to_vec()))
                    })
                    .collect();
                JournalEntry {
                    cursor,
                    realtime_us: 1_700_000_000_000_000 + i as u64 * 1000 + e.len() as u64,
                    fields,
                }
            })
            .collect()
    }

    /// The value the mapping gives a field: a string if UTF-8, else bytes.
    fn text_or_bytes(v: &[u8]) -> any_value::Value {
        match std::str::from_utf8(v) {
            Ok(s) => any_value::Value::StringValue(s.to_string()),
            Err(_) => any_value::Value::BytesValue(v.to_vec()),
        }
    }

    fn last<'e>(e: &'e JournalEntry, name: &str) -> Option<&'e [u8]> {
        e.fields
            .iter()
            .rev()
            .find(|(n, _)| n == name.as_bytes())
            .map(|(_, v)| v.as_slice())
    }

    pub fn check(data: &[u8]) {
        let entries = entries(data);
        let extra: Vec<String> = EXTRA.iter().map(|s| s.to_string()).collect();
        let (framed, context, ids) = journald_batch(&entries, &extra, 42);
        let (again, context_again, ids_again) = journald_batch(&entries, &extra, 42);
        assert_eq!(
            (&framed, &context, &ids),
            (&again, &context_again, &ids_again),
            "deterministic"
        );

        let context = bytes::Bytes::from(context);
        let mut dec = Decoder::new();
        let mut at = 0;
        for (i, e) in entries.iter().enumerate() {
            let len = u32::from_le_bytes(framed[at..at + 4].try_into().unwrap()) as usize;
            let ev = dec
                .decode(&framed[at + 4..at + 4 + len], &context, i as u64)
                .expect("every mapped entry decodes");
            at += 4 + len;
            assert_eq!(ev.id, ids[i]);
            assert_eq!(ev.source(), "journal");
            let Some(Record::Log(r)) = &ev.env.record else {
                panic!("a log record")
            };
            assert_eq!(r.time_unix_nano, e.realtime_us * 1000);
            assert_eq!(
                r.body.as_ref().and_then(|b| b.value.clone()),
                last(e, "MESSAGE").map(text_or_bytes)
            );
            let sev = last(e, "PRIORITY")
                .and_then(|p| std::str::from_utf8(p).ok()?.parse::<u8>().ok())
                .and_then(severity::otel);
            assert_eq!(
                (r.severity_number, r.severity_text.as_str()),
                sev.unwrap_or((0, ""))
            );
            let host = ev
                .resource()
                .and_then(|res| res.attributes.iter().find(|a| a.key == "host.name"))
                .and_then(|a| a.value.clone());
            let want_host = last(e, "_HOSTNAME")
                .and_then(|h| std::str::from_utf8(h).ok())
                .map(|h| AnyValue {
                    value: Some(any_value::Value::StringValue(h.to_string())),
                });
            assert_eq!(host, want_host);
            let names = JOURNALD_DEFAULT_FIELDS.iter().chain(&["X_TRACE"]);
            let want: Vec<(String, any_value::Value)> = names
                .filter_map(|n| {
                    let v = last(e, n)?;
                    let pid = (*n == "_PID")
                        .then(|| std::str::from_utf8(v).ok()?.parse::<i64>().ok())
                        .flatten();
                    Some((
                        n.to_string(),
                        pid.map_or_else(|| text_or_bytes(v), any_value::Value::IntValue),
                    ))
                })
                .collect();
            let got: Vec<(String, any_value::Value)> = r
                .attributes
                .iter()
                .map(|a| {
                    (
                        a.key.clone(),
                        a.value.clone().and_then(|v| v.value).expect("a value"),
                    )
                })
                .collect();
            assert_eq!(got, want);
        }
        assert_eq!(at, framed.len(), "one event per entry, nothing more");
    }
}

pub mod file_lines {
    //! The file source's line splitting (any cut into reads, the partial
    //! line's cap) and its multiline join.

    use holdfast::fuzzing::{join_multiline, split_lines, FileLine};

    /// The lines of `data` read independently: split at `\n`, one `\r`
    /// before it (or at the very end) dropped, the unfinished last line
    /// as the flush gives it.
    fn oracle(data: &[u8]) -> Vec<FileLine> {
        let mut out = Vec::new();
        let mut start = 0usize;
        while start < data.len() {
            let (content_end, end) = match data[start..].iter().position(|&b| b == b'\n') {
                Some(k) => (start + k, start + k + 1),
                None => (data.len(), data.len()),
            };
            let mut content = &data[start..content_end];
            if content.last() == Some(&b'\r') {
                content = &content[..content.len() - 1];
            }
            out.push(FileLine {
                bytes: content.to_vec(),
                start: start as u64,
                end: end as u64,
                len: content.len() as u64,
            });
            start = end;
        }
        out
    }

    /// Byte 0: the cap on a partial line (`% 64 + 1`); byte 1: the read
    /// size (`% 32 + 1`) and the multiline start pattern (`/ 32 % 2`); the
    /// rest is the file.
    pub fn check(data: &[u8]) {
        let [a, b, file @ ..] = data else { return };
        let keep = usize::from(a % 64) + 1;
        let step = usize::from(b % 32) + 1;
        let want = oracle(file);

        let whole = split_lines(file, file.len().max(1), keep);
        let pieces = split_lines(file, step, keep);
        for got in [&whole, &pieces] {
            assert_eq!(got.len(), want.len(), "line count");
            for (g, w) in got.iter().zip(&want) {
                assert_eq!((g.start, g.end, g.len), (w.start, w.end, w.len), "{w:?}");
                let n = g.bytes.len();
                assert_eq!(g.bytes[..], w.bytes[..n], "kept bytes are the line's");
                assert!(n >= w.bytes.len().min(keep), "kept at least the cap");
            }
        }
        // Read at once, a finished line is handed out whole.
        for (g, w) in whole.iter().zip(&want) {
            if file.get(w.end as usize - 1) == Some(&b'\n') {
                assert_eq!(g.bytes, w.bytes);
            }
        }

        static PATTERNS: std::sync::OnceLock<[regex::Regex; 2]> = std::sync::OnceLock::new();
        let patterns = PATTERNS.get_or_init(|| {
            [r"^\S", r"^\d{4}-"].map(|p| regex::Regex::new(p).expect("a valid pattern"))
        });
        let re = &patterns[usize::from(b / 32 % 2)];
        let events = join_multiline(&want, re, keep);
        // Independently: an event starts at the first line and at each
        // line the pattern matches; the others join the one before.
        let mut groups: Vec<Vec<&FileLine>> = Vec::new();
        for l in &want {
            let starts = re.is_match(&String::from_utf8_lossy(&l.bytes));
            match groups.last_mut() {
                Some(g) if !starts => g.push(l),
                _ => groups.push(vec![l]),
            }
        }
        assert_eq!(events.len(), groups.len(), "event count");
        for (e, g) in events.iter().zip(&groups) {
            let joined = g
                .iter()
                .map(|l| l.bytes.as_slice())
                .collect::<Vec<_>>()
                .join(&b'\n');
            assert_eq!((e.start, e.end), (g[0].start, g[g.len() - 1].end));
            assert_eq!(e.len, joined.len() as u64);
            assert_eq!(e.bytes, joined[..joined.len().min(keep)]);
        }
        // Events tile the file: a checkpoint never points into one.
        for w in events.windows(2) {
            assert_eq!(w[0].end, w[1].start);
        }
    }
}

pub mod quarantine_ndjson {
    //! The quarantine's NDJSON reader (`holdfast quarantine list`,
    //! `requeue`) over any file.

    use holdfast::sinks::quarantine::{read_records, Record};

    /// One file per process, rewritten for each input (on `/dev/shm` when
    /// there is one: no disk writes per input).
    fn scratch() -> std::path::PathBuf {
        let dir = std::path::Path::new("/dev/shm");
        let dir = if dir.is_dir() {
            dir.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        dir.join(format!(
            "holdfast-fuzz-quarantine-{}.ndjson",
            std::process::id()
        ))
    }

    pub fn check(data: &[u8]) {
        let path = scratch();
        std::fs::write(&path, data).expect("the scratch file");
        let got = read_records(&path).expect("a readable file reads, whatever it holds");
        let _ = std::fs::remove_file(&path);
        // One result per line that is not blank, in order, with its number.
        let lines: Vec<(usize, &[u8])> = data
            .split(|&b| b == b'\n')
            .enumerate()
            .filter(|(_, l)| !String::from_utf8_lossy(l).trim().is_empty())
            .collect();
        assert_eq!(got.len(), lines.len(), "one result per line");
        for (r, (i, line)) in got.iter().zip(&lines) {
            match r {
                Ok(rec) => {
                    // A record round-trips and fits one line.
                    let text = serde_json::to_string(rec).expect("a record serializes");
                    assert!(!text.contains('\n'));
                    let back: Record = serde_json::from_str(&text).expect("and reads back");
                    assert_eq!(&back, rec);
                    assert!(std::str::from_utf8(line).is_ok());
                }
                Err(e) => assert!(
                    e.contains(&format!(":{}:", i + 1)),
                    "{e} names line {}",
                    i + 1
                ),
            }
        }
    }
}

pub mod prometheus_text {
    //! The `prometheus_scrape` source's parser (the text format and
    //! OpenMetrics) and its conversion to OTLP, over arbitrary bytes: never
    //! a panic, the bounds held, every sample line counted, an error on a
    //! line that exists.

    use holdfast::fuzzing::prometheus_exposition;

    /// The sample lines an independent reading counts: not blank, not a
    /// comment.
    fn sample_lines(body: &str, openmetrics: bool) -> usize {
        let body = body.strip_suffix('\n').unwrap_or(body);
        if body.is_empty() {
            return 0;
        }
        body.split('\n')
            .map(|l| l.strip_suffix('\r').unwrap_or(l))
            .filter(|l| {
                let l = if openmetrics { *l } else { l.trim_start() };
                !l.trim().is_empty() && !l.starts_with('#')
            })
            .count()
    }

    /// The first byte: bit 0 the format, bits 1-7 small bounds; the rest
    /// the body (not UTF-8: the source refuses it before parsing).
    pub fn check(data: &[u8]) {
        let Some((&selector, rest)) = data.split_first() else {
            return;
        };
        let Ok(body) = std::str::from_utf8(rest) else {
            return;
        };
        let openmetrics = selector & 1 == 1;
        let small = selector & 2 == 2;
        let (max_samples, max_labels, max_label_bytes) = if small {
            (1 + (selector >> 2) as usize % 8, 2, 8)
        } else {
            (100_000, 64, 4096)
        };
        let lines = body.strip_suffix('\n').unwrap_or(body).split('\n').count();
        match prometheus_exposition(body, openmetrics, max_samples, max_labels, max_label_bytes) {
            Ok((samples, points)) => {
                assert!(
                    samples <= max_samples,
                    "{samples} samples over {max_samples}"
                );
                assert_eq!(
                    samples,
                    sample_lines(body, openmetrics),
                    "sample lines of {body:?}"
                );
                // Histogram and summary series fold into one point each;
                // _created lines are start times.
                assert!(
                    points as usize <= samples,
                    "{points} points from {samples} samples"
                );
            }
            Err((line, message)) => {
                assert!(line <= lines, "error at line {line} of {lines}: {message}");
                assert!(!message.is_empty());
            }
        }
    }
}
