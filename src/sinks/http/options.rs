//! What the HTTP transport runs with besides the delivery options: the
//! shared network keys it reads (`compression`, `auth.*`, `tls.*`,
//! `headers`, `headers_file`).

use std::path::PathBuf;

use crate::sinks::credentials::TlsFiles;

/// The HTTP transport's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpOptions {
    pub compression: Compression,
    pub auth: Option<Auth>,
    pub tls: TlsFiles,
    /// Headers sent with every request, in config order.
    pub headers: Vec<Header>,
}

impl Default for HttpOptions {
    /// Gzip, no credentials, the system's CA certificates, no headers.
    fn default() -> HttpOptions {
        HttpOptions {
            compression: Compression::Gzip,
            auth: None,
            tls: TlsFiles::default(),
            headers: Vec::new(),
        }
    }
}

/// Request body compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    /// Compressed by the API itself, which also names it in its headers
    /// (remote write's snappy): not a value of the `compression` key.
    Snappy,
}

/// Credentials, always read from files (never written in the config).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// HTTP basic: a user and a file holding the password.
    Basic {
        user: String,
        password_file: PathBuf,
    },
    /// `Authorization: Bearer <token>`.
    Bearer { token_file: PathBuf },
    /// Elasticsearch API key: `Authorization: ApiKey <file content>` (the
    /// base64 `id:key` Elasticsearch hands out as `encoded`).
    ApiKey { key_file: PathBuf },
}

/// A header sent with every request (`headers` or `headers_file`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// As written; HTTP compares header names without case.
    pub name: String,
    pub value: HeaderValueFrom,
}

/// Where a header's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderValueFrom {
    /// Written in the config (`headers`).
    Inline(String),
    /// A secret read from this file at start (`headers_file`), trimmed
    /// like the `auth.*_file` secrets.
    File(PathBuf),
}
