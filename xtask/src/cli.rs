//! Command-line parsing for `cargo xtask`, kept apart from the runner so it can be unit-tested
//! without spawning anything.

use std::fmt;

/// Preemption bound used when neither `--preemptions` nor `LOOM_MAX_PREEMPTIONS` says otherwise.
pub(crate) const DEFAULT_PREEMPTIONS: u32 = 2;

/// Usage text printed by `cargo xtask help` and after a usage error.
pub(crate) const USAGE: &str = "\
cargo xtask: workspace automation (std only)

USAGE:
    cargo xtask loom [CRATE...] [--preemptions N] [-- FILTER...]
    cargo xtask loom --list
    cargo xtask help

loom:
    Runs the loom models of every workspace crate that has `crates/<dir>/tests/loom.rs`
    (or only the named crates; a crate is named by its package name or directory), each with:
        RUSTFLAGS=\"$RUSTFLAGS --cfg herd_loom\" LOOM_MAX_PREEMPTIONS=N \\
        cargo test --release -p CRATE --test loom --target-dir target/loom -- [FILTER...]
    keeps going after a failure, prints a summary table, and exits non-zero if any crate
    failed, a named crate has no loom models, or a crate ran 0 models (only a warning when
    a FILTER is given).

    --list            print the package names of the crates that have loom models, one a
                      line, and run nothing (CI checks its loom matrix against this).
    --preemptions N   loom's preemption bound (default: $LOOM_MAX_PREEMPTIONS, else 2);
                      `unbounded` explores every interleaving (slow).
    -- FILTER...      passed to the libtest harness: a model-name filter, `--exact`,
                      `--nocapture`, `--test-threads=N` (default: available cores), ...

    Refuses to run (exit 2) if LOOM_MAX_DURATION or LOOM_MAX_PERMUTATIONS is set: both end
    loom's search early and still report success.

    Debug one failing model with:
        LOOM_LOG=trace LOOM_LOCATION=1 cargo xtask loom CRATE -- MODEL --exact --nocapture

EXIT STATUS:
    0 all models passed, 1 a crate failed, 2 usage or environment error.
";

/// What the user asked `cargo xtask` to do.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Command {
    /// Print usage and exit successfully.
    Help,
    /// Run loom models.
    Loom(LoomArgs),
}

/// Preemption bound passed to loom as `LOOM_MAX_PREEMPTIONS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Preemptions {
    /// `LOOM_MAX_PREEMPTIONS=N`.
    Bounded(u32),
    /// `LOOM_MAX_PREEMPTIONS` removed: loom explores every interleaving.
    Unbounded,
}

impl fmt::Display for Preemptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Preemptions::Bounded(n) => write!(f, "{n}"),
            Preemptions::Unbounded => f.write_str("unbounded"),
        }
    }
}

/// Arguments of `cargo xtask loom`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct LoomArgs {
    /// Crates named on the command line, deduplicated, in the order given; empty means all.
    pub(crate) crates: Vec<String>,
    /// `--preemptions`, if given; the environment and the default are resolved later.
    pub(crate) preemptions: Option<Preemptions>,
    /// Everything after `--`, passed verbatim to the libtest harness.
    pub(crate) harness_args: Vec<String>,
    /// `--list`: print the crates that have models instead of running them.
    pub(crate) list: bool,
}

impl LoomArgs {
    /// Whether the harness arguments narrow which models run (a name filter or `--skip`), in which
    /// case running 0 models is a warning rather than a failure.
    pub(crate) fn is_filtered(&self) -> bool {
        self.harness_args
            .iter()
            .any(|arg| !arg.starts_with('-') || arg == "--skip" || arg.starts_with("--skip="))
    }

    /// Whether the user chose the harness's thread count themselves (libtest rejects the flag
    /// twice, so the runner must not add its own then).
    pub(crate) fn sets_test_threads(&self) -> bool {
        self.harness_args
            .iter()
            .any(|arg| arg == "--test-threads" || arg.starts_with("--test-threads="))
    }
}

/// A command line that cannot be understood; printed with the usage text, exit status 2.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct UsageError(pub(crate) String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Parses the arguments after the program name.
pub(crate) fn parse<I, S>(args: I) -> Result<Command, UsageError>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut args = args.into_iter().map(Into::into);
    match args.next().as_deref() {
        None => Err(UsageError("missing a subcommand".into())),
        Some("help" | "-h" | "--help") => Ok(Command::Help),
        Some("loom") => parse_loom(args),
        Some(other) => Err(UsageError(format!("unknown subcommand `{other}`"))),
    }
}

