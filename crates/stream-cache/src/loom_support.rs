//! Public handles onto the crate-private partial-body cell, compiled only under
//! `--cfg herd_loom` so `tests/loom.rs` can model the cell directly (the storage indexes use
//! `parking_lot`, which loom cannot schedule, so the models exercise the cell alone).

use std::sync::Arc;

use bytes::Bytes;

use crate::cell::{BodyCell, CellLimits, Cursor};
use crate::error::BodyError;
use crate::state::{AbortReason, WriteState};

/// A partial-body cell retaining its chunks.
#[derive(Debug, Clone)]
pub struct Cell(Arc<BodyCell>);

impl Cell {
    /// An open cell, optionally with a declared length.
    pub fn new(expected_len: Option<u64>) -> Self {
        Cell(BodyCell::new(
            true,
            CellLimits {
                expected_len,
                max_len: None,
            },
        ))
    }

    /// Append a chunk.
    pub fn append(&self, chunk: Bytes) -> Result<u64, AbortReason> {
        self.0.append(chunk)
    }

    /// Finish the write.
    pub fn complete(&self) -> Result<u64, AbortReason> {
        self.0.complete()
    }

    /// Abort the write; false if already terminal.
    pub fn abort(&self, reason: AbortReason) -> bool {
        self.0.abort(reason)
    }

    /// Abort only if no reader is attached; whether it aborted.
    pub fn abort_if_unread(&self, reason: AbortReason) -> bool {
        self.0.abort_if_unread(reason)
    }

    /// Current state.
    pub fn state(&self) -> WriteState {
        self.0.state()
    }

    /// Attach a reader at offset 0.
    pub fn reader(&self) -> Reader {
        Reader(self.0.cursor())
    }
}

/// A reader bound to a [`Cell`].
#[derive(Debug)]
pub struct Reader(Cursor);

impl Reader {
    /// The next chunk, as `BodyReader::read`.
    pub async fn read(&mut self) -> Result<Option<Bytes>, BodyError> {
        std::future::poll_fn(|cx| self.0.poll_next_chunk(cx)).await
    }

    /// Read to the end: the bytes and how the body ended.
    pub async fn read_all(&mut self) -> (Vec<u8>, Result<(), BodyError>) {
        let mut body = Vec::new();
        loop {
            match self.read().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                Ok(None) => return (body, Ok(())),
                Err(error) => return (body, Err(error)),
            }
        }
    }

    /// Seek, as `BodyReader::seek`.
    pub async fn seek(&mut self, start: u64, end: Option<u64>) -> Result<(), BodyError> {
        std::future::poll_fn(|cx| self.0.poll_seek(start, end, cx)).await
    }
}
