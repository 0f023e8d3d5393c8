//! The HTTP transport the HTTP sinks share.

mod client;

pub(crate) use client::*;
