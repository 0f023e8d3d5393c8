use super::*;

/// `(key, message)` of each error the `mqtt` source `m` gets with `source`
/// added to its table.
fn errors(source: &str) -> Vec<(String, String)> {
    let text = format!(
        "[sources.m]\ntype = \"mqtt\"\nurl = \"mqtt://127.0.0.1:1883\"\n{source}\n\n\
         [sinks.out]\ntype = \"file\"\ninputs = [\"m\"]\n"
    );
    crate::config::error_messages(&text)
}

fn one_error(source: &str, key: &str, says: &str) {
    let e = errors(source);
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].0, key, "{e:?}");
    assert!(e[0].1.contains(says), "{e:?}");
}

#[test]
fn a_minimal_and_a_full_table_pass() {
    assert_eq!(errors("topics = [\"devices/+/telemetry\"]"), []);
    assert_eq!(
        errors(
            "topics = [\"devices/+/telemetry\", \"plant/#\", \"#\"]\nqos = 2\nformat = \"otlp_proto\"\n\
             max_payload_size = \"64KiB\"\nretained = true\nreceive_maximum = 1000\n\
             [sources.m.process]\nattributes = { site = \"plant-3\" }\n"
        ),
        []
    );
}

#[test]
fn topics_are_required_and_each_must_be_a_filter() {
    one_error("", "sources.m.topics", "needs the topics");
    one_error("topics = []", "sources.m.topics", "subscribes to nothing");
    one_error(
        "topics = [\"a/#/b\"]",
        "sources.m.topics[0]",
        "'#' must be a whole level and the last one",
    );
    one_error(
        "topics = [\"ok/+\", \"a/b+\"]",
        "sources.m.topics[1]",
        "'+' must be a whole level",
    );
    one_error("topics = [\"\"]", "sources.m.topics[0]", "cannot be empty");
    one_error(
        "topics = [\"x\", \"x\"]",
        "sources.m.topics[1]",
        "listed twice",
    );
}

#[test]
fn qos_0_and_3_are_refused_with_why() {
    one_error(
        "topics = [\"t\"]\nqos = 0",
        "sources.m.qos",
        "no acknowledgement",
    );
    one_error("topics = [\"t\"]\nqos = 3", "sources.m.qos", "out of range");
}

#[test]
fn format_payload_size_and_window_are_checked() {
    one_error(
        "topics = [\"t\"]\nformat = \"xml\"",
        "sources.m.format",
        "write \"json\", \"text\", \"otlp_proto\" or \"otlp_json\"",
    );
    one_error(
        "topics = [\"t\"]\nmax_payload_size = \"0B\"",
        "sources.m.max_payload_size",
        "zero",
    );
    one_error(
        "topics = [\"t\"]\nmax_payload_size = \"200MiB\"",
        "sources.m.max_payload_size",
        "quarter of log.segment_size",
    );
    one_error(
        "topics = [\"t\"]\nreceive_maximum = 0",
        "sources.m.receive_maximum",
        "out of range",
    );
    one_error(
        "topics = [\"t\"]\nreceive_maximum = 70000",
        "sources.m.receive_maximum",
        "out of range",
    );
}

#[test]
fn connection_keys_come_from_the_kit_and_unknown_keys_are_refused() {
    one_error(
        "topics = [\"t\"]\nkeep_alive = \"0s\"",
        "sources.m.keep_alive",
        "",
    );
    one_error("topics = [\"t\"]\ntopic = \"t\"", "sources.m.topic", "");
}

#[test]
fn filters_follow_the_mqtt_rules() {
    for ok in ["#", "+", "a/+/b", "a/#", "/", "a//b", "+/+/#", "$SYS/#"] {
        assert_eq!(valid_filter(ok), Ok(()), "{ok}");
    }
    for bad in ["", "a#", "#/a", "a/b#", "a+/b", "a/+b", "nul\0"] {
        assert!(valid_filter(bad).is_err(), "{bad:?}");
    }
}
