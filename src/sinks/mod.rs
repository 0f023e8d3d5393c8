/*!
Sinks: the log's consumers. Each sink reads from its own cursor, delivers,
and commits only what is finished, so a restart resumes exactly where
delivery stopped.

* [`file`] — NDJSON files in a directory, for air-gapped devices and the
  default configuration.
*/

pub mod file;
