//! Real messages: the RFCs' own examples, what `logger` and rsyslog send,
//! and what Cisco IOS and Junos devices send.

use super::*;

const NOW: i64 = 1_796_191_200; // 2026-12-02T06:00:00Z
const S: i64 = 1_000_000_000;

fn utc() -> ParseOptions {
    ParseOptions {
        time_zone: TimeZone::Utc,
        now_unix: NOW,
    }
}

fn p(line: &[u8]) -> Parsed<'_> {
    parse(line, &utc())
}

fn s(b: Option<&[u8]>) -> Option<&str> {
    b.map(|b| std::str::from_utf8(b).unwrap())
}

#[test]
fn rfc5424_with_bom_and_nil_fields() {
    let m = p(b"<34>1 2003-10-11T22:14:15.003Z mymachine.example.com su - ID47 - \xEF\xBB\xBF'su root' failed for lonvick on /dev/pts/8");
    assert_eq!(m.format, Format::Rfc5424);
    assert_eq!((m.facility, m.severity), (Some(4), Some(2)));
    assert_eq!(m.timestamp_ns, Some(1_065_910_455 * S + 3_000_000));
    assert_eq!(s(m.hostname), Some("mymachine.example.com"));
    assert_eq!(s(m.app_name), Some("su"));
    assert_eq!(m.proc_id, None);
    assert_eq!(s(m.msg_id), Some("ID47"));
    assert!(m.structured_data.is_empty());
    assert_eq!(m.message, b"'su root' failed for lonvick on /dev/pts/8");
    assert_eq!(m.error, None);
}

#[test]
fn rfc5424_offset_and_microseconds() {
    let m = p(b"<165>1 2003-08-24T05:14:15.000003-07:00 192.0.2.1 myproc 8710 - - %% It's time to make the do-nuts.");
    assert_eq!(m.timestamp_ns, Some(1_061_727_255 * S + 3_000));
    assert_eq!(s(m.proc_id), Some("8710"));
    assert_eq!(m.message, b"%% It's time to make the do-nuts.");
}

