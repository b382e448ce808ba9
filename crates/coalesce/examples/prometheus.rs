//! The `metrics` feature's counters and histograms, rendered in Prometheus' text format.
//!
//! Run: `cargo run -p coalesce --features metrics --example prometheus`. A service would serve
//! `handle.render()` on its `/metrics` endpoint (or use the exporter's own HTTP listener); here
//! a few flights run (a stampede of ten callers, a cancelled leader, a failure) and the page is
//! printed once.

use std::time::Duration;

use coalesce::Group;
use metrics_exporter_prometheus::PrometheusBuilder;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // Installed before any group is built: a group registers its handles when it is built.
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .expect("no other metrics recorder is installed");
    let group: Group<String, String, String> = Group::builder()
        .metrics_name("users")
        .wait_timeout(Duration::from_secs(1))
        .build();

    // Ten callers at once for one key: one fill, nine followers.
    let stampede = (0..10).map(|_| {
        group.run("user:42".to_string(), || async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok("Ada".to_string())
        })
    });
    for result in futures::future::join_all(stampede).await {
        assert_eq!(result.unwrap(), "Ada");
    }
    // A leader cancelled mid-fill (its caller timed out): the follower behind it takes over.
    let slow = group.run("user:7".to_string(), || async {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok("never".to_string())
    });
    let patient = group.run("user:7".to_string(), || async { Ok("Grace".to_string()) });
    let (cancelled, handed_on) = tokio::join!(
        tokio::time::timeout(Duration::from_millis(10), slow),
        patient
    );
    assert!(cancelled.is_err());
    assert_eq!(handed_on.unwrap(), "Grace");
    // A failed fill.
    let failed = group.run("user:0".to_string(), || async {
        Err("backend down".to_string())
    });
    assert!(failed.await.is_err());

    print!("{}", handle.render());
}
