//! `TtlLruAdapter`: `ttl_lru::Cache<String, String>` as a [`ReadThrough`], in either of its
//! read-through forms (`get_or_try_insert`, fill in the caller; `get_or_try_insert_detached`,
//! fill on a spawned task that survives the caller).
//!
//! It doubles as the worked example of an adapter: map the cache's call onto
//! [`ReadThrough::get_or_fill`] and its error type onto [`ReadError`].

use std::time::Duration;

use async_trait::async_trait;
use ttl_lru::{Cache, FetchError};

use super::{Fill, FillError, ReadError, ReadThrough, ReadThroughCapabilities};

/// Which read-through call of `ttl_lru::Cache` the adapter uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TtlLruMode {
    /// `get_or_try_insert`: the fill runs in the leading caller's future.
    Inline,
    /// `get_or_try_insert_detached` with this fill timeout: the fill runs on a spawned task.
    Detached(Duration),
}

/// A `ttl_lru::Cache<String, String>` held to the read-through contract.
#[derive(Debug, Clone)]
pub struct TtlLruAdapter {
    cache: Cache<String, String>,
    ttl: Duration,
    mode: TtlLruMode,
}

impl TtlLruAdapter {
    /// Inline fills, values cached for an hour.
    pub fn new(cache: Cache<String, String>) -> Self {
        TtlLruAdapter {
            cache,
            ttl: Duration::from_secs(3600),
            mode: TtlLruMode::Inline,
        }
    }

    /// Use `mode`.
    pub fn mode(mut self, mode: TtlLruMode) -> Self {
        self.mode = mode;
        self
    }

    /// The wrapped cache.
    pub fn cache(&self) -> &Cache<String, String> {
        &self.cache
    }
}

fn to_read_error(error: FetchError<FillError>) -> ReadError {
    match error {
        FetchError::Failed(fill) => ReadError::Failed((*fill).clone()),
        other => ReadError::Other(other.to_string()),
    }
}

#[async_trait]
impl ReadThrough for TtlLruAdapter {
    fn capabilities(&self) -> ReadThroughCapabilities {
        ReadThroughCapabilities::default()
            .with_fills_survive_caller(matches!(self.mode, TtlLruMode::Detached(_)))
    }

    /// Cancel safety: as `ttl_lru::Cache::get_or_try_insert` (or its detached form).
    async fn get_or_fill(&self, key: String, fill: Fill) -> Result<String, ReadError> {
        let ttl = self.ttl;
        let fetched = match self.mode {
            TtlLruMode::Inline => self.cache.get_or_try_insert(key, move |_| ttl, fill).await,
            TtlLruMode::Detached(timeout) => {
                self.cache
                    .get_or_try_insert_detached(key, move |_| ttl, fill, timeout)
                    .await
            }
        };
        fetched.map(|fetched| fetched.value).map_err(to_read_error)
    }
}
