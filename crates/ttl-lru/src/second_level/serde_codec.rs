//! [`CborCodec`] (feature `serde`): any `serde` type as CBOR (RFC 8949) through `ciborium`, for
//! values (and keys) that have no hand-written [`Codec`]. Why CBOR: a compact binary encoding
//! that is a published standard (readable by other languages in the fleet, and by a person
//! with any CBOR tool when debugging what sits in Redis), self-describing (a field added to a
//! struct decodes old values as a typed error or with serde defaults, never as garbage), and
//! `ciborium` is maintained and already in the workspace's lock file.

use std::marker::PhantomData;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::codec::{Codec, CodecError};

/// Encodes `T` as CBOR. Decoding rejects trailing bytes (a value is exactly one CBOR item).
pub struct CborCodec<T>(PhantomData<fn() -> T>);

impl<T> CborCodec<T> {
    /// The codec.
    pub fn new() -> Self {
        CborCodec(PhantomData)
    }
}

impl<T> Default for CborCodec<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> std::fmt::Debug for CborCodec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CborCodec")
    }
}

/// Bytes left over after one CBOR item.
#[derive(Debug, thiserror::Error)]
#[error("{0} trailing bytes after the CBOR value")]
struct Trailing(usize);

impl<T> Codec<T> for CborCodec<T>
where
    T: Serialize + DeserializeOwned + 'static,
{
    fn encode(&self, value: &T) -> Result<Vec<u8>, CodecError> {
        let mut out = Vec::new();
        ciborium::into_writer(value, &mut out).map_err(CodecError::encode)?;
        Ok(out)
    }

    fn decode(&self, bytes: &[u8]) -> Result<T, CodecError> {
        let mut rest = bytes;
        let value = ciborium::from_reader(&mut rest).map_err(CodecError::decode)?;
        if !rest.is_empty() {
            return Err(CodecError::decode(Trailing(rest.len())));
        }
        Ok(value)
    }
}
