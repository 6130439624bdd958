//! The lock of a prepared directory (`NAME-KEY/.lock`) and the clean-up of a failed
//! preparation.
//!
//! Runs of a sweep may prepare the same corpus at once: one builds, the others wait for its
//! lock (an `flock`, which dies with its process) and then open the result. A preparation that
//! fails removes what it created, its lock file and directory included, so nothing is left to
//! block or confuse the next attempt. A process that was waiting on that lock then holds a lock
//! on a removed file; it sees that (the path no longer names the file it locked) and takes the
//! lock again, on a fresh file.

use anyhow::{Context, Result, bail};
use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};

/// The lock file's name inside a prepared directory.
pub const LOCK_FILE: &str = ".lock";

/// An exclusive lock on a prepared directory, and what taking it created.
pub struct DirLock {
    file: File,
    dir: PathBuf,
    created_dir: bool,
    created_lock: bool,
}

/// How often taking the lock is retried when its file or directory is removed meanwhile (each
/// retry follows another process's failed preparation, so this bound is never reached in
/// practice; it only keeps a broken file system from looping forever).
const MAX_ATTEMPTS: usize = 10_000;

impl DirLock {
    /// Lock `dir/.lock` (blocking), creating the directory and the file as needed.
    pub fn take(dir: &Path) -> Result<Self> {
        use std::os::fd::AsRawFd;
        let path = dir.join(LOCK_FILE);
        for _ in 0..MAX_ATTEMPTS {
            // Whether this process created the directory and the lock file is what the
            // creating call says (not an earlier exists(): another process's failed
            // preparation may remove both between the check and the creation).
            if let Some(parent) = dir.parent() {
                match std::fs::create_dir_all(parent) {
                    // a parent was removed while it was being created: try again
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    r => r.with_context(|| format!("creating {}", parent.display()))?,
                }
            }
            let created_dir = match std::fs::create_dir(dir) {
                Ok(()) => true,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
            };
            let (file, created_lock) =
                match File::options().create_new(true).write(true).open(&path) {
                    Ok(f) => (f, true),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        match File::options().write(true).open(&path) {
                            Ok(f) => (f, false),
                            // removed by a failed preparation meanwhile
                            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                            Err(e) => {
                                return Err(e)
                                    .with_context(|| format!("opening {}", path.display()));
                            }
                        }
                    }
                    // the directory was removed by a failed preparation meanwhile
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => {
                        return Err(e).with_context(|| format!("creating {}", path.display()));
                    }
                };
            // SAFETY: flock on a descriptor this function owns; no memory is passed.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
                bail!(
                    "locking {}: {}",
                    path.display(),
                    std::io::Error::last_os_error()
                );
            }
            if names_file(&path, &file)? {
                return Ok(Self {
                    file,
                    dir: dir.to_path_buf(),
                    created_dir,
                    created_lock,
                });
            }
            // the holder removed the file we waited on: lock afresh
        }
        bail!(
            "locking {}: its lock file was removed {MAX_ATTEMPTS} times while waiting",
            path.display()
        )
    }

    /// Every entry under the directory except the lock file (relative paths).
    pub fn entries(&self) -> Result<BTreeSet<PathBuf>> {
        let mut out = BTreeSet::new();
        let mut stack = vec![self.dir.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).with_context(|| format!("listing {}", d.display()))? {
                let p = e?.path();
                let rel = p.strip_prefix(&self.dir).expect("under the directory");
                if rel == Path::new(LOCK_FILE) {
                    continue;
                }
                if p.is_dir() {
                    stack.push(p.clone());
                }
                out.insert(rel.to_path_buf());
            }
        }
        Ok(out)
    }

    /// Remove what a failed preparation created: every entry that was not there `before` (the
    /// lock is held, so no other process wrote them), then the lock file and the directory if
    /// taking the lock created them; then release the lock.
    pub fn undo(self, before: &BTreeSet<PathBuf>) -> Result<()> {
        let now = self.entries()?;
        // outermost first: a new directory goes with everything in it
        let mut removed: Vec<&PathBuf> = Vec::new();
        for rel in now.difference(before) {
            if removed.iter().any(|r| rel.starts_with(r)) {
                continue;
            }
            let p = self.dir.join(rel);
            let r = if p.is_dir() {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
            r.with_context(|| format!("removing {}", p.display()))?;
            removed.push(rel);
        }
        if self.created_lock {
            let p = self.dir.join(LOCK_FILE);
            std::fs::remove_file(&p).with_context(|| format!("removing {}", p.display()))?;
        }
        // The directory goes when it is empty and this attempt created it — or created the
        // lock file in it: another process's failed attempt may have removed its own lock file
        // and then found this one's there, leaving the directory to this attempt. Another
        // process may take the lock in it meanwhile (then it is not empty) or remove it.
        if (self.created_dir || self.created_lock) && std::fs::read_dir(&self.dir)?.next().is_none()
        {
            match std::fs::remove_dir(&self.dir) {
                Ok(()) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::DirectoryNotEmpty | std::io::ErrorKind::NotFound
                    ) => {}
                Err(e) => {
                    return Err(e).with_context(|| format!("removing {}", self.dir.display()));
                }
            }
        }
        drop(self.file); // releases the lock
        Ok(())
    }
}

