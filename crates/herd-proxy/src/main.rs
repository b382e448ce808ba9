//! The `herd-proxy` binary: parses flags, opens the storage, serves until interrupted.
//!
//! ```text
//! herd-proxy --upstream 127.0.0.1:8080 [--listen 127.0.0.1:3128] [--storage memory|disk:DIR]
//!            [--capacity BYTES] [--max-object BYTES] [--purge-token TOKEN]
//!            [--connect-timeout-ms N] [--response-timeout-ms N] [--body-idle-timeout-ms N]
//!            [--max-header-bytes N] [--metrics-path PATH] [--log LEVEL]
//! ```
//! The purge token may also come from `HERD_PURGE_TOKEN` (so it stays out of `ps`).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use herd_proxy::{Config, Proxy, SharedStorage};
use stream_cache::{DiskStorage, MemStorage};

#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error("unknown flag {0:?} (see the crate docs for the flags)")]
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

fn parse(args: impl Iterator<Item = String>) -> Result<Cli, CliError> {
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
            "--log" => {
                let v = value()?;
                level = v.parse().map_err(|_| CliError::BadLevel(v))?;
            }
            _ => return Err(CliError::UnknownFlag(flag)),
        }
    }
    config.upstream = upstream.ok_or(CliError::NoUpstream)?;
    Ok(Cli {
        listen,
        storage,
        capacity,
        level,
        config,
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = match parse(std::env::args().skip(1)) {
        Ok(cli) => cli,
        Err(error) => {
            eprintln!("herd-proxy: {error}");
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
