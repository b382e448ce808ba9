//! Body adapters: a [`BodyReader`] as a `futures::Stream` ([`BodyStream`]) and, with the
//! `http-body` feature, as an `http_body::Body` ([`HttpBody`]).
//!
//! Why they exist: HTTP servers and stream combinators consume bodies as streams, and the one
//! thing an adapter must not lose is the difference between "the write finished" and "the write
//! died". Both adapters end cleanly only where the reader returned `Ok(None)`; an aborted write
//! becomes an `Err` item / a body error. For hyper that error means the response ends without its
//! terminating chunk (HTTP/1.1 chunked), short of its `Content-Length`, or with `RST_STREAM`
//! (HTTP/2), so the client sees a broken transfer, never a short body that looks whole.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::{FusedStream, Stream};

use crate::error::BodyError;
use crate::traits::BodyReader;

/// One `read` in flight; owns the reader so the future is `'static` and the stream needs no
/// self-reference.
type ReadFuture = BoxFuture<'static, (Box<dyn BodyReader>, Result<Option<Bytes>, BodyError>)>;

enum State {
    /// Between reads: the reader is here.
    Idle(Box<dyn BodyReader>),
    /// A read is in flight; the reader is inside the future.
    Reading(ReadFuture),
    /// The body ended (cleanly, or with the error already yielded).
    Done,
}

/// A [`BodyReader`] as a `Stream<Item = Result<Bytes, BodyError>>`.
///
/// The stream ends (`None`) after the last byte of a successfully finished write. If the write
/// was aborted it yields every written byte, then one `Err(BodyError::Aborted(_))`, then `None`:
/// **an `Err` item is the end of the body**, and a consumer must not treat the `None` after it as
/// a clean end. Other reader errors (`WaitTimedOut`, `Io`) also end the stream, because a body
/// with a gap cannot be resumed by a stream consumer.
///
/// Cancel safety: dropping the stream while a read is pending drops that read, which loses
/// nothing (the reader's `read` is cancel safe), and detaches the reader from the write.
pub struct BodyStream {
    state: State,
}

impl fmt::Debug for BodyStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Idle(_) => "idle",
            State::Reading(_) => "reading",
            State::Done => "done",
        };
        f.debug_struct("BodyStream").field("state", &state).finish()
    }
}

impl BodyStream {
    /// Stream the rest of `reader` (from its current position, within its range after a `seek`).
    pub fn new(reader: Box<dyn BodyReader>) -> Self {
        BodyStream {
            state: State::Idle(reader),
        }
    }
}

impl From<Box<dyn BodyReader>> for BodyStream {
    fn from(reader: Box<dyn BodyReader>) -> Self {
        BodyStream::new(reader)
    }
}

impl Stream for BodyStream {
    type Item = Result<Bytes, BodyError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            match std::mem::replace(&mut self.state, State::Done) {
                State::Done => return Poll::Ready(None),
                State::Idle(mut reader) => {
                    self.state = State::Reading(Box::pin(async move {
                        let result = reader.read().await;
                        (reader, result)
                    }));
                }
                State::Reading(mut read) => match read.as_mut().poll(cx) {
                    Poll::Pending => {
                        self.state = State::Reading(read);
                        return Poll::Pending;
                    }
                    Poll::Ready((reader, Ok(Some(chunk)))) => {
                        self.state = State::Idle(reader);
                        return Poll::Ready(Some(Ok(chunk)));
                    }
                    // The reader is dropped here: the body is over either way.
                    Poll::Ready((_reader, Ok(None))) => return Poll::Ready(None),
                    Poll::Ready((_reader, Err(error))) => return Poll::Ready(Some(Err(error))),
                },
            }
        }
    }
}

impl FusedStream for BodyStream {
    fn is_terminated(&self) -> bool {
        matches!(self.state, State::Done)
    }
}

#[cfg(feature = "http-body")]
pub use http::HttpBody;

#[cfg(feature = "http-body")]
mod http {
    use super::*;
    use crate::state::AbortReason;
    use futures::StreamExt;
    use http_body::{Body, Frame, SizeHint};

