//! Broken, empty and hostile config files (design promise 10): each row is a
//! config file, what `holdfast check` answers (exit code and the words of
//! its finding: file, line, column, key) and what `holdfast run` does with
//! the same file: refuse it with the same finding and exit code, or start
//! and keep serving. No row may crash the binary, leave it hanging, or print
//! a finding twice.

#[path = "common/daemon.rs"]
mod daemon;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use daemon::{free_port, http_get, wait_for, Agent, BIN};

/// How `holdfast run` must answer a row's file.
enum Run {
    /// Refused before anything starts: this exit code and the same words.
    Refused(i32),
    /// Refused at start-up with exit 1 and these words instead.
    Fails(Vec<&'static str>),
    /// Not run: the file leaves data_dir and the API at their defaults,
    /// which a test must not touch.
    Skip,
}

struct Row {
    name: &'static str,
    /// The file; `{dir}` is the test directory and `{api}` a free address.
    text: Vec<u8>,
    /// `holdfast check`'s exit code.
    check: i32,
    /// Words that must be on one line of check's output: `{file}` is the
    /// config's path.
    words: Vec<&'static str>,
    run: Run,
}

fn row(name: &'static str, text: &str, words: &[&'static str], run: Run) -> Row {
    Row {
        name,
        text: text.as_bytes().to_vec(),
        check: 2,
        words: words.to_vec(),
        run,
    }
}

/// `data_dir` and `[api]` set, so `run` touches only the test directory.
const HEAD: &str = "data_dir = \"{dir}/data\"\n[api]\nlisten = \"{api}\"\n";

fn with_head(body: &str) -> String {
    format!("{HEAD}{body}")
}

