//! One writer per directory: an exclusive lock on `DIR/.lock`, held for the whole life of the
//! process that writes into `DIR` (a run that trains, an import, a report, a sweep's launcher).
//!
//! The lock is a POSIX record lock on the whole file, taken with Linux's open-file-description
//! form (`fcntl(F_OFD_SETLK)`; `flock` elsewhere), never waited for: a second writer stops at
//! once. It belongs to the open file, not to a path or a pid file, so the kernel releases it when
//! the holder exits or dies (`kill -9`, the OOM killer): nothing ever has to be removed by hand,
//! and the `.lock` file left behind is harmless. Record locks are what shared file systems
//! carry between machines: NFSv4 (built into the protocol; a client that dies loses its locks
//! when its lease expires, 90 s by default), NFSv3 (through the lock manager, `lockd`/`rpc.statd`
//! running — mounted with `nolock`, locks are only seen on one machine), Lustre mounted with
//! `-o flock` (with `localflock` they are node-local), GPFS, BeeGFS (with global locks on),
//! CephFS. A file system that does not support them makes the start fail with that reason.
//!
//! The lock file also names its holder (pid, host, command, start time) for the message the
//! second writer prints.

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The lock file's name inside the locked directory.
pub const LOCK_FILE: &str = ".lock";

/// Exit status of a command stopped because another process holds the directory it would
/// write (`EX_TEMPFAIL`): a sweep tells it apart from a failure.
pub const EXIT_BUSY: i32 = 75;

/// Who holds a lock: written into the lock file by the holder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    pub host: String,
    /// The holder's command line.
    pub command: String,
    /// What it does there (`train`, `import`, `report`, `sweep`).
    pub purpose: String,
    /// Seconds since the Unix epoch, and the same as UTC text.
    pub since_unix: u64,
    pub since: String,
}

impl Holder {
    fn me(purpose: &str) -> Self {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Holder {
            pid: std::process::id(),
            host: hostname(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            purpose: purpose.to_string(),
            since_unix: now,
            since: utc(now),
        }
    }
}

/// Another process holds the directory's lock: the error a second writer stops with.
#[derive(Debug)]
pub struct Busy {
    pub dir: PathBuf,
    pub holder: Option<Holder>,
    /// What else the refused command can do (a command-specific way around), if anything.
    pub advice: Option<String>,
}

impl std::fmt::Display for Busy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is in use by another sinklab process",
            self.dir.display()
        )?;
        match &self.holder {
            Some(h) => write!(
                f,
                " (`{}`, pid {} on host {}, since {})",
                h.command, h.pid, h.host, h.since
            )?,
            None => write!(f, " (it has not named itself yet)")?,
        }
        write!(
            f,
            "; only one process writes a directory at a time. Wait for it to finish, or stop it \
             (`kill -INT PID` checkpoints a training run and exits; `--resume` continues it)"
        )?;
        match &self.advice {
            Some(a) => write!(f, "; {a}"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for Busy {}

/// Whether `e` (or its cause chain) is a [`Busy`] error.
pub fn is_busy(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<Busy>().is_some())
}

/// An exclusive lock on a directory, released when dropped (or when the process dies).
#[derive(Debug)]
pub struct DirLock {
    file: File,
    dir: PathBuf,
}

impl DirLock {
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Releasing is an explicit unlock, not only the close of the file: a lock belongs to the open
/// file description, and a child process forked by another thread shares that description until
/// it execs (or for good, if it never does), so closing our descriptor alone could leave the
/// directory locked for a moment after the holder is gone (seen once in the test suite, whose
/// tests spawn processes in parallel).
impl Drop for DirLock {
    fn drop(&mut self) {
        unlock(&self.file);
    }
}

/// Take the exclusive lock of `dir` (which must exist) for `purpose`, without waiting: a
/// [`Busy`] error names the holder when another process has it.
pub fn acquire(dir: &Path, purpose: &str) -> Result<DirLock> {
    acquire_advising(dir, purpose, None)
}

/// [`acquire`], with `advice` for the refused command added to a [`Busy`] error.
pub fn acquire_advising(dir: &Path, purpose: &str, advice: Option<&str>) -> Result<DirLock> {
    let path = dir.join(LOCK_FILE);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    match try_lock(&file) {
        Ok(true) => {}
        Ok(false) => {
            return Err(Busy {
                dir: dir.to_path_buf(),
                holder: read_holder(&path),
                advice: advice.map(str::to_string),
            }
            .into());
        }
        Err(e) => bail!(
            "locking {}: {e}; sinklab needs file locks (POSIX record locks) to keep two \
             processes from writing one run: put the directory on a file system that supports \
             them (for NFSv3, run the lock daemon instead of mounting with `nolock`; Lustre: \
             mount with `-o flock`)",
            path.display()
        ),
    }
    let me = serde_json::to_string(&Holder::me(purpose))?;
    (|| -> std::io::Result<()> {
        file.set_len(0)?;
        file.seek(SeekFrom::Start(0))?;
        file.write_all(me.as_bytes())?;
        file.write_all(b"\n")?;
        file.flush()
    })()
    .with_context(|| format!("writing {}", path.display()))?;
    Ok(DirLock {
        file,
        dir: dir.to_path_buf(),
    })
}

/// The holder of `dir`'s lock, if a process holds it now (probes with a lock of its own that is
/// released at once).
pub fn holder(dir: &Path) -> Option<Holder> {
    let path = dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .ok()?;
    match try_lock(&file) {
        Ok(false) => Some(read_holder(&path).unwrap_or_else(|| Holder {
            pid: 0,
            host: "?".into(),
            command: "(a process that has not named itself yet)".into(),
            purpose: String::new(),
            since_unix: 0,
            since: "?".into(),
        })),
        _ => None, // free (our probe lock is released when `file` closes), or no lock support
    }
}

/// Whether a process holds `dir`'s lock now.
pub fn is_held(dir: &Path) -> bool {
    holder(dir).is_some()
}

/// The holder record in a lock file (a holder writing it at this instant may leave it empty for
/// a moment: read again briefly).
fn read_holder(path: &Path) -> Option<Holder> {
    for _ in 0..20 {
        let mut text = String::new();
        if let Ok(mut f) = File::open(path) {
            f.read_to_string(&mut text).ok();
        }
        if let Ok(h) = serde_json::from_str(text.trim()) {
            return Some(h);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    None
}

/// Try to take an exclusive lock on the whole of `file`: Ok(false) when another open file
/// holds one.
#[cfg(target_os = "linux")]
fn try_lock(file: &File) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: a zeroed flock is a valid value of this plain C struct.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = 0;
    fl.l_len = 0; // to the end of the file, however long
    fl.l_pid = 0; // required for OFD locks
    // SAFETY: fcntl on a descriptor `file` owns, with a pointer to a live flock.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
    if rc == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
        _ => Err(e),
    }
}

#[cfg(not(target_os = "linux"))]
fn try_lock(file: &File) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor `file` owns; no memory is passed.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Ok(false),
        _ => Err(e),
    }
}

