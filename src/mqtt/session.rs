//! The client options a new rumqttc event loop starts from, with the
//! password and TLS files read now (at each connect, so rotations and
//! changed passwords apply at the next reconnect).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls::ClientConfig;

use super::config::describe_auth;
use super::{Connection, Protocol};
use crate::checking::units::format_duration;
use crate::tls_material::{provider, read_pair, roots, PairError};

/// Why a connect could not even start: a file it needs.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("reading the MQTT password file {path}: {source}")]
    Password {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the MQTT password file {0} is empty")]
    EmptyPassword(PathBuf),
    #[error("the MQTT client certificate: {0}")]
    ClientCert(#[from] PairError),
    #[error("the MQTT TLS setup: {0:#}")]
    Tls(anyhow::Error),
}

/// A password file's text without its trailing line ending.
fn read_password(path: &Path) -> Result<String, ConnectError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConnectError::Password {
        path: path.to_path_buf(),
        source,
    })?;
    let password = text
        .strip_suffix('\n')
        .map(|t| t.strip_suffix('\r').unwrap_or(t))
        .unwrap_or(&text);
    if password.is_empty() {
        return Err(ConnectError::EmptyPassword(path.to_path_buf()));
    }
    Ok(password.to_string())
}

impl Connection {
    /// The user name and password, the file read now.
    fn credentials(&self) -> Result<Option<(String, String)>, ConnectError> {
        let Some(user) = &self.username else {
            return Ok(None);
        };
        let password = match &self.password_file {
            Some(path) => read_password(path)?,
            None => String::new(),
        };
        Ok(Some((user.clone(), password)))
    }

    /// The rustls config for `mqtts://`, files read now; `None` for
    /// `mqtt://`.
    fn tls_config(&self) -> Result<Option<Arc<ClientConfig>>, ConnectError> {
        let Some(files) = &self.tls else {
            return Ok(None);
        };
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| ConnectError::Tls(e.into()))?
            .with_root_certificates(roots(files.ca_file.as_deref()).map_err(ConnectError::Tls)?);
        let config = match (&files.client_cert_file, &files.client_key_file) {
            (Some(cert), Some(key)) => {
                let (chain, private) = read_pair(cert, key)?;
                builder
                    .with_client_auth_cert(chain, private)
                    .map_err(|reason| PairError::Mismatch {
                        cert: cert.clone(),
                        key: key.clone(),
                        reason,
                    })?
            }
            _ => builder.with_no_client_auth(),
        };
        Ok(Some(Arc::new(config)))
    }

    /// MQTT 5 options for a new event loop: broker, client id, keep-alive,
    /// credentials, TLS, the Session Expiry Interval and the connect
    /// timeout. `clean_start = false` keeps the broker's session (what the
    /// promise needs); `true` only to start over on purpose.
    pub fn options_v5(&self, clean_start: bool) -> Result<rumqttc::v5::MqttOptions, ConnectError> {
        let mut o = rumqttc::v5::MqttOptions::new(&self.client_id, &self.host, self.port);
        o.set_keep_alive(self.keep_alive)
            .set_clean_start(clean_start)
            .set_session_expiry_interval(Some(
                self.session_expiry.as_secs().min(u32::MAX as u64 - 1) as u32,
            ))
            .set_connection_timeout(self.connect_timeout.as_secs().max(1));
        if let Some((user, password)) = self.credentials()? {
            o.set_credentials(user, password);
        }
        if let Some(tls) = self.tls_config()? {
            o.set_transport(rumqttc::Transport::tls_with_config(
                rumqttc::TlsConfiguration::Rustls(tls),
            ));
        }
        Ok(o)
    }

    /// MQTT 3.1.1 options for a new event loop (see [`options_v5`]); give
    /// the event loop [`network_options`](Self::network_options) too, for
    /// the connect timeout.
    ///
    /// [`options_v5`]: Self::options_v5
    pub fn options_v311(&self, clean_session: bool) -> Result<rumqttc::MqttOptions, ConnectError> {
        let mut o = rumqttc::MqttOptions::new(&self.client_id, &self.host, self.port);
        o.set_keep_alive(self.keep_alive)
            .set_clean_session(clean_session);
        if let Some((user, password)) = self.credentials()? {
            o.set_credentials(user, password);
        }
        if let Some(tls) = self.tls_config()? {
            o.set_transport(rumqttc::Transport::tls_with_config(
                rumqttc::TlsConfiguration::Rustls(tls),
            ));
        }
        Ok(o)
    }

    /// The socket options of a 3.1.1 event loop: the connect timeout.
    pub fn network_options(&self) -> rumqttc::NetworkOptions {
        let mut n = rumqttc::NetworkOptions::new();
        n.set_connection_timeout(self.connect_timeout.as_secs().max(1));
        n
    }

    /// One line for `holdfast check`: broker, protocol, identity, session;
    /// a password's file, never its text.
    pub fn describe(&self) -> String {
        let tls = match &self.tls {
            None => String::new(),
            Some(t) => {
                let mut s = String::from(" over TLS");
                if let Some(ca) = &t.ca_file {
                    s += &format!(" (CA {})", ca.display());
                }
                if let Some(cert) = &t.client_cert_file {
                    s += &format!(" with the client certificate {}", cert.display());
                }
                s
            }
        };
        let session = match self.protocol {
            Protocol::V5 => format!(
                "a session kept {} after a disconnect",
                format_duration(self.session_expiry)
            ),
            Protocol::V311 => "a persistent session (clean_session = false)".into(),
        };
        format!(
            "MQTT {} to {}:{}{tls} as client {:?} {}, {session}, keep-alive {}",
            self.protocol.as_str(),
            self.host,
            self.port,
            self.client_id,
            describe_auth(&self.username, &self.password_file),
            format_duration(self.keep_alive),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_file_loses_one_line_ending_and_nothing_else() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("pass");
        std::fs::write(&p, "s3cret \n").unwrap();
        assert_eq!(read_password(&p).unwrap(), "s3cret ");
        std::fs::write(&p, "s3cret\r\n").unwrap();
        assert_eq!(read_password(&p).unwrap(), "s3cret");
        std::fs::write(&p, "\n").unwrap();
        assert!(matches!(
            read_password(&p),
            Err(ConnectError::EmptyPassword(_))
        ));
        let missing = d.path().join("missing");
        let e = read_password(&missing).unwrap_err().to_string();
        assert!(e.contains("missing") && e.contains("password file"), "{e}");
    }
}
