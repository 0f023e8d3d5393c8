//! The `holdfast` command line.

use clap::Parser;

/// holdfast: a telemetry agent for edge devices that keeps every record on
/// local disk until a backend has accepted it.
#[derive(Parser, Debug)]
#[command(version, about, long_about = None)]
struct Cli {}

fn main() {
    let _cli = Cli::parse();
    println!("holdfast {}: the daemon arrives with the next release; the segment log is in place (see README.md).", env!("CARGO_PKG_VERSION"));
}
