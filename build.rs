//! Records the Burn version from Cargo.lock and the git revision of the build for provenance.

fn main() {
    println!("cargo:rerun-if-changed=Cargo.lock");
    // Git's own paths, so that a linked worktree (where `.git` is a file) or a copy without git
    // does not name a missing file, which would rerun this script and rebuild sinklab every time.
    let git_path = |p: &str| {
        std::process::Command::new("git")
            .args(["rev-parse", "--git-path", p])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    if let Some(head) = git_path("HEAD").filter(|h| std::path::Path::new(h).exists()) {
        println!("cargo:rerun-if-changed={head}");
        // a commit on a branch moves the branch's ref, not HEAD: watch the ref HEAD names too
        if let Some(r) = std::fs::read_to_string(&head)
            .ok()
            .and_then(|h| h.strip_prefix("ref: ").map(|r| r.trim().to_string()))
        {
            for p in [r.as_str(), "packed-refs"] {
                if let Some(path) = git_path(p).filter(|p| std::path::Path::new(p).exists()) {
                    println!("cargo:rerun-if-changed={path}");
                }
            }
        }
    }
    let lock = std::fs::read_to_string("Cargo.lock").unwrap_or_default();
    let mut burn = "unknown".to_string();
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line == "name = \"burn\"" {
            if let Some(v) = lines.next().and_then(|l| l.strip_prefix("version = \"")) {
                burn = v.trim_end_matches('"').to_string();
            }
            break;
        }
    }
    println!("cargo:rustc-env=SINKLAB_BURN_VERSION={burn}");
    let rev = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=SINKLAB_BUILD_GIT={rev}");
}
