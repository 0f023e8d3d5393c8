/*!
Sources: where events come from. Each source turns its input into
[`Envelope`](crate::event::Envelope)s and appends them to the log, and
acknowledges its input (a file checkpoint, an HTTP response) only after the
append is durable.

* [`file`] — tails files through rotation, truncation, crashes and bad lines,
  without losing or repeating a line.
* [`otlp_http`] — an OTLP/HTTP receiver (protobuf and JSON) that answers 200
  only once a request's records are durable.
*/

pub mod file;
pub mod otlp_http;
