//! The `herd-proxy` binary: parses flags, opens the storage, serves until interrupted.
//! `herd-proxy --help` prints [`USAGE`].

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use herd_proxy::{Config, Proxy, SharedStorage};
use stream_cache::{DiskStorage, MemStorage};

/// What `--help` prints.
const USAGE: &str = "\
usage: herd-proxy --upstream HOST:PORT [options]

A caching HTTP reverse proxy: coalesced misses, read-while-write, and a truncated body is
never served as complete.

options:
  --upstream HOST:PORT        the origin (required)
  --listen ADDR:PORT          where to serve (default 127.0.0.1:3128)
  --storage memory|disk:DIR   where bodies live (default memory)
  --capacity BYTES            the storage's byte capacity, for either storage: bodies in
                              memory; files plus metadata on disk (default 268435456)
  --max-object BYTES          larger responses are passed, not stored
  --purge-token TOKEN         PURGE needs the header `X-Purge-Token: TOKEN` (or the
                              HERD_PURGE_TOKEN environment variable, kept out of `ps`)
  --connect-timeout-ms N      origin connect timeout (502 after it)
  --response-timeout-ms N     origin response-head timeout (504 after it)
  --body-idle-timeout-ms N    an origin body silent this long is aborted
  --max-header-bytes N        request head limit (at least 8192)
  --metrics-path PATH         Prometheus text metrics (default /metrics)
  --hit-for-pass-s N          a URL whose response may not be stored is passed, without
                              queueing, for N seconds (default 120; 0: off)
  --log LEVEL                 error, warn, info, debug or trace (default info)
  -h, --help                  print this and exit
";

#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error("unknown flag {0:?} (see --help)")]
    UnknownFlag(String),
    #[error("flag {0} needs a value")]
    MissingValue(String),
    #[error("flag {flag}: {value:?} is not a valid number")]
    BadNumber { flag: String, value: String },
    #[error("--storage must be `memory` or `disk:DIR`, got {0:?}")]
    BadStorage(String),
    #[error("--upstream is required")]
    NoUpstream,
    #[error("--log must be one of error, warn, info, debug, trace; got {0:?}")]
    BadLevel(String),
}

enum StorageFlag {
    Memory,
    Disk(String),
}

struct Cli {
    listen: String,
    storage: StorageFlag,
    capacity: u64,
    level: tracing::Level,
    config: Config,
}

/// What the command line asks for.
enum Command {
    Serve(Box<Cli>),
    Help,
}

