//! [`Codec`]: how keys and values become the bytes a second level stores, with typed errors. A
//! value that fails to decode is a miss (refilled and overwritten), never a poisoned key.

use std::fmt;

/// Why a value or key could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// Encoding failed.
    #[error("encode failed: {0}")]
    Encode(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The bytes are not a valid encoding.
    #[error("decode failed: {0}")]
    Decode(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl CodecError {
    /// An encode error from any error value.
    pub fn encode(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Encode(error.into())
    }
    /// A decode error from any error value.
    pub fn decode(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Decode(error.into())
    }
}

/// Turns `T` into bytes and back. Must round-trip: `decode(encode(t)) == t`, and for keys,
/// distinct keys must encode to distinct bytes.
pub trait Codec<T>: Send + Sync + 'static {
    /// `value` as bytes.
    fn encode(&self, value: &T) -> Result<Vec<u8>, CodecError>;
    /// The value these bytes encode.
    fn decode(&self, bytes: &[u8]) -> Result<T, CodecError>;
}

/// UTF-8 strings as their bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct StringCodec;

impl Codec<String> for StringCodec {
    fn encode(&self, value: &String) -> Result<Vec<u8>, CodecError> {
        Ok(value.as_bytes().to_vec())
    }
    fn decode(&self, bytes: &[u8]) -> Result<String, CodecError> {
        String::from_utf8(bytes.to_vec()).map_err(CodecError::decode)
    }
}

/// Byte vectors as themselves.
#[derive(Debug, Clone, Copy, Default)]
pub struct BytesCodec;

impl Codec<Vec<u8>> for BytesCodec {
    fn encode(&self, value: &Vec<u8>) -> Result<Vec<u8>, CodecError> {
        Ok(value.clone())
    }
    fn decode(&self, bytes: &[u8]) -> Result<Vec<u8>, CodecError> {
        Ok(bytes.to_vec())
    }
}

/// `u64` as 8 big-endian bytes (anything else is a decode error).
#[derive(Debug, Clone, Copy, Default)]
pub struct U64Codec;

/// The bytes given to [`U64Codec`] were not 8 long.
#[derive(Debug)]
struct WrongLength(usize);

impl fmt::Display for WrongLength {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "expected 8 bytes, got {}", self.0)
    }
}

impl std::error::Error for WrongLength {}

impl Codec<u64> for U64Codec {
    fn encode(&self, value: &u64) -> Result<Vec<u8>, CodecError> {
        Ok(value.to_be_bytes().to_vec())
    }
    fn decode(&self, bytes: &[u8]) -> Result<u64, CodecError> {
        let array: [u8; 8] = bytes
            .try_into()
            .map_err(|_| CodecError::decode(WrongLength(bytes.len())))?;
        Ok(u64::from_be_bytes(array))
    }
}
