//! The environment a loom run gets: the `herd_loom` cfg added to the user's rustflags, the
//! preemption bound, and the refusal of variables that would end loom's search early but still
//! report success. Pure functions, unit-tested, so the rules are checked without spawning cargo.

use crate::cli::{self, Preemptions, UsageError};

/// The workspace's own loom cfg (not bare `loom`, which would also switch tokio's internals).
pub(crate) const LOOM_CFG: &str = "herd_loom";

/// Environment variables that make loom stop exploring early yet still report success.
pub(crate) const SEARCH_LIMITING_VARS: [&str; 2] = ["LOOM_MAX_DURATION", "LOOM_MAX_PERMUTATIONS"];

/// The refusal message when any search-limiting variable is set, naming them.
pub(crate) fn refusal(set_vars: &[&str]) -> Option<String> {
    (!set_vars.is_empty()).then(|| {
        format!(
            "refusing to run with {} set: it ends loom's search early and still reports \
             success, so a passing run would prove nothing. Unset it (a lower --preemptions \
             gives a quicker search that is still complete within its bound).",
            set_vars.join(" and ")
        )
    })
}

/// The preemption bound: `--preemptions`, else `LOOM_MAX_PREEMPTIONS`, else the default.
pub(crate) fn resolve_preemptions(
    flag: Option<Preemptions>,
    from_env: Option<&str>,
) -> Result<Preemptions, UsageError> {
    match (flag, from_env) {
        (Some(preemptions), _) => Ok(preemptions),
        (None, Some(value)) => cli::parse_preemptions(value.trim())
            .map_err(|UsageError(msg)| UsageError(format!("LOOM_MAX_PREEMPTIONS: {msg}"))),
        (None, None) => Ok(Preemptions::Bounded(cli::DEFAULT_PREEMPTIONS)),
    }
}

/// Adds `--cfg herd_loom` to space-separated `RUSTFLAGS`, keeping what the user set.
pub(crate) fn with_loom_cfg(existing: Option<&str>) -> String {
    let existing = existing.unwrap_or("").trim();
    let has_cfg = existing
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .any(|pair| pair == ["--cfg", LOOM_CFG])
        || existing
            .split_whitespace()
            .any(|flag| flag == format!("--cfg={LOOM_CFG}"));
    match (existing.is_empty(), has_cfg) {
        (true, _) => format!("--cfg {LOOM_CFG}"),
        (false, true) => existing.to_owned(),
        (false, false) => format!("{existing} --cfg {LOOM_CFG}"),
    }
}

/// Adds `--cfg herd_loom` to `CARGO_ENCODED_RUSTFLAGS` (flags separated by 0x1f), which cargo
/// prefers over `RUSTFLAGS` whenever it is set, even empty.
pub(crate) fn with_loom_cfg_encoded(existing: &str) -> String {
    let flags: Vec<&str> = existing.split('\u{1f}').filter(|f| !f.is_empty()).collect();
    if flags.windows(2).any(|pair| pair == ["--cfg", LOOM_CFG]) {
        return existing.to_owned();
    }
    let mut flags: Vec<String> = flags.into_iter().map(str::to_owned).collect();
    flags.push("--cfg".to_owned());
    flags.push(LOOM_CFG.to_owned());
    flags.join("\u{1f}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_when_a_search_limit_is_set() {
        assert_eq!(refusal(&[]), None);
        let one = refusal(&["LOOM_MAX_DURATION"]).unwrap();
        assert!(
            one.starts_with("refusing to run with LOOM_MAX_DURATION set"),
            "{one}"
        );
        let both = refusal(&SEARCH_LIMITING_VARS).unwrap();
        assert!(
            both.contains("LOOM_MAX_DURATION and LOOM_MAX_PERMUTATIONS"),
            "{both}"
        );
    }

    #[test]
    fn preemptions_come_from_flag_then_env_then_default() {
        use Preemptions::{Bounded, Unbounded};
        assert_eq!(resolve_preemptions(None, None), Ok(Bounded(2)));
        assert_eq!(resolve_preemptions(None, Some("3")), Ok(Bounded(3)));
        assert_eq!(resolve_preemptions(None, Some(" 4\n")), Ok(Bounded(4)));
        assert_eq!(
            resolve_preemptions(Some(Bounded(1)), Some("3")),
            Ok(Bounded(1))
        );
        assert_eq!(resolve_preemptions(Some(Unbounded), None), Ok(Unbounded));
        let UsageError(message) = resolve_preemptions(None, Some("lots")).unwrap_err();
        assert!(message.starts_with("LOOM_MAX_PREEMPTIONS:"), "{message}");
    }

    #[test]
    fn rustflags_gain_the_loom_cfg_once() {
        assert_eq!(with_loom_cfg(None), "--cfg herd_loom");
        assert_eq!(with_loom_cfg(Some("  ")), "--cfg herd_loom");
        assert_eq!(
            with_loom_cfg(Some("-C target-cpu=native")),
            "-C target-cpu=native --cfg herd_loom"
        );
        assert_eq!(with_loom_cfg(Some("--cfg herd_loom")), "--cfg herd_loom");
        assert_eq!(with_loom_cfg(Some("--cfg=herd_loom")), "--cfg=herd_loom");
        assert_eq!(
            with_loom_cfg(Some("--cfg loom")),
            "--cfg loom --cfg herd_loom"
        );
    }

    #[test]
    fn encoded_rustflags_gain_the_loom_cfg_once() {
        assert_eq!(with_loom_cfg_encoded(""), "--cfg\u{1f}herd_loom");
        assert_eq!(
            with_loom_cfg_encoded("-Copt-level=3"),
            "-Copt-level=3\u{1f}--cfg\u{1f}herd_loom"
        );
        assert_eq!(
            with_loom_cfg_encoded("--cfg\u{1f}herd_loom"),
            "--cfg\u{1f}herd_loom"
        );
    }
}