fn rows() -> Vec<Row> {
    vec![
        Row {
            check: 0,
            ..row(
                "an empty file",
                "",
                &["will start", "collect nothing"],
                Run::Skip,
            )
        },
        Row {
            check: 0,
            ..row(
                "only comments and blank lines",
                "  \n\n# holdfast.toml\n\t\n",
                &["will start", "collect nothing"],
                Run::Skip,
            )
        },
        Row {
            text: [
                with_head("[log]\nfsync = \"al").as_bytes(),
                b"\xe9ways\"\n",
            ]
            .concat(),
            ..row(
                "a file that is not UTF-8",
                "",
                &["{file}:5:12:", "not valid UTF-8", "byte 0xe9", "iconv"],
                Run::Refused(2),
            )
        },
        Row {
            text: [
                with_head("[log]\nfsync = \"always\"").as_bytes(),
                b"\0\n",
            ]
            .concat(),
            ..row(
                "a NUL byte",
                "",
                &["{file}:5:17:", "invalid TOML"],
                Run::Refused(2),
            )
        },
        Row {
            text: std::fs::read(
                Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/otlp/logs.pb.gz"),
            )
            .unwrap(),
            ..row(
                "a binary file",
                "",
                &["{file}:1:", "not valid UTF-8"],
                Run::Refused(2),
            )
        },
        row(
            "a table header left open",
            &with_head("[log\nfsync = \"always\"\n"),
            &["{file}:4:5:", "invalid TOML", "unclosed table"],
            Run::Refused(2),
        ),
        row(
            "a key set twice",
            &with_head("[log]\nfsync = \"always\"\nfsync = \"never\"\n"),
            &["{file}:6:1:", "log.fsync", "set twice"],
            Run::Refused(2),
        ),
        row(
            "a table defined twice",
            &with_head("[log]\nfsync = \"always\"\n[log]\nmax_age = \"1d\"\n"),
            &["{file}:6:2:", "log", "defined twice"],
            Run::Refused(2),
        ),
        row(
            "an unknown top-level key",
            "data_dir = \"{dir}/data\"\nbogus = 1\n[api]\nlisten = \"{api}\"\n",
            &["{file}:2:1:", "bogus", "unknown key", "data_dir, log, api"],
            Run::Refused(2),
        ),
        row(
            "a misspelt key",
            &with_head("[log]\nfsnyc = \"always\"\n"),
            &["{file}:5:1:", "log.fsnyc", "did you mean `fsync`"],
            Run::Refused(2),
        ),
        row(
            "a misspelt key in a source",
            &with_head(
                "[sources.app]\ntype = \"file\"\ninclude = [\"/var/log/app.log\"]\nincldue = [\"x\"]\n",
            ),
            &["{file}:7:1:", "sources.app.incldue", "did you mean `include`"],
            Run::Refused(2),
        ),
        row(
            "an unknown source type",
            &with_head("[sources.app]\ntype = \"snmp_trap\"\n"),
            &["{file}:5:8:", "sources.app.type", "\"snmp_trap\"", "\"file\", \"otlp_http\""],
            Run::Refused(2),
        ),
        row(
            "a sink reading a source that does not exist",
            &with_head(
                "[sources.app]\ntype = \"otlp_http\"\nlisten = \"127.0.0.1:0\"\n\
                 [sinks.out]\ntype = \"file\"\ninputs = [\"ap\"]\n",
            ),
            &["{file}:9:11:", "sinks.out.inputs[0]", "no source named \"ap\"", "did you mean \"app\""],
            Run::Refused(2),
        ),
        row(
            "a source name with a space",
            &with_head("[sources.\"a b\"]\ntype = \"file\"\n"),
            &["{file}:4:10:", "invalid source name \"a b\""],
            Run::Refused(2),
        ),
        row(
            "a size given as an integer",
            &with_head("[log]\nmax_bytes = 5\n"),
            &["{file}:5:13:", "log.max_bytes", "expected a size like \"64MiB\"", "integer 5"],
            Run::Refused(2),
        ),
        row(
            "a boolean for an enumeration",
            &with_head("[log]\nfsync = true\n"),
            &["{file}:5:9:", "log.fsync", "\"always\", \"interval\", \"never\"", "boolean"],
            Run::Refused(2),
        ),
        row(
            "a string for a list",
            &with_head("[sources.app]\ntype = \"file\"\ninclude = \"/var/log/*.log\"\n"),
            &["{file}:6:11:", "sources.app.include"],
            Run::Refused(2),
        ),
        row(
            "a table for a whole section",
            "data_dir = \"{dir}/data\"\nsources = 5\n[api]\nlisten = \"{api}\"\n",
            &["{file}:2:11:", "sources", "must be a table"],
            Run::Refused(2),
        ),
        row(
            "a negative size",
            &with_head("[log]\nmax_bytes = \"-5MiB\"\n"),
            &["{file}:5:13:", "log.max_bytes", "cannot be negative"],
            Run::Refused(2),
        ),
        row(
            "a negative integer size",
            &with_head("[log]\nsegment_size = -65536\n"),
            &["{file}:5:16:", "log.segment_size", "integer -65536"],
            Run::Refused(2),
        ),
        row(
            "a negative duration",
            &with_head("[log]\nmax_age = \"-5s\"\n"),
            &["{file}:5:11:", "log.max_age", "cannot be negative"],
            Run::Refused(2),
        ),
        row(
            "a negative count",
            &with_head(
                "[sources.otlp]\ntype = \"otlp_http\"\nlisten = \"127.0.0.1:0\"\nmax_connections = -1\n",
            ),
            &["{file}:7:19:", "sources.otlp.max_connections", "-1 is out of range"],
            Run::Refused(2),
        ),
        row(
            "a zero size",
            &with_head("[log]\nsegment_size = \"0\"\n"),
            &["{file}:5:16:", "log.segment_size", "zero"],
            Run::Refused(2),
        ),
        row(
            "a number TOML cannot hold",
            &with_head("[log]\nmax_bytes = 1e400\n"),
            &["{file}:5:13:", "log.max_bytes", "overflowed"],
            Run::Refused(2),
        ),
        row(
            "a size beyond 16 EiB",
            &with_head("[log]\nmax_bytes = \"99999999999999999999TiB\"\n"),
            &["{file}:5:13:", "log.max_bytes", "too large"],
            Run::Refused(2),
        ),
        row(
            "a log smaller than two segments",
            &with_head("[log]\nsegment_size = \"64MiB\"\nmax_bytes = \"100MiB\"\n"),
            &["{file}:6:13:", "log.max_bytes", "at least twice log.segment_size"],
            Run::Refused(2),
        ),
        row(
            "a host name to listen on",
            &with_head("[sources.otlp]\ntype = \"otlp_http\"\nlisten = \"localhost:4318\"\n"),
            &["{file}:6:10:", "sources.otlp.listen", "host names are not resolved"],
            Run::Refused(2),
        ),
        row(
            "a line limit larger than a segment",
            &with_head(
                "[log]\nsegment_size = \"64KiB\"\n[sources.app]\ntype = \"file\"\n\
                 include = [\"/var/log/app.log\"]\nmax_line_bytes = \"1MiB\"\n",
            ),
            &["{file}:9:18:", "sources.app.max_line_bytes", "would not fit in one log segment"],
            Run::Refused(2),
        ),
        row(
            "an invalid regular expression",
            &with_head(
                "[sources.app]\ntype = \"file\"\ninclude = [\"/var/log/app.log\"]\n\
                 multiline = { start_pattern = \"(unclosed\" }\n",
            ),
            &["{file}:7:", "sources.app.multiline.start_pattern", "not a valid regular expression"],
            Run::Refused(2),
        ),
        row(
            "a regular expression that explodes when compiled",
            &with_head(
                "[sources.app]\ntype = \"file\"\ninclude = [\"/var/log/app.log\"]\n\
                 multiline = { start_pattern = \"a{1000}{1000}{1000}\" }\n",
            ),
            &["{file}:7:", "sources.app.multiline.start_pattern", "not a valid regular expression"],
            Run::Refused(2),
        ),
        row(
            "an empty include list",
            &with_head("[sources.app]\ntype = \"file\"\ninclude = []\n"),
            &["{file}:6:11:", "sources.app.include", "empty"],
            Run::Refused(2),
        ),
        row(
            "arrays nested 100,000 deep",
            &with_head(&format!("x = {}{}\n", "[".repeat(100_000), "]".repeat(100_000))),
            &["{file}:4:", "invalid TOML", "recursion"],
            Run::Refused(2),
        ),
        row(
            "inline tables nested 100,000 deep",
            &with_head(&format!("x = {}{}\n", "{a=".repeat(100_000), "}".repeat(100_000))),
            &["{file}:4:", "invalid TOML", "recursion"],
            Run::Refused(2),
        ),
        row(
            "a dotted key 50,000 deep",
            &with_head(&format!("{}c = 1\n", "b.".repeat(50_000))),
            &["{file}:", "invalid TOML", "recursion"],
            Run::Refused(2),
        ),
        row(
            "a syslog max_buffer_size too small for one max_message_size",
            &with_head(
                "[sources.lan]\ntype = \"syslog\"\nlisten = \"127.0.0.1:0\"\n\
                 max_message_size = \"1MiB\"\nmax_buffer_size = \"2MiB\"\n",
            ),
            &[
                "{file}:8:",
                "sources.lan.max_buffer_size",
                "raise max_buffer_size to at least",
            ],
            Run::Refused(2),
        ),
        row(
            "a data_dir under a regular file",
            "data_dir = \"{dir}/a-file/data\"\n[api]\nlisten = \"{api}\"\n",
            &["{file}:1:12:", "data_dir", "not a directory"],
            Run::Fails(vec![
                "opening the log in {dir}/a-file/data/log",
                "data_dir",
                "Not a directory",
            ]),
        ),
        row(
            "a data_dir on a file system that cannot hold it",
            "data_dir = \"/proc/holdfast-test\"\n[api]\nlisten = \"{api}\"\n",
            &["{file}:1:12:", "data_dir", "cannot create /proc/holdfast-test"],
            Run::Fails(vec!["opening the log in /proc/holdfast-test/log", "data_dir"]),
        ),
    ]
}

