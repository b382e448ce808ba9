//! Eight OS processes (this test binary, re-run as children), one cold key, 200 concurrent
//! callers each: one fill in total through the Redis lease and L2, and all 1,600 callers get the
//! value. The parent starts the children, releases them together, and counts.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use coalesce_redis::test_server::RedisServer;

use crate::second_level::process_with;

/// Set in a child's environment: the Redis url.
const CHILD: &str = "HERD_FLEET_CHILD";
const PROCESSES: usize = 8;
const CALLERS: usize = 200;
const FILLS_KEY: &str = "herd:test:fleet:fills";

/// In a child (its environment names the Redis url): runs the child's part and returns its exit
/// code; otherwise `None`.
pub(crate) fn child() -> Option<ExitCode> {
    let url = std::env::var(CHILD).ok()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    Some(runtime.block_on(child_main(url)))
}

async fn child_main(url: String) -> ExitCode {
    let proc = process_with(&url, Duration::from_millis(50), true, true);
    proc.l2.wait_subscribed().await;
    println!("ready");
    let _ = std::io::stdout().flush();
    let mut go = String::new();
    if tokio::task::spawn_blocking(move || std::io::stdin().read_line(&mut go))
        .await
        .is_err()
    {
        return ExitCode::FAILURE;
    }
    let client = redis::Client::open(url.as_str()).expect("url");
    let ok = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..CALLERS {
        let (tier, client, ok) = (proc.tier.clone(), client.clone(), ok.clone());
        tasks.push(tokio::spawn(async move {
            let got = tier
                .get_or_try_insert(
                    "cold".to_string(),
                    |_| Duration::from_secs(60),
                    move || async move {
                        let mut conn = client
                            .get_multiplexed_async_connection()
                            .await
                            .map_err(|e| e.to_string())?;
                        let _: i64 = redis::cmd("INCR")
                            .arg(FILLS_KEY)
                            .query_async(&mut conn)
                            .await
                            .map_err(|e| e.to_string())?;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Ok::<_, String>(42)
                    },
                )
                .await;
            if matches!(got, Ok(ref f) if f.value == 42) {
                ok.fetch_add(1, SeqCst);
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    println!("done {}", ok.load(SeqCst));
    let _ = std::io::stdout().flush();
    ExitCode::SUCCESS
}

struct Kid {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn line(kid: &mut Kid) -> String {
    let mut line = String::new();
    kid.stdout
        .read_line(&mut line)
        .expect("read a child's line");
    line.trim().to_owned()
}

/// The parent's part, all blocking I/O: run on a blocking thread.
fn run_fleet(url: String) -> (usize, Vec<String>) {
    let exe = std::env::current_exe().expect("this test binary");
    let mut kids: Vec<Kid> = (0..PROCESSES)
        .map(|_| {
            let mut child = Command::new(&exe)
                .env(CHILD, &url)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn a child");
            let stdin = child.stdin.take().expect("stdin");
            let stdout = BufReader::new(child.stdout.take().expect("stdout"));
            Kid {
                child,
                stdin,
                stdout,
            }
        })
        .collect();
    for kid in &mut kids {
        assert_eq!(line(kid), "ready");
    }
    for kid in &mut kids {
        kid.stdin.write_all(b"go\n").expect("release a child");
        kid.stdin.flush().expect("flush");
    }
    let lines: Vec<String> = kids.iter_mut().map(line).collect();
    let ok = lines
        .iter()
        .map(|l| {
            l.strip_prefix("done ")
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or_else(|| panic!("a child said {l:?}"))
        })
        .sum();
    for kid in &mut kids {
        assert!(kid.child.wait().expect("wait").success());
    }
    (ok, lines)
}

pub(crate) async fn eight_processes_fill_one_cold_key_once(server: RedisServer) {
    let url = server.url();
    let task = tokio::task::spawn_blocking({
        let url = url.clone();
        move || run_fleet(url)
    });
    let (ok, lines) = tokio::time::timeout(Duration::from_secs(120), task)
        .await
        .expect("the fleet hung")
        .expect("the parent's part panicked");
    assert_eq!(
        ok,
        PROCESSES * CALLERS,
        "every caller got the value: {lines:?}"
    );
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let fills: i64 = redis::cmd("GET")
        .arg(FILLS_KEY)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(fills, 1, "one fill for the whole fleet");
}
