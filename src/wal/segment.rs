//! The log's files: a control file with the two checkpoint slots, and the
//! log stream in segment files, each holding the stream from its first LSN
//! up to the next segment's.
//!
//! ```text
//! wal.log                      checkpoint slot 0 (one sector), slot 1, up to 4 KiB
//! wal-<first LSN, 16 hex>.log  header (one sector, up to 4 KiB), then the
//!                              stream: LSN `l` at header + (l - first LSN)
//! ```
//!
//! Segment header (integers little-endian; the rest of the sector zero):
//!
//! ```text
//! offset size field
//!      0    4 magic            "BRSG" (SEGMENT_MAGIC)
//!      4    4 format_version   7 (the checkpoint slots' version)
//!      8    8 first_lsn        as in the file's name
//!     16    4 crc32c           over [0, 16)
//! ```
//!
//! A checkpoint starts a new segment ([`super::Wal::rotate`]) and, once it
//! is recorded, deletes the segments before it: the files hold the log
//! from the last checkpoint on, not a ring's worth.

use std::path::{Path, PathBuf};
use std::sync::Arc;

#[cfg(test)]
use barracuda_io::MemoryFile;
use barracuda_io::{BlockFile, IoOptions};
#[cfg(test)]
use parking_lot::Mutex;

use super::checkpoint::CHECKPOINT_FORMAT_VERSION;
use super::reader::LogSource;
use crate::error::{Error, Result};

/// The control file's name: the checkpoint slots.
pub const CONTROL_FILE_NAME: &str = "wal.log";

/// Marks a segment header.
pub const SEGMENT_MAGIC: u32 = u32::from_le_bytes(*b"BRSG");

/// Bytes of a segment header that carry anything.
const SEGMENT_HEADER_USED_BYTES: usize = 20;

/// The name of the segment whose stream starts at `first_lsn`.
pub fn segment_file_name(first_lsn: u64) -> String {
    format!("wal-{first_lsn:016x}.log")
}

/// The first LSN a segment's file name gives, if it names a segment.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("wal-")?.strip_suffix(".log")?;
    if hex.len() != 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// Where the log's files live: a directory, or memory for tests. Every
/// file it opens is the log's alone.
pub trait LogDir: Send + Sync {
    /// The control file, created empty if it does not exist.
    fn control(&self) -> Result<Arc<dyn BlockFile>>;

    /// The first LSNs of the segment files present, ascending.
    fn segments(&self) -> Result<Vec<u64>>;

    /// Opens the segment starting at `first_lsn`, creating it (empty) if
    /// `create`.
    fn open_segment(&self, first_lsn: u64, create: bool) -> Result<Arc<dyn BlockFile>>;

    /// Deletes a segment file (not an error if it is gone).
    fn remove_segment(&self, first_lsn: u64) -> Result<()>;

    /// Makes the creation and removal of files durable.
    fn sync(&self) -> Result<()>;
}

/// Wraps each file a [`FsLogDir`] opens (fault injection in tests).
pub type FileWrap = Arc<dyn Fn(&Path, Arc<dyn BlockFile>) -> Arc<dyn BlockFile> + Send + Sync>;

/// The log's files in a database directory.
pub struct FsLogDir {
    dir: PathBuf,
    io_options: IoOptions,
    wrap: Option<FileWrap>,
}

impl FsLogDir {
    /// The log in `dir`, its files opened with `io_options` and each passed
    /// through `wrap`.
    pub fn new(dir: &Path, io_options: IoOptions, wrap: Option<FileWrap>) -> FsLogDir {
        FsLogDir {
            dir: dir.to_path_buf(),
            io_options,
            wrap,
        }
    }

    fn open_path(&self, path: &Path) -> Result<Arc<dyn BlockFile>> {
        let file = barracuda_io::open(path, &self.io_options)?;
        Ok(match &self.wrap {
            Some(wrap) => wrap(path, file),
            None => file,
        })
    }

    fn io_error(&self, what: &str, e: &std::io::Error) -> Error {
        Error::Directory {
            path: self.dir.clone(),
            reason: format!("{what}: {e}"),
        }
    }
}

impl LogDir for FsLogDir {
    fn control(&self) -> Result<Arc<dyn BlockFile>> {
        self.open_path(&self.dir.join(CONTROL_FILE_NAME))
    }

