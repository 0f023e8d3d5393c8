//! A network sink's `tls` table, checked: the CA certificates it trusts
//! besides the system's, and the client certificate it presents to prove
//! which device it is (mTLS).

use super::Place;
use crate::checking::raw::raw_table;
use crate::checking::Checker;
use crate::sinks::credentials::{ClientCert, TlsFiles};

raw_table! {
    /// `tls.*`, as written.
    RawSinkTls, "a table with ca_file, client_cert_file and client_key_file" {
        /// PEM CA certificates to trust besides the system's.
        ca_file: String,
        /// PEM certificate chain, leaf first, presented to the receiver;
        /// needs `client_key_file`.
        client_cert_file: String,
        /// The PEM private key of `client_cert_file`.
        client_key_file: String,
    }
}

impl RawSinkTls {
    /// Sets `ca_file` and `client_cert` of `o`.
    pub(super) fn check(&self, cx: &mut Checker<'_>, p: &Place<'_, '_>, o: &mut TlsFiles) {
        let tkey = |k: &str| p.key(&format!("tls.{k}"));
        o.ca_file = cx.path(&tkey("ca_file"), self.ca_file.as_ref());
        let cert_file = cx.path(&tkey("client_cert_file"), self.client_cert_file.as_ref());
        let key_file = cx.path(&tkey("client_key_file"), self.client_key_file.as_ref());
        let lone = [
            (
                &self.client_cert_file,
                "client_cert_file",
                "client_key_file",
            ),
            (&self.client_key_file, "client_key_file", "client_cert_file"),
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
}
