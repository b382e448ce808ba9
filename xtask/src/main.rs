//! Workspace automation, std only: `cargo xtask loom` (placeholder until the runner lands).
fn main() {
    eprintln!("xtask: not yet implemented");
    std::process::exit(2);
}
