//! A real per-process memory limit for each engine's child process, and
//! cold files before the read passes.
//!
//! An engine's cache setting bounds only the memory the engine manages
//! itself. LMDB's cache is the OS page cache (its memory map), and redb,
//! sled and fjall read through buffered I/O, so without a limit they read
//! from whatever page cache the machine has free, while Barracuda (O_DIRECT)
//! stays in its buffer pool. A memory cgroup charges a process's anonymous
//! memory *and* the page cache its file I/O and mappings bring in, so the
//! same limit bounds every engine, whatever it calls its cache.
//!
//! The parent creates one cgroup per engine (v2 `memory.max` where a v2
//! hierarchy has the memory controller, else v1 `memory.limit_in_bytes`
//! and `memory.memsw.limit_in_bytes`), named `barracuda-peers-<pid>-<engine>`
//! beside the parent's own cgroup's children (nested in it, so the
//! children stay inside whatever accounting the parent is under). The child
//! writes its own pid into it before it allocates anything of the
//! workload; the parent removes the directory when the child has exited,
//! also on error ([`Cgroup`]'s `Drop`).

use std::fs;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// How the parent limits each child's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LimitMode {
    /// Only the engines' cache settings.
    None,
    /// A memory cgroup per child, the load's and the reads' (falls back
    /// to `none`, saying so, where the machine has no usable memory
    /// controller).
    Cgroup,
    /// A memory cgroup for the reads only; the load runs unlimited (under
    /// the limit LMDB's load thrashes: >100 GB of page-fault reads in five
    /// minutes on this machine).
    CgroupReads,
}

/// The cgroup interface a limit was set through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

/// Attempts to remove a cgroup directory: a child that has just exited
/// may still be counted in it for a few milliseconds.
const RMDIR_ATTEMPTS: usize = 100;
const RMDIR_RETRY: Duration = Duration::from_millis(20);

/// One engine's memory cgroup, removed on drop.
pub struct Cgroup {
    path: PathBuf,
    version: Version,
    limit_bytes: u64,
}

impl Cgroup {
    /// Creates `barracuda-peers-<pid>-<engine>` limited to `limit_bytes`:
    /// v2 if possible, else v1.
    pub fn create(engine: &str, limit_bytes: u64) -> Result<Self> {
        let name = format!("barracuda-peers-{}-{engine}", std::process::id());
        let v2 = Self::create_v2(&name, limit_bytes);
        if let Ok(cgroup) = v2 {
            return Ok(cgroup);
        }
        Self::create_v1(&name, limit_bytes).map_err(|v1| {
            let v2 = v2.err().map(|e| format!("{e:#}")).unwrap_or_default();
            anyhow::anyhow!("no memory cgroup: v2: {v2}; v1: {v1:#}")
        })
    }

    fn create_v2(name: &str, limit_bytes: u64) -> Result<Self> {
        let mount = mount_point(|fstype, _| fstype == "cgroup2").context("no cgroup2 mount")?;
        let controllers = fs::read_to_string(mount.join("cgroup.controllers"))?;
        if !controllers.split_whitespace().any(|c| c == "memory") {
            bail!("{} has no memory controller", mount.display());
        }
        let own = own_cgroup(|id, _| id == "0").context("own v2 cgroup")?;
        let cgroup = Self::make_dir(&mount, &own, name, Version::V2, limit_bytes)?;
        // The parent's subtree_control must enable the controller for its
        // children; where it does not, memory.max is missing.
        if !cgroup.path.join("memory.max").exists() {
            bail!("memory controller not enabled for children of {own}");
        }
        write_value(&cgroup.path.join("memory.max"), limit_bytes)?;
        // No swap: a limit on memory alone could be escaped by swapping.
        let swap = cgroup.path.join("memory.swap.max");
        if swap.exists() {
            write_value(&swap, 0)?;
        }
        Ok(cgroup)
    }

