use std::path::Path;

use toml::de::DeTable;

use super::*;
use crate::checking::text::SourceText;
use crate::mqtt::ConnectError;

mqtt_table! {
    /// A component's table as the components write theirs.
    struct RawTestTable {
        topic: Option<Spanned<String>>,
    }
}

/// The table's connection checked: what it gives, and each error as
/// (key, message).
fn check(text: &str) -> (Option<Connection>, Vec<(String, String)>) {
    let src = SourceText::new(text, Path::new("/etc/holdfast/holdfast.toml"));
    let root = DeTable::parse(text).unwrap();
    let mut cx = Checker::new(&src, root.get_ref(), "/etc/holdfast".into());
    let raw: RawTestTable = cx
        .deserialize("t", root.get_ref().get("t").unwrap())
        .unwrap();
    let _ = &raw.topic;
    let key = |k: &str| format!("sources.m.{k}");
    let conn = raw.connection().check(&mut cx, &key, 0..1, "m");
    let (errors, _, _) = cx.finish();
    let errors = errors.into_iter().map(|d| (d.key, d.message)).collect();
    (conn, errors)
}

#[test]
fn defaults_give_a_persistent_mqtt_5_session_on_1883() {
    let (c, errors) = check("[t]\nurl = \"mqtt://127.0.0.1\"\n");
    assert!(errors.is_empty(), "{errors:?}");
    let c = c.unwrap();
    assert_eq!(
        (c.host.as_str(), c.port, c.tls.is_none()),
        ("127.0.0.1", 1883, true)
    );
    assert_eq!(c.protocol, Protocol::V5);
    assert!(
        c.client_id.starts_with("holdfast-") && c.client_id.ends_with("-m"),
        "{}",
        c.client_id
    );
    assert_eq!(c.keep_alive, defaults::KEEP_ALIVE);
    assert_eq!(c.session_expiry, defaults::SESSION_EXPIRY);
    let o = c.options_v5(false).unwrap();
    assert!(!o.clean_start());
    assert_eq!(o.session_expiry_interval(), Some(86_400));
    assert!(!c.options_v311(false).unwrap().clean_session());
}

#[test]
fn mqtts_is_tls_on_8883_and_ipv6_hosts_lose_their_brackets() {
    let (c, errors) = check("[t]\nurl = \"mqtts://[::1]\"\nprotocol = \"3.1.1\"\n");
    assert!(errors.is_empty(), "{errors:?}");
    let c = c.unwrap();
    assert_eq!((c.host.as_str(), c.port), ("::1", 8883));
    assert_eq!(c.tls, Some(TlsFiles::default()));
    assert_eq!(c.protocol, Protocol::V311);
}

#[test]
fn every_wrong_key_is_named_with_what_to_do() {
    let cases = [
        ("", "url", "needs the broker"),
        ("url = \"http://h:1\"", "url", "is not MQTT"),
        ("url = \"mqtt://u:p@h\"", "url", "password_file"),
        ("url = \"mqtt://h/topic\"", "url", "no path"),
        ("url = \"mqtt://h\"\nprotocol = \"4\"", "protocol", "3.1.1"),
        ("url = \"mqtt://h\"\nclient_id = \"a+b\"", "client_id", "'+'"),
        ("url = \"mqtt://h\"\nkeep_alive = \"20h\"", "keep_alive", "65535"),
        ("url = \"mqtt://h\"\nsession_expiry = \"0s\"", "session_expiry", "forget the session"),
        ("url = \"mqtt://h\"\npassword_file = \"/p\"", "password_file", "username"),
        ("url = \"mqtt://h\"\ntls.ca_file = \"/ca.pem\"", "tls", "mqtts://"),
        ("url = \"mqtts://h\"\ntls.client_cert_file = \"/c.pem\"", "tls.client_cert_file", "client_key_file"),
        (
            "url = \"mqtt://h\"\nreconnect_backoff_initial = \"10s\"\nreconnect_backoff_max = \"1s\"",
            "reconnect_backoff_max",
            "at least as long",
        ),
    ];
    for (text, key, words) in cases {
        let (_, errors) = check(&format!("[t]\n{text}\n"));
        assert!(
            errors
                .iter()
                .any(|(k, m)| k.ends_with(&format!(".{key}")) && m.contains(words)),
            "{text:?}: wanted an error on {key} saying {words:?}, got {errors:?}"
        );
    }
}

#[test]
fn a_client_certificate_is_read_at_each_connect_and_its_trouble_is_a_connect_error() {
    let d = tempfile::tempdir().unwrap();
    let text = format!(
        "[t]\nurl = \"mqtts://127.0.0.1:8883\"\ntls.client_cert_file = \"{0}/c.pem\"\n\
         tls.client_key_file = \"{0}/k.pem\"\nusername = \"dev\"\npassword_file = \"{0}/pass\"\n",
        d.path().display()
    );
    let (c, errors) = check(&text);
    assert!(errors.is_empty(), "{errors:?}");
    let c = c.unwrap();
    std::fs::write(d.path().join("pass"), "pw\n").unwrap();
    let e = c.options_v5(false).unwrap_err();
    assert!(matches!(e, ConnectError::ClientCert(_)), "{e}");
    assert!(
        c.describe().contains("with the password in"),
        "{}",
        c.describe()
    );
    assert!(!c.describe().contains("pw"), "{}", c.describe());
    assert_eq!(c.files().len(), 3);
}
