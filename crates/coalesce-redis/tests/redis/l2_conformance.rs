//! `RedisSecondLevel` against the `conformance::second_level` suite, each case on a fresh
//! `redis-server` (taken down by killing it), each handle with its own connections and
//! subscriber. Run by `main.rs`'s harness.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use coalesce_redis::RedisSecondLevel;
use coalesce_redis::test_server::RedisServer;
use conformance::second_level::{L2Service, Suite};
use ttl_lru::SecondLevel;

struct RedisL2 {
    server: Mutex<RedisServer>,
    handles: Mutex<Vec<Arc<RedisSecondLevel>>>,
}

impl RedisL2 {
    fn start() -> Self {
        RedisL2 {
            server: Mutex::new(RedisServer::start().expect("start redis-server")),
            handles: Mutex::new(Vec::new()),
        }
    }
}

#[async_trait]
impl L2Service for RedisL2 {
    fn handle(&self) -> Arc<dyn SecondLevel> {
        let url = self.server.lock().unwrap().url();
        let handle = Arc::new(
            RedisSecondLevel::builder(url)
                .connect_timeout(Duration::from_millis(250))
                .command_timeout(Duration::from_millis(250))
                .reconnect_backoff(Duration::from_millis(50))
                .ack_timeout(Duration::from_secs(2))
                .build()
                .expect("a valid url"),
        );
        self.handles.lock().unwrap().push(handle.clone());
        handle
    }

    fn has_backplane(&self) -> bool {
        true
    }

    async fn settle(&self) {
        let handles = self.handles.lock().unwrap().clone();
        for handle in handles {
            // Only handles with an attached sink run a subscriber.
            if handle.backplane_stats().is_some_and(|s| s.running) {
                let live = tokio::time::timeout(Duration::from_secs(10), handle.wait_subscribed());
                live.await.expect("the backplane subscribes");
            }
        }
    }

    async fn take_down(&self) -> bool {
        self.server.lock().unwrap().kill();
        true
    }
}

pub(crate) async fn redis_second_level_passes_the_l2_suite(probe: RedisServer) {
    // The suite starts a server per case; the harness's one only proved the binary is there.
    drop(probe);
    let report = Suite::new(|| async { RedisL2::start() }).run().await;
    report.assert_passed();
    assert!(report.skipped().is_empty(), "{report}");
}
