//! `RedisLease` against the `conformance::lease` suite, each case on a fresh `redis-server`
//! (taken down by killing it). Skipped loudly without a `redis-server` binary; fails under CI.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use coalesce::FillLease;
use coalesce_redis::RedisLease;
use coalesce_redis::test_server::{RedisServer, redis_or_skip};
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

#[tokio::test]
async fn redis_lease_passes_the_lease_suite() {
    let Some(probe) = redis_or_skip("redis_lease_passes_the_lease_suite") else {
        return;
    };
    drop(probe);
    let report = Suite::new(|| async { RedisService::start() }).run().await;
    report.assert_passed();
    assert!(report.skipped().is_empty(), "{report}");
    assert_eq!(report.passed().len(), conformance::lease::CASES.len());
}
