//! [`Settings::check_environment`]: the checks that need the machine,
//! over a whole config. A config can be valid and still fail here (the
//! data directory is not writable by this user, a port is taken, a token
//! file is missing); the probes are `crate::checking::Env`'s, and each
//! component runs those its table needs.

use super::settings::Settings;
use crate::checking::{Diagnostic, Env};

impl Settings {
    /// Checks this config against the machine it runs on: the data
    /// directory and each file sink's directory can be created and written
    /// (by trying, then cleaning up); the data directory is not on a RAM
    /// file system; every listen address can be bound (port 0 is skipped);
    /// token, certificate and key files are readable (and not readable by
    /// everyone); tailed files exist and can be read (warnings only: they
    /// may appear later).
    ///
    /// Returns errors (holdfast would fail to start or to work) and warnings,
    /// each naming the key and, when the key is in the file, its line.
    pub fn check_environment(&self) -> Vec<Diagnostic> {
        let log_dir = self.log_dir();
        let mut env = Env::new(
            &self.config_file,
            &self.origins,
            &self.secrets,
            &self.data_dir,
            &log_dir,
        );

        env.writable_dir("data_dir", &self.log_dir());
        env.not_in_ram("data_dir", &self.data_dir);
        for sink in self.sinks.values() {
            sink.kind
                .component()
                .check_environment(&sink.name, &mut env);
        }

        env.bindable("api.listen", self.api.listen);
        for source in self.sources.values() {
            source
                .kind
                .component()
                .check_environment(&source.name, &mut env);
        }
        env.finish()
    }
}

// Its table is a journald source.
#[cfg(all(test, feature = "journald"))]
mod tests {
    use crate::checking::{Env, Position, Severity};

    /// `check --json` gave a table's finding (the journald source's
    /// readability) no line: it is placed where the table's `type` is.
    #[test]
    fn a_finding_about_a_table_is_placed_at_its_type() {
        let s = crate::config::parse(
            "[sources.j]\ntype = \"journald\"\n\n[sinks.a]\ntype = \"file\"\ninputs = [\"j\"]\n",
            "/etc/holdfast/holdfast.toml",
        )
        .expect("a valid config");
        let log_dir = s.log_dir();
        let mut env = Env::new(
            &s.config_file,
            &s.origins,
            &s.secrets,
            &s.data_dir,
            &log_dir,
        );
        env.push(Severity::Warning, "sources.j", "not readable".into());
        env.push(Severity::Warning, "sinks.a.inputs", "written".into());
        let at: Vec<_> = env.finish().iter().map(|d| d.position).collect();
        assert_eq!(
            at,
            [
                Some(Position { line: 2, column: 8 }),
                Some(Position {
                    line: 6,
                    column: 10
                })
            ]
        );
    }
}
