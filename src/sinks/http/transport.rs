//! The one transport of every HTTP sink: the API builds the request and
//! reads the answer's body, the client sends it. A non-2xx status is a
//! refusal of the whole request, its body the explanation; a 2xx body is
//! read only up to the request's bound ([`response_limit`]).

use super::api::{HttpApi, Request};
use super::client::{response_limit, Client, Reply};
use super::options::HttpOptions;
use crate::event::Stored;
use crate::sinks::delivery::item::Item;
use crate::sinks::delivery::options::DeliveryOptions;
use crate::sinks::delivery::transport::{Answer, Refusal, Sent, Transport};

/// An HTTP receiver API and the client that reaches it.
pub(crate) struct HttpTransport<A> {
    api: A,
    client: Client,
}

impl<A: HttpApi> HttpTransport<A> {
    /// Fails (naming the file) when a credential, header, CA or client
    /// certificate file cannot be read.
    pub fn new(
        api: A,
        http: &HttpOptions,
        delivery: &DeliveryOptions,
    ) -> anyhow::Result<HttpTransport<A>> {
        let client = Client::new(http, delivery.request_timeout, delivery.concurrency)?;
        Ok(HttpTransport { api, client })
    }
}

impl<A: HttpApi> Transport for HttpTransport<A> {
    /// The body and how much of the answer may be read.
    type Request<'a> = (Request, usize);
    type Reply = Reply;

    fn route(&self, ev: &Stored) -> u64 {
        self.api.route(ev)
    }

    fn unsendable(&self, ev: &Stored) -> Option<&'static str> {
        self.api.unsendable(ev)
    }

    fn foreknown(&self, ev: &Stored) -> Option<Refusal> {
        self.api.foreknown(ev)
    }

    fn reads_points_in_place(&self) -> bool {
        self.api.reads_points_in_place()
    }

    fn in_order(&self) -> bool {
        self.api.in_order()
    }

    fn learn_refusal(&self, items: &[Item], refusal: &Refusal) {
        self.api.learn_refusal(items, refusal)
    }

    fn prepare<'a>(&'a self, items: &'a [Item], request: usize) -> (Request, usize) {
        (self.api.encode(items, request), response_limit(items.len()))
    }

    async fn send(&self, (request, limit): (Request, usize)) -> Sent<Reply> {
        let target = request.url.clone();
        let (reply, wire) = self.client.send(request, limit).await;
        Sent {
            target,
            reply,
            wire,
        }
    }

    fn judge(&self, reply: Reply, events: usize) -> Answer {
        match reply {
            Reply::Transport { kind, message } => Answer::Transport { kind, message },
            Reply::Response {
                status,
                truncated: true,
                ..
            } if (200..300).contains(&status) => Answer::TooLarge {
                status,
                limit: response_limit(events),
            },
            Reply::Response {
                status,
                content_type,
                body,
                ..
            } if (200..300).contains(&status) => Answer::Read {
                status,
                verdict: self.api.parse(content_type.as_deref(), &body, events),
            },
            // The status decides; a body cut at the limit only shortens the
            // error text.
            Reply::Response {
                status,
                retry_after,
                content_type,
                body,
                ..
            } => {
                let error = self.api.error_text(content_type.as_deref(), &body);
                match self.api.refused_events(status, &error) {
                    Some((reason, newer_first)) => Answer::SomeRefused {
                        status,
                        reason,
                        error,
                        newer_first,
                    },
                    None => Answer::Refused {
                        status,
                        retry_after,
                        error,
                    },
                }
            }
        }
    }
}
