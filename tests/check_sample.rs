//! `holdfast check --sample` tells the truth about the chain the daemon
//! runs (issue 27): it runs for every source with a chain (`file` and
//! `otlp_http`), refuses a source without one instead of running an empty
//! chain, describes a `sample` step as it behaves, and counts an unparsed
//! line exactly as the daemon's `holdfast_processed_events_total` does.

#[path = "common/daemon.rs"]
mod daemon;

use std::process::Output;
use std::time::Duration;

use daemon::{free_port, holdfast, wait_for, Agent};

fn sample(a: &Agent, file: &std::path::Path, source: &str) -> Output {
    holdfast(&[
        "check",
        "--config",
        a.config_arg(),
        "--sample",
        file.to_str().unwrap(),
        "--source",
        source,
    ])
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A `json` step then a `severity` step: a line that is not JSON has no
/// level either.
const JSON_THEN_LEVEL: &str = "[[sources.app.process.steps]]\ntype = \"json\"\n\n\
     [[sources.app.process.steps]]\ntype = \"severity\"\nfield = \"level\"\n";

#[test]
fn an_unparsed_line_is_counted_once_by_the_daemon_as_by_check_sample() {
    let mut a = Agent::new("");
    let logs = a.path("logs");
    std::fs::create_dir(&logs).unwrap();
    let lines = "{\"msg\":\"up\",\"level\":\"info\"}\nnot json\n";
    std::fs::write(logs.join("app.log"), lines).unwrap();
    let body = format!(
        "[sources.app]\ntype = \"file\"\ninclude = [\"{}/*.log\"]\nstart_at = \"beginning\"\n\n\
         {JSON_THEN_LEVEL}\n[sinks.archive]\ntype = \"file\"\ninputs = [\"app\"]\n",
        logs.display()
    );
    let config = std::fs::read_to_string(&a.config).unwrap() + &body;
    std::fs::write(&a.config, config).unwrap();

    let out = sample(&a, &logs.join("app.log"), "app");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out)
            .contains("2 lines through sources.app.process: 2 kept (1 unparsed), 0 dropped"),
        "{}",
        stderr(&out)
    );

    a.start();
    a.wait_ready();
    let unparsed = |rule: &str| {
        a.metric(&format!(
            "holdfast_processed_events_total{{source=\"app\",rule=\"{rule}\",outcome=\"unparsed\"}}"
        ))
    };
    wait_for("both lines in the log", Duration::from_secs(20), || {
        (a.metric("holdfast_source_events_total{source=\"app\"}") == Some(2.0)).then_some(())
    });
    assert_eq!(unparsed("json_0"), Some(1.0));
    // The severity step cannot read it either; it is the same line.
    assert_eq!(unparsed("severity_1"), Some(0.0));
    a.stop();
}

#[test]
fn an_otlp_source_chain_runs_on_each_line_as_a_record_body() {
    let a = Agent::new(&format!(
        "[sources.app]\ntype = \"otlp_http\"\nlisten = \"127.0.0.1:{}\"\n\n{JSON_THEN_LEVEL}\n\
         [sinks.archive]\ntype = \"file\"\ninputs = [\"app\"]\n",
        free_port()
    ));
    let file = a.path("bodies.txt");
    std::fs::write(&file, "{\"msg\":\"up\",\"level\":\"warn\"}\n").unwrap();
    let out = sample(&a, &file, "app");
    assert!(out.status.success(), "{}", stderr(&out));
    let line: serde_json::Value =
        serde_json::from_slice(out.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(line["attributes"]["msg"], "up", "{line}");
    assert_eq!(line["severityNumber"], 13, "{line}");
    assert!(
        stderr(&out).contains("1 log record bodies through sources.app.process: 1 kept"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_source_without_a_chain_is_refused_by_name() {
    let a = Agent::new(&format!(
        "[sources.app]\ntype = \"file\"\ninclude = [\"/tmp/x/*.log\"]\n\n\
         [sources.devices]\ntype = \"syslog\"\nlisten = \"127.0.0.1:{}\"\n\n\
         [sinks.archive]\ntype = \"file\"\ninputs = [\"app\", \"devices\"]\n",
        free_port()
    ));
    let file = a.path("lines.txt");
    std::fs::write(&file, "one\n").unwrap();
    let out = sample(&a, &file, "app");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("sources.app has no processing chain"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("lines through"), "{}", stderr(&out));

    let out = sample(&a, &file, "devices");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is a syslog source, which has no processing chain"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_sample_step_is_described_as_it_behaves() {
    let a = Agent::new(
        "[sources.app]\ntype = \"file\"\ninclude = [\"/tmp/x/*.log\"]\n\n\
         [[sources.app.process.steps]]\ntype = \"sample\"\nrate = 0.1\n\n\
         [[sources.app.process.steps]]\ntype = \"sample\"\nrate = 0.5\nseverity_below = \"info\"\n\n\
         [sinks.archive]\ntype = \"file\"\ninputs = [\"app\"]\n",
    );
    let out = holdfast(&["check", "--offline", "--config", a.config_arg()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", stderr(&out));
    assert!(
        stdout.contains("keep 10% of all events (decided by id)"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "keep 50% of events where severity below 9, and every other event (decided by id)"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("where every event"), "{stdout}");
}
