//! `Range: bytes=...` parsing (RFC 9110 section 14): one range, resolved against a known length.
//!
//! Multiple ranges (multipart/byteranges) are answered with the whole body (a server may ignore
//! `Range`); so is any header we cannot parse, which RFC 9110 says to ignore.

/// One byte range as written by the client, before the length is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RangeSpec {
    /// `first-last` or `first-` (last inclusive).
    From { first: u64, last: Option<u64> },
    /// `-n`: the last n bytes.
    Suffix(u64),
}

/// A range resolved against a body length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resolved {
    /// Serve `start..end` (end exclusive) with 206.
    Partial { start: u64, end: u64 },
    /// 416 with `Content-Range: bytes */len`.
    NotSatisfiable,
    /// Satisfiable, but no 206 can say it: a non-zero suffix of an empty body (RFC 9110 14.1.1
    /// counts it satisfiable, and `bytes 0--1/0` is no range). The whole, empty body, 200.
    Whole,
}

/// Parse a `Range` header value; `None` means "ignore it and send the whole body".
pub(crate) fn parse(value: &[u8]) -> Option<RangeSpec> {
    let value = std::str::from_utf8(value).ok()?.trim();
    let (unit, set) = value.split_once('=')?;
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return None;
    }
    let set = set.trim();
    if set.contains(',') {
        return None;
    }
    let (first, last) = set.split_once('-')?;
    let (first, last) = (first.trim(), last.trim());
    let number = |s: &str| -> Option<u64> {
        // Digits only: `+5`, ` 5` or an overflowing value are not a range.
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    if first.is_empty() {
        return Some(RangeSpec::Suffix(number(last)?));
    }
    let first = number(first)?;
    let last = if last.is_empty() {
        None
    } else {
        Some(number(last)?)
    };
    if last.is_some_and(|last| last < first) {
        // Syntactically invalid: ignored (RFC 9110 14.1.1).
        return None;
    }
    Some(RangeSpec::From { first, last })
}

impl RangeSpec {
    /// Resolve against a body of `len` bytes.
    pub(crate) fn resolve(self, len: u64) -> Resolved {
        match self {
            RangeSpec::From { first, last } => {
                if first >= len {
                    return Resolved::NotSatisfiable;
                }
                let end = last.map_or(len, |last| last.saturating_add(1).min(len));
                Resolved::Partial { start: first, end }
            }
            RangeSpec::Suffix(0) => Resolved::NotSatisfiable,
            RangeSpec::Suffix(n) => {
                if len == 0 {
                    return Resolved::Whole;
                }
                Resolved::Partial {
                    start: len.saturating_sub(n),
                    end: len,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 9110 14.1.1: of an empty body only a non-zero suffix is satisfiable; it was 416.
    #[test]
    fn a_suffix_of_an_empty_body_is_the_whole_body() {
        let r = |s: &str| parse(s.as_bytes()).unwrap().resolve(0);
        assert_eq!(r("bytes=-5"), Resolved::Whole);
        assert_eq!(r("bytes=-0"), Resolved::NotSatisfiable);
        assert_eq!(r("bytes=0-"), Resolved::NotSatisfiable);
        assert_eq!(r("bytes=0-10"), Resolved::NotSatisfiable);
    }

    #[test]
    fn parses_and_resolves() {
        let r = |s: &str| parse(s.as_bytes());
        assert_eq!(
            r("bytes=0-99").unwrap().resolve(1000),
            Resolved::Partial { start: 0, end: 100 }
        );
        assert_eq!(
            r("bytes=900-").unwrap().resolve(1000),
            Resolved::Partial {
                start: 900,
                end: 1000
            }
        );
        assert_eq!(
            r("bytes=-10").unwrap().resolve(1000),
            Resolved::Partial {
                start: 990,
                end: 1000
            }
        );
        assert_eq!(
            r("bytes=-5000").unwrap().resolve(1000),
            Resolved::Partial {
                start: 0,
                end: 1000
            }
        );
        assert_eq!(
            r("bytes=990-5000").unwrap().resolve(1000),
            Resolved::Partial {
                start: 990,
                end: 1000
            }
        );
        assert_eq!(
            r("bytes=1000-").unwrap().resolve(1000),
            Resolved::NotSatisfiable
        );
        assert_eq!(
            r("bytes=-0").unwrap().resolve(1000),
            Resolved::NotSatisfiable
        );
        assert_eq!(
            r("bytes=18446744073709551615-18446744073709551615")
                .unwrap()
                .resolve(1000),
            Resolved::NotSatisfiable
        );
    }

    #[test]
    fn absurd_values_are_ignored() {
        for bad in [
            "bytes=5-1",
            "bytes=0-1,5-6",
            "items=0-1",
            "bytes=-",
            "bytes=a-b",
            "bytes=+1-2",
            "bytes=99999999999999999999999-",
            "",
            "bytes",
        ] {
            assert_eq!(parse(bad.as_bytes()), None, "{bad}");
        }
        assert_eq!(parse(&[0xff, 0xfe]), None);
    }
}