    fn segments(&self) -> Result<Vec<u64>> {
        let entries = std::fs::read_dir(&self.dir)
            .map_err(|e| self.io_error("cannot list the log's segments", &e))?;
        let mut found = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| self.io_error("cannot list the log's segments", &e))?;
            if let Some(lsn) = parse_segment_file_name(&entry.file_name().to_string_lossy()) {
                found.push(lsn);
            }
        }
        found.sort_unstable();
        Ok(found)
    }

    fn open_segment(&self, first_lsn: u64, create: bool) -> Result<Arc<dyn BlockFile>> {
        let path = self.dir.join(segment_file_name(first_lsn));
        if !create && !path.is_file() {
            return Err(Error::LogCorrupted {
                lsn: barracuda_base::Lsn(first_lsn),
                reason: "a log segment is missing",
            });
        }
        self.open_path(&path)
    }

    fn remove_segment(&self, first_lsn: u64) -> Result<()> {
        match std::fs::remove_file(self.dir.join(segment_file_name(first_lsn))) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(self.io_error("cannot delete a log segment", &e))
            }
            _ => Ok(()),
        }
    }

    fn sync(&self) -> Result<()> {
        std::fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| self.io_error("cannot sync", &e))
    }
}

/// The log's files in memory (tests): each file is made by `make` from a
/// fresh [`MemoryFile`] (a fault-injecting wrapper, say) and kept, so a
/// reopen finds what the last one wrote.
#[cfg(test)]
pub struct MemLogDir {
    files: Mutex<Vec<(String, Arc<MemoryFile>)>>,
    make: FileWrap,
}

#[cfg(test)]
impl Default for MemLogDir {
    fn default() -> Self {
        MemLogDir::new(Arc::new(|_: &Path, file| file))
    }
}

#[cfg(test)]
impl MemLogDir {
    /// An empty directory whose files pass through `make` when opened.
    pub fn new(make: FileWrap) -> MemLogDir {
        MemLogDir {
            files: Mutex::new(Vec::new()),
            make,
        }
    }

    /// The same files, opened through `make` from now on.
    pub fn reopen_with(&self, make: FileWrap) -> MemLogDir {
        MemLogDir {
            files: Mutex::new(self.files.lock().clone()),
            make,
        }
    }

    /// The memory file named `name`, if present.
    pub fn file(&self, name: &str) -> Option<Arc<MemoryFile>> {
        let files = self.files.lock();
        files
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, f)| f.clone())
    }

    /// Bytes of all files.
    pub fn total_bytes(&self) -> u64 {
        let files = self.files.lock();
        files.iter().map(|(_, f)| f.len().unwrap_or(0)).sum()
    }

    pub(crate) fn open_name(&self, name: &str, create: bool) -> Result<Arc<dyn BlockFile>> {
        let memory = {
            let mut files = self.files.lock();
            match files.iter().find(|(n, _)| n == name) {
                Some((_, f)) => f.clone(),
                None if create => {
                    let f = Arc::new(MemoryFile::new(name));
                    files.push((name.to_string(), f.clone()));
                    f
                }
                None => {
                    return Err(Error::LogCorrupted {
                        lsn: barracuda_base::Lsn(0),
                        reason: "a log segment is missing",
                    });
                }
            }
        };
        Ok((self.make)(Path::new(name), memory))
    }
}

#[cfg(test)]
impl LogDir for MemLogDir {
    fn control(&self) -> Result<Arc<dyn BlockFile>> {
        self.open_name(CONTROL_FILE_NAME, true)
    }

    fn segments(&self) -> Result<Vec<u64>> {
        let mut found: Vec<u64> = self
            .files
            .lock()
            .iter()
            .filter_map(|(n, _)| parse_segment_file_name(n))
            .collect();
        found.sort_unstable();
        Ok(found)
    }

    fn open_segment(&self, first_lsn: u64, create: bool) -> Result<Arc<dyn BlockFile>> {
        self.open_name(&segment_file_name(first_lsn), create)
    }

    fn remove_segment(&self, first_lsn: u64) -> Result<()> {
        let name = segment_file_name(first_lsn);
        self.files.lock().retain(|(n, _)| *n != name);
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        Ok(())
    }
}