    fn create_v1(name: &str, limit_bytes: u64) -> Result<Self> {
        let mount = mount_point(|fstype, options| {
            fstype == "cgroup" && options.split(',').any(|o| o == "memory")
        })
        .context("no cgroup v1 memory mount")?;
        let own = own_cgroup(|_, controllers| controllers.split(',').any(|c| c == "memory"))
            .context("own v1 memory cgroup")?;
        let cgroup = Self::make_dir(&mount, &own, name, Version::V1, limit_bytes)?;
        write_value(&cgroup.path.join("memory.limit_in_bytes"), limit_bytes)?;
        // memory + swap, where swap accounting is on: no escape into swap.
        // Set after memory.limit_in_bytes (memsw must not be below it).
        let memsw = cgroup.path.join("memory.memsw.limit_in_bytes");
        if memsw.exists() {
            write_value(&memsw, limit_bytes)?;
        }
        Ok(cgroup)
    }

    /// Makes the directory under the own cgroup, else under the
    /// hierarchy's root.
    fn make_dir(
        mount: &Path,
        own: &str,
        name: &str,
        version: Version,
        limit_bytes: u64,
    ) -> Result<Self> {
        let nested = mount.join(own.trim_start_matches('/')).join(name);
        let path = match fs::create_dir(&nested) {
            Ok(()) => nested,
            Err(_) => {
                let top = mount.join(name);
                fs::create_dir(&top).with_context(|| format!("mkdir {}", top.display()))?;
                top
            }
        };
        Ok(Self {
            path,
            version,
            limit_bytes,
        })
    }

    /// The file a process writes its pid to, to join.
    pub fn procs_file(&self) -> PathBuf {
        self.path.join("cgroup.procs")
    }

    /// What was set, for the table header and the JSON.
    pub fn describe(&self) -> String {
        let mib = self.limit_bytes >> 20;
        match self.version {
            Version::V2 => format!("cgroup v2 memory.max = {mib} MiB (memory.swap.max = 0)"),
            Version::V1 => {
                format!("cgroup v1 memory.limit_in_bytes = memory.memsw.limit_in_bytes = {mib} MiB")
            }
        }
    }

    /// Peak memory charged to the cgroup (anonymous + page cache).
    pub fn peak_bytes(&self) -> Option<u64> {
        let file = match self.version {
            Version::V1 => "memory.max_usage_in_bytes",
            Version::V2 => "memory.peak",
        };
        fs::read_to_string(self.path.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Processes the kernel's OOM killer killed in the cgroup.
    pub fn oom_kills(&self) -> Option<u64> {
        let file = match self.version {
            Version::V1 => "memory.oom_control",
            Version::V2 => "memory.events",
        };
        let text = fs::read_to_string(self.path.join(file)).ok()?;
        let line = text.lines().find(|l| l.starts_with("oom_kill "))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for _ in 0..RMDIR_ATTEMPTS {
            if fs::remove_dir(&self.path).is_ok() || !self.path.exists() {
                return;
            }
            std::thread::sleep(RMDIR_RETRY);
        }
        eprintln!("   could not remove cgroup {}", self.path.display());
    }
}

/// Removes the empty cgroups an earlier `compare` left when it was killed
/// before its `Drop`s ran (their pid is gone). Best effort.
pub fn remove_stale() {
    let v1 = mount_point(|fstype, options| {
        fstype == "cgroup" && options.split(',').any(|o| o == "memory")
    })
    .zip(own_cgroup(|_, c| c.split(',').any(|c| c == "memory")));
    let v2 = mount_point(|fstype, _| fstype == "cgroup2").zip(own_cgroup(|id, _| id == "0"));
    for (mount, own) in [v1, v2].into_iter().flatten() {
        for parent in [mount.join(own.trim_start_matches('/')), mount] {
            let Ok(entries) = fs::read_dir(&parent) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let Some(rest) = name.strip_prefix("barracuda-peers-") else {
                    continue;
                };
                let pid = rest.split('-').next().unwrap_or_default();
                if !Path::new("/proc").join(pid).exists() && fs::remove_dir(entry.path()).is_ok() {
                    eprintln!("   removed stale cgroup {}", entry.path().display());
                }
            }
        }
    }
}

/// Moves the calling process into the cgroup whose `cgroup.procs` is
/// `procs_file`.
pub fn join(procs_file: &Path) -> Result<()> {
    write_value(procs_file, u64::from(std::process::id()))
        .with_context(|| format!("join {}", procs_file.display()))
}

fn write_value(path: &Path, value: u64) -> Result<()> {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .open(path)
        .with_context(|| format!("open {}", path.display()))?;
    file.write_all(value.to_string().as_bytes())
        .with_context(|| format!("write {value} to {}", path.display()))
}

/// Mount point of the first cgroup filesystem `wanted(fstype, super
/// options)` accepts, from /proc/self/mountinfo.
fn mount_point(wanted: impl Fn(&str, &str) -> bool) -> Option<PathBuf> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").ok()?;
    mountinfo.lines().find_map(|line| {
        let (mount, fs) = line.split_once(" - ")?;
        let mut fs = fs.split_whitespace();
        let (fstype, _source, options) = (fs.next()?, fs.next()?, fs.next()?);
        let mut fields = mount.split_whitespace().skip(3);
        let (root, point) = (fields.next()?, fields.next()?);
        // A mount of a subtree (root other than "/") cannot reach the own
        // cgroup path reliably: skip it.
        (wanted(fstype, options) && root == "/").then(|| PathBuf::from(point))
    })
}

