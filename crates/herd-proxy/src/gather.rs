//! Response bodies whose frames gather every stored chunk that is ready now, without copying,
//! so hyper writes a cached body with one `writev` instead of one write per stored chunk.
//!
//! Why: a stored body is the chunks the origin's reads produced (about 8 per MiB here). hyper
//! polls one frame, queues it, and flushes as soon as its write buffer holds `max_buf_size`
//! bytes (which is also the request-head limit, 64 KiB by default, so it cannot simply be
//! raised): each chunk became its own `writev`, five or more syscalls per 1 MiB hit where
//! Varnish makes one. [`Gathered`] is a `Buf` over several `Bytes` whose `chunks_vectored` hands
//! them all to hyper's vectored write; [`Gather`] fills it from the reader with every chunk that
//! is ready without waiting (a body still arriving is sent as soon as each chunk arrives, as
//! before), up to [`MAX_BYTES`] / [`MAX_CHUNKS`]. An error or trailers that come after gathered
//! data are held for the next poll, so nothing is lost or reordered: a truncation still ends the
//! response with an error after the bytes that came before it.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut as _, Bytes};
use http_body::{Body, Frame, SizeHint};

/// At most this many bytes per gathered frame (hyper writes it in one go).
pub(crate) const MAX_BYTES: usize = 2 << 20;
/// At most this many chunks per frame (hyper's vectored write takes up to 64 slices, the
/// response head and chunked framing included).
pub(crate) const MAX_CHUNKS: usize = 48;

/// One or more `Bytes`, read in order.
#[derive(Debug, Default)]
pub(crate) struct Gathered {
    chunks: VecDeque<Bytes>,
    remaining: usize,
}

impl From<Bytes> for Gathered {
    fn from(bytes: Bytes) -> Self {
        let mut gathered = Gathered::default();
        gathered.push(bytes);
        gathered
    }
}

impl Gathered {
    fn push(&mut self, bytes: Bytes) {
        if !bytes.is_empty() {
            self.remaining += bytes.len();
            self.chunks.push_back(bytes);
        }
    }
}

impl Buf for Gathered {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        self.chunks.front().map_or(&[], |b| b.as_ref())
    }

    fn advance(&mut self, mut cnt: usize) {
        assert!(cnt <= self.remaining, "advance past the end of a Gathered");
        self.remaining -= cnt;
        while cnt > 0 {
            let Some(front) = self.chunks.front_mut() else {
                return;
            };
            if cnt < front.len() {
                front.advance(cnt);
                return;
            }
            cnt -= front.len();
            self.chunks.pop_front();
        }
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        for (slot, chunk) in dst.iter_mut().zip(&self.chunks) {
            *slot = IoSlice::new(chunk);
            n += 1;
        }
        n
    }

    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        // One chunk covers it: hand out a slice of it, no copy (HTTP/2 sends frames this way).
        match self.chunks.front_mut() {
            Some(front) if front.len() >= len => {
                let out = front.split_to(len);
                if front.is_empty() {
                    self.chunks.pop_front();
                }
                self.remaining -= len;
                out
            }
            _ => {
                assert!(
                    len <= self.remaining,
                    "copy_to_bytes past the end of a Gathered"
                );
                let mut out = bytes::BytesMut::with_capacity(len);
                out.put((&mut *self).take(len));
                out.freeze()
            }
        }
    }
}

/// A frame of `Bytes` as a frame of [`Gathered`] (for bodies that are not gathered).
pub(crate) fn one(frame: Frame<Bytes>) -> Frame<Gathered> {
    frame.map_data(Gathered::from)
}

/// A body whose data frames gather every chunk of `inner` that is ready now (see the module doc).
pub(crate) struct Gather<B: Body> {
    inner: B,
    /// A non-data frame or an error that followed gathered data: returned by the next poll.
    held: Option<Result<Frame<Bytes>, B::Error>>,
}

impl<B: Body> Gather<B> {
    pub(crate) fn new(inner: B) -> Self {
        Gather { inner, held: None }
    }
}

impl<B> Body for Gather<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Unpin,
{
    type Data = Gathered;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Gathered>, Self::Error>>> {
        let this = &mut *self;
        if let Some(held) = this.held.take() {
            return Poll::Ready(Some(held.map(one)));
        }
        let mut gathered = Gathered::default();
        while gathered.remaining < MAX_BYTES && gathered.chunks.len() < MAX_CHUNKS {
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => gathered.push(data),
                    Err(other) if gathered.remaining == 0 => {
                        return Poll::Ready(Some(Ok(one(other))));
                    }
                    Err(other) => {
                        this.held = Some(Ok(other));
                        break;
                    }
                },
                Poll::Ready(Some(Err(error))) if gathered.remaining == 0 => {
                    return Poll::Ready(Some(Err(error)));
                }
                Poll::Ready(Some(Err(error))) => {
                    this.held = Some(Err(error));
                    break;
                }
                // Pending (the waker is registered: the next chunk wakes us) or the end.
                Poll::Ready(None) | Poll::Pending if gathered.remaining > 0 => break,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Some(Ok(Frame::data(gathered))))
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};

    fn data(s: &'static str) -> Result<Frame<Bytes>, &'static str> {
        Ok(Frame::data(Bytes::from_static(s.as_bytes())))
    }

    #[tokio::test]
    async fn ready_chunks_become_one_frame_and_an_error_still_follows_them() {
        let inner = StreamBody::new(futures::stream::iter([
            data("ab"),
            data("cd"),
            data("e"),
            Err("origin died"),
        ]));
        let mut body = Gather::new(inner);
        let frame = body.frame().await.unwrap().unwrap();
        let mut gathered = frame.into_data().unwrap();
        assert_eq!(gathered.remaining(), 5);
        let mut slices = [IoSlice::new(&[]); 8];
        assert_eq!(gathered.chunks_vectored(&mut slices), 3);
        assert_eq!(gathered.copy_to_bytes(5), Bytes::from_static(b"abcde"));
        // The error is not lost behind the data, and nothing looks like a clean end before it.
        assert!(!body.is_end_stream());
        assert_eq!(body.frame().await.unwrap().unwrap_err(), "origin died");
    }

    #[test]
    fn advance_and_copy_cross_chunks() {
        let mut g = Gathered::from(Bytes::from_static(b"hello "));
        g.push(Bytes::from_static(b"world"));
        g.advance(3);
        assert_eq!(g.chunk(), b"lo ");
        assert_eq!(g.copy_to_bytes(2), Bytes::from_static(b"lo"));
        assert_eq!(g.copy_to_bytes(4), Bytes::from_static(b" wor"));
        assert_eq!(g.remaining(), 2);
        g.advance(2);
        assert_eq!(g.remaining(), 0);
        assert!(g.chunk().is_empty());
    }
}
