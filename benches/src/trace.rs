//! Reading the ARC block traces (`OLTP`, `P2`, `P3`, `P6`, `P12`; vendored in `benches/traces/arc`,
//! whose README gives their source, citation and published figures): zstd-compressed text, one `start_block block_count ignored
//! request_no` line per request run, where a line stands for `block_count` one-block requests.
//!
//! Runs are stored as `(start, count)` pairs (8 bytes a line) and expanded lazily, so a 13M-request
//! trace costs a few MB rather than 100 MB of expanded keys.

use std::io::Read;
use std::path::{Path, PathBuf};

/// The traces the README publishes exact-LRU figures for, in its order.
pub const ARC_TRACES: [&str; 5] = ["OLTP", "P2", "P3", "P6", "P12"];

/// Environment variable that overrides where the traces are looked for.
pub const TRACE_DIR_ENV: &str = "HERD_TRACE_DIR";

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened or read.
    #[error("reading {path}: {source}")]
    Io {
        /// The trace file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The zstd stream is corrupt or truncated.
    #[error("decompressing {path}: {message}")]
    Zstd {
        /// The trace file.
        path: PathBuf,
        /// The decoder's description of the problem.
        message: String,
    },
    /// A line is not four unsigned integers, or its block range overflows.
    #[error("{path}:{line}: {reason}: {text:?}")]
    BadLine {
        /// The trace file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: &'static str,
        /// The offending line (truncated to 80 bytes).
        text: String,
    },
    /// None of the candidate directories holds the trace.
    #[error(
        "trace {name} not found in any of {searched:?}; set {TRACE_DIR_ENV} to the directory holding {name}.lis.zst"
    )]
    NotFound {
        /// The trace name.
        name: String,
        /// Every directory that was tried.
        searched: Vec<PathBuf>,
    },
}

/// One decoded ARC trace.
#[derive(Debug, Clone)]
pub struct ArcTrace {
    name: String,
    runs: Vec<(u32, u32)>,
    requests: u64,
}

impl ArcTrace {
    /// The trace's name (file stem without `.lis.zst`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Number of lines in the file.
    pub fn lines(&self) -> usize {
        self.runs.len()
    }

    /// Number of one-block requests after expanding every line.
    pub fn requests(&self) -> u64 {
        self.requests
    }

    /// Every one-block request, in order.
    pub fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.runs
            .iter()
            .flat_map(|&(start, count)| u64::from(start)..u64::from(start) + u64::from(count))
    }

    /// Loads `NAME.lis.zst` from the first default directory that has it (see [`trace_dirs`]).
    pub fn load(name: &str) -> Result<Self, TraceError> {
        Self::load_from(name, &trace_dirs())
    }

    /// Loads `NAME.lis.zst` from the first of `dirs` that has it.
    pub fn load_from(name: &str, dirs: &[PathBuf]) -> Result<Self, TraceError> {
        for dir in dirs {
            let path = dir.join(format!("{name}.lis.zst"));
            if path.is_file() {
                return Self::from_file(&path);
            }
        }
        Err(TraceError::NotFound {
            name: name.to_owned(),
            searched: dirs.to_vec(),
        })
    }

    /// Decodes and parses one `.lis.zst` file.
    pub fn from_file(path: &Path) -> Result<Self, TraceError> {
        let io_err = |source| TraceError::Io {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io_err)?;
        let mut decoder = ruzstd::decoding::StreamingDecoder::new(std::io::BufReader::new(file))
            .map_err(|e| TraceError::Zstd {
                path: path.to_owned(),
                message: e.to_string(),
            })?;
        let mut text = Vec::new();
        decoder
            .read_to_end(&mut text)
            .map_err(|e| TraceError::Zstd {
                path: path.to_owned(),
                message: e.to_string(),
            })?;
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .map(|n| n.trim_end_matches(".zst").trim_end_matches(".lis"))
            .unwrap_or("trace")
            .to_owned();
        Self::parse(name, &text).map_err(|(line, reason, text)| TraceError::BadLine {
            path: path.to_owned(),
            line,
            reason,
            text,
        })
    }

    /// Parses decompressed trace text. Errors carry (1-based line, reason, line text).
    pub fn parse(
        name: impl Into<String>,
        text: &[u8],
    ) -> Result<Self, (usize, &'static str, String)> {
        let mut runs = Vec::with_capacity(text.len() / 16);
        let mut requests = 0u64;
        for (idx, raw) in text.split(|&b| b == b'\n').enumerate() {
            let line = raw.strip_suffix(b"\r").unwrap_or(raw);
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let bad = |reason| {
                let shown = &line[..line.len().min(80)];
                (idx + 1, reason, String::from_utf8_lossy(shown).into_owned())
            };
            let mut fields = line
                .split(|b| b.is_ascii_whitespace())
                .filter(|f| !f.is_empty());
            let mut next_number = || -> Result<u64, (usize, &'static str, String)> {
                let field = fields.next().ok_or_else(|| bad("fewer than 4 fields"))?;
                parse_u64(field).ok_or_else(|| bad("field is not an unsigned integer"))
            };
            let start = next_number()?;
            let count = next_number()?;
            next_number()?;
            next_number()?;
            if fields.next().is_some() {
                return Err(bad("more than 4 fields"));
            }
            let (Ok(start32), Ok(count32)) = (u32::try_from(start), u32::try_from(count)) else {
                return Err(bad("block number or count does not fit in 32 bits"));
            };
            if start
                .checked_add(count)
                .is_none_or(|end| end > u64::from(u32::MAX))
            {
                return Err(bad("block range overflows 32 bits"));
            }
            requests += count;
            runs.push((start32, count32));
        }
        Ok(Self {
            name: name.into(),
            runs,
            requests,
        })
    }
}

