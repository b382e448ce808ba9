//! HTTP caching rules: which requests may use the cache, which responses may be stored and for
//! how long (RFC 9111 `Cache-Control`, `Expires`, `Age`), and the cache key.
//!
//! Kept free of I/O so every rule is a unit test. The choices where the RFC leaves room (no
//! heuristic freshness, `no-cache` not stored, `Authorization` requests passed) are listed in the
//! crate docs.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, Method, StatusCode, header};

/// Statuses stored when the response carries explicit freshness (RFC 9110 section 15.1's
/// "heuristically cacheable" set plus 308). 206 is not stored: the proxy never forwards `Range`.
pub(crate) fn status_is_storable(status: StatusCode) -> bool {
    matches!(
        status.as_u16(),
        200 | 203 | 204 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

/// The directives of a `Cache-Control` response header that matter to a shared cache.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct CacheControl {
    pub(crate) max_age: Option<u64>,
    pub(crate) s_maxage: Option<u64>,
    pub(crate) no_store: bool,
    pub(crate) no_cache: bool,
    pub(crate) private: bool,
    /// RFC 5861: serve stale this long past freshness while one request refreshes it.
    pub(crate) stale_while_revalidate: Option<u64>,
    /// RFC 5861: serve stale this long past freshness when the origin fails.
    pub(crate) stale_if_error: Option<u64>,
    /// `must-revalidate` or `proxy-revalidate`: never served stale (RFC 9111 5.2.2.2, 5.2.2.8),
    /// whatever `stale-while-revalidate` or `stale-if-error` allow.
    pub(crate) must_revalidate: bool,
    /// A directive we could not parse (a `max-age` that is not a number): the response is not
    /// stored, as RFC 9111 section 4.2.1 advises for invalid freshness.
    pub(crate) invalid: bool,
}

impl CacheControl {
    /// Parse every `Cache-Control` field of `headers` (several fields are one list).
    pub(crate) fn parse(headers: &HeaderMap) -> Self {
        let mut cc = CacheControl::default();
        for value in headers.get_all(header::CACHE_CONTROL) {
            let Ok(value) = value.to_str() else {
                cc.invalid = true;
                continue;
            };
            for directive in split_list(value) {
                let (name, arg) = match directive.split_once('=') {
                    Some((name, arg)) => (name.trim(), Some(arg.trim().trim_matches('"'))),
                    None => (directive, None),
                };
                let seconds = |arg: Option<&str>| arg.and_then(delta_seconds);
                match name.to_ascii_lowercase().as_str() {
                    "max-age" => match seconds(arg) {
                        Some(s) => cc.max_age = Some(cc.max_age.map_or(s, |m| m.min(s))),
                        None => cc.invalid = true,
                    },
                    "s-maxage" => match seconds(arg) {
                        Some(s) => cc.s_maxage = Some(cc.s_maxage.map_or(s, |m| m.min(s))),
                        None => cc.invalid = true,
                    },
                    "stale-while-revalidate" => cc.stale_while_revalidate = seconds(arg),
                    "stale-if-error" => cc.stale_if_error = seconds(arg),
                    "no-store" => cc.no_store = true,
                    "no-cache" => cc.no_cache = true,
                    "private" => cc.private = true,
                    "must-revalidate" | "proxy-revalidate" => cc.must_revalidate = true,
                    _ => {}
                }
            }
        }
        cc
    }
}

/// The most seconds a delta-seconds value (`max-age`, `Age`, ...) counts for: RFC 9111
/// section 1.2.2's 2^31 (68 years). Larger values, "forever" in practice (`max-age` of
/// `i64::MAX` is common), are read as this, not refused, and nothing computed from them
/// overflows.
pub(crate) const MAX_DELTA_SECONDS: u64 = 1 << 31;

/// A delta-seconds value (one or more digits), capped at [`MAX_DELTA_SECONDS`]; `None` if it
/// is not one.
fn delta_seconds(value: &str) -> Option<u64> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // All digits: a parse error can only be an overflow.
    Some(
        value
            .parse::<u64>()
            .map_or(MAX_DELTA_SECONDS, |s| s.min(MAX_DELTA_SECONDS)),
    )
}

