//! Processing before the append (issue 17), through the real binary: each
//! processor on real Loghub samples, ids and sampling decisions stable
//! across kill -9, bad patterns as config errors, and `holdfast check`
//! describing and trying a chain.

#[path = "common/daemon.rs"]
mod daemon;

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::time::Duration;

use daemon::{holdfast, wait_for, Agent};
use holdfast::event::EventId;
use holdfast::process::filter::Condition;
use holdfast::process::sample::Sample;
use serde_json::Value;

const T: Duration = Duration::from_secs(60);

fn loghub(name: &str) -> String {
    fs::read_to_string(format!(
        "{}/tests/fixtures/loghub/{name}_2k.log",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("a loghub fixture")
}

/// The events in the agent's log, in order (`holdfast dump`).
fn dump(a: &Agent) -> Vec<Value> {
    let out = holdfast(&["dump", "--config", a.config_arg()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("dump prints JSON lines"))
        .collect()
}

/// At most `limit` events from sequence number `from`.
fn dump_from(a: &Agent, from: u64, limit: u64) -> Vec<Value> {
    let out = holdfast(&[
        "dump",
        "--config",
        a.config_arg(),
        "--from",
        &from.to_string(),
        "--limit",
        &limit.to_string(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("dump prints JSON lines"))
        .collect()
}

fn of_source<'a>(events: &'a [Value], source: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["source"] == source).collect()
}

fn body(e: &Value) -> &str {
    e["record"]["body"]["stringValue"].as_str().unwrap_or("")
}

/// A record attribute's value as text (string, int or bool).
fn attr(e: &Value, key: &str) -> Option<String> {
    attr_in(&e["record"]["attributes"], key)
}

fn attr_in(list: &Value, key: &str) -> Option<String> {
    let kv = list.as_array()?.iter().find(|kv| kv["key"] == key)?;
    let v = &kv["value"];
    v["stringValue"]
        .as_str()
        .map(str::to_string)
        .or_else(|| v["intValue"].as_str().map(str::to_string))
        .or_else(|| v["intValue"].as_i64().map(|i| i.to_string()))
        .or_else(|| v["boolValue"].as_bool().map(|b| b.to_string()))
}

/// The sum of the `/metrics` samples of `name` whose labels contain every
/// one of `labels`.
fn metric_sum(a: &Agent, name: &str, labels: &[&str]) -> f64 {
    a.metrics()
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| labels.iter().all(|x| l.contains(x)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits until every line of `source` is either in the log or counted as
/// dropped by a rule.
fn wait_all(a: &Agent, source: &str, lines: usize) {
    let s = format!("source=\"{source}\"");
    wait_for(&format!("all {lines} lines of {source}"), T, || {
        let appended = metric_sum(a, "holdfast_source_events_total", &[&s]);
        let dropped = metric_sum(
            a,
            "holdfast_processed_events_total",
            &[&s, "outcome=\"dropped\""],
        ) + metric_sum(
            a,
            "holdfast_processed_events_total",
            &[&s, "outcome=\"sampled_out\""],
        );
        (appended + dropped >= lines as f64).then_some(())
    });
}

fn fingerprint(e: &Value) -> u64 {
    u64::from_str_radix(e["origin"]["fingerprint"].as_str().expect("an origin"), 16)
        .expect("hex fingerprint")
}

/// Line start offsets of `text`, with the lines.
fn offsets(text: &str) -> Vec<(u64, &str)> {
    let mut at = 0u64;
    text.split_inclusive('\n')
        .map(|l| {
            let o = at;
            at += l.len() as u64;
            (o, l.trim_end_matches('\n'))
        })
        .collect()
}

#[test]
fn each_processor_on_loghub_samples() {
    let mut a = Agent::new("");
    let dir = a.path("in");
    fs::create_dir_all(&dir).unwrap();

    // Apache's own format: regex, strptime time, severity, keep errors.
    let apache = loghub("Apache");
    fs::write(dir.join("apache.log"), &apache).unwrap();
    let errors = apache.lines().filter(|l| l.contains("] [error] ")).count();

    // JSON application logs (HDFS's lines as JSON), with lines that are not.
    let hdfs = loghub("HDFS");
    let mut json = String::new();
    for l in hdfs.lines() {
        let mut p = l.splitn(5, ' ');
        let (d, t, pid, level, rest) = (
            p.next().unwrap(),
            p.next().unwrap(),
            p.next().unwrap(),
            p.next().unwrap(),
            p.next().unwrap_or(""),
        );
        let (component, msg) = rest.split_once(": ").unwrap_or(("", rest));
        json.push_str(&serde_json::json!({"ts": format!("{d} {t}"), "pid": pid.parse::<i64>().unwrap(), "level": level, "component": component, "msg": msg}).to_string());
        json.push('\n');
    }
    json.push_str("not json at all\n{\"unclosed\": \n");
    fs::write(dir.join("hdfs.json"), &json).unwrap();

    // logfmt (Zookeeper's lines), dropping what is below WARN.
    let zk = loghub("Zookeeper");
    let mut logfmt = String::new();
    let mut warn_or_worse = 0;
    for l in zk.lines() {
        let (time, rest) = l.split_at(23);
        let rest = rest.trim_start_matches(" - ");
        let (level, msg) = rest.split_once(' ').unwrap();
        if level != "INFO" && level != "DEBUG" {
            warn_or_worse += 1;
        }
        logfmt.push_str(&format!(
            "time=\"{time}\" level={level} msg=\"{}\"\n",
            msg.trim().replace('\\', "\\\\").replace('"', "\\\"")
        ));
    }
    fs::write(dir.join("zk.log"), &logfmt).unwrap();

    // OpenSSH: addresses masked, half sampled by id, labels.
    let ssh = loghub("OpenSSH");
    fs::write(dir.join("ssh.log"), &ssh).unwrap();

    let d = dir.display();
    let cfg = format!(
        r#"
[sources.apache]
type = "file"
include = ["{d}/apache.log"]
start_at = "beginning"

[[sources.apache.process.steps]]
type = "regex"
pattern = '^\[(?P<time>[^\]]+)\] \[(?P<level>\w+)\] (?P<msg>.*)$'
body_key = "msg"

[[sources.apache.process.steps]]
type = "timestamp"
field = "time"
format = "%a %b %d %H:%M:%S %Y"

[[sources.apache.process.steps]]
type = "severity"
field = "level"

[[sources.apache.process.steps]]
type = "filter"
name = "errors_only"
action = "keep"
severity_at_least = "error"

[sources.hdfs]
type = "file"
include = ["{d}/hdfs.json"]
start_at = "beginning"

[[sources.hdfs.process.steps]]
type = "json"
name = "app_json"
body_key = "msg"

[[sources.hdfs.process.steps]]
type = "timestamp"
field = "ts"
format = "%y%m%d %H%M%S"
timezone = "+01:00"

[[sources.hdfs.process.steps]]
type = "severity"
field = "level"

[sources.zk]
type = "file"
include = ["{d}/zk.log"]
start_at = "beginning"

[[sources.zk.process.steps]]
type = "logfmt"
body_key = "msg"

[[sources.zk.process.steps]]
type = "timestamp"
field = "time"
format = "%Y-%m-%d %H:%M:%S,%f"

[[sources.zk.process.steps]]
type = "severity"
field = "level"

[[sources.zk.process.steps]]
type = "filter"
name = "no_info"
severity_below = "warn"

[sources.ssh]
type = "file"
include = ["{d}/ssh.log"]
start_at = "beginning"

[sources.ssh.process]
resource = {{ site = "berlin-3", "host.name" = "gw-7" }}
attributes = {{ "device.id" = "dev-42" }}

[[sources.ssh.process.steps]]
type = "redact"
name = "ipv4"
pattern = '\b\d{{1,3}}(\.\d{{1,3}}){{3}}\b'
replacement = "x.x.x.x"

[[sources.ssh.process.steps]]
type = "sample"
name = "half"
rate = 0.5
"#
    );
    let mut f = fs::OpenOptions::new().append(true).open(&a.config).unwrap();
    f.write_all(cfg.as_bytes()).unwrap();
    a.start();
    a.wait_ready();
    wait_all(&a, "apache", 2000);
    wait_all(&a, "hdfs", 2002);
    wait_all(&a, "zk", 2000);
    wait_all(&a, "ssh", 2000);
    let events = dump(&a);

    // apache
    let ap = of_source(&events, "apache");
    assert_eq!(ap.len(), errors);
    for e in &ap {
        assert_eq!(e["record"]["severityNumber"], 17, "{e}");
        assert_eq!(e["record"]["severityText"], "error");
        assert!(!body(e).contains("] [error] "), "{e}");
        assert!(attr(e, "holdfast.unparsed").is_none(), "{e}");
    }
    // [Sun Dec 04 04:47:44 2005] [error] mod_jk child workerEnv in error state 6
    assert_eq!(ap[0]["record"]["timeUnixNano"], "1133671664000000000");
    assert_eq!(body(ap[0]), "mod_jk child workerEnv in error state 6");
    assert_eq!(
        metric_sum(
            &a,
            "holdfast_processed_events_total",
            &[
                "source=\"apache\"",
                "rule=\"errors_only\"",
                "outcome=\"dropped\""
            ]
        ),
        (2000 - errors) as f64
    );

    // hdfs: every line kept, the two that are not JSON whole and marked.
    let hd = of_source(&events, "hdfs");
    assert_eq!(hd.len(), 2002);
    assert_eq!(
        body(hd[0]),
        "PacketResponder 1 for block blk_38865049064139660 terminating"
    );
    assert_eq!(attr(hd[0], "pid").as_deref(), Some("148"));
    assert_eq!(
        attr(hd[0], "component").as_deref(),
        Some("dfs.DataNode$PacketResponder")
    );
    assert_eq!(attr(hd[0], "log.file.name").as_deref(), Some("hdfs.json"));
    // 081109 203615 at +01:00
    assert_eq!(hd[0]["record"]["timeUnixNano"], "1226259375000000000");
    assert_eq!(hd[0]["record"]["severityNumber"], 9);
    assert_eq!(body(hd[2000]), "not json at all");
    assert_eq!(
        attr(hd[2000], "holdfast.unparsed").as_deref(),
        Some("app_json")
    );
    assert_eq!(body(hd[2001]), "{\"unclosed\": ");
    assert_eq!(
        metric_sum(
            &a,
            "holdfast_processed_events_total",
            &[
                "source=\"hdfs\"",
                "rule=\"app_json\"",
                "outcome=\"unparsed\""
            ]
        ),
        2.0
    );

    // zk: only WARN and worse, times with milliseconds.
    let z = of_source(&events, "zk");
    assert_eq!(z.len(), warn_or_worse);
    assert!(z
        .iter()
        .all(|e| e["record"]["severityNumber"].as_i64() >= Some(13)));
    assert!(z[0]["record"]["timeUnixNano"]
        .as_str()
        .is_some_and(|t| t.ends_with("000000") && !t.ends_with("000000000")));

    // ssh: no address reaches the log; half kept, decided by id; labels.
    let s = of_source(&events, "ssh");
    let ip = regex::Regex::new(r"\b\d{1,3}(\.\d{1,3}){3}\b").unwrap();
    assert!(s.iter().all(|e| !ip.is_match(body(e))));
    assert!(s.iter().any(|e| body(e).contains("x.x.x.x")));
    let fp = fingerprint(s[0]);
    let rule = Sample::new(0.5, Condition::default(), "half");
    let want: Vec<u64> = offsets(&ssh)
        .into_iter()
        .filter(|(o, _)| rule.keeps(&EventId::for_file_line(fp, 0, *o).0))
        .map(|(o, _)| o)
        .collect();
    let got: Vec<u64> = s
        .iter()
        .map(|e| e["origin"]["offset"].as_u64().unwrap())
        .collect();
    assert_eq!(got, want);
    assert!((800..1200).contains(&got.len()), "{}", got.len());
    assert_eq!(
        attr_in(&s[0]["resource"]["attributes"], "site").as_deref(),
        Some("berlin-3")
    );
    assert_eq!(
        attr_in(&s[0]["resource"]["attributes"], "host.name").as_deref(),
        Some("gw-7")
    );
    assert_eq!(attr(s[0], "device.id").as_deref(), Some("dev-42"));
    assert_eq!(
        metric_sum(
            &a,
            "holdfast_processed_events_total",
            &["source=\"ssh\"", "rule=\"half\"", "outcome=\"sampled_out\""]
        ),
        (2000 - want.len()) as f64
    );
    assert!(
        metric_sum(
            &a,
            "holdfast_processed_events_total",
            &["source=\"ssh\"", "rule=\"ipv4\"", "outcome=\"redacted\""]
        ) > 1000.0
    );
    assert!(a.stop().success());
}

/// The `syslog` parse step on Loghub's Linux sample, as syslogd wrote it
/// (no `<PRI>`): every line read from its timestamp on, the MSG part the
/// body, the host and the tag's pid as attributes; a line that is not
/// syslog kept whole and counted.
#[test]
fn syslog_step_reads_a_syslog_file() {
    let mut a = Agent::new("");
    let dir = a.path("in");
    fs::create_dir_all(&dir).unwrap();
    let mut linux = loghub("Linux");
    if !linux.ends_with('\n') {
        linux.push('\n');
    }
    linux.push_str("not a syslog line\n");
    fs::write(dir.join("syslog"), &linux).unwrap();
    let d = dir.display();
    let cfg = format!(
        r#"
[sources.sys]
type = "file"
include = ["{d}/syslog"]
start_at = "beginning"

[[sources.sys.process.steps]]
type = "syslog"
name = "syslog"
timezone = "UTC"
"#
    );
    let mut f = fs::OpenOptions::new().append(true).open(&a.config).unwrap();
    f.write_all(cfg.as_bytes()).unwrap();
    a.start();
    a.wait_ready();
    wait_all(&a, "sys", 2001);
    let events = dump(&a);
    let sys = of_source(&events, "sys");
    assert_eq!(sys.len(), 2001);
    for (e, line) in sys.iter().zip(linux.lines()) {
        if line == "not a syslog line" {
            assert_eq!(body(e), line);
            assert_eq!(attr(e, "holdfast.unparsed").as_deref(), Some("syslog"));
            continue;
        }
        // "Jun 14 15:16:01 combo sshd(pam_unix)[19939]: check pass; user unknown"
        assert!(attr(e, "holdfast.unparsed").is_none(), "{e}");
        assert_eq!(attr(e, "syslog.hostname").as_deref(), Some("combo"), "{e}");
        assert!(line.ends_with(body(e)), "{line} / {e}");
        assert!(body(e).len() < line.len() - 16, "{e}");
        assert_ne!(e["record"]["timeUnixNano"], serde_json::Value::Null, "{e}");
    }
    let first = sys[0];
    assert!(
        body(first).starts_with("authentication failure; logname="),
        "{first}"
    );
    assert_eq!(
        attr(first, "syslog.app_name").as_deref(),
        Some("sshd(pam_unix)")
    );
    assert_eq!(attr(first, "syslog.proc_id").as_deref(), Some("19939"));
    assert_eq!(
        metric_sum(
            &a,
            "holdfast_processed_events_total",
            &["source=\"sys\"", "rule=\"syslog\"", "outcome=\"unparsed\""]
        ),
        1.0
    );
    assert!(a.stop().success());
}

/// `{"a":{"a":...{"a":1}...}}` with `depth` objects in all.
fn nested_json(depth: usize) -> String {
    format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth))
}

/// `holdfast dump`'s lines as text: values nested past serde_json's own
/// recursion limit cannot be read as `Value`s.
fn dump_lines(a: &Agent) -> Vec<String> {
    let out = holdfast(&["dump", "--config", a.config_arg()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// A line nested deeper than the `json` step's `max_depth` (32 by default,
/// the most a protobuf decoder takes) is kept whole, marked and counted;
/// one within it is stored to its last level (the step once cut a 60-deep
/// value to 9 levels ending in `{}`, unmarked and uncounted).
#[test]
fn json_step_keeps_lines_past_max_depth_whole() {
    let mut a = Agent::new("");
    let dir = a.path("in");
    fs::create_dir_all(&dir).unwrap();
    let lines = [
        nested_json(8),
        nested_json(32),
        nested_json(33),
        nested_json(60),
    ];
    fs::write(dir.join("app.json"), lines.join("\n") + "\n").unwrap();
    let d = dir.display();
    let cfg = format!(
        r#"
[sources.dflt]
type = "file"
include = ["{d}/app.json"]
start_at = "beginning"

[[sources.dflt.process.steps]]
type = "json"
name = "deep"

[sources.narrow]
type = "file"
include = ["{d}/app.json"]
start_at = "beginning"

[[sources.narrow.process.steps]]
type = "json"
name = "deep"
max_depth = 8
"#
    );
    let mut f = fs::OpenOptions::new().append(true).open(&a.config).unwrap();
    f.write_all(cfg.as_bytes()).unwrap();
    a.start();
    a.wait_ready();
    wait_all(&a, "dflt", lines.len());
    wait_all(&a, "narrow", lines.len());
    let dumped = dump_lines(&a);
    let unparsed = r#"{"key":"holdfast.unparsed","value":{"stringValue":"deep"}}"#;
    for (source, parsed) in [("dflt", 2), ("narrow", 1)] {
        let events: Vec<&String> = dumped
            .iter()
            .filter(|l| l.contains(&format!(r#""source":"{source}""#)))
            .collect();
        assert_eq!(events.len(), lines.len(), "{source}");
        for (i, (e, line)) in events.iter().zip(&lines).enumerate() {
            if i < parsed {
                // Every level there, the last one holding its 1.
                let depth = line.matches('{').count();
                assert_eq!(e.matches("kvlistValue").count(), depth - 1, "{e}");
                assert!(e.contains(r#"{"key":"a","value":{"intValue":"1"}}"#), "{e}");
                assert!(!e.contains("holdfast.unparsed"), "{e}");
            } else {
                assert!(!e.contains("kvlistValue"), "{e}");
                assert!(e.contains(unparsed), "{e}");
                let want = serde_json::to_string(line).unwrap();
                assert!(
                    e.contains(&format!(r#""body":{{"stringValue":{want}}}"#)),
                    "{e}"
                );
            }
        }
        assert_eq!(
            metric_sum(
                &a,
                "holdfast_processed_events_total",
                &[
                    &format!("source=\"{source}\""),
                    "rule=\"deep\"",
                    "outcome=\"unparsed\""
                ],
            ),
            (lines.len() - parsed) as f64,
            "{source}"
        );
    }
    assert!(a.stop().success());
}

#[test]
fn json_max_depth_past_what_protobuf_decodes_is_a_config_error() {
    let (ok, _, err) = check(
        r#"[sources.app]
type = "file"
include = ["/var/log/app.log"]

[[sources.app.process.steps]]
type = "json"
max_depth = 64
"#,
        &[],
    );
    assert!(!ok, "{err}");
    assert!(
        err.contains("sources.app.process.steps[0].max_depth"),
        "{err}"
    );
    assert!(err.contains("from 1 to 32"), "{err}");
}

/// Promise 4 with sampling on: a line re-read after kill -9 gets the same
/// id and the same decision, so the log holds exactly the lines the rule
/// keeps (some perhaps twice, never a different one, never one missing).
#[test]
fn sampled_ids_survive_kill_9() {
    let mut a = Agent::new("");
    let file = a.path("app.log");
    let bgl = loghub("BGL");
    let base: Vec<&str> = bgl.lines().map(|l| &l[..l.len().min(120)]).collect();
    let text = |from: usize, n: usize| -> String {
        (from..from + n)
            .map(|i| format!("{i} {}\n", base[i % base.len()]))
            .collect()
    };
    let first = text(0, 100_000);
    fs::write(&file, &first).unwrap();
    let cfg = format!(
        r#"
[log]
segment_size = "1MiB"

[sources.app]
type = "file"
include = ["{}"]
start_at = "beginning"

[[sources.app.process.steps]]
type = "regex"
pattern = '^(?P<n>\d+) (?P<rest>.*)$'

[[sources.app.process.steps]]
type = "sample"
name = "thirty"
rate = 0.3
"#,
        file.display()
    );
    let mut f = fs::OpenOptions::new().append(true).open(&a.config).unwrap();
    f.write_all(cfg.as_bytes()).unwrap();
    a.start();
    a.wait_ready();
    wait_for("some events appended", T, || {
        (metric_sum(&a, "holdfast_source_events_total", &["source=\"app\""]) > 0.0).then_some(())
    });
    a.kill9();
    let second = text(100_000, 20_000);
    fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap()
        .write_all(second.as_bytes())
        .unwrap();
    let all = format!("{first}{second}");
    let before = dump(&a).len();
    a.start();
    a.wait_ready();
    let rule = Sample::new(0.3, Condition::default(), "thirty");
    // Only the last event is read while waiting: dumping the whole log on
    // every poll costs more than the source's work on a loaded machine.
    let fp = fingerprint(&dump_from(&a, 0, 1)[0]);
    let want_last = offsets(&all)
        .into_iter()
        .rev()
        .find(|(o, _)| rule.keeps(&EventId::for_file_line(fp, 0, *o).0))
        .unwrap()
        .0;
    wait_for(
        "every kept line in the log",
        Duration::from_secs(120),
        || {
            let next = a.inspect_json()["next_seq"].as_u64()?;
            let last = dump_from(&a, next.checked_sub(1)?, 1).pop()?;
            (last["origin"]["offset"].as_u64() == Some(want_last)).then_some(())
        },
    );
    let events = dump(&a);
    let lines: BTreeMap<u64, &str> = offsets(&all).into_iter().collect();
    let mut seen: BTreeMap<u64, (String, String)> = BTreeMap::new();
    let mut repeats = 0;
    for e in &events {
        let o = e["origin"]["offset"].as_u64().unwrap();
        let id = e["id"].as_str().unwrap().to_string();
        assert_eq!(id, EventId::for_file_line(fp, 0, o).to_hex(), "{e}");
        assert!(
            rule.keeps(&EventId::for_file_line(fp, 0, o).0),
            "a line the rule drops is in the log: {e}"
        );
        let line = lines[&o];
        assert_eq!(body(e), line);
        let n = line.split(' ').next().unwrap().to_string();
        assert_eq!(attr(e, "n"), Some(n.clone()));
        if let Some(prev) = seen.insert(o, (id.clone(), n)) {
            assert_eq!(prev.0, id);
            repeats += 1;
        }
    }
    let want: Vec<u64> = lines
        .keys()
        .copied()
        .filter(|o| rule.keeps(&EventId::for_file_line(fp, 0, *o).0))
        .collect();
    assert_eq!(
        seen.keys().copied().collect::<Vec<_>>(),
        want,
        "kept lines missing or extra"
    );
    println!(
        "kill -9 after {before} events: {} of {} lines kept, {repeats} appended twice",
        want.len(),
        lines.len()
    );
    assert!(a.stop().success());
}

fn check(body: &str, extra: &[&str]) -> (bool, String, String) {
    let a = Agent::new(body);
    let mut args = vec!["check", "--offline", "--config", a.config_arg()];
    args.extend_from_slice(extra);
    let out = holdfast(&args);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_patterns_are_config_errors_with_key_line_and_position() {
    let (ok, _, err) = check(
        r#"[sources.app]
type = "file"
include = ["/var/log/app.log"]

[[sources.app.process.steps]]
type = "regex"
pattern = '(?P<x>[a-z'

[[sources.app.process.steps]]
type = "timestamp"
field = "t"
format = "%Y-%m-%d %Q"

[[sources.app.process.steps]]
type = "json"
pattern = "x"

[[sources.app.process.steps]]
type = "filter"
body_matches = 'a)'

[[sources.app.process.steps]]
type = "sample"
rate = 2
"#,
        &[],
    );
    assert!(!ok, "{err}");
    // The harness writes 8 lines before the body.
    for (key, line, what) in [
        ("sources.app.process.steps[0].pattern", 15, "^"),
        ("sources.app.process.steps[1].format", 20, "position 9"),
        (
            "sources.app.process.steps[2].pattern",
            24,
            "does not apply to a \"json\" step",
        ),
        (
            "sources.app.process.steps[3].body_matches",
            28,
            "unopened group",
        ),
        ("sources.app.process.steps[4].rate", 32, "fraction kept"),
    ] {
        let d = err
            .split("\nerror")
            .find(|d| d.contains(key))
            .unwrap_or_else(|| panic!("no error about {key}: {err}"));
        assert!(
            d.contains(&format!(":{line}:")),
            "{key} not at line {line}: {d}"
        );
        assert!(d.contains(what), "{key}: {what}: {d}");
    }
}

#[test]
fn check_describes_the_chain_and_runs_it_on_a_sample() {
    let body = r#"[sources.app]
type = "file"
include = ["/var/log/app.log"]

[sources.app.process]
resource = { site = "berlin-3" }

[[sources.app.process.steps]]
type = "json"
body_key = "msg"

[[sources.app.process.steps]]
type = "severity"
field = "level"

[[sources.app.process.steps]]
type = "filter"
name = "no_debug"
severity_below = "info"
"#;
    let (ok, out, err) = check(body, &[]);
    assert!(ok, "{err}");
    assert!(
        out.contains("labels the resource: site=\"berlin-3\""),
        "{out}"
    );
    assert!(
        out.contains("3. no_debug: drop events where severity below 9"),
        "{out}"
    );

    let a = Agent::new(body);
    let sample = a.path("sample.log");
    fs::write(
        &sample,
        "{\"msg\":\"up\",\"level\":\"info\"}\n{\"msg\":\"x\",\"level\":\"debug\"}\nplain\n",
    )
    .unwrap();
    let out = holdfast(&[
        "check",
        "--config",
        a.config_arg(),
        "--sample",
        sample.to_str().unwrap(),
        "--source",
        "app",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["body"], "up");
    assert_eq!(lines[0]["severityNumber"], 9);
    assert_eq!(lines[0]["resource"]["site"], "berlin-3");
    assert_eq!(lines[1]["dropped_by"], "no_debug");
    assert_eq!(lines[2]["attributes"]["holdfast.unparsed"], "json_0");
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("3 lines through sources.app.process: 2 kept (1 unparsed), 1 dropped"));
    let out = holdfast(&[
        "check",
        "--config",
        a.config_arg(),
        "--sample",
        sample.to_str().unwrap(),
        "--source",
        "nope",
    ]);
    assert_eq!(out.status.code(), Some(2));
}

/// A plain HTTP/1.1 POST on loopback: the status.
fn http_post(
    addr: std::net::SocketAddr,
    path: &str,
    content_type: &str,
    body: &str,
) -> Option<u16> {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    buf.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn otlp_log_records_are_processed_before_the_append() {
    let port = daemon::free_port();
    let mut a = Agent::new(&format!(
        r#"
[sources.otlp]
type = "otlp_http"
listen = "127.0.0.1:{port}"

[sources.otlp.process]
resource = {{ site = "berlin-3" }}

[[sources.otlp.process.steps]]
type = "json"
body_key = "msg"

[[sources.otlp.process.steps]]
type = "severity"
field = "level"

[[sources.otlp.process.steps]]
type = "filter"
name = "no_debug"
severity_below = "info"
"#
    ));
    a.start();
    a.wait_ready();
    let rec = |line: &str| serde_json::json!({"body": {"stringValue": line}, "attributes": [{"key": "k", "value": {"intValue": "7"}}]});
    let request = serde_json::json!({"resourceLogs": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "app"}}]},
        "scopeLogs": [{"scope": {"name": "s"}, "logRecords": [
            rec(r#"{"msg":"up","level":"info"}"#), rec(r#"{"msg":"x","level":"debug"}"#), rec("plain")]}]}]});
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    assert_eq!(
        http_post(addr, "/v1/logs", "application/json", &request.to_string()),
        Some(200)
    );
    let events = dump(&a);
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(body(&events[0]), "up");
    assert_eq!(events[0]["record"]["severityNumber"], 9);
    assert_eq!(attr(&events[0], "k").as_deref(), Some("7"));
    assert_eq!(
        attr_in(&events[0]["resource"]["attributes"], "site").as_deref(),
        Some("berlin-3")
    );
    assert_eq!(
        attr_in(&events[0]["resource"]["attributes"], "service.name").as_deref(),
        Some("app")
    );
    assert_eq!(body(&events[1]), "plain");
    assert_eq!(
        attr(&events[1], "holdfast.unparsed").as_deref(),
        Some("json_0")
    );
    assert_eq!(
        metric_sum(
            &a,
            "holdfast_processed_events_total",
            &[
                "source=\"otlp\"",
                "rule=\"no_debug\"",
                "outcome=\"dropped\""
            ]
        ),
        1.0
    );
    assert!(a.stop().success());
}
