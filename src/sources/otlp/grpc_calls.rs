/*!
Where the calls of a gRPC connection run: hyper hands each new HTTP/2 stream
to an executor ([`Calls`]), and this one keeps the connection's first call
in flight on the connection's own task, as an HTTP/1.1 request is.

Spawning a task per call (hyper_util's `TokioExecutor`) cost OTLP/gRPC in
more server CPU per record than OTLP/HTTP on the same requests (issue 29's
bench): a task allocated per call, a trip through the scheduler, an idle
worker woken to steal it, and then every frame crossing between two tasks,
often two threads: the connection's (which reads the DATA frames and writes
the answer) and the call's (which reads the body and queues the answer).

So the connection's loop (`grpc_server.rs`) polls the call [`Inline`] holds
beside the connection. A call that arrives while another of the same
connection is in flight is spawned, as before, so a client that sends many
calls at once over one connection (the Collector's exporter does) still has
them decoded on every worker.
*/

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Context;

type Call = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The executor hyper is built with, one per connection.
#[derive(Clone, Default)]
pub(crate) struct Calls {
    /// Shared by hyper's copies of the executor (inside the connection)
    /// and the connection's [`Inline`]; hyper hands calls over only while
    /// the connection is polled, so on the connection's task: uncontended.
    shared: Arc<Mutex<Handover>>,
}

#[derive(Default)]
struct Handover {
    /// A call hyper handed over for the connection's task, not yet taken.
    next: Option<Call>,
    /// Whether the connection's task has a call (taken or not): the next
    /// one is spawned until it ends.
    busy: bool,
}

impl Calls {
    fn lock(&self) -> MutexGuard<'_, Handover> {
        // A panic cannot leave the two fields inconsistent.
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the connection's loop polls the inline call through.
    pub(crate) fn inline(&self) -> Inline {
        Inline {
            calls: self.clone(),
            running: None,
        }
    }
}

impl<F> hyper::rt::Executor<F> for Calls
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, call: F) {
        let mut h = self.lock();
        if h.busy {
            drop(h);
            tokio::spawn(call);
            return;
        }
        h.busy = true;
        h.next = Some(Box::pin(call));
    }
}

/// The call running on the connection's task, if any.
pub(crate) struct Inline {
    calls: Calls,
    running: Option<Call>,
}

impl Inline {
    /// Polls the inline call, first taking the one hyper handed over if
    /// there is none. True when a call ended here: its answer is queued in
    /// the connection, which is worth polling again to send it now.
    pub(crate) fn poll_call(&mut self, cx: &mut Context<'_>) -> bool {
        if self.running.is_none() {
            self.running = self.calls.lock().next.take();
        }
        let Some(call) = &mut self.running else {
            return false;
        };
        if call.as_mut().poll(cx).is_pending() {
            return false;
        }
        self.running = None;
        self.calls.lock().busy = false;
        true
    }

    /// Runs the inline call to its end, once the connection has ended
    /// under it: as a spawned call would, so that an append underway is
    /// finished rather than cut off (the answer has nowhere to go).
    pub(crate) async fn finish(mut self) {
        std::future::poll_fn(|cx| {
            if self.poll_call(cx) || self.running.is_none() {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::rt::Executor;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn the_first_call_runs_inline_and_a_concurrent_one_is_spawned() {
        let calls = Calls::default();
        let mut inline = calls.inline();
        let ran = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let r = ran.clone();
        calls.execute(async move {
            let _ = rx.await;
            r.fetch_add(1, Ordering::SeqCst);
        });
        // The second, while the first waits: spawned, and it runs alone.
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let r = ran.clone();
        calls.execute(async move {
            r.fetch_add(10, Ordering::SeqCst);
            let _ = done_tx.send(());
        });
        done_rx.await.unwrap();
        assert_eq!(ran.load(Ordering::SeqCst), 10);
        // The first runs only when polled through `inline`.
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(!inline.poll_call(&mut cx));
        tx.send(()).unwrap();
        assert!(inline.poll_call(&mut cx));
        assert_eq!(ran.load(Ordering::SeqCst), 11);
        // Free again: the next call is inline.
        let r = ran.clone();
        calls.execute(async move {
            r.fetch_add(100, Ordering::SeqCst);
        });
        assert!(inline.poll_call(&mut cx));
        assert_eq!(ran.load(Ordering::SeqCst), 111);
    }
}