    /// A [`BodyReader`] as an `http_body::Body` (feature `http-body`).
    ///
    /// Data frames are the reader's chunks; there are no trailers. An aborted write is a body
    /// error (`BodyError::Aborted`), which hyper turns into a broken response: no terminating
    /// chunk, fewer bytes than `Content-Length`, or `RST_STREAM`. A body never ends cleanly
    /// unless the reader returned `Ok(None)`.
    ///
    /// With [`HttpBody::with_exact_len`] the body also reports an exact size hint (hyper then
    /// sends a `Content-Length` when the response has none) and checks it: a clean end short of
    /// that length, or more bytes than it, is an error (`AbortReason::LengthMismatch`), so a
    /// declared length is never contradicted silently.
    ///
    /// Cancel safety: as [`BodyStream`] (dropping the body detaches the reader and loses nothing).
    #[derive(Debug)]
    pub struct HttpBody {
        stream: BodyStream,
        /// Bytes still owed when the length is known.
        remaining: Option<u64>,
        /// Bytes sent so far (for the mismatch error).
        sent: u64,
        /// End cleanly once `remaining` is 0 ([`HttpBody::ending_at_len`]).
        end_at_len: bool,
    }

    impl HttpBody {
        /// The rest of `reader`, length unknown.
        pub fn new(reader: Box<dyn BodyReader>) -> Self {
            HttpBody {
                stream: BodyStream::new(reader),
                remaining: None,
                sent: 0,
                end_at_len: false,
            }
        }

        /// Declare that the reader delivers exactly `len` more bytes (for instance a completed
        /// body's length, or a range's length).
        pub fn with_exact_len(mut self, len: u64) -> Self {
            self.remaining = Some(len);
            self
        }

        /// With [`with_exact_len`](Self::with_exact_len), for a reader restricted to a range
        /// (`seek`): end cleanly once that many bytes are sent, without waiting for the write
        /// to finish. A range's bytes are final once written, so its client neither waits for
        /// the rest of the download nor is failed by an abort after its last byte (over
        /// HTTP/1.1 hyper stops at the `Content-Length` anyway; over HTTP/2 it polls until the
        /// body says it ended, so a 2-byte range of a body still arriving was held open for the
        /// whole download). Without it, the end is clean only once the write completes.
        pub fn ending_at_len(mut self) -> Self {
            self.end_at_len = true;
            self
        }

        /// Every declared byte is sent and the body may end without waiting for the write.
        fn ended_at_len(&self) -> bool {
            self.end_at_len && self.remaining == Some(0)
        }

        fn mismatch(&self, extra: u64) -> BodyError {
            let expected = self.sent + self.remaining.unwrap_or(0);
            BodyError::Aborted(AbortReason::LengthMismatch {
                expected,
                written: self.sent + extra,
            })
        }
    }

    impl Body for HttpBody {
        type Data = Bytes;
        type Error = BodyError;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
            // With every declared byte sent the stream is still polled: the body must end
            // cleanly, and an abort or a surplus byte after the last declared one is reported
            // (unless the body ends at its length: a range).
            if self.ended_at_len() {
                return Poll::Ready(None);
            }
            match self.stream.poll_next_unpin(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(Some(Ok(chunk))) => {
                    let n = chunk.len() as u64;
                    if let Some(remaining) = self.remaining {
                        if n > remaining {
                            let error = self.mismatch(n);
                            self.stream = BodyStream { state: State::Done };
                            return Poll::Ready(Some(Err(error)));
                        }
                        self.remaining = Some(remaining - n);
                    }
                    self.sent += n;
                    Poll::Ready(Some(Ok(Frame::data(chunk))))
                }
                Poll::Ready(Some(Err(error))) => Poll::Ready(Some(Err(error))),
                Poll::Ready(None) => match self.remaining {
                    Some(remaining) if remaining > 0 => {
                        let error = self.mismatch(0);
                        self.remaining = Some(0);
                        Poll::Ready(Some(Err(error)))
                    }
                    _ => Poll::Ready(None),
                },
            }
        }