fn fill(s: &str, dir: &Path, api: &str, file: &Path) -> String {
    s.replace("{dir}", dir.to_str().unwrap())
        .replace("{api}", api)
        .replace("{file}", file.to_str().unwrap())
}

/// Runs `holdfast ARGS` with a deadline: a row must never leave it hanging.
fn run_with_deadline(args: &[&str], deadline: Duration) -> (Option<i32>, String, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let end = std::time::Instant::now() + deadline;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > end {
            // Never leave a stray agent behind a failed test.
            let _ = child.kill();
            let _ = child.wait();
            panic!("holdfast {args:?} did not exit within {:?}", deadline);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    (
        status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The line holding every word, or a description of what was missing.
fn line_with<'a>(text: &'a str, words: &[String]) -> Result<&'a str, String> {
    text.lines()
        .find(|l| words.iter().all(|w| l.contains(w.as_str())))
        .ok_or_else(|| format!("no line holds all of {words:?}"))
}

/// Every finding once: a line (other than blank ones) printed twice is a bug.
fn repeated_line(text: &str) -> Option<&str> {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines
        .iter()
        .enumerate()
        .find(|(i, l)| lines[..*i].contains(l))
        .map(|(_, l)| *l)
}

#[test]
fn every_broken_config_is_refused_naming_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a-file"), b"not a directory").unwrap();
    let mut failures = Vec::new();
    for (i, r) in rows().into_iter().enumerate() {
        let api = format!("127.0.0.1:{}", free_port());
        let file = dir.path().join(format!("row{i}.toml"));
        let text = String::from_utf8(r.text.clone())
            .map(|t| fill(&t, dir.path(), &api, &file).into_bytes())
            .unwrap_or(r.text.clone());
        std::fs::write(&file, &text).unwrap();
        let words: Vec<String> = r
            .words
            .iter()
            .map(|w| fill(w, dir.path(), &api, &file))
            .collect();

        let config = file.to_str().unwrap();
        let (code, stdout, stderr) =
            run_with_deadline(&["check", "--config", config], Duration::from_secs(20));
        let both = format!("{stdout}{stderr}");
        // A valid file left at the defaults is checked against this
        // machine's /var/lib/holdfast and port 9467, which a test does not
        // control: there only "not refused as invalid" is asserted.
        let machine_only = r.check == 0
            && code == Some(2)
            && !stderr.contains("invalid configuration")
            && stderr.contains("cannot run on this machine");
        if code != Some(r.check) && !machine_only {
            failures.push(format!(
                "{}: check exited {code:?}, want {}:\n{stderr}",
                r.name, r.check
            ));
        }
        if let Err(e) = line_with(&both, &words) {
            failures.push(format!("{}: check: {e}:\n{both}", r.name));
        }
        if let Some(l) = repeated_line(&stderr) {
            failures.push(format!("{}: check printed twice: {l}", r.name));
        }

        let want = match &r.run {
            Run::Skip => continue,
            Run::Refused(code) => (*code, words.clone()),
            Run::Fails(w) => (
                1,
                w.iter().map(|w| fill(w, dir.path(), &api, &file)).collect(),
            ),
        };
        let (code, _, stderr) =
            run_with_deadline(&["run", "--config", config], Duration::from_secs(20));
        if code != Some(want.0) {
            failures.push(format!(
                "{}: run exited {code:?}, want {}:\n{stderr}",
                r.name, want.0
            ));
        }
        if let Err(e) = line_with(&stderr, &want.1) {
            failures.push(format!("{}: run: {e}:\n{stderr}", r.name));
        }
        if stderr.lines().any(|l| l.contains("caused by"))
            && stderr
                .lines()
                .filter(|l| l.contains("caused by"))
                .any(|l| stderr.lines().filter(|m| *m == l).count() > 1)
        {
            failures.push(format!("{}: run repeated a cause:\n{stderr}", r.name));
        }
        if let Some(l) = repeated_line(&stderr) {
            failures.push(format!("{}: run printed twice: {l}", r.name));
        }
        if http_get(api.parse().unwrap(), "/healthz").is_some() {
            failures.push(format!("{}: something still serves {api}", r.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} problem(s):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn a_config_file_that_cannot_be_read_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.toml");
    for (path, words) in [
        (
            missing.to_str().unwrap(),
            vec!["cannot read the config file", "No such file", "--config"],
        ),
        (
            dir.path().to_str().unwrap(),
            vec!["cannot read the config file", "Is a directory"],
        ),
    ] {
        for cmd in ["check", "run"] {
            let (code, _, stderr) =
                run_with_deadline(&[cmd, "--config", path], Duration::from_secs(20));
            assert_eq!(code, Some(2), "{cmd} {path}: {stderr}");
            let mut want: Vec<String> = words.iter().map(|w| w.to_string()).collect();
            want.push(path.to_string());
            assert!(line_with(&stderr, &want).is_ok(), "{cmd} {path}: {stderr}");
        }
    }
}

/// A file sink whose directory cannot be created: `check` refuses the
/// config; `run` starts anyway (the source keeps taking data into the log),
/// names the path in its log, counts the sink's restarts, stays ready, and
/// delivers everything once the path is fixed.
#[test]
fn a_sink_path_it_cannot_write_keeps_the_data_and_says_why() {
    let mut a = Agent::new("");
    let otlp = format!("127.0.0.1:{}", free_port());
    let blocker = a.path("blocker");
    std::fs::write(&blocker, b"a regular file where a directory should be").unwrap();
    let out = blocker.join("out");
    let body = format!(
        "[sources.otlp]\ntype = \"otlp_http\"\nlisten = \"{otlp}\"\n\n\
         [sinks.archive]\ntype = \"file\"\ninputs = [\"otlp\"]\npath = \"{}\"\nbatch_timeout = \"50ms\"\n",
        out.display()
    );
    let text = std::fs::read_to_string(&a.config).unwrap() + &body;
    std::fs::write(&a.config, &text).unwrap();
    let line = text.lines().position(|l| l.starts_with("path =")).unwrap() + 1;

    let (code, _, stderr) = run_with_deadline(
        &["check", "--config", a.config_arg()],
        Duration::from_secs(20),
    );
    assert_eq!(code, Some(2), "{stderr}");
    let want = [
        format!("{}:{line}:8:", a.config.display()),
        "sinks.archive.path".to_string(),
        "not a directory".to_string(),
    ];
    assert!(line_with(&stderr, &want).is_ok(), "{stderr}");

    a.start();
    a.wait_ready();
    let logs =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/otlp/logs.pb"))
            .unwrap();
    assert_eq!(post(&otlp, &logs), 200, "the source still takes data");
    wait_for(
        "the sink's failure to be counted",
        Duration::from_secs(30),
        || {
            let n = a.metric("holdfast_task_restarts_total{sink=\"archive\"}")?;
            (n >= 1.0).then_some(())
        },
    );
    let err = a.stderr();
    assert!(
        err.lines()
            .any(|l| l.contains("sink:archive") && l.contains(&out.display().to_string())),
        "{err}"
    );
    assert_eq!(http_get(a.api, "/readyz").unwrap().0, 200);
    assert_eq!(a.metric("holdfast_log_next_sequence"), Some(1.0));

    // Fixed while running: the retried sink delivers what the log kept.
    std::fs::remove_file(&blocker).unwrap();
    wait_for(
        "the kept record in the sink's output",
        Duration::from_secs(60),
        || {
            let n = std::fs::read_dir(&out)
                .ok()?
                .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
                .map(|t| t.lines().count())
                .sum::<usize>();
            (n == 1).then_some(())
        },
    );
    assert!(a.stop().success(), "{}", a.stderr());
}

fn post(addr: &str, body: &[u8]) -> u16 {
    post_with(addr, body, "")
}

fn post_with(addr: &str, body: &[u8], headers: &str) -> u16 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /v1/logs HTTP/1.1\r\nHost: test\r\nContent-Type: application/x-protobuf\r\n\
         {headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    resp.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A source that cannot start (its token file is missing, its port taken,
/// its certificate garbage):
/// `check` names the key; `run` stays up and retries it, but `/readyz`
/// answers 503 naming the source and the key until it runs, since "ready"
/// promises that sources accept input.
#[test]
fn a_source_that_cannot_start_keeps_the_agent_unready_until_it_can() {
    let tls = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/otlp/tls");
    for case in ["token", "port", "certificate"] {
        let mut a = Agent::new("");
        let port = free_port();
        let otlp = format!("127.0.0.1:{port}");
        let token = a.path("otlp.token");
        let (cert, key_file) = (a.path("cert.pem"), a.path("key.pem"));
        let mut body = format!("[sources.otlp]\ntype = \"otlp_http\"\nlisten = \"{otlp}\"\n");
        let key = match case {
            "token" => {
                body += &format!("bearer_token_file = \"{}\"\n", token.display());
                "sources.otlp.bearer_token_file"
            }
            "port" => "sources.otlp.listen",
            _ => {
                std::fs::write(&cert, "-----BEGIN CERTIFICATE-----\ngarbage\n").unwrap();
                std::fs::copy(tls.join("key.pem"), &key_file).unwrap();
                body += &format!(
                    "tls = {{ cert_file = \"{}\", key_file = \"{}\" }}\n",
                    cert.display(),
                    key_file.display()
                );
                "sources.otlp.tls.cert_file"
            }
        };
        let taken = (case == "port").then(|| std::net::TcpListener::bind(&otlp).unwrap());
        let text = std::fs::read_to_string(&a.config).unwrap() + &body;
        std::fs::write(&a.config, &text).unwrap();

        let (code, _, stderr) = run_with_deadline(
            &["check", "--config", a.config_arg()],
            Duration::from_secs(20),
        );
        assert_eq!(code, Some(2), "{case}: {stderr}");
        assert!(stderr.contains(key), "{case}: {stderr}");

        a.start();
        let api = a.api;
        let (_, why) = wait_for(
            "/readyz to say the source is failing",
            Duration::from_secs(30),
            // (Not the 503 of the start-up itself, before sources run.)
            || http_get(api, "/readyz").filter(|(s, why)| *s == 503 && why.contains("source:otlp")),
        );
        assert!(
            why.contains("source:otlp") && why.contains(key),
            "{case}: {why}"
        );
        assert_eq!(http_get(api, "/healthz").unwrap().0, 200, "{case}");
        assert!(a.try_exit().is_none(), "{case}: still running");

        // Fixed while running: the source starts on its next attempt.
        std::fs::write(&token, "s3cret\n").unwrap();
        drop(taken);
        std::fs::copy(tls.join("cert.pem"), &cert).unwrap();
        wait_for("/readyz to turn 200", Duration::from_secs(30), || {
            http_get(api, "/readyz").filter(|(s, _)| *s == 200)
        });
        if case == "certificate" {
            // Serving TLS now; the plain-HTTP client below cannot talk to it.
            assert!(a.stop().success(), "{case}: {}", a.stderr());
            continue;
        }
        let logs = std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/otlp/logs.pb"),
        )
        .unwrap();
        let status = if case == "token" {
            post_with(&otlp, &logs, "Authorization: Bearer s3cret\r\n")
        } else {
            post(&otlp, &logs)
        };
        assert_eq!(status, 200, "{case}");
        assert!(a.stop().success(), "{case}: {}", a.stderr());
    }
}
