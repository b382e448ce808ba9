//! Where `DiskStorage` keeps its files: object names, the subdirectory each key's files live
//! in, and the directory walks and syncs that the restart scan and the durability rules need.
//!
//! Object files are spread over `SUBDIRS` (256) subdirectories of `objects/`, chosen by a byte
//! of the key's (mixed) name hash (`objects/3f/<hash>-<seq>.obj`, as nginx's `levels=` and
//! Squid's `L1`/`L2` do), so that no directory holds every object (the module docs of `disk`
//! say why, and what it measured). Every file a key ever has lives in the same
//! subdirectory, which is what lets `purge` sync exactly one directory.

use std::io;
use std::path::{Path, PathBuf};

use crate::traits::CacheKey;

/// Bits of the key hash that pick the subdirectory.
pub(super) const SUBDIR_BITS: u32 = 8;
/// Number of object subdirectories.
pub(super) const SUBDIRS: usize = 1 << SUBDIR_BITS;

/// Unit tests make every key collide, to show that collisions are harmless.
#[cfg(test)]
pub(super) static COLLIDE: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

pub(super) fn key_hash(key: &CacheKey) -> u64 {
    #[cfg(test)]
    if COLLIDE.load(std::sync::atomic::Ordering::Relaxed) {
        return 0;
    }
    fnv1a(key.as_bytes())
}

/// FNV-1a: stable across processes and versions (the restart scan and the flat layout of
/// earlier versions depend on that); uniqueness comes from the seq, identity from the stored
/// key.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The subdirectory of the files of a key with this name hash: the top byte of the hash after
/// a finalizer (MurmurHash3's `fmix64`). FNV-1a's own top bits barely move when only the last
/// bytes of a key differ (`k1`, `k2`, ...: 100,000 such keys left most subdirectories empty,
/// test `sequential_keys_spread_evenly`); the finalizer spreads every input bit over them.
fn subdir_of_hash(hash: u64) -> usize {
    let mut h = hash;
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    (h >> (64 - SUBDIR_BITS)) as usize
}

/// The subdirectory of `key`'s files.
pub(super) fn subdir_of(key: &CacheKey) -> usize {
    subdir_of_hash(key_hash(key))
}

/// A subdirectory's name: its index in two lowercase hex digits.
fn subdir_name(subdir: usize) -> String {
    format!("{subdir:02x}")
}

/// The subdirectory index a directory name stands for, `None` for anything else.
fn parse_subdir_name(name: &str) -> Option<usize> {
    if name.len() != 2 || !name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    usize::from_str_radix(name, 16).ok()
}

fn object_name(key: &CacheKey, seq: u64) -> String {
    format!("{:016x}-{seq:016x}.obj", key_hash(key))
}

/// The seq of an object file name, `None` for anything else.
fn parse_object_name(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".obj")?;
    let (hash, seq) = stem.split_once('-')?;
    if hash.len() != 16 || seq.len() != 16 {
        return None;
    }
    u64::from_str_radix(hash, 16).ok()?;
    u64::from_str_radix(seq, 16).ok()
}

/// Paths under a storage's `objects/` directory, and where removed objects wait for their
/// unlink (`tmp/`).
#[derive(Debug, Clone)]
pub(super) struct Layout {
    objects: PathBuf,
    tmp: PathBuf,
}

impl Layout {
    pub(super) fn new(objects: PathBuf, tmp: PathBuf) -> Self {
        Layout { objects, tmp }
    }

    pub(super) fn objects(&self) -> &Path {
        &self.objects
    }

    pub(super) fn subdir_path(&self, subdir: usize) -> PathBuf {
        self.objects.join(subdir_name(subdir))
    }

    /// Where the object `seq` of `key` lives.
    pub(super) fn object_path(&self, key: &CacheKey, seq: u64) -> PathBuf {
        self.subdir_path(subdir_of(key)).join(object_name(key, seq))
    }

