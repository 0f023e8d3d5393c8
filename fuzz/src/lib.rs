//! Shared code of the holdfast fuzz targets; see `docs/fuzzing.md`.

pub mod checks;
pub mod readers;