fn parse(args: impl Iterator<Item = String>) -> Result<Command, CliError> {
    let mut args = args.peekable();
    let mut upstream = None;
    let mut listen = "127.0.0.1:3128".to_owned();
    let mut storage = StorageFlag::Memory;
    let mut capacity: u64 = 256 << 20;
    let mut level = tracing::Level::INFO;
    let mut config = Config::new("");
    config.purge_token = std::env::var("HERD_PURGE_TOKEN").ok();
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| CliError::MissingValue(flag.clone()))
        };
        let number = |value: String| {
            value.parse::<u64>().map_err(|_| CliError::BadNumber {
                flag: flag.clone(),
                value,
            })
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--upstream" => upstream = Some(value()?),
            "--listen" => listen = value()?,
            "--storage" => {
                let v = value()?;
                storage = match v.as_str() {
                    "memory" => StorageFlag::Memory,
                    other => match other.strip_prefix("disk:") {
                        Some(dir) if !dir.is_empty() => StorageFlag::Disk(dir.to_owned()),
                        _ => return Err(CliError::BadStorage(v)),
                    },
                };
            }
            "--capacity" => capacity = number(value()?)?,
            "--max-object" => config.max_object_size = number(value()?)?,
            "--purge-token" => config.purge_token = Some(value()?),
            "--connect-timeout-ms" => {
                config.connect_timeout = Duration::from_millis(number(value()?)?)
            }
            "--response-timeout-ms" => {
                config.response_timeout = Duration::from_millis(number(value()?)?)
            }
            "--body-idle-timeout-ms" => {
                config.body_idle_timeout = Duration::from_millis(number(value()?)?)
            }
            "--max-header-bytes" => {
                config.max_header_bytes = usize::try_from(number(value()?)?).unwrap_or(usize::MAX);
            }
            "--metrics-path" => config.metrics_path = value()?,
            "--hit-for-pass-s" => config.hit_for_pass = Duration::from_secs(number(value()?)?),
            "--log" => {
                let v = value()?;
                level = v.parse().map_err(|_| CliError::BadLevel(v))?;
            }
            _ => return Err(CliError::UnknownFlag(flag)),
        }
    }
    config.upstream = upstream.ok_or(CliError::NoUpstream)?;
    Ok(Command::Serve(Box::new(Cli {
        listen,
        storage,
        capacity,
        level,
        config,
    })))
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = match parse(std::env::args().skip(1)) {
        Ok(Command::Serve(cli)) => *cli,
        Ok(Command::Help) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            eprintln!("herd-proxy: {error}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt().with_max_level(cli.level).init();
    let storage: SharedStorage = match &cli.storage {
        StorageFlag::Memory => Arc::new(MemStorage::with_max_object_size(
            cli.capacity,
            cli.config.max_object_size,
        )),
        // The byte capacity bounds files plus metadata on disk; bodies are fsynced before they
        // become visible (Durability::Full, the default).
        StorageFlag::Disk(dir) => {
            match DiskStorage::builder(dir, cli.capacity)
                .max_object_size(cli.config.max_object_size)
                .open()
                .await
            {
                Ok(storage) => Arc::new(storage),
                Err(error) => {
                    eprintln!("herd-proxy: cannot open disk storage {dir:?}: {error}");
                    return ExitCode::FAILURE;
                }
            }
        }
    };
    let proxy = match Proxy::new(cli.config, storage) {
        Ok(proxy) => proxy,
        Err(error) => {
            eprintln!("herd-proxy: {error}");
            return ExitCode::from(2);
        }
    };
    let listener = match tokio::net::TcpListener::bind(&cli.listen).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("herd-proxy: cannot listen on {}: {error}", cli.listen);
            return ExitCode::FAILURE;
        }
    };
    tracing::info!(listen = %cli.listen, "herd-proxy serving");
    tokio::select! {
        () = proxy.serve(listener) => {}
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted; exiting"),
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> impl Iterator<Item = String> {
        list.iter()
            .map(|s| (*s).to_owned())
            .collect::<Vec<_>>()
            .into_iter()
    }

    #[test]
    fn help_is_a_command_not_an_unknown_flag() {
        for flag in ["--help", "-h"] {
            assert!(matches!(parse(args(&[flag])), Ok(Command::Help)), "{flag}");
            // Even with other flags (and without the required --upstream).
            assert!(matches!(
                parse(args(&["--listen", "127.0.0.1:1", flag])),
                Ok(Command::Help)
            ));
        }
        assert!(matches!(
            parse(args(&["--nope"])),
            Err(CliError::UnknownFlag(_))
        ));
    }

    #[test]
    fn disk_storage_takes_the_byte_capacity() {
        let Ok(Command::Serve(cli)) = parse(args(&[
            "--upstream",
            "127.0.0.1:8080",
            "--storage",
            "disk:/var/cache/herd",
            "--capacity",
            "1048576",
        ])) else {
            panic!("valid flags")
        };
        assert!(matches!(&cli.storage, StorageFlag::Disk(dir) if dir == "/var/cache/herd"));
        assert_eq!(cli.capacity, 1 << 20);
        assert!(matches!(
            parse(args(&["--upstream", "x:1", "--storage", "disk:"])),
            Err(CliError::BadStorage(_))
        ));
    }
}
