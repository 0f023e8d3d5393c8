//! The chain as a whole: steps in order, unparsed lines kept, labels over
//! parsed fields, and (a property) nothing lost that no step dropped.

use std::borrow::Cow;

use proptest::prelude::*;

use super::filter::Condition;
use super::parse::Format;
use super::sample::Sample;
use super::testing::{drop_when, parse, step};
use super::*;

fn id(n: u64) -> EventId {
    EventId::for_file_line(1, 0, n)
}

#[test]
fn json_then_severity_then_filter() {
    let chain = Chain {
        labels: Labels {
            resource: vec![],
            attributes: vec![("site".into(), "berlin".into())],
        },
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
                "level",
                Kind::Severity(severity::Severity {
                    field: "level".into(),
                    map: vec![],
                }),
            ),
            step(
                "no_debug",
                drop_when(Condition {
                    severity_below: Some(9),
                    ..Default::default()
                }),
            ),
        ],
    };
    let mut counts = vec![0; 3];
    let mut ev = Event::new(
        r#"{"msg":"started","level":"info","site":"x","n":3,"o":{"a":[1,true]}}"#,
        id(0),
    );
    assert!(chain.run(&mut ev, &mut counts));
    assert_eq!(ev.body, "started");
    assert_eq!(ev.severity_number, 9);
    // The label wins over the parsed field of the same name.
    assert_eq!(ev.attr("site"), None);
    assert_eq!(ev.attr("n"), Some(&Value::Int(3)));
    assert!(matches!(ev.attr("o"), Some(Value::Any(_))));

    let mut dbg = Event::new(r#"{"msg":"x","level":"debug"}"#, id(1));
    assert!(!chain.run(&mut dbg, &mut counts));
    assert_eq!(counts, [0, 0, 1]);

    let mut bad = Event::new("not json at all", id(2));
    assert!(chain.run(&mut bad, &mut counts));
    assert_eq!(bad.body, "not json at all");
    assert_eq!(bad.attr(ATTR_UNPARSED), Some(&Value::Str("json".into())));
    // Unparsed once, by the rule that marked it: the severity step that
    // cannot read it either is not counted (issue 27).
    assert_eq!(counts, [1, 0, 1]);
}

#[test]
fn logfmt_and_regex_keep_lines_they_cannot_read() {
    let mut counts = vec![0; 2];
    let re = parse::regex::RegexParser::new(
        regex::Regex::new(r"^(?P<ip>\d+\.\d+\.\d+\.\d+) (?P<user>\S+)").expect("regex"),
    );
    let chain = Chain {
        labels: Labels::default(),
        steps: vec![
            step("lf", parse(Format::Logfmt, None)),
            step("re", parse(Format::Regex(re), None)),
        ],
    };
    let mut ev = Event::new(r#"at=info msg="hello \"you\"" fast"#, id(0));
    assert!(chain.run(&mut ev, &mut counts));
    assert_eq!(ev.attr("msg"), Some(&Value::Str(r#"hello "you""#.into())));
    assert_eq!(ev.attr("fast"), Some(&Value::Bool(true)));
    assert_eq!(ev.attr(ATTR_UNPARSED), Some(&Value::Str("re".into())));
    let mut broken = Event::new(r#"a="unclosed"#, id(1));
    assert!(chain.run(&mut broken, &mut counts));
    assert_eq!(broken.body, r#"a="unclosed"#);
    assert_eq!(broken.attr(ATTR_UNPARSED), Some(&Value::Str("lf".into())));
    assert_eq!(counts, [1, 1]);
}

#[test]
fn a_label_only_chain_leaves_events_alone() {
    let chain = Arc::new(Chain {
        labels: Labels {
            resource: vec![("site".into(), "x".into())],
            attributes: vec![],
        },
        steps: vec![],
    });
    let metrics = Metrics::new(None);
    let mut r = Runner::new(chain, &metrics, "app");
    let line = "plain line";
    let out = r.process(Cow::Borrowed(line), id(0)).expect("kept");
    assert!(matches!(out, Cow::Borrowed(_)));
    assert!(r.record.is_empty());
}

fn any_step() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(parse(
            Format::Json {
                max_depth: crate::process::parse::json::MAX_DEPTH
            },
            Some("msg")
        )),
        Just(parse(Format::Logfmt, Some("msg"))),
        Just(Kind::Severity(severity::Severity {
            field: "level".into(),
            map: vec![]
        })),
        Just(Kind::Timestamp(timestamp::Timestamp {
            field: "ts".into(),
            format: timestamp::TimeFormat::Rfc3339,
            zone: crate::calendar::TimeZone::Utc,
        })),
        Just(Kind::Redact(redact::Redact {
            pattern: regex::Regex::new("[0-9]{4}").expect("regex"),
            replacement: "####".into(),
            fields: vec![],
        })),
        (0.01f64..1.0).prop_map(|r| Kind::Sample(Sample::new(r, Condition::default(), "s"))),
        "[a-z]{1,3}".prop_map(|w| drop_when(Condition {
            body: Some(regex::Regex::new(&w).expect("regex")),
            ..Default::default()
        })),
    ]
}

fn any_line() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,60}",
        ("[a-z]{1,8}", "[a-z ]{0,20}", "(debug|info|warn|error|loud)").prop_map(
            |(k, m, l)| format!(
                r#"{{"{k}":1,"msg":"{m}","level":"{l}","ts":"2024-01-02T03:04:05Z"}}"#
            )
        ),
        ("[a-z]{1,8}", "[a-z0-9]{0,12}")
            .prop_map(|(k, v)| format!("{k}={v} msg=\"hi 1234\" level=info")),
    ]
}

proptest! {
    /// Every event comes out, or exactly one step counted dropping it:
    /// nothing is lost that was not explicitly dropped, and the decision
    /// is the same when the line is processed again (a re-read line).
    #[test]
    fn a_chain_never_loses_an_event_it_does_not_drop(
        kinds in proptest::collection::vec(any_step(), 0..6),
        lines in proptest::collection::vec(any_line(), 1..40),
    ) {
        let chain = Chain {
            labels: Labels::default(),
            steps: kinds.into_iter().enumerate().map(|(i, k)| step(&format!("s{i}"), k)).collect(),
        };
        let mut counts = vec![0u64; chain.steps.len()];
        let mut kept = 0u64;
        for (n, line) in lines.iter().enumerate() {
            let mut ev = Event::new(line.as_str(), id(n as u64));
            let k = chain.run(&mut ev, &mut counts);
            let mut again = Event::new(line.as_str(), id(n as u64));
            let mut scratch = vec![0u64; chain.steps.len()];
            prop_assert_eq!(k, chain.run(&mut again, &mut scratch));
            if k {
                kept += 1;
                prop_assert_eq!(&ev.body, &again.body);
            }
        }
        let dropped: u64 = chain.steps.iter().zip(&counts)
            .filter(|(s, _)| matches!(s.kind.outcome(), Outcome::Dropped | Outcome::SampledOut))
            .map(|(_, n)| *n)
            .sum();
        prop_assert_eq!(kept + dropped, lines.len() as u64);
    }
}
