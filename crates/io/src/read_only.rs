//! A file that refuses every change: the guard of a read-only open.

use std::path::Path;
use std::sync::Arc;

use crate::{
    AlignedBuf, Alignment, BlockFile, Completion, CompletionSender, IoError, IoOp, IoRequest,
    OpKind,
};

/// Wraps a file so that reads go through and every write, `set_len` and
/// zero fill fails with [`IoError::ReadOnly`], changing nothing: whatever
/// above it tries to write (recovery, a flush, a checkpoint) stops with an
/// error instead of touching the file. `sync_data` goes through: with
/// nothing written it changes nothing either.
#[derive(Debug)]
pub struct ReadOnlyFile {
    inner: Arc<dyn BlockFile>,
}

impl ReadOnlyFile {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn BlockFile>) -> ReadOnlyFile {
        ReadOnlyFile { inner }
    }

    fn refused(&self, op: OpKind) -> IoError {
        IoError::ReadOnly {
            op,
            path: self.inner.path().to_path_buf(),
        }
    }
}

impl BlockFile for ReadOnlyFile {
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), IoError> {
        self.inner.read_at(offset_bytes, buf)
    }

    fn write_at(&self, _offset_bytes: u64, _data: &[u8]) -> Result<(), IoError> {
        Err(self.refused(OpKind::Write))
    }

    fn write_vectored_at(&self, _offset_bytes: u64, _bufs: &[&[u8]]) -> Result<(), IoError> {
        Err(self.refused(OpKind::Write))
    }

    fn sync_data(&self) -> Result<(), IoError> {
        self.inner.sync_data()
    }

    fn len(&self) -> Result<u64, IoError> {
        self.inner.len()
    }

    fn set_len(&self, _len_bytes: u64) -> Result<(), IoError> {
        Err(self.refused(OpKind::SetLen))
    }

    fn alignment(&self) -> Alignment {
        self.inner.alignment()
    }

    fn path(&self) -> &Path {
        self.inner.path()
    }

    fn alloc_buf(&self, len_bytes: usize) -> AlignedBuf {
        self.inner.alloc_buf(len_bytes)
    }

    fn read_if_cached(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<bool, IoError> {
        self.inner.read_if_cached(offset_bytes, buf)
    }

    fn uncache(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), IoError> {
        self.inner.uncache(offset_bytes, len_bytes)
    }

    fn submit(&self, requests: Vec<IoRequest>, completions: &CompletionSender) {
        let (reads, writes): (Vec<IoRequest>, Vec<IoRequest>) =
            requests.into_iter().partition(|r| r.op == IoOp::Read);
        completions.send_all(writes.into_iter().map(|r| Completion {
            op: r.op,
            offset_bytes: r.offset_bytes,
            buf: r.buf,
            tag: r.tag,
            result: Err(self.refused(OpKind::Write)),
        }));
        if !reads.is_empty() {
            self.inner.submit(reads, completions);
        }
    }

    fn write_zeros(&self, _offset_bytes: u64, len_bytes: u64) -> Result<(), IoError> {
        if len_bytes == 0 {
            return Ok(());
        }
        Err(self.refused(OpKind::Write))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryFile;

    #[test]
    fn reads_pass_and_every_change_is_refused() {
        for len_bytes in [4096usize, 8192, 65536] {
            let inner: Arc<dyn BlockFile> = Arc::new(MemoryFile::new("f"));
            let mut data = inner.alloc_buf(len_bytes);
            data.fill(7);
            inner.write_at(0, &data).expect("memory write");
            let file = ReadOnlyFile::new(Arc::clone(&inner));
            let mut buf = file.alloc_buf(len_bytes);
            file.read_at(0, &mut buf).expect("read");
            assert_eq!(buf[..], data[..]);
            assert!(matches!(
                file.write_at(0, &buf),
                Err(IoError::ReadOnly { .. })
            ));
            assert!(matches!(file.set_len(0), Err(IoError::ReadOnly { .. })));
            assert!(file.write_zeros(0, 4096).is_err());
            let completions = file.submit_and_wait(vec![
                IoRequest::read(0, file.alloc_buf(4096), 1),
                IoRequest::write(0, file.alloc_buf(4096), 2),
            ]);
            assert_eq!(completions.len(), 2);
            for completion in completions {
                assert_eq!(completion.result.is_ok(), completion.tag == 1);
            }
            assert_eq!(inner.len().expect("len"), len_bytes as u64);
            let mut after = inner.alloc_buf(len_bytes);
            inner.read_at(0, &mut after).expect("read");
            assert_eq!(after[..], data[..], "unchanged");
        }
    }
}
