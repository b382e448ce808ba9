//! A minimal libtest-style runner for the Redis tests: the same command-line shape as libtest for
//! what `cargo test` passes (a name filter, `--exact`, `--skip`, `--list`, `--ignored`; other
//! flags are accepted and ignored), the same closing `test result:` line, plus a `SKIPPED` line
//! that names every test skipped for want of a `redis-server` binary.
//!
//! Tests run one after another, each on a fresh tokio runtime; a panic fails that test only.

use std::future::Future;
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::process::ExitCode;
use std::time::Instant;

use coalesce_redis::test_server::{RedisServer, redis_or_skip};

/// A test's future.
pub(crate) type TestFuture = Pin<Box<dyn Future<Output = ()>>>;

enum Body {
    /// Needs a fresh server, which the harness starts (or skips the test without one).
    Redis(fn(RedisServer) -> TestFuture),
    /// Needs no server.
    Plain(fn() -> TestFuture),
}

/// One test: its name, how many runtime worker threads it runs on (1: a current-thread
/// runtime, as `#[tokio::test]`), and its body.
pub(crate) struct Case {
    name: &'static str,
    threads: usize,
    body: Body,
}

impl Case {
    pub(crate) fn redis(
        name: &'static str,
        threads: usize,
        f: fn(RedisServer) -> TestFuture,
    ) -> Self {
        Case {
            name,
            threads,
            body: Body::Redis(f),
        }
    }

    pub(crate) fn plain(name: &'static str, threads: usize, f: fn() -> TestFuture) -> Self {
        Case {
            name,
            threads,
            body: Body::Plain(f),
        }
    }
}

/// What the command line asks for.
#[derive(Default)]
struct Args {
    filters: Vec<String>,
    skips: Vec<String>,
    exact: bool,
    list: bool,
    only_ignored: bool,
}

impl Args {
    fn parse() -> Args {
        let mut args = Args::default();
        let mut it = std::env::args().skip(1);
        while let Some(arg) = it.next() {
            match arg.as_str() {
                "--list" => args.list = true,
                "--exact" => args.exact = true,
                "--ignored" => args.only_ignored = true,
                "--skip" => args.skips.extend(it.next()),
                // libtest flags that take a value in the next argument.
                "--test-threads" | "--color" | "--format" | "--logfile" | "-Z" => {
                    it.next();
                }
                flag if flag.starts_with('-') => {}
                filter => args.filters.push(filter.to_owned()),
            }
        }
        args
    }

    fn selects(&self, name: &str) -> bool {
        let matches = |pattern: &String| {
            if self.exact {
                name == pattern
            } else {
                name.contains(pattern.as_str())
            }
        };
        (self.filters.is_empty() || self.filters.iter().any(matches))
            && !self.skips.iter().any(|s| name.contains(s.as_str()))
    }
}

enum Outcome {
    Passed,
    Failed,
    Skipped,
}

/// Runs the selected cases and prints libtest's lines; fails the process if any case failed.
pub(crate) fn run(cases: &[Case]) -> ExitCode {
    let args = Args::parse();
    if args.list {
        for case in cases.iter().filter(|c| args.selects(c.name)) {
            println!("{}: test", case.name);
        }
        return ExitCode::SUCCESS;
    }
    let selected: Vec<&Case> = if args.only_ignored {
        Vec::new() // nothing here is #[ignore]d
    } else {
        cases.iter().filter(|c| args.selects(c.name)).collect()
    };
    let started = Instant::now();
    println!("\nrunning {} tests", selected.len());
    let (mut passed, mut failed, mut skipped) = (Vec::new(), Vec::new(), Vec::new());
    for case in &selected {
        let outcome = run_one(case);
        let word = match outcome {
            Outcome::Passed => "ok",
            Outcome::Failed => "FAILED",
            Outcome::Skipped => "ignored, SKIPPED: no redis-server binary",
        };
        println!("test {} ... {word}", case.name);
        let _ = std::io::stdout().flush();
        match outcome {
            Outcome::Passed => passed.push(case.name),
            Outcome::Failed => failed.push(case.name),
            Outcome::Skipped => skipped.push(case.name),
        }
    }
    if !failed.is_empty() {
        println!("\nfailures:");
        for name in &failed {
            println!("    {name}");
        }
    }
    if !skipped.is_empty() {
        println!(
            "\n*** SKIPPED {} Redis test(s), no redis-server binary (apt-get install -y \
             redis-server, or set REDIS_SERVER): {} ***",
            skipped.len(),
            skipped.join(", ")
        );
    }
    println!(
        "\ntest result: {}. {} passed; {} failed; {} ignored; 0 measured; {} filtered out; \
         finished in {:.2}s\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        passed.len(),
        failed.len(),
        skipped.len(),
        cases.len() - selected.len(),
        started.elapsed().as_secs_f64()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(101)
    }
}

fn run_one(case: &Case) -> Outcome {
    let result = catch_unwind(AssertUnwindSafe(|| {
        // Started outside the runtime: the server start blocks (it polls the port).
        let future = match case.body {
            Body::Redis(f) => match redis_or_skip(case.name) {
                Some(server) => f(server),
                None => return false,
            },
            Body::Plain(f) => f(),
        };
        runtime(case.threads).block_on(future);
        true
    }));
    match result {
        Ok(true) => Outcome::Passed,
        Ok(false) => Outcome::Skipped,
        Err(_) => Outcome::Failed,
    }
}

fn runtime(threads: usize) -> tokio::runtime::Runtime {
    let mut builder = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    builder.enable_all().build().expect("a tokio runtime")
}
