//! What the proxy stores in `ObjectMeta::user` beside a body: the status, the end-to-end headers,
//! when the response was received and its freshness.
//!
//! A small line-based format (header values cannot contain CR or LF, so a newline ends a field),
//! versioned by its first token so a format change reads old objects as misses, not garbage.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use crate::policy::Freshness;

const MAGIC: &str = "herd-proxy/2";

/// A stored response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredHead {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) received: SystemTime,
    pub(crate) freshness: Freshness,
}

/// Stored meta that does not parse (written by another program or version).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stored response meta is malformed")]
pub(crate) struct MalformedMeta;

impl StoredHead {
    pub(crate) fn encode(&self) -> Bytes {
        let millis = |d: Duration| d.as_millis();
        let received = self.received.duration_since(UNIX_EPOCH).unwrap_or_default();
        let mut out = format!(
            "{MAGIC} {} {} {} {} {} {}\n",
            self.status.as_u16(),
            millis(received),
            millis(self.freshness.lifetime),
            millis(self.freshness.initial_age),
            millis(self.freshness.stale_while_revalidate),
            millis(self.freshness.stale_if_error)
        )
        .into_bytes();
        for (name, value) in &self.headers {
            out.extend_from_slice(name.as_str().as_bytes());
            out.push(b':');
            out.extend_from_slice(value.as_bytes());
            out.push(b'\n');
        }
        Bytes::from(out)
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, MalformedMeta> {
        let mut lines = bytes.split(|b| *b == b'\n');
        let first =
            std::str::from_utf8(lines.next().ok_or(MalformedMeta)?).map_err(|_| MalformedMeta)?;
        let mut fields = first.split(' ');
        if fields.next() != Some(MAGIC) {
            return Err(MalformedMeta);
        }
        let mut number = || -> Result<u64, MalformedMeta> {
            fields
                .next()
                .and_then(|f| f.parse().ok())
                .ok_or(MalformedMeta)
        };
        let status = u16::try_from(number()?).map_err(|_| MalformedMeta)?;
        let status = StatusCode::from_u16(status).map_err(|_| MalformedMeta)?;
        let received = UNIX_EPOCH + Duration::from_millis(number()?);
        let lifetime = Duration::from_millis(number()?);
        let initial_age = Duration::from_millis(number()?);
        let stale_while_revalidate = Duration::from_millis(number()?);
        let stale_if_error = Duration::from_millis(number()?);
        let mut headers = HeaderMap::new();
        for line in lines.filter(|l| !l.is_empty()) {
            let colon = line.iter().position(|b| *b == b':').ok_or(MalformedMeta)?;
            let name = HeaderName::from_bytes(&line[..colon]).map_err(|_| MalformedMeta)?;
            let value = HeaderValue::from_bytes(&line[colon + 1..]).map_err(|_| MalformedMeta)?;
            headers.append(name, value);
        }
        Ok(StoredHead {
            status,
            headers,
            received,
            freshness: Freshness {
                lifetime,
                initial_age,
                stale_while_revalidate,
                stale_if_error,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut headers = HeaderMap::new();
        headers.append("content-type", HeaderValue::from_static("text/plain"));
        headers.append("x-multi", HeaderValue::from_static("a"));
        headers.append("x-multi", HeaderValue::from_static("b: c"));
        let head = StoredHead {
            status: StatusCode::NOT_FOUND,
            headers,
            received: UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
            freshness: Freshness {
                lifetime: Duration::from_secs(60),
                initial_age: Duration::from_millis(1500),
                stale_while_revalidate: Duration::from_secs(5),
                stale_if_error: Duration::ZERO,
            },
        };
        assert_eq!(StoredHead::decode(&head.encode()), Ok(head));
    }

    #[test]
    fn garbage_is_malformed() {
        for bytes in [
            &b""[..],
            b"nope",
            b"herd-proxy/2 99999 1 2 3 4 5\n",
            b"herd-proxy/2 200 1 2 3 4\n",
            b"herd-proxy/1 200 1 2 3\n",
            b"herd-proxy/2 200 1 2 3 4 5\nno colon\n",
        ] {
            assert_eq!(StoredHead::decode(bytes), Err(MalformedMeta), "{bytes:?}");
        }
    }
}
