//! Every rule of the interpolation, positions included, and attempts to
//! change the document's structure through a variable.

use super::parse_with_env;
use crate::checking::interpolate::*;
use crate::checking::{ConfigError, Diagnostic, Position};

fn env_of<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |name| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    }
}

fn subst(text: &str, vars: &[(&str, &str)]) -> String {
    let i = interpolate(text, &env_of(vars));
    assert!(i.problems.is_empty(), "{:?}", i.problems);
    i.text
}

fn problems(text: &str, vars: &[(&str, &str)]) -> Vec<Diagnostic> {
    match parse_with_env(text, "/etc/holdfast/holdfast.toml", &env_of(vars)) {
        Ok(_) => panic!("expected problems for {text:?}"),
        Err(ConfigError::Invalid { problems }) => problems,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn references_defaults_and_escapes() {
    let vars = [("A", "x"), ("EMPTY", "")];
    let cases = [
        ("k = \"${A}\"", "k = \"x\""),
        ("k = \"${B:-dflt}\"", "k = \"dflt\""),
        // Empty counts as unset, as in the shell.
        ("k = \"${EMPTY:-dflt}\"", "k = \"dflt\""),
        ("k = \"${A:-dflt}\"", "k = \"x\""),
        ("k = \"${B:-}\"", "k = \"\""),
        ("k = \"$${A}\"", "k = \"${A}\""),
        ("k = \"a$$b\"", "k = \"a$b\""),
        // A lone `$` stays.
        ("k = \"^end$\"", "k = \"^end$\""),
        ("k = \"$A $1 $\"", "k = \"$A $1 $\""),
        // Comments are not interpolated.
        ("k = 1 # ${NOPE} $$", "k = 1 # ${NOPE} $$"),
        ("# ${NOPE}\nk = \"${A}\"", "# ${NOPE}\nk = \"x\""),
        // Strings with `#` are not comments.
        ("k = \"#${A}\"", "k = \"#x\""),
        ("k = '${A}'", "k = 'x'"),
        ("k = \"\"\"\n${A}\"\"\"", "k = \"\"\"\nx\"\"\""),
        ("k = '''${A}'''", "k = '''x'''"),
        // Escaped quotes do not end the string.
        ("k = \"\\\"${A}\"", "k = \"\\\"x\""),
    ];
    for (text, want) in cases {
        assert_eq!(subst(text, &vars), want, "{text}");
    }
}

#[test]
fn bare_values_must_be_scalars() {
    let vars = [
        ("PORT", "9467"),
        ("ON", "true"),
        ("F", "1.5e3"),
        ("T", "1979-05-27T07:32:00Z"),
    ];
    assert_eq!(
        subst(
            "a = ${PORT}\nb = ${ON}\nc = ${F}\nd = ${T}\ne = ${X:-false}",
            &vars
        ),
        "a = 9467\nb = true\nc = 1.5e3\nd = 1979-05-27T07:32:00Z\ne = false"
    );
    for bad in [
        "abc", "1 # x", "[1]", "{a=1}", "1\nb = 2", "\"s\"", "", "1, b = 2",
    ] {
        let i = interpolate("a = ${V:-0}", &env_of(&[("V", bad)]));
        if bad.is_empty() {
            // Empty is unset: the default applies.
            assert!(i.problems.is_empty());
            continue;
        }
        assert_eq!(i.problems.len(), 1, "{bad:?}");
        assert!(i.problems[0].message.contains("quote it"), "{bad:?}");
    }
}

#[test]
fn values_cannot_change_the_structure() {
    let evil = "x\"\nevil = true\n[sinks.x]\ntype = \"file\"\n\\";
    let text = "data_dir = \"/d/${V}\"\n";
    let out = subst(text, &[("V", evil)]);
    let doc = toml::de::DeTable::parse(&out).unwrap();
    let doc = doc.get_ref();
    assert_eq!(doc.len(), 1, "{out}");
    assert_eq!(
        doc.get("data_dir").unwrap().get_ref().as_str(),
        Some(&*format!("/d/{evil}"))
    );
    // Control characters become escapes.
    let out = subst("k = \"${V}\"", &[("V", "a\u{1}b\tc")]);
    let doc = toml::de::DeTable::parse(&out).unwrap();
    assert_eq!(
        doc.get_ref().get("k").unwrap().get_ref().as_str(),
        Some("a\u{1}b\tc")
    );

    // Literal strings cannot escape: a quote or a line break is refused.
    for bad in ["it's", "a\nb"] {
        let i = interpolate("k = '${V}'", &env_of(&[("V", bad)]));
        assert_eq!(i.problems.len(), 1, "{bad:?}");
        assert!(i.problems[0].message.contains("literal string"));
    }
    assert_eq!(subst("k = '''${V}'''", &[("V", "a\nb")]), "k = '''a\nb'''");
}

#[test]
fn secret_values_are_never_quoted_in_messages() {
    let i = interpolate("k = ${API_TOKEN}", &env_of(&[("API_TOKEN", "hunter2")]));
    assert!(!i.problems[0].message.contains("hunter2"));
    let i = interpolate("k = ${SITE}", &env_of(&[("SITE", "berlin")]));
    assert!(i.problems[0].message.contains("berlin"));
    assert!(i.pieces.iter().all(|p| !p.secret));
    for secret in [
        "API_TOKEN",
        "DB_PASSWORD",
        "ES_API_KEY",
        "client_secret",
        "TOKEN",
    ] {
        assert!(looks_secret(secret), "{secret}");
    }
    for plain in [
        "CREDENTIALS_DIRECTORY",
        "TOKEN_FILE",
        "SITE",
        "HOST",
        "MONKEY",
        "PWD",
    ] {
        assert!(!looks_secret(plain), "{plain}");
    }
}

#[test]
fn an_unset_variable_names_line_column_and_key_and_all_are_reported() {
    let text = "data_dir = \"${HF_DATA}/data\"\n\
                [api]\n\
                listen = \"127.0.0.1:${HF_PORT}\"\n\
                [daemon]\n\
                worker_threads = ${THREADS}\n";
    let found = problems(text, &[]);
    let seen: Vec<(usize, usize, &str)> = found
        .iter()
        .map(|d| {
            let p = d.position.unwrap();
            (p.line, p.column, d.key.as_str())
        })
        .collect();
    assert_eq!(
        seen,
        [
            (1, 13, "data_dir"),
            (3, 21, "api.listen"),
            (5, 18, "daemon.worker_threads")
        ],
        "{found:#?}"
    );
    for says in ["HF_DATA is not set", "${HF_DATA:-value}"] {
        assert!(found[0].message.contains(says), "{}", found[0]);
    }
}

#[test]
fn malformed_references_are_errors() {
    for text in ["k = \"${\"", "k = \"${1A}\"", "k = \"${A B}\""] {
        let i = interpolate(text, &env_of(&[]));
        assert_eq!(i.problems.len(), 1, "{text}");
        assert!(i.problems[0].message.contains("${NAME}"), "{text}");
    }
}

#[test]
fn columns_after_a_substitution_point_into_the_file_as_written() {
    // The value is longer than the reference: the column of `9x` must
    // still be that of the file as written.
    let text =
        "log = { max_bytes = \"${SZ}\", segment_size = 7 }\n[api]\nlisten = \"${HOST}:9x\"\n";
    let found = problems(text, &[("HOST", "a-much-longer-host-name"), ("SZ", "1GiB")]);
    let at = |key: &str| {
        found
            .iter()
            .find(|d| d.key == key)
            .and_then(|d| d.position)
            .unwrap_or_else(|| panic!("{key}: {found:#?}"))
    };
    assert_eq!(
        at("api.listen"),
        Position {
            line: 3,
            column: 10
        }
    );
    assert_eq!(
        at("log.segment_size"),
        Position {
            line: 1,
            column: 45
        }
    );

    // A column on the same line after a reference.
    let i = interpolate("a = \"${HOST}\", b", &env_of(&[("HOST", "longer-value")]));
    let b = i.text.find(", b").unwrap() + 2;
    assert_eq!(
        original_offset(&i.pieces, b),
        "a = \"${HOST}\", b".find('b').unwrap()
    );
}

#[test]
fn the_effective_config_is_interpolated_and_masked() {
    let text = "data_dir = \"${D}\"\n\
                [sources.o]\ntype = \"otlp_http\"\nlisten = \"127.0.0.1:0\"\n\
                [sinks.s]\ntype = \"file\"\ninputs = [\"o\"]\n";
    let s = parse_with_env(text, "/etc/holdfast/h.toml", &env_of(&[("D", "/srv/hf")])).unwrap();
    assert!(s.effective_config().contains("data_dir = \"/srv/hf\""));
    assert_eq!(s.data_dir, std::path::Path::new("/srv/hf"));
}

#[test]
fn messages_that_quote_a_value_never_show_a_secret_variable() {
    let text = "[sources.o]\ntype = \"otlp_http\"\nlisten = \"127.0.0.1:0\"\n\
                [sinks.s]\ntype = \"elasticsearch\"\ninputs = [\"o\"]\n\
                endpoint = \"http://es:9200/x?token=${API_TOKEN}\"\n";
    let found = problems(text, &[("API_TOKEN", "tok\"en-secret")]);
    let d = found.iter().find(|d| d.key == "sinks.s.endpoint").unwrap();
    assert!(!d.message.contains("en-secret"), "{d}");
    assert!(d.message.contains("token=********"), "{d}");
}
