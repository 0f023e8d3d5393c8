//! Reuse of the large buffers the data path fills and drops at its own
//! pace: a file chunk, a block compressed or decompressed, a request body.
//!
//! Each is a few hundred KiB, allocated and freed hundreds of times a
//! second at full speed. Left to glibc, such a size either goes to `mmap`
//! (fresh pages, so a page fault for every 4 KiB written, then `munmap`)
//! or, once glibc's threshold has risen past it, into the heap, where the
//! holes it leaves between smaller allocations keep pages resident long
//! after the buffer is gone: most of the agent's peak RSS at full speed was
//! such holes (docs/configuration.md, "Memory"). A pool hands the same few
//! buffers round instead: their pages stay mapped and warm, and nothing
//! else lands between them.
//!
//! A pool is bounded twice: it keeps at most `keep` idle buffers, and none
//! larger than `max_capacity` (a rare huge one goes back to the allocator).
//! What it holds idle is therefore at most `keep × max_capacity`; what is
//! in use is what the data path has in flight, bounded by its own limits
//! (chunks queued to an appender, requests in flight).

use std::sync::Mutex;

use bytes::Bytes;

/// A bounded free list of values of one kind (see the module doc).
pub struct Pool<T> {
    free: Mutex<Vec<T>>,
    keep: usize,
}

impl<T: Reusable> Pool<T> {
    /// A pool that keeps at most `keep` idle values.
    pub const fn new(keep: usize) -> Pool<T> {
        Pool {
            free: Mutex::new(Vec::new()),
            keep,
        }
    }

    /// An empty value from the pool, or a new one.
    pub fn take(&self) -> T {
        self.lock().pop().unwrap_or_default()
    }

    /// Gives `value` back for reuse: emptied, and kept only if the pool
    /// has room and the value is not oversized.
    pub fn give(&self, mut value: T) {
        if !value.fits() {
            return;
        }
        value.clear();
        let mut free = self.lock();
        if free.len() < self.keep {
            free.push(value);
        }
    }

    /// Idle values held.
    pub fn idle(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<T>> {
        // A panic while holding the lock cannot leave the list half-changed
        // (a push or a pop), so a poisoned pool is still a good one.
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Pool<Vec<u8>> {
    /// A buffer with room for at least `capacity` bytes.
    pub fn take_with(&self, capacity: usize) -> Vec<u8> {
        let mut buf = self.take();
        buf.reserve(capacity);
        buf
    }

    /// `buf` as [`Bytes`] that give the buffer back to the pool when the
    /// last clone or slice of them is dropped: the buffer is reused however
    /// long its bytes are shared (a decompressed block lives as long as the
    /// events read from it).
    pub fn freeze(&'static self, buf: Vec<u8>) -> Bytes {
        Bytes::from_owner(Pooled {
            buf,
            pool: PoolRef(self),
        })
    }
}

/// What a pool can hold: emptied before reuse, and refused when larger
/// than the pool should keep.
pub trait Reusable: Default {
    fn clear(&mut self);
    fn fits(&self) -> bool;
}

/// The largest byte buffer a pool keeps: room for the largest chunk or
/// request body the defaults produce, with slack.
pub const MAX_BYTES_KEPT: usize = 4 << 20;

impl Reusable for Vec<u8> {
    fn clear(&mut self) {
        Vec::clear(self)
    }
    fn fits(&self) -> bool {
        self.capacity() <= MAX_BYTES_KEPT
    }
}

/// A vector of values (say a request's items) whose room is reused; the
/// values themselves are dropped when it is given back.
#[derive(Debug)]
pub struct Items<T>(pub Vec<T>);

impl<T> Default for Items<T> {
    fn default() -> Self {
        Items(Vec::new())
    }
}

/// The most elements a vector kept by a pool may have room for.
pub const MAX_ITEMS_KEPT: usize = 16_384;

impl<T> Reusable for Items<T> {
    fn clear(&mut self) {
        self.0.clear()
    }
    fn fits(&self) -> bool {
        self.0.capacity() <= MAX_ITEMS_KEPT
    }
}

struct PoolRef(&'static Pool<Vec<u8>>);

/// The owner behind [`Pool::freeze`]'s bytes.
struct Pooled {
    buf: Vec<u8>,
    pool: PoolRef,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        self.pool.0.give(std::mem::take(&mut self.buf));
    }
}

/// File chunks on their way from a tailer to the log.
pub static CHUNKS: Pool<Vec<u8>> = Pool::new(8);
/// Blocks decompressed for readers, shared by the events read from them.
pub static BLOCKS: Pool<Vec<u8>> = Pool::new(8);
/// Scratch room for compressing a block (its worst case), copied out at
/// the compressed size so that blocks waiting for the writer hold no slack.
pub static COMPRESS: Pool<Vec<u8>> = Pool::new(4);
/// Request bodies of sinks, given back when the request is done with.
pub static BODIES: Pool<Vec<u8>> = Pool::new(8);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frozen_bytes_come_back_when_the_last_slice_goes() {
        static P: Pool<Vec<u8>> = Pool::new(2);
        let mut buf = P.take_with(1000);
        buf.extend_from_slice(b"hello world");
        let ptr = buf.as_ptr();
        let bytes = P.freeze(buf);
        let slice = bytes.slice(6..);
        drop(bytes);
        assert_eq!(P.idle(), 0, "a slice still shares the buffer");
        assert_eq!(&slice[..], b"world");
        drop(slice);
        assert_eq!(P.idle(), 1);
        let again = P.take_with(10);
        assert_eq!(again.as_ptr(), ptr, "the same buffer is handed out again");
        assert!(again.is_empty() && again.capacity() >= 1000);
    }

    #[test]
    fn a_pool_keeps_no_more_than_it_may() {
        static P: Pool<Vec<u8>> = Pool::new(2);
        for _ in 0..3 {
            P.give(Vec::with_capacity(64));
        }
        assert_eq!(P.idle(), 2);
        P.take();
        P.give(Vec::with_capacity(MAX_BYTES_KEPT + 1));
        assert_eq!(
            P.idle(),
            1,
            "an oversized buffer goes back to the allocator"
        );
    }

    #[test]
    fn vectors_of_items_come_back_empty() {
        static P: Pool<Items<String>> = Pool::new(1);
        let mut v = P.take();
        v.0.push("x".to_string());
        P.give(v);
        let v = P.take();
        assert!(v.0.is_empty() && v.0.capacity() >= 1);
    }
}