    /// Where the removed object `seq` of `key` waits for its unlink: renamed there under the
    /// index lock (a metadata update), unlinked after it (freeing the blocks is the slow part).
    /// In `tmp/`, which `open` empties, so a crash in between leaves nothing behind.
    pub(super) fn trash_path(&self, key: &CacheKey, seq: u64) -> PathBuf {
        self.tmp
            .join(format!("{:016x}-{seq:016x}.removed", key_hash(key)))
    }

    /// The subdirectory a file under `objects/` sits in (`None` for a file directly in it).
    pub(super) fn subdir_holding(&self, file: &Path) -> Option<usize> {
        let dir = file.parent()?;
        if dir.parent()? != self.objects {
            return None;
        }
        parse_subdir_name(dir.file_name()?.to_str()?)
    }

    /// Create `objects/` and every subdirectory that is missing. Returns whether anything was
    /// created (the caller makes the new entries durable by syncing their parents).
    pub(super) fn create_dirs(&self) -> io::Result<bool> {
        let mut created = false;
        if !self.objects.is_dir() {
            std::fs::create_dir_all(&self.objects)?;
            created = true;
        }
        for subdir in 0..SUBDIRS {
            match std::fs::create_dir(self.subdir_path(subdir)) {
                Ok(()) => created = true,
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
                Err(error) => return Err(error),
            }
        }
        Ok(created)
    }

    /// Every object file under `objects/` with its seq: those in the subdirectories and those
    /// left directly in `objects/` by the flat layout of earlier versions (same format; the scan
    /// moves them into their subdirectory). Anything else is left alone.
    pub(super) fn list(&self) -> io::Result<Vec<(PathBuf, u64)>> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&self.objects)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                continue;
            };
            if let Some(seq) = parse_object_name(name) {
                found.push((entry.path(), seq));
            } else if parse_subdir_name(name).is_some() && entry.file_type()?.is_dir() {
                for inner in std::fs::read_dir(entry.path())? {
                    let inner = inner?;
                    if let Some(seq) = inner.file_name().to_str().and_then(parse_object_name) {
                        found.push((inner.path(), seq));
                    }
                }
            }
        }
        Ok(found)
    }
}

/// fsync a directory so that renames, unlinks and creations in it survive a power loss.
/// Directories cannot be opened for syncing on Windows, where these are journalled by the file
/// system anyway. The directory is opened per sync (an `open` of a cached directory costs about
/// 0.03 ms beside the fsync's 0.15 ms or more; holding 256 handles per storage open would not
/// be worth it).
pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        std::fs::File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let key = CacheKey::from("some key");
        let layout = Layout::new(PathBuf::from("objects"), PathBuf::from("tmp"));
        let path = layout.object_path(&key, 7);
        let name = path.file_name().unwrap().to_str().unwrap();
        let dir = path
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap();
        assert_eq!(parse_object_name(name), Some(7));
        assert_eq!(parse_subdir_name(dir), Some(subdir_of(&key)));
        assert_eq!(layout.subdir_holding(&path), Some(subdir_of(&key)));
        assert_eq!(layout.subdir_holding(&layout.objects().join(name)), None);
        assert_eq!(parse_subdir_name("0g"), None);
        assert_eq!(parse_subdir_name("AB"), None);
        assert_eq!(parse_subdir_name("abc"), None);
    }

    /// Sequential keys (as a benchmark or a crawler produces) spread over the subdirectories:
    /// none gets more than twice its share or less than half. (The hash itself, not
    /// `key_hash`, which another unit test makes collide.)
    #[test]
    fn sequential_keys_spread_evenly() {
        let mut counts = vec![0u32; SUBDIRS];
        let n = 100_000;
        for i in 0..n {
            counts[subdir_of_hash(fnv1a(format!("k{i}").as_bytes()))] += 1;
        }
        let share = n / SUBDIRS as u32;
        let max = *counts.iter().max().unwrap();
        let min = *counts.iter().min().unwrap();
        assert!(max < 2 * share && min > share / 2, "min {min} max {max}");
    }
}