/// Split a comma-separated header list, skipping empty members (quoted commas are rare in
/// `Cache-Control` and only occur inside `no-cache="..."`/`private="..."`, which we treat as
/// their unqualified forms anyway).
fn split_list(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// Why a response is not stored (for logs and the `pass` metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotStored {
    Status,
    NoStore,
    Private,
    NoCache,
    SetCookie,
    Vary,
    NoFreshness,
    InvalidDirective,
    TooLarge,
    /// The body ends only when the origin closes its connection (HTTP/1 with neither
    /// `Content-Length` nor chunked encoding), so a body cut short by the origin's death reads
    /// as complete: stored, it could be served whole-looking and truncated.
    CloseDelimited,
}

/// Whether a response not stored for `why` marks its URL hit-for-pass (`Config::hit_for_pass`):
/// yes when the resource's answers may not be shared (private, no-store, cookies, a status
/// never stored, a body too large), no for an origin error (5xx, 429): that is a moment of the
/// origin, and passing the URL for minutes after one would send every request to the origin
/// uncoalesced, storing nothing, just when it is weakest (Varnish's hit-for-miss lets the next
/// storable answer in; nginx's cache lock keeps coalescing).
pub(crate) fn marks_hit_for_pass(why: NotStored, status: StatusCode) -> bool {
    !(why == NotStored::Status
        && (status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS))
}

/// How long a stored response stays fresh, measured from when it was received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Freshness {
    /// Freshness lifetime (s-maxage, else max-age, else Expires - Date).
    pub(crate) lifetime: Duration,
    /// Age the response already had when we received it (RFC 9111 section 4.2.3, without the
    /// response delay, which is under a millisecond on the paths we serve).
    pub(crate) initial_age: Duration,
    /// How long past its lifetime it may be served while a refresh runs (RFC 5861).
    pub(crate) stale_while_revalidate: Duration,
    /// How long past its lifetime it may be served when the refresh fails (RFC 5861).
    pub(crate) stale_if_error: Duration,
}

impl Freshness {
    /// Whether a response received at `received` is still fresh at `now`.
    pub(crate) fn is_fresh(&self, received: SystemTime, now: SystemTime) -> bool {
        self.current_age(received, now) < self.lifetime
    }

    /// Stale, but young enough to be served while one request refreshes it.
    pub(crate) fn may_serve_while_revalidating(
        &self,
        received: SystemTime,
        now: SystemTime,
    ) -> bool {
        self.current_age(received, now) < self.lifetime.saturating_add(self.stale_while_revalidate)
    }

    /// Stale, but young enough to be served when the origin fails.
    pub(crate) fn may_serve_on_error(&self, received: SystemTime, now: SystemTime) -> bool {
        self.current_age(received, now) < self.lifetime.saturating_add(self.stale_if_error)
    }

    /// The `Age` to send at `now`.
    pub(crate) fn current_age(&self, received: SystemTime, now: SystemTime) -> Duration {
        self.initial_age + now.duration_since(received).unwrap_or(Duration::ZERO)
    }
}

