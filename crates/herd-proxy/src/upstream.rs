//! Talking to the origin: the pooled hyper client, the response timeout (504) and connection
//! failures (502), and the origin body as a stream with an idle timeout.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use http::{Request, Response};
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::metrics::Metrics;

/// A request body sent upstream (empty for fills, the client's for passes).
pub(crate) type UpBody = BoxBody<Bytes, hyper::Error>;

/// Why an origin request or body failed. Shared (behind an `Arc`) with every caller coalesced
/// on the fill, so it says what the proxy answers.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FetchError {
    /// Could not connect, or the connection broke before a response head (502).
    #[error("origin unreachable or broke before answering: {0}")]
    Unreachable(#[source] hyper_util::client::legacy::Error),
    /// No response head within the response timeout (504).
    #[error("origin did not answer within {0:?}")]
    Timeout(Duration),
    /// The response may not be shared; the leader serves it alone and every coalesced caller
    /// fetches its own (Varnish's hit-for-pass).
    #[error("the response may not be stored")]
    Uncacheable,
    /// The origin body failed mid-way.
    #[error("origin body failed: {0}")]
    Body(#[source] hyper::Error),
    /// No body bytes within the idle timeout.
    #[error("origin body stalled for {0:?}")]
    BodyIdle(Duration),
}

/// The origin client.
#[derive(Clone)]
pub(crate) struct Origin {
    client: Client<HttpConnector, UpBody>,
    response_timeout: Duration,
    body_idle_timeout: Duration,
    metrics: Arc<Metrics>,
}

impl Origin {
    pub(crate) fn new(
        connect_timeout: Duration,
        response_timeout: Duration,
        body_idle_timeout: Duration,
        metrics: Arc<Metrics>,
    ) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(connect_timeout));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Origin {
            client,
            response_timeout,
            body_idle_timeout,
            metrics,
        }
    }

    /// Send `request` and wait for the response head.
    ///
    /// Cancel safety: dropping the future drops the request (hyper closes or pools the
    /// connection); nothing else is shared.
    pub(crate) async fn fetch(
        &self,
        request: Request<UpBody>,
    ) -> Result<Response<Incoming>, FetchError> {
        self.metrics.upstream_fetches.inc();
        match tokio::time::timeout(self.response_timeout, self.client.request(request)).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(error)) => {
                self.metrics.upstream_errors.inc();
                Err(FetchError::Unreachable(error))
            }
            Err(_elapsed) => {
                self.metrics.upstream_timeouts.inc();
                Err(FetchError::Timeout(self.response_timeout))
            }
        }
    }

    /// The origin body as a stream of data chunks: trailers dropped, an error or an idle gap
    /// longer than the idle timeout ends it with an error. Counts bytes and, while it lives,
    /// one fill in flight.
    pub(crate) fn body_stream(
        &self,
        body: Incoming,
    ) -> BoxStream<'static, Result<Bytes, FetchError>> {
        struct InFlight(Arc<Metrics>);
        impl Drop for InFlight {
            fn drop(&mut self) {
                self.0.fills_in_flight.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.metrics.fills_in_flight.fetch_add(1, Ordering::Relaxed);
        let guard = InFlight(Arc::clone(&self.metrics));
        let idle = self.body_idle_timeout;
        let data = body.into_data_stream();
        futures::stream::unfold(Some((data, guard)), move |state| async move {
            let (mut data, guard) = state?;
            match tokio::time::timeout(idle, data.next()).await {
                Err(_elapsed) => Some((Err(FetchError::BodyIdle(idle)), None)),
                Ok(None) => None,
                Ok(Some(Err(error))) => Some((Err(FetchError::Body(error)), None)),
                Ok(Some(Ok(chunk))) => {
                    guard.0.upstream_bytes.add(chunk.len() as u64);
                    Some((Ok(chunk), Some((data, guard))))
                }
            }
        })
        .boxed()
    }
}
