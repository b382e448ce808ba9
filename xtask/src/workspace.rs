//! Finds the workspace root and the crates that have loom models (`crates/*/tests/loom.rs`), so
//! `cargo xtask loom` picks up a new crate's models without anyone editing a list.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where a crate's loom models live, relative to the crate directory.
pub(crate) const LOOM_TESTS: &str = "tests/loom.rs";

/// A workspace crate under `crates/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorkspaceCrate {
    /// The package name from its `Cargo.toml` (what `cargo -p` takes).
    pub(crate) name: String,
    /// The directory name under `crates/`.
    pub(crate) dir_name: String,
    /// Whether `tests/loom.rs` exists.
    pub(crate) has_loom_models: bool,
}

/// Asks cargo for the workspace root, so the runner works from any subdirectory.
pub(crate) fn locate_root(cargo: &str) -> Result<PathBuf, String> {
    let output = Command::new(cargo)
        .args(["locate-project", "--workspace", "--message-format", "plain"])
        .output()
        .map_err(|error| format!("could not run `{cargo} locate-project`: {error}"))?;
    if !output.status.success() {
        return Err(format!(
            "`cargo locate-project --workspace` failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let manifest = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    manifest
        .parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| format!("workspace manifest {} has no parent", manifest.display()))
}

/// Lists every crate under `<root>/crates/`, sorted by package name. A directory without a
/// `Cargo.toml` is skipped; a `Cargo.toml` without a readable package name is an error.
pub(crate) fn discover(root: &Path) -> Result<Vec<WorkspaceCrate>, String> {
    let crates_dir = root.join("crates");
    let entries = match fs::read_dir(&crates_dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(format!("cannot read {}: {error}", crates_dir.display())),
    };
    let mut crates = Vec::new();
    for entry in entries {
        let entry =
            entry.map_err(|error| format!("cannot read {}: {error}", crates_dir.display()))?;
        let dir = entry.path();
        let manifest_path = dir.join("Cargo.toml");
        if !dir.is_dir() || !manifest_path.is_file() {
            continue;
        }
        let manifest = fs::read_to_string(&manifest_path)
            .map_err(|error| format!("cannot read {}: {error}", manifest_path.display()))?;
        let name = package_name(&manifest).ok_or_else(|| {
            format!(
                "{} has no `name = \"...\"` in its [package] table",
                manifest_path.display()
            )
        })?;
        crates.push(WorkspaceCrate {
            name,
            dir_name: entry.file_name().to_string_lossy().into_owned(),
            has_loom_models: dir.join(LOOM_TESTS).is_file(),
        });
    }
    crates.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(crates)
}

/// Picks the crates to run: every crate with models when `requested` is empty, otherwise the
/// named ones (by package or directory name), each of which must exist and have models.
pub(crate) fn select<'a>(
    crates: &'a [WorkspaceCrate],
    requested: &[String],
) -> Result<Vec<&'a WorkspaceCrate>, String> {
    if requested.is_empty() {
        return Ok(crates.iter().filter(|c| c.has_loom_models).collect());
    }
    let mut selected: Vec<&WorkspaceCrate> = Vec::new();
    for wanted in requested {
        let found = crates
            .iter()
            .find(|c| &c.name == wanted || &c.dir_name == wanted)
            .ok_or_else(|| {
                let known: Vec<&str> = crates.iter().map(|c| c.name.as_str()).collect();
                format!(
                    "no workspace crate named `{wanted}` under crates/ (known: {})",
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                )
            })?;
        if !found.has_loom_models {
            return Err(format!(
                "crate `{}` has no loom models (expected crates/{}/{LOOM_TESTS})",
                found.name, found.dir_name
            ));
        }
        if !selected.iter().any(|c| c.name == found.name) {
            selected.push(found);
        }
    }
    Ok(selected)
}