fn parse_u64(field: &[u8]) -> Option<u64> {
    if field.is_empty() || field.len() > 19 {
        return None;
    }
    field.iter().try_fold(0u64, |acc, &b| {
        b.is_ascii_digit().then(|| acc * 10 + u64::from(b - b'0'))
    })
}

/// Directories searched for traces, in order: `$HERD_TRACE_DIR` (other traces, or a copy
/// elsewhere), then the repository's own copy in `benches/traces/arc`. Nothing outside the
/// repository is read unless the variable names it, so a plain clone has every trace its tests use.
pub fn trace_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(dir) = std::env::var_os(TRACE_DIR_ENV) {
        dirs.push(PathBuf::from(dir));
    }
    dirs.push(vendored_dir());
    dirs
}

/// `benches/traces/arc`, the copy of the ARC traces kept in the repository: under the
/// package directory cargo names at run time (`cargo test`, `cargo run` and `cargo bench` set
/// `CARGO_MANIFEST_DIR` for the process), else the one it named at build time. The run-time
/// one comes first because a build can be reused from another checkout of the same sources (a
/// shared target directory), whose compile-time path may since have been deleted.
pub fn vendored_dir() -> PathBuf {
    let package = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    package.join("traces/arc")
}

#[cfg(test)]
mod tests {
    use super::ArcTrace;

    #[test]
    fn expands_block_runs() {
        let t = ArcTrace::parse("t", b"10 3 0 0\n5 1 0 1\n\n7 0 0 2\n").unwrap();
        assert_eq!(t.lines(), 3);
        assert_eq!(t.requests(), 4);
        assert_eq!(t.keys().collect::<Vec<_>>(), vec![10, 11, 12, 5]);
    }

    #[test]
    fn rejects_malformed_lines_with_their_number() {
        let err = ArcTrace::parse("t", b"1 1 0 0\n1 x 0 0\n").unwrap_err();
        assert_eq!(err.0, 2);
        assert!(ArcTrace::parse("t", b"1 1 0\n").is_err());
        assert!(ArcTrace::parse("t", b"1 1 0 0 9\n").is_err());
        assert!(ArcTrace::parse("t", b"4294967295 2 0 0\n").is_err());
        assert!(ArcTrace::parse("t", b"99999999999999999999 1 0 0\n").is_err());
    }
}