/// The own cgroup path of the first /proc/self/cgroup line
/// `wanted(hierarchy id, controllers)` accepts.
fn own_cgroup(wanted: impl Fn(&str, &str) -> bool) -> Option<String> {
    let text = fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        wanted(id, controllers).then(|| path.to_string())
    })
}

/// Page-cache residency of the files under a directory, before and after
/// dropping it.
#[derive(Clone, Copy, Debug, Default)]
pub struct CacheDrop {
    /// Bytes of the files.
    pub file_bytes: u64,
    /// Bytes resident in the page cache before.
    pub resident_before_bytes: u64,
    /// Bytes resident after `fdatasync` + `POSIX_FADV_DONTNEED`.
    pub resident_after_bytes: u64,
}

/// Drops the OS page cache of every file under `dir` (the engine must be
/// closed): `fdatasync` (DONTNEED skips dirty pages), then
/// `posix_fadvise(POSIX_FADV_DONTNEED)` on the whole file. Only these
/// files' pages go; `/proc/sys/vm/drop_caches` would empty the cache of
/// everyone on the machine.
pub fn drop_file_cache(dir: &Path) -> Result<CacheDrop> {
    let mut total = CacheDrop::default();
    for path in files_under(dir)? {
        let file = fs::File::open(&path).with_context(|| format!("open {}", path.display()))?;
        let bytes = file.metadata()?.len();
        total.file_bytes += bytes;
        total.resident_before_bytes += resident_bytes(&file, bytes)?;
        file.sync_data().ok(); // read-only descriptors may refuse; best effort
        // SAFETY: plain syscall on an open descriptor; no memory involved.
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if rc != 0 {
            bail!("posix_fadvise {}: error {rc}", path.display());
        }
        total.resident_after_bytes += resident_bytes(&file, bytes)?;
    }
    Ok(total)
}

fn files_under(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            files.extend(files_under(&path)?);
        } else {
            files.push(path);
        }
    }
    Ok(files)
}

/// Bytes of `file` in the page cache (`mincore` over a read-only mapping;
/// mapping does not fault anything in).
fn resident_bytes(file: &fs::File, len: u64) -> Result<u64> {
    if len == 0 {
        return Ok(0);
    }
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
    let len = usize::try_from(len)?;
    // SAFETY: a fresh shared read-only mapping of an open file; unmapped
    // below before returning, never dereferenced.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        bail!("mmap: {}", std::io::Error::last_os_error());
    }
    let mut residency = vec![0u8; len.div_ceil(page as usize)];
    // SAFETY: `addr..addr + len` is the mapping made above and `residency`
    // has one byte per page of it.
    let rc = unsafe { libc::mincore(addr, len, residency.as_mut_ptr()) };
    let error = std::io::Error::last_os_error();
    // SAFETY: unmaps exactly the mapping made above.
    unsafe { libc::munmap(addr, len) };
    if rc != 0 {
        bail!("mincore: {error}");
    }
    Ok(residency.iter().filter(|&&r| r & 1 == 1).count() as u64 * page)
}
