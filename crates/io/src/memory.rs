//! The in-memory backend: a `Vec<u8>` behind a lock. Nothing survives the
//! process; `sync_data` always succeeds. It enforces the same alignment
//! rules as the disk backends so code tested here runs against O_DIRECT.

use std::path::{Path, PathBuf};

use parking_lot::RwLock;

use crate::batch::{CompletionSender, IoRequest};
use crate::buf::Alignment;
use crate::error::{IoError, OpKind};
use crate::{BlockFile, run_inline};

/// A file held in memory.
#[derive(Debug)]
pub struct MemoryFile {
    name: PathBuf,
    alignment: Alignment,
    data: RwLock<Vec<u8>>,
}

impl MemoryFile {
    /// An empty file, named `name` in errors, with 512-byte alignment.
    pub fn new(name: impl Into<PathBuf>) -> MemoryFile {
        MemoryFile::with_alignment(name, Alignment::default())
    }

    /// An empty file with the given alignment rules.
    pub fn with_alignment(name: impl Into<PathBuf>, alignment: Alignment) -> MemoryFile {
        MemoryFile {
            name: name.into(),
            alignment,
            data: RwLock::new(Vec::new()),
        }
    }
}

impl BlockFile for MemoryFile {
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), IoError> {
        let addr = buf.as_ptr() as usize;
        self.alignment
            .check(&self.name, OpKind::Read, offset_bytes, addr, buf.len())?;
        let data = self.data.read();
        let end_bytes = offset_bytes.checked_add(buf.len() as u64);
        match end_bytes {
            Some(end) if end <= data.len() as u64 => {
                buf.copy_from_slice(&data[offset_bytes as usize..end as usize]);
                Ok(())
            }
            _ => Err(IoError::ReadPastEnd {
                path: self.name.clone(),
                offset_bytes,
                len_bytes: buf.len(),
                file_len_bytes: data.len() as u64,
            }),
        }
    }

    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> Result<(), IoError> {
        let addr = data.as_ptr() as usize;
        self.alignment
            .check(&self.name, OpKind::Write, offset_bytes, addr, data.len())?;
        let start = usize::try_from(offset_bytes).map_err(|_| IoError::Os {
            op: OpKind::Write,
            path: self.name.clone(),
            offset_bytes,
            len_bytes: data.len(),
            source: std::io::Error::from_raw_os_error(libc::EFBIG),
        })?;
        let mut file = self.data.write();
        let end = start + data.len();
        if file.len() < end {
            file.resize(end, 0);
        }
        file[start..end].copy_from_slice(data);
        Ok(())
    }

    fn sync_data(&self) -> Result<(), IoError> {
        Ok(())
    }

    fn len(&self) -> Result<u64, IoError> {
        Ok(self.data.read().len() as u64)
    }

    fn set_len(&self, len_bytes: u64) -> Result<(), IoError> {
        self.alignment.check_len(&self.name, len_bytes)?;
        let len = usize::try_from(len_bytes).map_err(|_| IoError::Os {
            op: OpKind::SetLen,
            path: self.name.clone(),
            offset_bytes: len_bytes,
            len_bytes: 0,
            source: std::io::Error::from_raw_os_error(libc::EFBIG),
        })?;
        self.data.write().resize(len, 0);
        Ok(())
    }

    fn alignment(&self) -> Alignment {
        self.alignment
    }

    fn path(&self) -> &Path {
        &self.name
    }

    fn submit(&self, requests: Vec<IoRequest>, completions: &CompletionSender) {
        run_inline(self, requests, completions);
    }
}