/// Bytes before a segment's stream: its header, on a 4 KiB boundary.
pub(crate) fn header_bytes(sector_bytes: u64) -> u64 {
    sector_bytes.max(4096).next_multiple_of(sector_bytes)
}

/// Writes a new segment's header and syncs it, and the directory.
pub(crate) fn create(dir: &dyn LogDir, first_lsn: u64) -> Result<Arc<dyn BlockFile>> {
    let file = dir.open_segment(first_lsn, true)?;
    let sector_bytes = file.alignment().offset_bytes as u64;
    let mut header = file.alloc_buf(header_bytes(sector_bytes) as usize);
    header.fill(0);
    header[0..4].copy_from_slice(&SEGMENT_MAGIC.to_le_bytes());
    header[4..8].copy_from_slice(&CHECKPOINT_FORMAT_VERSION.to_le_bytes());
    header[8..16].copy_from_slice(&first_lsn.to_le_bytes());
    let crc = crc32c::crc32c(&header[..16]);
    header[16..SEGMENT_HEADER_USED_BYTES].copy_from_slice(&crc.to_le_bytes());
    file.set_len(0)?;
    file.write_at(0, &header)?;
    file.sync_data()?;
    dir.sync()?;
    Ok(file)
}

/// Whether `file` starts with a valid header for `first_lsn`.
pub(crate) fn header_is_valid(file: &dyn BlockFile, first_lsn: u64) -> Result<bool> {
    let sector_bytes = file.alignment().offset_bytes as u64;
    let header_len = header_bytes(sector_bytes);
    if file.len()? < header_len {
        return Ok(false);
    }
    let mut header = file.alloc_buf(header_len as usize);
    file.read_at(0, &mut header)?;
    let u32_at = |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().unwrap_or([0; 4]));
    let lsn = u64::from_le_bytes(header[8..16].try_into().unwrap_or([0; 8]));
    Ok(u32_at(0) == SEGMENT_MAGIC
        && u32_at(4) == CHECKPOINT_FORMAT_VERSION
        && lsn == first_lsn
        && u32_at(16) == crc32c::crc32c(&header[..16]))
}

/// One segment: where its stream starts, and its file.
#[derive(Clone)]
pub(crate) struct Segment {
    pub(crate) first_lsn: u64,
    pub(crate) file: Arc<dyn BlockFile>,
}

/// Segments as a [`LogSource`]: LSN `l` is in the last segment that starts
/// at or before it.
pub(crate) struct SegmentSource<'a> {
    pub(crate) segments: &'a [Segment],
    pub(crate) sector_bytes: u64,
    /// The stream's end as the files hold it: the last segment's length.
    pub(crate) end_lsn: u64,
}

impl<'a> SegmentSource<'a> {
    pub(crate) fn new(segments: &'a [Segment], sector_bytes: u64) -> Result<SegmentSource<'a>> {
        let header = header_bytes(sector_bytes);
        let end_lsn = match segments.last() {
            Some(last) => last.first_lsn + last.file.len()?.saturating_sub(header),
            None => 0,
        };
        Ok(SegmentSource {
            segments,
            sector_bytes,
            end_lsn,
        })
    }
}

impl LogSource for SegmentSource<'_> {
    fn sector_bytes(&self) -> u64 {
        self.sector_bytes
    }

    fn read(&self, lsn: u64, out: &mut [u8]) -> Result<()> {
        out.fill(0);
        let header = header_bytes(self.sector_bytes);
        let end = lsn + out.len() as u64;
        for (i, segment) in self.segments.iter().enumerate() {
            let until = self.segments.get(i + 1).map_or(u64::MAX, |s| s.first_lsn);
            let from = lsn.max(segment.first_lsn);
            let to = end.min(until);
            if from >= to {
                continue;
            }
            // What of [from, to) the file holds (its length is a multiple
            // of the sector: every write to it is).
            let file_end = segment.first_lsn + segment.file.len()?.saturating_sub(header);
            let to = to.min(file_end);
            if from >= to {
                continue;
            }
            let mut piece = segment.file.alloc_buf((to - from) as usize);
            segment
                .file
                .read_at(header + (from - segment.first_lsn), &mut piece)?;
            let at = (from - lsn) as usize;
            out[at..at + piece.len()].copy_from_slice(&piece);
        }
        Ok(())
    }

    fn limit(&self) -> u64 {
        self.end_lsn
    }
}