#[test]
fn rfc5424_structured_data_several_elements_and_escapes() {
    let m = p(br#"<165>1 2003-10-11T22:14:15.003Z mymachine.example.com evntslog - ID47 [exampleSDID@32473 iut="3" eventSource="Application" eventID="1011"][examplePriority@32473 class="high" note="a \"q\" \] \\ \x"]"#);
    assert_eq!(m.error, None, "{m:?}");
    assert_eq!(m.structured_data.len(), 2);
    let first = &m.structured_data[0];
    assert_eq!(first.id, "exampleSDID@32473");
    assert_eq!(first.params.len(), 3);
    assert_eq!(first.params[1], ("eventSource", "Application".into()));
    let second = &m.structured_data[1];
    assert_eq!(second.params[1].1, r#"a "q" ] \ \x"#);
    assert_eq!(m.message, b"");
}

#[test]
fn rfc5424_from_logger_and_junos() {
    let m = p(br#"<13>1 2026-12-02T05:30:00.123456+00:00 gw01 root 4242 - [timeQuality tzKnown="1" isSynced="1" syncAccuracy="150000"] hello world"#);
    assert_eq!(m.format, Format::Rfc5424);
    assert_eq!(m.structured_data[0].id, "timeQuality");
    assert_eq!(m.message, b"hello world");
    let m = p(br#"<165>1 2007-02-15T09:17:15.719Z router1 mgd 3046 UI_DBASE_LOGOUT_EVENT [junos@2636.1.1.1.2.18 username="regress"] User 'regress' exiting configuration mode"#);
    assert_eq!(s(m.msg_id), Some("UI_DBASE_LOGOUT_EVENT"));
    assert_eq!(
        m.structured_data[0].params[0],
        ("username", "regress".into())
    );
    assert_eq!(m.message, b"User 'regress' exiting configuration mode");
}

#[test]
fn rfc5424_broken_is_kept_whole_with_its_priority() {
    for (line, why) in [
        (&b"<13>1 yesterday host app - - - msg"[..], "timestamp"),
        (
            b"<13>1 2026-12-02T05:30:00Z host app - - [unclosed a=\"1\" msg",
            "SD-PARAM",
        ),
        (
            b"<13>1 2026-12-02T05:30:00Z host app - - [unclosed a=\"1\"",
            "SD-ELEMENT",
        ),
        (
            b"<13>1 2026-12-02T05:30:00Z host app - - [x a=\"1] msg",
            "closing quote",
        ),
        (b"<13>1 2026-12-02T05:30:00Z host", "HOSTNAME"),
        (b"<13>2 2026-12-02T05:30:00Z host app - - - msg", "version"),
        (
            b"<13>1 2026-12-02T05:30:00Z host app - - x msg",
            "structured data",
        ),
    ] {
        let m = p(line);
        assert_eq!(m.format, Format::Unparsed, "{line:?}");
        assert_eq!(m.message, line);
        assert_eq!((m.facility, m.severity), (Some(1), Some(5)));
        assert!(m.error.unwrap().contains(why), "{line:?}: {:?}", m.error);
    }
}

#[test]
fn rfc3164_classic() {
    let m = p(b"<34>Oct 11 22:14:15 mymachine su: 'su root' failed for lonvick on /dev/pts/8\n");
    assert_eq!(m.format, Format::Rfc3164);
    assert_eq!(m.timestamp_ns, Some(1_791_756_855 * S));
    assert_eq!(s(m.hostname), Some("mymachine"));
    assert_eq!(s(m.app_name), Some("su"));
    assert_eq!(m.message, b"'su root' failed for lonvick on /dev/pts/8");
}

#[test]
fn rfc3164_missing_tag_hostname_or_timestamp() {
    let m = p(b"<13>Feb  5 17:32:18 10.0.0.99 Use the BFG!");
    assert_eq!(s(m.hostname), Some("10.0.0.99"));
    assert_eq!(m.app_name, None);
    assert_eq!(m.message, b"Use the BFG!");

    let m = p(b"<38>Feb  5 17:32:18 sshd[4123]: Accepted publickey for root");
    assert_eq!(m.hostname, None);
    assert_eq!((s(m.app_name), s(m.proc_id)), (Some("sshd"), Some("4123")));
    assert_eq!(m.message, b"Accepted publickey for root");

    let m = p(b"<13>myapp: started");
    assert_eq!((m.timestamp_ns, m.hostname), (None, None));
    assert_eq!(s(m.app_name), Some("myapp"));
    assert_eq!(m.message, b"started");
}

/// The message as RFC 3164 keeps it: text that is no tag, after a BOM
/// (dropped), bytes that are not UTF-8 (kept as they are).
#[test]
fn rfc3164_message_text_is_kept() {
    let cases: [(&[u8], &[u8]); 5] = [
        (
            b"<13>1234567: counted, but no time",
            b"1234567: counted, but no time",
        ),
        (b"<13>.hidden", b".hidden"),
        (b"<13>just words", b"just words"),
        (b"<14>Jan  1 00:00:00 host app: \xEF\xBB\xBFhello", b"hello"),
        (
            b"<14>Jan  1 00:00:00 host app: caf\xe9 \xff",
            b"caf\xe9 \xff",
        ),
    ];
    for (line, message) in cases {
        let m = p(line);
        assert_eq!(m.format, Format::Rfc3164, "{line:?}");
        assert_eq!(m.message, message, "{line:?}");
    }
}

#[test]
fn rfc3164_cisco_and_junos() {
    let m = p(b"<189>34: *Mar  1 00:00:45.123: %SYS-5-CONFIG_I: Configured from console by vty0 (10.0.0.1)");
    assert_eq!((m.facility, m.severity), (Some(23), Some(5)));
    assert_eq!(m.timestamp_ns, Some(1_772_323_245 * S + 123_000_000));
    assert_eq!(m.hostname, None);
    assert_eq!(
        m.message,
        b"%SYS-5-CONFIG_I: Configured from console by vty0 (10.0.0.1)"
    );

    let opts = ParseOptions {
        time_zone: TimeZone::Fixed(3600),
        now_unix: NOW,
    };
    let m = parse(b"<187>1234: Mar  1 2024 12:00:00.000 UTC: %LINK-3-UPDOWN: Interface Gi0/1, changed state to down", &opts);
    assert_eq!(
        m.timestamp_ns,
        Some(1_709_294_400 * S),
        "UTC named in the message wins"
    );
    assert_eq!(
        m.message,
        b"%LINK-3-UPDOWN: Interface Gi0/1, changed state to down"
    );

    let m = p(
        b"<28>Mar 18 12:34:56 fw1 mgd[1234]: UI_COMMIT: User 'admin' requested 'commit' operation",
    );
    assert_eq!(s(m.hostname), Some("fw1"));
    assert_eq!((s(m.app_name), s(m.proc_id)), (Some("mgd"), Some("1234")));
    assert_eq!(
        m.message,
        b"UI_COMMIT: User 'admin' requested 'commit' operation"
    );
}

#[test]
fn rfc3164_rsyslog_high_precision_timestamp() {
    let m = p(b"<30>2026-12-02T05:30:00.5+00:00 gw01 app[1]: msg");
    assert_eq!(m.timestamp_ns, Some((NOW - 1800) * S + 500_000_000));
    assert_eq!(s(m.hostname), Some("gw01"));
    assert_eq!(m.message, b"msg");
}

#[test]
fn rfc3164_year_is_the_latest_not_a_week_ahead() {
    let new_year = ParseOptions {
        time_zone: TimeZone::Utc,
        now_unix: 1_798_761_610, // 2027-01-01T00:00:10Z
    };
    let m = parse(b"<13>Dec 31 23:59:59 h app: late", &new_year);
    assert_eq!(m.timestamp_ns, Some(1_798_761_599 * S), "last year's");
    let m = parse(b"<13>Jan  1 00:00:30 h app: ahead", &new_year);
    assert_eq!(
        m.timestamp_ns,
        Some((1_798_761_600 + 30) * S),
        "this year's"
    );
    let m = parse(b"<13>Jan  1 00:00:30 h app: fast clock", &utc());
    let m2 = parse(b"<13>Dec  2 06:00:30 h app: now", &utc());
    assert_eq!(m2.timestamp_ns, Some((NOW + 30) * S));
    assert!(
        m.timestamp_ns.unwrap() < NOW * S,
        "a month ahead is last January"
    );
}

#[test]
fn rfc3164_in_the_configured_zone() {
    let opts = ParseOptions {
        time_zone: TimeZone::parse("+02:00").unwrap(),
        now_unix: NOW,
    };
    let m = parse(b"<34>Oct 11 22:14:15 mymachine su: x", &opts);
    assert_eq!(m.timestamp_ns, Some(1_791_749_655 * S));
}

#[test]
fn not_syslog_is_kept_whole() {
    for line in [
        &b"hello"[..],
        b"<999>x",
        b"<>x",
        b"<013>x",
        b"\x00\xff\x01<",
        b"",
    ] {
        let m = p(line);
        assert_eq!(m.format, Format::Unparsed);
        assert_eq!(m.message, line);
        assert_eq!(m.severity, None);
        assert!(m.error.is_some());
    }
}

#[test]
fn time_zones_parse_and_print() {
    for (s, tz) in [
        ("UTC", TimeZone::Utc),
        ("local", TimeZone::Local),
        ("+02:00", TimeZone::Fixed(7200)),
        ("-0530", TimeZone::Fixed(-19800)),
    ] {
        assert_eq!(TimeZone::parse(s), Some(tz));
    }
    assert_eq!(TimeZone::Fixed(-19800).to_string(), "-05:30");
    for bad in ["", "+2", "+25:00", "Europe/Paris", "+02:00x"] {
        assert_eq!(TimeZone::parse(bad), None, "{bad}");
    }
}

#[test]
fn never_panics_on_prefixes_of_real_messages() {
    let samples: [&[u8]; 3] = [
        br#"<165>1 2003-10-11T22:14:15.003Z mymachine.example.com evntslog - ID47 [exampleSDID@32473 iut="3" eventSource="App\"x"] msg"#,
        b"<189>34: *Mar  1 2024 00:00:45.123 UTC: %SYS-5-CONFIG_I: Configured",
        b"<28>Mar 18 12:34:56 fw1 mgd[1234]: UI_COMMIT: x",
    ];
    for sample in samples {
        for n in 0..=sample.len() {
            let m = p(&sample[..n]);
            assert!(m.message.len() <= n);
        }
    }
}
