//! Temporary benchmark data is removed on every exit path: a normal return
//! or an error drops its [`TempDir`] guard, a panic unwinds through it, and
//! SIGINT (Ctrl-C), SIGTERM (`timeout`, `kill`) and SIGHUP (a closed
//! terminal) are taken by a thread of their own, which removes every
//! registered directory and then exits with status 128 + the signal.
//! While it removes them, the work still running fails (its files vanish):
//! its errors and panics are then not reported, and the threads that meet
//! them wait for the exit ([`exit`], the panic hook of [`install`]), so the
//! status is always the signal's.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context;

/// The directories to remove if a signal ends the process.
static REGISTERED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// A signal was taken: the process is removing its data and will exit.
static EXITING: AtomicBool = AtomicBool::new(false);

/// The signals that end the process after the cleanup.
const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Attempts to remove a directory that threads may still be writing into
/// (each attempt can find a file created after it listed the directory).
const REMOVE_ATTEMPTS: usize = 100;

/// Blocks [`SIGNALS`] in the calling thread, so in every thread it starts
/// afterwards, and starts the thread that waits for them. Call it first in
/// `main`, before any other thread exists.
pub fn install() {
    let set = signal_set();
    // SAFETY: `set` is a valid, initialised signal set; the old mask is
    // not asked for (null).
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        // Without the mask the signals keep their default action: the
        // process dies without cleaning up, as it did before this existed.
        eprintln!(
            "warning: cannot block signals (error {rc}); Ctrl-C leaves benchmark data behind"
        );
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("barracuda-signals".into())
        .spawn(move || {
            let mut signal: libc::c_int = 0;
            // SAFETY: `set` and `signal` are valid for the call; sigwait
            // only reads the one and writes the other.
            let rc = unsafe { libc::sigwait(&set, &mut signal) };
            if rc != 0 {
                return;
            }
            EXITING.store(true, Ordering::SeqCst);
            remove_registered();
            std::process::exit(128 + signal);
        });
    if let Err(e) = spawned {
        eprintln!("warning: cannot start the signal thread ({e}); Ctrl-C is ignored");
        return;
    }
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        wait_if_exiting();
        report(info);
    }));
}

/// Exits with `code`, unless a signal is ending the process: then waits
/// for the signal thread's exit, so the status is the signal's.
pub fn exit(code: i32) -> ! {
    wait_if_exiting();
    std::process::exit(code)
}

/// Returns unless a signal is ending the process; then waits for its exit.
pub fn exit_if_signalled() {
    wait_if_exiting();
}

/// Waits forever if a signal is ending the process (the signal thread
/// exits it once the data is removed).
fn wait_if_exiting() {
    while EXITING.load(Ordering::SeqCst) {
        std::thread::park();
    }
}

fn signal_set() -> libc::sigset_t {
    // SAFETY: an all-zero sigset_t is a valid value to initialise below.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t for both calls, and every signal of
    // SIGNALS is a valid signal number.
    unsafe {
        libc::sigemptyset(&mut set);
        for signal in SIGNALS {
            libc::sigaddset(&mut set, signal);
        }
    }
    set
}

fn remove_registered() {
    let dirs = REGISTERED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    for dir in dirs {
        remove(&dir);
    }
}

/// Removes `dir` and all in it, again while other threads still create
/// files in it; reports a failure on stderr (the process is ending).
fn remove(dir: &Path) {
    for _ in 0..REMOVE_ATTEMPTS {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    if dir.exists() {
        eprintln!("warning: could not remove {}", dir.display());
    }
}

/// A new directory for temporary data, removed when this guard is dropped
/// or a signal ends the process.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates `<parent>/<prefix>XXXXXX`.
    pub fn new(parent: &Path, prefix: &str) -> anyhow::Result<TempDir> {
        let path = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in(parent)
            .with_context(|| format!("creating a temporary directory in {}", parent.display()))?
            .keep();
        REGISTERED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(path.clone());
        Ok(TempDir { path })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        remove(&self.path);
        REGISTERED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|p| p != &self.path);
    }
}

/// Where temporary benchmark data goes by default: the system's temporary
/// directory (`TMPDIR`, else `/tmp`), or `/var/tmp` when that one is a
/// tmpfs, which refuses O_DIRECT and holds its files in memory.
pub fn temp_parent() -> PathBuf {
    let temp = std::env::temp_dir();
    let var_tmp = Path::new("/var/tmp");
    if is_tmpfs(&temp) && var_tmp.is_dir() && !is_tmpfs(var_tmp) {
        return var_tmp.to_path_buf();
    }
    temp
}

fn is_tmpfs(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(name) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: an all-zero statfs is a valid value for the call to fill.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is a NUL-terminated path and `stat` a writable statfs,
    // both valid for the call.
    let rc = unsafe { libc::statfs(name.as_ptr(), &mut stat) };
    rc == 0 && stat.f_type == libc::TMPFS_MAGIC
}

/// Bytes free for an unprivileged user on the filesystem of `path`.
pub fn free_bytes(path: &Path) -> anyhow::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::CString::new(path.as_os_str().as_bytes())
        .with_context(|| format!("path {}", path.display()))?;
    // SAFETY: an all-zero statvfs is a valid value for the call to fill.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is a NUL-terminated path and `stat` a writable
    // statvfs, both valid for the call.
    let rc = unsafe { libc::statvfs(name.as_ptr(), &mut stat) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("statvfs of {}", path.display()));
    }
    Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// Refuses to start a run that would write about `needed_bytes` into `dir`
/// when its filesystem has less free (with a tenth to spare).
pub fn ensure_free(dir: &Path, needed_bytes: u64, what: &str) -> anyhow::Result<()> {
    let free = free_bytes(dir)?;
    let wanted = needed_bytes.saturating_add(needed_bytes / 10);
    if wanted > free {
        anyhow::bail!(
            "{what} would write about {} MiB into {}, which has {} MiB free; use smaller sizes, or --dir on a larger filesystem",
            needed_bytes >> 20,
            dir.display(),
            free >> 20
        );
    }
    Ok(())
}
