//! A fixed amount of uncontended work for instruction counts (`valgrind --tool=callgrind`):
//! `fillprobe run N` leads and finishes N fresh keys through `Group::run`, `fillprobe join N`
//! through `join` + `finish`. Run it at two values of N and divide the difference in
//! instructions by the difference in N for the cost of one fill, free of start-up costs.

use std::convert::Infallible;
use std::hint::black_box;

use coalesce::{Group, Joined};

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "run".into());
    let n: u64 = args
        .next()
        .map_or(100_000, |n| n.parse().expect("N is a number"));
    let group: Group<u64, u64> = Group::builder().shards(16).build();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a tokio runtime");
    rt.block_on(async {
        for key in 0..n {
            // Scattered keys, as the criterion bench does, so hashing and probing are realistic.
            let key = key.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            match mode.as_str() {
                "run" => {
                    let v = group
                        .run(key, || async move { Ok::<_, Infallible>(key) })
                        .await;
                    black_box(v.ok());
                }
                "join" => {
                    let value = match group.join(key).await {
                        Joined::Leader(leader) => leader.finish(Ok(key)).ok(),
                        Joined::Done(done) => done.ok(),
                    };
                    black_box(value);
                }
                other => panic!("unknown mode {other}: run or join"),
            }
        }
    });
    assert_eq!(group.in_flight(), 0);
}
