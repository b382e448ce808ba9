//! `cargo xtask loom`: runs every crate's loom models in release mode under the `herd_loom` cfg,
//! in their own target dir, keeps going after a failure and reports how many models each crate
//! actually ran, so "loom passed" can never mean "loom ran nothing".

use crate::cli::{self, LoomArgs, Preemptions, UsageError};
use crate::libtest::SummaryCollector;
use crate::loom_env::{self, SEARCH_LIMITING_VARS};
use crate::report::{self, CrateRun, Verdict};
use crate::workspace::{self, WorkspaceCrate};
use std::env;
use std::ffi::OsString;
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

/// Target dir for loom builds, so the cfg change does not invalidate the normal build cache.
const LOOM_TARGET_DIR: &str = "target/loom";

/// Exit status for a model failure.
const EXIT_FAILED: u8 = 1;
/// Exit status for a usage or environment error (nothing was run).
const EXIT_USAGE: u8 = 2;

/// Runs `cargo xtask loom` and returns the process exit status.
pub(crate) fn run(args: &LoomArgs) -> ExitCode {
    if args.list {
        return list(args);
    }
    match prepare(args) {
        Ok(plan) => run_all(args, &plan),
        Err(message) => {
            eprintln!("xtask loom: error: {message}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// `--list`: prints the selected crates' package names, one a line.
fn list(args: &LoomArgs) -> ExitCode {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let listed = workspace::locate_root(&cargo.to_string_lossy())
        .and_then(|root| workspace::discover(&root))
        .and_then(|all| {
            workspace::select(&all, &args.crates)
                .map(|selected| selected.iter().map(|c| c.name.clone()).collect::<Vec<_>>())
        });
    match listed {
        Ok(names) => {
            for name in names {
                println!("{name}");
            }
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("xtask loom: error: {message}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// Everything decided before the first build starts.
struct Plan {
    /// The cargo binary that ran us (`$CARGO`), so the same toolchain builds the models.
    cargo: OsString,
    /// The workspace root; `target/loom` is relative to it.
    root: PathBuf,
    /// The crates to run, in order.
    crates: Vec<WorkspaceCrate>,
    /// The resolved preemption bound.
    preemptions: Preemptions,
}

/// Checks the environment and arguments and picks the crates, before anything is built.
fn prepare(args: &LoomArgs) -> Result<Plan, String> {
    let set: Vec<&str> = SEARCH_LIMITING_VARS
        .into_iter()
        .filter(|var| env::var_os(var).is_some())
        .collect();
    if let Some(message) = loom_env::refusal(&set) {
        return Err(message);
    }
    let preemptions = loom_env::resolve_preemptions(
        args.preemptions,
        env::var("LOOM_MAX_PREEMPTIONS").ok().as_deref(),
    )
    .map_err(|UsageError(message)| message)?;

    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let root = workspace::locate_root(&cargo.to_string_lossy())?;
    let all = workspace::discover(&root)?;
    let selected: Vec<WorkspaceCrate> = workspace::select(&all, &args.crates)?
        .into_iter()
        .cloned()
        .collect();
    if selected.is_empty() {
        return Err(format!(
            "no crate under {} has loom models (crates/*/{})",
            root.join("crates").display(),
            workspace::LOOM_TESTS
        ));
    }
    Ok(Plan {
        cargo,
        root,
        crates: selected,
        preemptions,
    })
}

/// The libtest arguments: the user's, plus a thread count unless they chose one. Loom models are
/// CPU-bound and each runs on one OS thread, so one harness thread per core is the fastest.
fn harness_args(args: &LoomArgs, cores: usize) -> Vec<String> {
    let mut harness = args.harness_args.clone();
    if !args.sets_test_threads() {
        harness.push(format!("--test-threads={}", cores.max(1)));
    }
    harness
}

/// Runs every planned crate, then prints the summary; the exit status reflects every crate.
fn run_all(args: &LoomArgs, plan: &Plan) -> ExitCode {
    let preemptions = plan.preemptions;
    match preemptions {
        Preemptions::Bounded(n) if n < cli::DEFAULT_PREEMPTIONS => eprintln!(
            "xtask loom: warning: LOOM_MAX_PREEMPTIONS={n} is below the bound of {} the \
             project's models are meant to pass",
            cli::DEFAULT_PREEMPTIONS
        ),
        _ => {}
    }
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let harness = harness_args(args, cores);
    let filtered = args.is_filtered();

    let mut runs = Vec::with_capacity(plan.crates.len());
    let mut failed_models: Vec<(String, Vec<String>)> = Vec::new();
    for krate in &plan.crates {
        eprintln!(
            "\n==> loom: {} (LOOM_MAX_PREEMPTIONS={preemptions}, release, {LOOM_TARGET_DIR})",
            krate.name
        );
        let (run, collector) =
            run_crate(&plan.cargo, &plan.root, &krate.name, &harness, preemptions);
        if !collector.failed_tests().is_empty() {
            failed_models.push((krate.name.clone(), collector.failed_tests().to_vec()));
        }
        runs.push(run);
    }

    let table = report::summary_table(&runs, filtered, &preemptions.to_string());
    println!("\n{table}");
    let verdicts: Vec<Verdict> = runs.iter().map(|run| Verdict::of(run, filtered)).collect();
    for (krate, models) in &failed_models {
        for model in models {
            println!(
                "rerun: LOOM_LOG=trace LOOM_LOCATION=1 cargo xtask loom {krate} \
                 --preemptions {preemptions} -- {model} --exact --nocapture"
            );
        }
    }
    let failures = verdicts.iter().filter(|v| v.is_failure()).count();
    if failures > 0 {
        println!("loom: {failures} of {} crate(s) FAILED", runs.len());
        ExitCode::from(EXIT_FAILED)
    } else {
        let total: u64 = runs
            .iter()
            .filter_map(|run| run.counts.map(|c| c.ran()))
            .sum();
        println!("loom: {total} model(s) passed in {} crate(s)", runs.len());
        ExitCode::SUCCESS
    }
}

/// Builds and runs one crate's loom models, echoing the harness's output while parsing it.
fn run_crate(
    cargo: &OsString,
    root: &Path,
    name: &str,
    harness: &[String],
    preemptions: Preemptions,
) -> (CrateRun, SummaryCollector) {
    let mut command = Command::new(cargo);
    command
        .current_dir(root)
        .args(["test", "--release", "-p", name, "--test", "loom"])
        .args(["--target-dir", LOOM_TARGET_DIR, "--"])
        .args(harness)
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    match env::var("CARGO_ENCODED_RUSTFLAGS") {
        Ok(encoded) => command.env(
            "CARGO_ENCODED_RUSTFLAGS",
            loom_env::with_loom_cfg_encoded(&encoded),
        ),
        Err(_) => command.env(
            "RUSTFLAGS",
            loom_env::with_loom_cfg(env::var("RUSTFLAGS").ok().as_deref()),
        ),
    };
    match preemptions {
        Preemptions::Bounded(n) => command.env("LOOM_MAX_PREEMPTIONS", n.to_string()),
        Preemptions::Unbounded => command.env_remove("LOOM_MAX_PREEMPTIONS"),
    };

    let started = Instant::now();
    let mut collector = SummaryCollector::default();
    let outcome = command.spawn().and_then(|mut child| {
        if let Some(stdout) = child.stdout.take() {
            echo_and_collect(stdout, &mut collector)?;
        }
        child.wait()
    });
    let seconds = started.elapsed().as_secs_f64();
    let (exit_success, exit_code) = match outcome {
        Ok(status) => (status.success(), status.code()),
        Err(error) => {
            eprintln!("xtask loom: could not run cargo for `{name}`: {error}");
            (false, None)
        }
    };
    let run = CrateRun {
        name: name.to_owned(),
        exit_success,
        exit_code,
        counts: collector.counts(),
        seconds,
    };
    (run, collector)
}

/// Copies the harness's stdout to ours line by line (so progress stays visible) and feeds each
/// line to the collector. Non-UTF-8 output is shown lossily rather than aborting the run.
fn echo_and_collect(stdout: impl io::Read, collector: &mut SummaryCollector) -> io::Result<()> {
    let mut reader = BufReader::new(stdout);
    let mut out = io::stdout();
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            return Ok(());
        }
        out.write_all(&line)?;
        out.flush()?;
        collector.feed(&String::from_utf8_lossy(&line));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn harness_gets_one_thread_per_core_unless_told() {
        let mut args = LoomArgs {
            crates: vec![],
            preemptions: None,
            harness_args: vec!["model".to_owned()],
            list: false,
        };
        assert_eq!(harness_args(&args, 2), ["model", "--test-threads=2"]);
        assert_eq!(harness_args(&args, 0), ["model", "--test-threads=1"]);
        args.harness_args.push("--test-threads=1".to_owned());
        assert_eq!(harness_args(&args, 8), ["model", "--test-threads=1"]);
    }
}
