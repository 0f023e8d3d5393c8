//! A network sink's `headers` and `headers_file` through the real binary:
//! both arrive on every request (the file's value trimmed, never shown by
//! `holdfast check`), and a header that cannot be sent is a config error at
//! `holdfast check` naming the key and its line.

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/identity.rs"]
mod identity;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use daemon::{holdfast, wait_for, Agent};
use identity::Receiver;

/// An agent tailing `app.log` into an `otlp_http` sink at `endpoint`, with
/// `extra` keys in the sink's table.
fn agent(endpoint: &str, extra: &str) -> Agent {
    let a = Agent::new("");
    let body = format!(
        "[sources.app]\ntype = \"file\"\ninclude = [\"{}\"]\nstart_at = \"beginning\"\n\
         scan_interval = \"100ms\"\n\n\
         [sinks.central]\ntype = \"otlp_http\"\ninputs = [\"app\"]\n\
         endpoint = \"{endpoint}\"\nencoding = \"json\"\ncompression = \"none\"\n\
         batch_timeout = \"50ms\"\n{extra}",
        a.path("app.log").display(),
    );
    let text = std::fs::read_to_string(&a.config).unwrap() + &body;
    std::fs::write(&a.config, text).unwrap();
    std::fs::write(a.path("app.log"), b"").unwrap();
    a
}

/// `holdfast check`: (exit code, stdout, stderr).
fn check(a: &Agent) -> (Option<i32>, String, String) {
    let out = holdfast(&["check", "--config", a.config_arg()]);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The 1-based line of the config that holds `needle`.
fn line_of(a: &Agent, needle: &str) -> usize {
    let text = std::fs::read_to_string(&a.config).unwrap();
    text.lines().position(|l| l.contains(needle)).unwrap() + 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_and_file_headers_arrive_on_every_request() {
    let receiver = Receiver::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("api-key");
    std::fs::write(&key_file, "s3cret-value\n").unwrap();
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut a = agent(
        &format!("http://{}", receiver.addr),
        &format!(
            "headers = {{ \"X-Scope-OrgID\" = \"tenant-a\", \"X-Route\" = \"edge/site-7\" }}\n\
             headers_file = {{ \"X-Api-Key\" = \"{}\" }}\n",
            key_file.display()
        ),
    );

    let (code, stdout, stderr) = check(&a);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("X-Scope-OrgID: tenant-a") && stdout.contains("X-Api-Key from"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("s3cret"),
        "a secret in check's output: {stdout}"
    );

    let lines: Vec<String> = (0..40).map(|i| format!("line-{i}")).collect();
    {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(a.path("app.log"))
            .unwrap();
        for l in &lines {
            writeln!(f, "{l}").unwrap();
        }
    }
    a.start();
    a.wait_ready();
    wait_for(
        "every line at the receiver",
        Duration::from_secs(60),
        || {
            let st = receiver.state();
            lines
                .iter()
                .all(|l| st.arrivals.contains_key(l))
                .then_some(())
        },
    );
    assert!(a.stop().success(), "{}", a.stderr());
    assert!(!a.stderr().contains("s3cret"), "a secret in the log");
    let st = receiver.state();
    assert!(!st.requests.is_empty());
    for r in &st.requests {
        let h = |name: &str| r.headers.get(name).map(String::as_str);
        assert_eq!(h("x-scope-orgid"), Some("tenant-a"), "{r:?}");
        assert_eq!(h("x-route"), Some("edge/site-7"), "{r:?}");
        assert_eq!(h("x-api-key"), Some("s3cret-value"), "{r:?}");
        assert_eq!(h("content-type"), Some("application/json"), "{r:?}");
    }
}

/// Each case: the sink's extra keys, the text on the line the error must
/// name, the key it must name, and a fragment of the reason.
#[test]
fn a_header_that_cannot_be_sent_is_a_config_error_naming_key_and_line() {
    let cases = [
        (
            "headers = { \"X Bad\" = \"v\" }\n",
            "X Bad",
            "sinks.central.headers.\"X Bad\"",
            "is not a valid header name",
        ),
        (
            "headers = { \"Content-Type\" = \"text/plain\" }\n",
            "Content-Type",
            "sinks.central.headers.Content-Type",
            "holdfast sets Content-Type itself",
        ),
        (
            "auth.bearer_token_file = \"/t\"\nheaders_file = { \"Authorization\" = \"/a\" }\n",
            "Authorization",
            "sinks.central.headers_file.Authorization",
            "auth sets the Authorization header",
        ),
        (
            "headers = { \"X-Api-Key\" = \"abc\" }\n",
            "X-Api-Key",
            "sinks.central.headers.X-Api-Key",
            "set headers_file",
        ),
        (
            "headers = { \"X-Tenant\" = \"a\" }\nheaders_file = { \"x-tenant\" = \"/t\" }\n",
            "x-tenant",
            "sinks.central.headers_file.x-tenant",
            "set twice",
        ),
        (
            "headers = { \"X-Tenant\" = \"a\\nb\" }\n",
            "X-Tenant",
            "sinks.central.headers.X-Tenant",
            "characters a header cannot carry",
        ),
    ];
    for (extra, on_line, key, reason) in cases {
        let a = agent("https://collector.example.com:4318", extra);
        let (code, stdout, stderr) = check(&a);
        assert_eq!(code, Some(2), "{extra}: {stdout}{stderr}");
        let line = line_of(&a, on_line);
        let expected = format!("holdfast.toml:{line}:");
        let named = stderr
            .lines()
            .find(|l| l.contains(&format!("{key}:")))
            .unwrap_or_else(|| panic!("{extra}: no error names {key}: {stderr}"));
        assert!(
            named.contains(&expected),
            "{extra}: not line {line}: {named}"
        );
        assert!(named.contains(reason), "{extra}: {named}");
    }
}

#[test]
fn check_reads_the_header_files() {
    let a = agent(
        "https://collector.example.com:4318",
        "headers_file = { \"X-Api-Key\" = \"/nonexistent/api-key\" }\n",
    );
    let (code, stdout, stderr) = check(&a);
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(
        stderr.contains("sinks.central.headers_file.X-Api-Key")
            && stderr.contains("/nonexistent/api-key"),
        "{stderr}"
    );
}