/// Release this description's lock on `file` (nothing to do when it holds none).
#[cfg(target_os = "linux")]
fn unlock(file: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: as in `try_lock`.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_UNLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = 0;
    fl.l_len = 0;
    fl.l_pid = 0;
    // SAFETY: fcntl on a descriptor `file` owns, with a pointer to a live flock. A failure
    // leaves the lock to the close that follows, as before.
    unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
}

#[cfg(not(target_os = "linux"))]
fn unlock(file: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor `file` owns; no memory is passed.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
}

/// This machine's host name.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into a buffer we own.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// `secs` since the Unix epoch as UTC text, `2026-11-24 16:40:05 UTC`.
pub fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formats_known_instants() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_795_537_205), "2026-11-24 16:20:05 UTC");
    }

    #[test]
    fn a_second_lock_in_the_same_process_is_refused_and_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let first = acquire(dir.path(), "train").unwrap();
        let h = holder(dir.path()).expect("held");
        assert_eq!(h.pid, std::process::id());
        assert_eq!(h.purpose, "train");
        let err = acquire(dir.path(), "report").unwrap_err();
        assert!(is_busy(&err), "{err:#}");
        let msg = format!("{err:#}");
        assert!(
            msg.contains(&format!("pid {}", std::process::id())),
            "{msg}"
        );
        drop(first);
        assert!(!is_held(dir.path()));
        let again = acquire(dir.path(), "report").unwrap();
        assert_eq!(holder(dir.path()).unwrap().purpose, "report");
        drop(again);
    }

    /// A copy of the lock's descriptor that outlives the lock (as a child forked by another
    /// thread holds one until it execs) does not keep the directory locked.
    #[test]
    fn a_released_lock_is_free_even_while_a_copy_of_its_descriptor_lives() {
        let dir = tempfile::tempdir().unwrap();
        let first = acquire(dir.path(), "import").unwrap();
        let copy = first.file.try_clone().unwrap(); // dup: the same open file description
        drop(first);
        assert!(!is_held(dir.path()), "released despite the copy");
        let again = acquire(dir.path(), "import").unwrap();
        drop(again);
        drop(copy);
    }
}
