//! The HTTP transport every HTTP sink shares (`otlp_http`,
//! `elasticsearch`, `openobserve`): each brings its API ([`HttpApi`]:
//! build a request, read a 2xx body) and gets the rest here.
//!
//! | file | concept |
//! |------|---------|
//! | `api.rs` | the seam an HTTP receiver API implements |
//! | `transport.rs` | [`HttpTransport`]: an API and a client as the delivery runtime's `Transport` |
//! | `client.rs` | the HTTP client: rustls, timeouts, gzip, credentials and headers from files, answers read up to a bound |
//! | `options.rs` | what it runs with: `compression`, `auth.*`, `tls.*`, `headers` |

mod api;
mod client;
mod options;
mod transport;

pub(crate) use api::{json_answer, HttpApi, Request};
pub use options::{Auth, Compression, Header, HeaderValueFrom, HttpOptions};
pub(crate) use transport::HttpTransport;