/// Whether `path` still names the file `file` is open on.
fn names_file(path: &Path, file: &File) -> Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let held = file.metadata()?;
    Ok(match std::fs::metadata(path) {
        Ok(m) => m.dev() == held.dev() && m.ino() == held.ino(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undo_removes_only_what_the_failed_attempt_created() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("corpus-0123");
        // a fresh directory: everything goes, the directory too
        let lock = DirLock::take(&dir).unwrap();
        let before = lock.entries().unwrap();
        assert!(before.is_empty());
        std::fs::create_dir_all(dir.join("web")).unwrap();
        std::fs::write(dir.join("web/00000.u16"), b"ab").unwrap();
        std::fs::write(dir.join("tokenizer.json"), b"{}").unwrap();
        lock.undo(&before).unwrap();
        assert!(!dir.exists());
        // an existing directory with a lock file and an earlier attempt's files: those stay
        std::fs::create_dir_all(dir.join("web")).unwrap();
        for f in [".lock", "tokenizer.json", "web/00000.u16", "keep.txt"] {
            std::fs::write(dir.join(f), b"x").unwrap();
        }
        let lock = DirLock::take(&dir).unwrap();
        let before = lock.entries().unwrap();
        assert_eq!(before.len(), 4, "{before:?}"); // web, its shard, tokenizer, keep.txt
        std::fs::write(dir.join("web/00001.u16"), b"new").unwrap();
        std::fs::create_dir_all(dir.join("papers/sub")).unwrap();
        std::fs::write(dir.join("papers/sub/00000.u16"), b"new").unwrap();
        lock.undo(&before).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, [".lock", "keep.txt", "tokenizer.json", "web"]);
        assert!(dir.join("web/00000.u16").exists() && !dir.join("web/00001.u16").exists());
    }

    #[test]
    fn a_waiter_whose_lock_file_is_removed_locks_a_fresh_one() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("corpus-0123");
        let first = DirLock::take(&dir).unwrap();
        let before = first.entries().unwrap();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let lock = DirLock::take(&dir).unwrap();
                // it holds the file the path names, in a directory that exists again
                let f = File::open(dir.join(LOCK_FILE)).unwrap();
                assert!(names_file(&dir.join(LOCK_FILE), &f).unwrap());
                assert!(names_file(&dir.join(LOCK_FILE), &lock.file).unwrap());
                lock
            });
            // let the waiter block on the lock (if it has not got there yet, it finds the
            // directory gone and creates it: the outcome is the same)
            std::thread::sleep(std::time::Duration::from_millis(200));
            first.undo(&before).unwrap();
            let lock = waiter.join().unwrap();
            assert!(dir.join(LOCK_FILE).exists());
            // and taking it created the directory and the file again, so its own undo
            // removes both
            lock.undo(&BTreeSet::new()).unwrap();
            assert!(!dir.exists());
        });
    }
}
