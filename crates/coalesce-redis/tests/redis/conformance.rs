//! `RedisLease` against the `conformance::lease` suite, each case on a fresh `redis-server`
//! (taken down by killing it). Run by `main.rs`'s harness.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use coalesce::FillLease;
use coalesce_redis::RedisLease;
use coalesce_redis::test_server::RedisServer;
use conformance::lease::{LeaseService, Suite};

struct RedisService {
    server: Mutex<RedisServer>,
    lease: Arc<RedisLease>,
}

impl RedisService {
    fn start() -> Self {
        let server = RedisServer::start().expect("start redis-server");
        let lease = RedisLease::builder(server.url())
            .connect_timeout(Duration::from_millis(250))
            .command_timeout(Duration::from_millis(250))
            .build()
            .expect("a valid url");
        RedisService {
            server: Mutex::new(server),
            lease: Arc::new(lease),
        }
    }
}

#[async_trait]
impl LeaseService for RedisService {
    fn lease(&self) -> Arc<dyn FillLease> {
        self.lease.clone()
    }

    async fn take_down(&self) -> bool {
        self.server.lock().unwrap().kill();
        true
    }
}

pub(crate) async fn redis_lease_passes_the_lease_suite(probe: RedisServer) {
    // The suite starts a server per case; the harness's one only proved the binary is there.
    drop(probe);
    let report = Suite::new(|| async { RedisService::start() }).run().await;
    report.assert_passed();
    assert!(report.skipped().is_empty(), "{report}");
    assert_eq!(report.passed().len(), conformance::lease::CASES.len());
}