/// Decide whether a response to a `GET`/`HEAD` may be stored by a shared cache, and its
/// freshness. `received` is when its headers arrived.
pub(crate) fn storable(
    status: StatusCode,
    headers: &HeaderMap,
    received: SystemTime,
) -> Result<Freshness, NotStored> {
    if !status_is_storable(status) {
        return Err(NotStored::Status);
    }
    let cc = CacheControl::parse(headers);
    if cc.no_store {
        return Err(NotStored::NoStore);
    }
    if cc.private {
        return Err(NotStored::Private);
    }
    if cc.no_cache {
        // Stored objects are never revalidated, so a response that must be revalidated on
        // every use is not stored at all.
        return Err(NotStored::NoCache);
    }
    if headers.contains_key(header::SET_COOKIE) {
        return Err(NotStored::SetCookie);
    }
    for vary in headers.get_all(header::VARY) {
        let Ok(vary) = vary.to_str() else {
            return Err(NotStored::Vary);
        };
        if split_list(vary).any(|field| !field.eq_ignore_ascii_case("accept-encoding")) {
            return Err(NotStored::Vary);
        }
    }
    if cc.invalid {
        return Err(NotStored::InvalidDirective);
    }
    let date = http_date(headers, header::DATE).unwrap_or(received);
    let age_header = headers
        .get(header::AGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| delta_seconds(v.trim()))
        .map_or(Duration::ZERO, Duration::from_secs);
    let apparent_age = received.duration_since(date).unwrap_or(Duration::ZERO);
    let initial_age = apparent_age.max(age_header);
    let lifetime = match (cc.s_maxage, cc.max_age) {
        (Some(s), _) => Duration::from_secs(s),
        (None, Some(s)) => Duration::from_secs(s),
        (None, None) => match headers.get(header::EXPIRES) {
            // An invalid Expires (for instance "0") means "already expired" (RFC 9111 5.3).
            Some(_) => match http_date(headers, header::EXPIRES) {
                Some(expires) => expires.duration_since(date).unwrap_or(Duration::ZERO),
                None => Duration::ZERO,
            },
            None => return Err(NotStored::NoFreshness),
        },
    };
    // Stale use is forbidden outright by must-revalidate / proxy-revalidate (a MUST NOT in
    // RFC 9111 4.2.4): their stale windows count as none.
    let stale = |window: Option<u64>| match cc.must_revalidate {
        true => Duration::ZERO,
        false => Duration::from_secs(window.unwrap_or(0)),
    };
    let freshness = Freshness {
        lifetime,
        initial_age,
        stale_while_revalidate: stale(cc.stale_while_revalidate),
        stale_if_error: stale(cc.stale_if_error),
    };
    if !freshness.is_fresh(received, received) {
        return Err(NotStored::NoFreshness);
    }
    Ok(freshness)
}

/// Whether a response's body, if it has one, ends only when the connection closes (RFC 9112
/// section 6.3, rule 8): HTTP/1 with no `Content-Length` and no `Transfer-Encoding` ending in
/// `chunked`. Then the end of the body and the death of the origin look the same to the
/// proxy. HTTP/2 and later frame every body.
pub(crate) fn close_delimited(version: http::Version, headers: &HeaderMap) -> bool {
    if version >= http::Version::HTTP_2 || headers.contains_key(header::CONTENT_LENGTH) {
        return false;
    }
    let last_coding = headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(split_list)
        .last();
    !last_coding.is_some_and(|c| c.eq_ignore_ascii_case("chunked"))
}

/// Whether a response carries a transfer coding other than `chunked` (`gzip, chunked`, say).
/// The proxy undoes only chunked framing and drops `Transfer-Encoding` (hop-by-hop), so such a
/// body would reach the client still coded with nothing to say so: refused (502), as nginx
/// refuses "unknown Transfer-Encoding".
pub(crate) fn foreign_transfer_coding(headers: &HeaderMap) -> bool {
    headers.get_all(header::TRANSFER_ENCODING).iter().any(|v| {
        v.to_str().map_or(true, |v| {
            split_list(v).any(|c| !c.eq_ignore_ascii_case("chunked"))
        })
    })
}

/// The `name` field as an HTTP-date, if it is one.
pub(crate) fn http_date(headers: &HeaderMap, name: header::HeaderName) -> Option<SystemTime> {
    let value = headers.get(name)?.to_str().ok()?;
    httpdate::parse_http_date(value.trim()).ok()
}