fn parse_loom(mut args: impl Iterator<Item = String>) -> Result<Command, UsageError> {
    let mut parsed = LoomArgs {
        crates: Vec::new(),
        preemptions: None,
        harness_args: Vec::new(),
        list: false,
    };
    while let Some(arg) = args.next() {
        if arg == "--" {
            parsed.harness_args.extend(args.by_ref());
            break;
        }
        if arg == "-h" || arg == "--help" {
            return Ok(Command::Help);
        }
        if arg == "--list" {
            parsed.list = true;
            continue;
        }
        let preemption_value = if arg == "--preemptions" {
            Some(args.next().ok_or_else(|| {
                UsageError("`--preemptions` needs a value (a number or `unbounded`)".into())
            })?)
        } else {
            arg.strip_prefix("--preemptions=").map(str::to_owned)
        };
        if let Some(value) = preemption_value {
            if parsed.preemptions.is_some() {
                return Err(UsageError("`--preemptions` given more than once".into()));
            }
            parsed.preemptions = Some(parse_preemptions(&value)?);
        } else if arg.starts_with('-') {
            return Err(UsageError(format!(
                "unknown option `{arg}` (libtest options go after `--`)"
            )));
        } else if !is_crate_name(&arg) {
            return Err(UsageError(format!("`{arg}` is not a crate name")));
        } else if !parsed.crates.contains(&arg) {
            parsed.crates.push(arg);
        }
    }
    Ok(Command::Loom(parsed))
}

/// Parses a preemption bound as given to `--preemptions` or in `LOOM_MAX_PREEMPTIONS`.
pub(crate) fn parse_preemptions(value: &str) -> Result<Preemptions, UsageError> {
    if value == "unbounded" {
        return Ok(Preemptions::Unbounded);
    }
    value.parse().map(Preemptions::Bounded).map_err(|_| {
        UsageError(format!(
            "preemption bound `{value}` is neither a non-negative integer nor `unbounded`"
        ))
    })
}

fn is_crate_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loom(args: &[&str]) -> LoomArgs {
        let mut full = vec!["loom"];
        full.extend_from_slice(args);
        match parse(full) {
            Ok(Command::Loom(parsed)) => parsed,
            other => panic!("expected loom args for {args:?}, got {other:?}"),
        }
    }

    fn error(args: &[&str]) -> String {
        match parse(args.iter().copied()) {
            Err(UsageError(message)) => message,
            other => panic!("expected a usage error for {args:?}, got {other:?}"),
        }
    }

    #[test]
    fn help_in_every_spelling() {
        for args in [
            &["help"][..],
            &["-h"],
            &["--help"],
            &["loom", "--help"],
            &["loom", "x", "-h"],
        ] {
            assert_eq!(parse(args.iter().copied()), Ok(Command::Help), "{args:?}");
        }
    }

    #[test]
    fn bare_loom_runs_everything_with_defaults() {
        assert_eq!(
            loom(&[]),
            LoomArgs {
                crates: vec![],
                preemptions: None,
                harness_args: vec![],
                list: false,
            }
        );
    }

    #[test]
    fn crates_preemptions_and_filter() {
        let parsed = loom(&[
            "coalesce",
            "--preemptions",
            "3",
            "ttl-lru",
            "--",
            "leader",
            "--nocapture",
        ]);
        assert_eq!(parsed.crates, ["coalesce", "ttl-lru"]);
        assert_eq!(parsed.preemptions, Some(Preemptions::Bounded(3)));
        assert_eq!(parsed.harness_args, ["leader", "--nocapture"]);
        assert!(parsed.is_filtered());
        assert!(!parsed.sets_test_threads());
    }

    #[test]
    fn preemptions_with_equals_and_unbounded() {
        assert_eq!(
            loom(&["--preemptions=0"]).preemptions,
            Some(Preemptions::Bounded(0))
        );
        assert_eq!(
            loom(&["--preemptions", "unbounded"]).preemptions,
            Some(Preemptions::Unbounded)
        );
    }

    #[test]
    fn list_flag() {
        assert!(loom(&["--list"]).list);
        assert!(!loom(&["--", "--list"]).list);
    }

    #[test]
    fn duplicate_crates_are_collapsed() {
        assert_eq!(loom(&["a", "b", "a"]).crates, ["a", "b"]);
    }

    #[test]
    fn flags_after_double_dash_are_not_ours() {
        let parsed = loom(&["--", "--preemptions", "9", "--test-threads=1"]);
        assert_eq!(parsed.preemptions, None);
        assert_eq!(
            parsed.harness_args,
            ["--preemptions", "9", "--test-threads=1"]
        );
        assert!(parsed.sets_test_threads());
    }

    #[test]
    fn filtered_means_a_name_filter_or_skip() {
        assert!(!loom(&["--", "--nocapture", "--test-threads=2"]).is_filtered());
        assert!(loom(&["--", "--skip", "slow"]).is_filtered());
        assert!(loom(&["--", "--skip=slow"]).is_filtered());
        assert!(loom(&["--", "model", "--exact"]).is_filtered());
    }

    #[test]
    fn usage_errors() {
        assert_eq!(error(&[]), "missing a subcommand");
        assert!(error(&["bench"]).contains("unknown subcommand `bench`"));
        assert!(error(&["loom", "--preemptions"]).contains("needs a value"));
        assert!(error(&["loom", "--preemptions", "two"]).contains("`two`"));
        assert!(error(&["loom", "--preemptions=-1"]).contains("`-1`"));
        assert!(error(&["loom", "--preemptions=1", "--preemptions=2"]).contains("more than once"));
        assert!(error(&["loom", "--nocapture"]).contains("after `--`"));
        assert!(error(&["loom", "crates/coalesce"]).contains("not a crate name"));
    }
}
