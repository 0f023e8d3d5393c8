//! The operator's subcommands that work on holdfast's files rather than
//! run the daemon: what `main.rs` parses, done here.

pub mod forget;
pub mod quarantine;
pub mod sample;