/// Whether a request may be answered from the cache (and fill it). Others are passed to the
/// origin untouched.
pub(crate) fn request_is_cacheable(method: &Method, headers: &HeaderMap) -> bool {
    (method == Method::GET || method == Method::HEAD)
        && !headers.contains_key(header::AUTHORIZATION)
        && !headers.contains_key(header::UPGRADE)
}

/// The coding class a request's `Accept-Encoding` falls into. The proxy sends the class (not
/// the client's header) to the origin, so one stored response is right for every client of the
/// class, and the class joins the cache key (that is how `Vary: Accept-Encoding` is honoured).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coding {
    Br,
    Gzip,
    Identity,
}

impl Coding {
    pub(crate) const ALL: [Coding; 3] = [Coding::Br, Coding::Gzip, Coding::Identity];

    /// The class for a request's headers: the best of `br`, `gzip` the client accepts (q > 0),
    /// else identity.
    pub(crate) fn of(headers: &HeaderMap) -> Self {
        let mut br = false;
        let mut gzip = false;
        for value in headers.get_all(header::ACCEPT_ENCODING) {
            let Ok(value) = value.to_str() else { continue };
            for member in split_list(value) {
                let mut parts = member.split(';');
                let coding = parts.next().unwrap_or("").trim().to_ascii_lowercase();
                let refused = parts.any(|p| {
                    let p = p.trim().to_ascii_lowercase();
                    p.strip_prefix("q=")
                        .and_then(|q| q.trim().parse::<f32>().ok())
                        .is_some_and(|q| q <= 0.0)
                });
                if refused {
                    continue;
                }
                match coding.as_str() {
                    "br" => br = true,
                    "gzip" | "x-gzip" => gzip = true,
                    _ => {}
                }
            }
        }
        if br {
            Coding::Br
        } else if gzip {
            Coding::Gzip
        } else {
            Coding::Identity
        }
    }

    /// The `Accept-Encoding` value sent upstream for this class.
    pub(crate) fn header_value(self) -> &'static str {
        match self {
            Coding::Br => "br",
            Coding::Gzip => "gzip",
            Coding::Identity => "identity",
        }
    }
}