/// Reads `name = "..."` from the `[package]` table of a manifest. A tiny line-based reader, not
/// a TOML parser: enough for the manifests this workspace writes (xtask stays dependency-free).
pub(crate) fn package_name(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
            continue;
        }
        if !in_package {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if key.trim() != "name" {
            continue;
        }
        let value = value.trim();
        let unquoted = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))?;
        return (!unquoted.is_empty()).then(|| unquoted.to_owned());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A scratch workspace under the system temp dir, removed on drop.
    struct TempWorkspace(PathBuf);

    impl TempWorkspace {
        fn new() -> Self {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let dir = std::env::temp_dir().join(format!(
                "xtask-discover-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            fs::create_dir_all(dir.join("crates")).unwrap();
            TempWorkspace(dir)
        }

        fn add_crate(&self, dir_name: &str, manifest: &str, with_loom: bool) {
            let dir = self.0.join("crates").join(dir_name);
            fs::create_dir_all(dir.join("tests")).unwrap();
            fs::write(dir.join("Cargo.toml"), manifest).unwrap();
            if with_loom {
                fs::write(dir.join(LOOM_TESTS), "#![cfg(herd_loom)]\n").unwrap();
            }
        }
    }

    impl Drop for TempWorkspace {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn manifest(name: &str) -> String {
        format!("[package]\nname = \"{name}\"\nversion.workspace = true\n")
    }

    #[test]
    fn finds_crates_and_their_loom_models_sorted_by_name() {
        let ws = TempWorkspace::new();
        ws.add_crate("ttl", &manifest("ttl-lru"), true);
        ws.add_crate("coalesce", &manifest("coalesce"), true);
        ws.add_crate("plain", &manifest("plain"), false);
        fs::create_dir_all(ws.0.join("crates/not-a-crate")).unwrap();
        fs::write(ws.0.join("crates/README.md"), "stray file").unwrap();

        let crates = discover(&ws.0).unwrap();
        let summary: Vec<(&str, &str, bool)> = crates
            .iter()
            .map(|c| (c.name.as_str(), c.dir_name.as_str(), c.has_loom_models))
            .collect();
        assert_eq!(
            summary,
            [
                ("coalesce", "coalesce", true),
                ("plain", "plain", false),
                ("ttl-lru", "ttl", true)
            ]
        );
    }

    #[test]
    fn a_workspace_without_crates_dir_has_no_crates() {
        let ws = TempWorkspace::new();
        fs::remove_dir(ws.0.join("crates")).unwrap();
        assert_eq!(discover(&ws.0).unwrap(), []);
    }

    #[test]
    fn a_manifest_without_a_name_is_an_error() {
        let ws = TempWorkspace::new();
        ws.add_crate("broken", "[package]\nversion = \"1.0.0\"\n", true);
        let error = discover(&ws.0).unwrap_err();
        assert!(error.contains("broken"), "{error}");
    }

    #[test]
    fn selection_rules() {
        let ws = TempWorkspace::new();
        ws.add_crate("coalesce", &manifest("coalesce"), true);
        ws.add_crate("ttl", &manifest("ttl-lru"), true);
        ws.add_crate("plain", &manifest("plain"), false);
        let crates = discover(&ws.0).unwrap();
        let names = |selected: Vec<&WorkspaceCrate>| -> Vec<String> {
            selected.into_iter().map(|c| c.name.clone()).collect()
        };

        assert_eq!(
            names(select(&crates, &[]).unwrap()),
            ["coalesce", "ttl-lru"]
        );
        let by_dir_and_name = [
            "ttl".to_owned(),
            "coalesce".to_owned(),
            "ttl-lru".to_owned(),
        ];
        assert_eq!(
            names(select(&crates, &by_dir_and_name).unwrap()),
            ["ttl-lru", "coalesce"]
        );
        let no_models = select(&crates, &["plain".to_owned()]).unwrap_err();
        assert!(no_models.contains("has no loom models"), "{no_models}");
        let unknown = select(&crates, &["nope".to_owned()]).unwrap_err();
        assert!(
            unknown.contains("no workspace crate named `nope`"),
            "{unknown}"
        );
    }

    #[test]
    fn package_name_reads_only_the_package_table() {
        let manifest = "\
# name = \"commented\"
[workspace]
name = \"not-this\"

[package]
version = \"0.1.0\"
name='single-quoted' # trailing comment

[dependencies]
name = \"nor-this\"
";
        assert_eq!(package_name(manifest).as_deref(), Some("single-quoted"));
        assert_eq!(package_name("[dependencies]\nname = \"x\"\n"), None);
        assert_eq!(package_name("[package]\nname.workspace = true\n"), None);
        assert_eq!(package_name("[package]\nname = \"\"\n"), None);
    }
}
