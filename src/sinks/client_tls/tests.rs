use std::path::PathBuf;

use super::*;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/otlp/tls")
        .join(name)
}

#[test]
fn a_pair_loads_and_a_wrong_pair_says_why() {
    assert!(load_pair(&fixture("cert.pem"), &fixture("key.pem")).is_ok());
    let e = load_pair(&fixture("ca.pem"), &fixture("key.pem")).unwrap_err();
    assert!(matches!(e, PairError::Mismatch { .. }), "{e}");
    assert!(
        e.to_string().contains("does not fit the certificate"),
        "{e}"
    );
    let e = load_pair(&fixture("key.pem"), &fixture("key.pem")).unwrap_err();
    assert!(matches!(e, PairError::NoCert(_)), "{e}");
    let e = load_pair(&fixture("cert.pem"), &fixture("cert.pem")).unwrap_err();
    assert!(matches!(e, PairError::Key { .. }), "{e}");
}

#[test]
fn changed_files_are_loaded_and_a_bad_pair_keeps_the_current_one() {
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("client.pem");
    let key = dir.path().join("client.key");
    std::fs::copy(fixture("cert.pem"), &cert).unwrap();
    std::fs::copy(fixture("key.pem"), &key).unwrap();
    let id = ClientIdentity::load(&cert, &key).unwrap();
    let first = id.resolve(&[], &[]).unwrap();
    let later = |n: u32| Instant::now() + CHECK_INTERVAL * n;

    // Half a rotation: a certificate the key does not fit.
    std::fs::copy(fixture("ca.pem"), &cert).unwrap();
    assert_eq!(
        id.refresh_at(Instant::now()),
        0,
        "looked before the interval"
    );
    assert_eq!(id.refresh_at(later(2)), 0);
    assert!(Arc::ptr_eq(&first, &id.resolve(&[], &[]).unwrap()));
    // Unchanged since the failed try: not loaded (nor logged) again.
    assert_eq!(id.refresh_at(later(4)), 0);

    // The rotation completes.
    let tmp = dir.path().join("client.pem.new");
    std::fs::copy(fixture("cert.pem"), &tmp).unwrap();
    std::fs::rename(&tmp, &cert).unwrap();
    assert_eq!(id.refresh_at(later(6)), 1);
    assert!(!Arc::ptr_eq(&first, &id.resolve(&[], &[]).unwrap()));
    assert_eq!(id.refresh_at(later(8)), 1, "nothing changed since");
}

#[test]
fn a_missing_pair_fails_at_start_naming_the_file() {
    let e = ClientTls::new(
        None,
        Some((Path::new("/nonexistent/c.pem"), &fixture("key.pem"))),
    )
    .err()
    .unwrap();
    assert!(format!("{e:#}").contains("/nonexistent/c.pem"), "{e:#}");
}

#[test]
fn the_ca_file_is_trusted() {
    assert!(ClientTls::new(Some(&fixture("ca.pem")), None).is_ok());
    let e = ClientTls::new(Some(Path::new("/nonexistent/ca.pem")), None)
        .err()
        .unwrap();
    assert!(format!("{e:#}").contains("reading the CA file"), "{e:#}");
}
