//! A network sink's `tls` table, checked: the CA certificates it trusts
//! besides the system's, and the client certificate it presents to prove
//! which device it is (mTLS).

use serde::Deserialize;
use toml::Spanned;

use super::Place;
use crate::config::check::Checker;
use crate::sinks::{ClientCert, HttpSinkOptions};

/// `tls.*`, as written.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a table with ca_file, client_cert_file and client_key_file"
)]
pub(crate) struct RawSinkTls {
    /// PEM CA certificates to trust besides the system's.
    ca_file: Option<Spanned<String>>,
    /// PEM certificate chain, leaf first, presented to the receiver;
    /// needs `client_key_file`.
    client_cert_file: Option<Spanned<String>>,
    /// The PEM private key of `client_cert_file`.
    client_key_file: Option<Spanned<String>>,
}

pub(super) fn check_tls(
    cx: &mut Checker<'_>,
    p: &Place<'_, '_>,
    tls: &Spanned<RawSinkTls>,
    o: &mut HttpSinkOptions,
) {
    let raw = tls.get_ref();
    let tkey = |k: &str| p.key(&format!("tls.{k}"));
    o.ca_file = cx.path(&tkey("ca_file"), raw.ca_file.as_ref());
    let cert_file = cx.path(&tkey("client_cert_file"), raw.client_cert_file.as_ref());
    let key_file = cx.path(&tkey("client_key_file"), raw.client_key_file.as_ref());
    let lone = [
        (&raw.client_cert_file, "client_cert_file", "client_key_file"),
        (&raw.client_key_file, "client_key_file", "client_cert_file"),
    ];
    for (set, name, other) in lone {
        if let (Some(v), true) = (set, cert_file.is_some() != key_file.is_some()) {
            cx.error(
                Some(v.span()),
                &tkey(name),
                format!(
                    "tls.{name} is set but tls.{other} is not: a client certificate needs both \
                     the certificate chain and its private key (PEM files); set tls.{other}, or \
                     remove tls.{name} to connect without a client certificate"
                ),
            );
        }
    }
    if let (Some(cert_file), Some(key_file)) = (cert_file, key_file) {
        o.client_cert = Some(ClientCert {
            cert_file,
            key_file,
        });
    }
}