        fn is_end_stream(&self) -> bool {
            // Only a stream that already ended cleanly is known to be at its end; with a known
            // length of 0 the write may still abort, and that must reach the client (unless the
            // body ends at its length: a range).
            self.stream.is_terminated() || self.ended_at_len()
        }

        fn size_hint(&self) -> SizeHint {
            match self.remaining {
                Some(remaining) => SizeHint::with_exact(remaining),
                None => SizeHint::default(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::AbortReason;
    use crate::traits::{ObjectMeta, Storage};
    use crate::{MemStorage, WriteError};
    use futures::StreamExt;

    async fn write_three(
        storage: &MemStorage,
    ) -> (Box<dyn crate::BodyWriter>, Box<dyn BodyReader>) {
        let key = "k".into();
        let mut writer = storage
            .begin_write(&key, ObjectMeta::new(""))
            .await
            .unwrap();
        writer.write(Bytes::from_static(b"abc")).await.unwrap();
        let hit = storage.lookup(&key).await.unwrap().unwrap();
        (writer, hit.body)
    }

    #[tokio::test]
    async fn stream_ends_cleanly_only_after_finish() -> Result<(), WriteError> {
        let storage = MemStorage::new(1 << 20);
        let (mut writer, reader) = write_three(&storage).await;
        let mut stream = BodyStream::new(reader);
        assert_eq!(stream.next().await.unwrap().unwrap(), "abc");
        writer.write(Bytes::from_static(b"def")).await?;
        writer.finish().await?;
        assert_eq!(stream.next().await.unwrap().unwrap(), "def");
        assert!(stream.next().await.is_none());
        assert!(stream.is_terminated());
        assert!(stream.next().await.is_none());
        Ok(())
    }

    #[tokio::test]
    async fn stream_reports_a_dead_writer_as_an_error_item() {
        let storage = MemStorage::new(1 << 20);
        let (writer, reader) = write_three(&storage).await;
        let mut stream = BodyStream::new(reader);
        assert_eq!(stream.next().await.unwrap().unwrap(), "abc");
        drop(writer);
        assert!(matches!(
            stream.next().await,
            Some(Err(BodyError::Aborted(AbortReason::WriterDropped)))
        ));
        assert!(stream.is_terminated());
    }

    #[tokio::test]
    async fn stream_waits_for_bytes_written_later() {
        let storage = MemStorage::new(1 << 20);
        let (mut writer, reader) = write_three(&storage).await;
        let mut stream = BodyStream::new(reader);
        assert_eq!(stream.next().await.unwrap().unwrap(), "abc");
        let next = tokio::spawn(async move { stream.next().await.map(|r| r.unwrap()) });
        tokio::task::yield_now().await;
        writer.write(Bytes::from_static(b"late")).await.unwrap();
        assert_eq!(next.await.unwrap().unwrap(), "late");
    }

    /// Dropping the stream with a read pending, at every poll count, detaches cleanly: a fresh
    /// reader still gets the whole body and the write still completes.
    #[tokio::test]
    async fn dropping_a_pending_stream_loses_nothing() {
        for polls in 0..3 {
            let storage = MemStorage::new(1 << 20);
            let (mut writer, reader) = write_three(&storage).await;
            let mut stream = BodyStream::new(reader);
            assert_eq!(stream.next().await.unwrap().unwrap(), "abc");
            let waker = futures::task::noop_waker();
            let mut cx = Context::from_waker(&waker);
            for _ in 0..polls {
                assert!(stream.poll_next_unpin(&mut cx).is_pending());
            }
            drop(stream);
            writer.write(Bytes::from_static(b"d")).await.unwrap();
            writer.finish().await.unwrap();
            let mut hit = storage.lookup(&"k".into()).await.unwrap().unwrap();
            assert_eq!(crate::read_to_end(&mut *hit.body).await.unwrap(), b"abcd");
        }
    }

    #[cfg(feature = "http-body")]
    mod http_body_tests {
        use super::*;
        use http_body::Body;

        async fn frame(body: &mut HttpBody) -> Option<Result<Bytes, BodyError>> {
            futures::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx))
                .await
                .map(|r| r.map(|frame| frame.into_data().expect("data frame")))
        }

        #[tokio::test]
        async fn abort_is_a_body_error_never_a_clean_end() {
            let storage = MemStorage::new(1 << 20);
            let (writer, reader) = write_three(&storage).await;
            let mut body = HttpBody::new(reader);
            assert!(body.size_hint().exact().is_none());
            assert_eq!(frame(&mut body).await.unwrap().unwrap(), "abc");
            writer.abort(AbortReason::Purged);
            assert!(matches!(
                frame(&mut body).await,
                Some(Err(BodyError::Aborted(AbortReason::Purged)))
            ));
        }

        #[tokio::test]
        async fn exact_length_is_hinted_and_checked() {
            let storage = MemStorage::new(1 << 20);
            let (writer, reader) = write_three(&storage).await;
            let mut body = HttpBody::new(reader).with_exact_len(4);
            assert_eq!(body.size_hint().exact(), Some(4));
            assert_eq!(frame(&mut body).await.unwrap().unwrap(), "abc");
            assert_eq!(body.size_hint().exact(), Some(1));
            // The reader ends cleanly one byte short of the declared length: an error.
            writer.finish().await.unwrap();
            assert!(matches!(
                frame(&mut body).await,
                Some(Err(BodyError::Aborted(AbortReason::LengthMismatch {
                    expected: 4,
                    written: 3
                })))
            ));
        }

        #[tokio::test]
        async fn surplus_bytes_past_the_exact_length_are_an_error() {
            let storage = MemStorage::new(1 << 20);
            let (_writer, reader) = write_three(&storage).await;
            let mut body = HttpBody::new(reader).with_exact_len(2);
            assert!(matches!(
                frame(&mut body).await,
                Some(Err(BodyError::Aborted(AbortReason::LengthMismatch { .. })))
            ));
        }

        #[tokio::test]
        async fn complete_body_ends_cleanly() {
            let storage = MemStorage::new(1 << 20);
            let (writer, reader) = write_three(&storage).await;
            writer.finish().await.unwrap();
            let mut body = HttpBody::new(reader).with_exact_len(3);
            assert_eq!(frame(&mut body).await.unwrap().unwrap(), "abc");
            assert!(frame(&mut body).await.is_none());
            assert!(body.is_end_stream());
        }

        /// A range's body ends at its last byte while the write goes on, and a later abort
        /// does not reach it; without `ending_at_len` the same body waits for the write.
        #[tokio::test]
        async fn a_range_ends_at_its_last_byte_while_the_write_goes_on() {
            let storage = MemStorage::new(1 << 20);
            let (writer, mut reader) = write_three(&storage).await;
            reader.seek(crate::ByteRange::from(1..3)).await.unwrap();
            let mut body = HttpBody::new(reader).with_exact_len(2).ending_at_len();
            assert!(!body.is_end_stream());
            assert_eq!(frame(&mut body).await.unwrap().unwrap(), "bc");
            assert!(body.is_end_stream());
            assert!(frame(&mut body).await.is_none());
            writer.abort(AbortReason::Purged);
            assert!(frame(&mut body).await.is_none());

            let (writer, mut reader) = write_three(&storage).await;
            reader.seek(crate::ByteRange::from(1..3)).await.unwrap();
            let mut body = HttpBody::new(reader).with_exact_len(2);
            assert_eq!(frame(&mut body).await.unwrap().unwrap(), "bc");
            assert!(!body.is_end_stream());
            let next = frame(&mut body);
            tokio::pin!(next);
            assert!(futures::poll!(next.as_mut()).is_pending());
            writer.abort(AbortReason::Purged);
            assert!(matches!(next.await, Some(Err(BodyError::Aborted(_)))));
        }
    }
}