/// The cache key: method, authority, path and query, coding class.
pub(crate) fn cache_key(
    method: &Method,
    authority: &str,
    path_and_query: &str,
    coding: Coding,
) -> String {
    format!(
        "{method} {} {path_and_query} {}",
        authority.to_ascii_lowercase(),
        coding.header_value()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    }

    #[test]
    fn only_chunked_alone_is_a_transfer_coding_the_proxy_relays() {
        for (te, foreign) in [
            (None, false),
            (Some("chunked"), false),
            (Some("Chunked"), false),
            (Some("gzip, chunked"), true),
            (Some("gzip"), true),
            (Some("identity"), true),
        ] {
            let map = headers(
                &te.map(|v| vec![("transfer-encoding", v)])
                    .unwrap_or_default(),
            );
            assert_eq!(foreign_transfer_coding(&map), foreign, "{te:?}");
        }
        let two = headers(&[
            ("transfer-encoding", "gzip"),
            ("transfer-encoding", "chunked"),
        ]);
        assert!(foreign_transfer_coding(&two));
    }

    #[test]
    fn max_age_and_s_maxage() {
        let f = storable(
            StatusCode::OK,
            &headers(&[("cache-control", "max-age=60")]),
            now(),
        )
        .unwrap();
        assert_eq!(f.lifetime, Duration::from_secs(60));
        let f = storable(
            StatusCode::OK,
            &headers(&[("cache-control", "max-age=60, s-maxage=5")]),
            now(),
        )
        .unwrap();
        assert_eq!(f.lifetime, Duration::from_secs(5));
        assert!(f.is_fresh(now(), now() + Duration::from_secs(4)));
        assert!(!f.is_fresh(now(), now() + Duration::from_secs(5)));
    }

    #[test]
    fn stale_extensions() {
        let f = storable(
            StatusCode::OK,
            &headers(&[(
                "cache-control",
                "max-age=10, stale-while-revalidate=20, stale-if-error=100",
            )]),
            now(),
        )
        .unwrap();
        let at = |s| now() + Duration::from_secs(s);
        assert!(!f.is_fresh(now(), at(10)));
        assert!(f.may_serve_while_revalidating(now(), at(29)));
        assert!(!f.may_serve_while_revalidating(now(), at(30)));
        assert!(f.may_serve_on_error(now(), at(109)));
        assert!(!f.may_serve_on_error(now(), at(110)));
        let plain = storable(
            StatusCode::OK,
            &headers(&[("cache-control", "max-age=10")]),
            now(),
        )
        .unwrap();
        assert!(!plain.may_serve_while_revalidating(now(), at(10)));
        assert!(!plain.may_serve_on_error(now(), at(10)));
    }

    #[test]
    fn age_counts_against_lifetime() {
        let f = storable(
            StatusCode::OK,
            &headers(&[("cache-control", "max-age=60"), ("age", "50")]),
            now(),
        )
        .unwrap();
        assert_eq!(f.initial_age, Duration::from_secs(50));
        assert!(!f.is_fresh(now(), now() + Duration::from_secs(10)));
        assert_eq!(
            storable(
                StatusCode::OK,
                &headers(&[("cache-control", "max-age=60"), ("age", "60")]),
                now()
            ),
            Err(NotStored::NoFreshness)
        );
    }

    /// `must-revalidate` and `proxy-revalidate` forbid serving stale (RFC 9111 4.2.4): the
    /// stale-while-revalidate and stale-if-error windows beside them count as none. Before,
    /// both were ignored and a stale copy was served when the origin had forbidden it.
    #[test]
    fn revalidation_directives_close_the_stale_windows() {
        let windows = |cc: &str| {
            let f = storable(StatusCode::OK, &headers(&[("cache-control", cc)]), now()).unwrap();
            (f.stale_while_revalidate, f.stale_if_error)
        };
        let open = "max-age=10, stale-while-revalidate=60, stale-if-error=600";
        assert_eq!(
            windows(open),
            (Duration::from_secs(60), Duration::from_secs(600))
        );
        for directive in ["must-revalidate", "proxy-revalidate", "Must-Revalidate"] {
            assert_eq!(
                windows(&format!("{open}, {directive}")),
                (Duration::ZERO, Duration::ZERO),
                "{directive}"
            );
        }
    }

    /// "Forever" written as a huge number (`i64::MAX`, or past `u64`) counts as 2^31 seconds
    /// (RFC 9111 section 1.2.2): stored, and its head survives the meta encoding.
    #[test]
    fn huge_delta_seconds_are_capped_not_refused() {
        for huge in [
            "9223372036854775807",
            "99999999999999999999999",
            "2147483649",
        ] {
            let cc = format!("max-age={huge}, stale-while-revalidate={huge}");
            let f = storable(StatusCode::OK, &headers(&[("cache-control", &cc)]), now())
                .unwrap_or_else(|why| panic!("max-age={huge}: {why:?}"));
            let capped = Duration::from_secs(MAX_DELTA_SECONDS);
            assert_eq!((f.lifetime, f.stale_while_revalidate), (capped, capped));
            let head = crate::meta::StoredHead {
                status: StatusCode::OK,
                headers: HeaderMap::new(),
                received: now(),
                freshness: f,
            };
            let decoded = crate::meta::StoredHead::decode(&head.encode()).unwrap();
            assert_eq!(decoded.freshness, f);
        }
        let aged = headers(&[
            ("cache-control", "max-age=60"),
            ("age", "99999999999999999999"),
        ]);
        assert_eq!(
            storable(StatusCode::OK, &aged, now()),
            Err(NotStored::NoFreshness)
        );
        let junk = headers(&[("cache-control", "max-age=12abc")]);
        assert_eq!(
            storable(StatusCode::OK, &junk, now()),
            Err(NotStored::InvalidDirective)
        );
    }

    #[test]
    fn a_body_without_framing_is_close_delimited() {
        use http::Version;
        let v11 = Version::HTTP_11;
        assert!(close_delimited(v11, &headers(&[])));
        assert!(close_delimited(Version::HTTP_10, &headers(&[])));
        assert!(close_delimited(
            v11,
            &headers(&[("transfer-encoding", "gzip")])
        ));
        assert!(close_delimited(
            v11,
            &headers(&[("transfer-encoding", "chunked, gzip")])
        ));
        assert!(!close_delimited(v11, &headers(&[("content-length", "5")])));
        assert!(!close_delimited(
            v11,
            &headers(&[("transfer-encoding", "gzip, Chunked")])
        ));
        assert!(!close_delimited(Version::HTTP_2, &headers(&[])));
    }

    #[test]
    fn expires_relative_to_date() {
        let date = httpdate::fmt_http_date(now());
        let expires = httpdate::fmt_http_date(now() + Duration::from_secs(30));
        let f = storable(
            StatusCode::OK,
            &headers(&[("date", &date), ("expires", &expires)]),
            now(),
        )
        .unwrap();
        assert_eq!(f.lifetime, Duration::from_secs(30));
        assert_eq!(
            storable(StatusCode::OK, &headers(&[("expires", "0")]), now()),
            Err(NotStored::NoFreshness)
        );
    }

    #[test]
    fn refusals() {
        let cases: &[(&[(&'static str, &str)], NotStored)] = &[
            (
                &[("cache-control", "no-store, max-age=60")],
                NotStored::NoStore,
            ),
            (
                &[("cache-control", "private, max-age=60")],
                NotStored::Private,
            ),
            (
                &[("cache-control", "no-cache, max-age=60")],
                NotStored::NoCache,
            ),
            (
                &[("cache-control", "max-age=60"), ("set-cookie", "a=b")],
                NotStored::SetCookie,
            ),
            (
                &[
                    ("cache-control", "max-age=60"),
                    ("vary", "Accept-Encoding, Cookie"),
                ],
                NotStored::Vary,
            ),
            (
                &[("cache-control", "max-age=60"), ("vary", "*")],
                NotStored::Vary,
            ),
            (
                &[("cache-control", "max-age=abc")],
                NotStored::InvalidDirective,
            ),
            (&[], NotStored::NoFreshness),
        ];
        for (pairs, expected) in cases {
            assert_eq!(
                storable(StatusCode::OK, &headers(pairs), now()),
                Err(*expected),
                "{pairs:?}"
            );
        }
        assert_eq!(
            storable(
                StatusCode::INTERNAL_SERVER_ERROR,
                &headers(&[("cache-control", "max-age=60")]),
                now()
            ),
            Err(NotStored::Status)
        );
        assert!(
            storable(
                StatusCode::OK,
                &headers(&[("cache-control", "max-age=60"), ("vary", "accept-encoding")]),
                now()
            )
            .is_ok()
        );
    }

    #[test]
    fn coding_classes() {
        assert_eq!(
            Coding::of(&headers(&[("accept-encoding", "gzip, deflate, br")])),
            Coding::Br
        );
        assert_eq!(
            Coding::of(&headers(&[("accept-encoding", "gzip;q=0.5, br;q=0")])),
            Coding::Gzip
        );
        assert_eq!(Coding::of(&headers(&[])), Coding::Identity);
    }

    #[test]
    fn requests_with_credentials_pass() {
        assert!(request_is_cacheable(&Method::GET, &HeaderMap::new()));
        assert!(!request_is_cacheable(&Method::POST, &HeaderMap::new()));
        assert!(!request_is_cacheable(
            &Method::GET,
            &headers(&[("authorization", "Basic x")])
        ));
    }
}
