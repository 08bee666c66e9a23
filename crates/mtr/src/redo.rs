//! Recovery's half of the mini-transaction: each logged record applied to
//! its page as the data file holds it, unless the block holds it already.

use std::collections::HashMap;
use std::sync::Arc;

use barracuda_base::{Lsn, PageId};
use barracuda_btree::LogicalKind;
use barracuda_codec::CodecError;
use barracuda_io::{BlockFile, IoError};
use barracuda_pool::{BufferPool, CommitOutcome, ExclusiveGuard, PoolError};

use crate::store::META_PAGE_ID;

/// What redo of one record did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Redone {
    /// The data file's block was written after the record: nothing to do.
    Skipped,
    /// Applied as logged.
    Applied,
    /// Applied, and committed into a packed block: it no longer fit its
    /// block with room for the modification log (see [`Redo::logical`]).
    Packed,
}

/// Why a record could not be redone.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedoError {
    /// The pool failed (I/O, a damaged block, no memory).
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// The record does not apply to its page (a malformed logical record,
    /// or a change that fits no block, packed or not): the log is damaged.
    #[error("{reason}")]
    Unusable {
        /// What is wrong.
        reason: &'static str,
    },
}

/// Redo into one tree's pool. It remembers, for each page it has redone,
/// the LSN its records apply after: the LSN of the page's block in the data
/// file when its first record was a change (the changes the block holds
/// are skipped), or zero after an image (every later record applies).
pub struct Redo {
    pool: Arc<BufferPool>,
    after: HashMap<PageId, Lsn>,
}

impl Redo {
    /// Redo into `pool`, whose file holds the tree's blocks as the last
    /// run left them (torn pages restored).
    #[must_use]
    pub fn new(pool: Arc<BufferPool>) -> Self {
        Self {
            pool,
            after: HashMap::new(),
        }
    }

    /// Pages redone so far.
    #[must_use]
    pub fn pages(&self) -> usize {
        self.after.len()
    }

    /// Whether a record of `page_id` was redone (or skipped as held by its
    /// block).
    #[must_use]
    pub fn has_redone(&self, page_id: PageId) -> bool {
        self.after.contains_key(&page_id)
    }

    /// Installs a logged image of a page's block, dirty at `end_lsn` (the
    /// end of its group): the page's content whatever its block holds.
    pub fn image(&mut self, page_id: PageId, block: &[u8], end_lsn: Lsn) -> Result<(), RedoError> {
        self.pool.install_image(page_id, block, end_lsn)?;
        self.after.insert(page_id, Lsn(0));
        Ok(())
    }

    /// Redoes one page commit logged as patches, in a group ending at
    /// `end_lsn`.
    pub fn patches<'p>(
        &mut self,
        page_id: PageId,
        end_lsn: Lsn,
        patches: impl IntoIterator<Item = (u32, &'p [u8])> + Clone,
    ) -> Result<Redone, RedoError> {
        self.change(page_id, end_lsn, |guard| {
            for (offset, bytes) in patches.clone() {
                guard.write(offset as usize, bytes)?;
            }
            Ok(())
        })
    }

    /// Redoes one page commit logged as a logical record: the tree's redo
    /// ([`barracuda_btree::recipe::redo`]) answers the writes it makes on
    /// the page as redo finds it.
    pub fn logical(
        &mut self,
        page_id: PageId,
        end_lsn: Lsn,
        kind: LogicalKind,
        body: &[u8],
    ) -> Result<Redone, RedoError> {
        self.change(page_id, end_lsn, |guard| {
            let writes = barracuda_btree::recipe::redo(kind, guard.page(), body)
                .map_err(|reason| RedoError::Unusable { reason })?;
            for patch in writes {
                guard.write(patch.offset as usize, &patch.bytes)?;
            }
            Ok(())
        })
    }

    /// Redoes one commit, which `change` writes into the page, unless the
    /// data file's block holds it already.
    ///
    /// Each record is one commit of the running system, redone as one
    /// commit from the block the running system had, so a compressed page's
    /// block goes through the same appends and recompressions and fits as
    /// it did. Should it not (a codec library whose output grew since the
    /// log was written), the change is committed once more into a packed
    /// block (no room kept for the modification log): the page holds no more
    /// than it held in the running system, whose block held it with a log,
    /// and a compaction or the next split makes room again. Only a page that
    /// fits no block at all is unusable.
    fn change(
        &mut self,
        page_id: PageId,
        end_lsn: Lsn,
        mut change: impl FnMut(&mut ExclusiveGuard<'_>) -> Result<(), RedoError>,
    ) -> Result<Redone, RedoError> {
        let mut guard = self.pool.fix_exclusive(page_id)?;
        let after = *self
            .after
            .entry(page_id)
            .or_insert_with(|| barracuda_codec::header_lsn(guard.page()));
        if end_lsn <= after {
            // The data file's block was written after this change.
            return Ok(Redone::Skipped);
        }
        change(&mut guard)?;
        if guard.commit(end_lsn)? == CommitOutcome::Fits {
            return Ok(Redone::Applied);
        }
        // The commit rolled the page back; recovery runs on one thread, so
        // packing is on for this commit alone.
        tracing::warn!("{page_id}: a redone change did not fit its block as logged; packing it");
        self.pool.set_packing(true);
        let packed = change(&mut guard).and_then(|()| Ok(guard.commit(end_lsn)?));
        self.pool.set_packing(false);
        if packed? == CommitOutcome::DoesNotFit {
            return Err(RedoError::Unusable {
                reason: "a logged change no longer fits its page's block",
            });
        }
        Ok(Redone::Packed)
    }
}

/// The LSN of the meta page's block in a tree's data file `file`, if the
/// file holds a whole one: `Ok(None)` if the file is shorter than a block,
/// `Ok(Some(Err))` with the codec's complaint if the block fails its
/// checks.
pub fn meta_block_lsn(
    file: &dyn BlockFile,
    block_bytes: usize,
) -> Result<Option<Result<Lsn, CodecError>>, IoError> {
    if file.len()? < block_bytes as u64 {
        return Ok(None);
    }
    let mut block = file.alloc_buf(block_bytes);
    file.read_at(0, &mut block)?;
    Ok(Some(
        barracuda_codec::verify(&block, META_PAGE_ID).map(|header| header.lsn),
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests may unwrap")]

    use super::*;
    use barracuda_base::{BlockSize, Geometry};
    use barracuda_codec::{Codec, PAGE_HEADER_RESERVED_BYTES};
    use barracuda_pool::{CodecService, FileService, PageFormat, PoolConfig, Services};
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// A change redone into a block it fits only packed is committed
    /// packed: a log whose commits recompress differently (a codec that
    /// compressed smaller when the log was written) still replays.
    #[test]
    fn a_redone_change_that_fits_only_packed_is_packed() {
        let geometry = Geometry::new(16 << 10, BlockSize::Kib8).unwrap();
        let services = Services {
            codec: Arc::new(CodecService::new(Codec::zlib_default(), geometry).unwrap()),
            file: Arc::new(FileService::new(Arc::new(barracuda_io::MemoryFile::new(
                "redo",
            )))),
            durable_lsn: Arc::new(|| Lsn(u64::MAX)),
            clock: None,
        };
        let config = PoolConfig::default()
            .format(PageFormat::Compressed {
                block_size_bytes: 8192,
            })
            .buffer_pool_bytes(1 << 20);
        let pool = Arc::new(BufferPool::open(config, services).unwrap());
        let mut rng = SmallRng::seed_from_u64(1);
        let mut noise = |len: usize| -> Vec<u8> { (0..len).map(|_| rng.random()).collect() };
        // 7,000 random bytes, recompressed with the log's reserve, then 700
        // more appended to its modification log: the page fits its 8 KiB
        // block only because its log holds part of it.
        pool.create(PageId(1)).unwrap().commit(Lsn(1)).unwrap();
        let at = PAGE_HEADER_RESERVED_BYTES;
        for (offset, len, lsn) in [(at, 7000, 2), (at + 7000, 700, 3)] {
            let mut guard = pool.fix_exclusive(PageId(1)).unwrap();
            guard.write(offset, &noise(len)).unwrap();
            assert_eq!(guard.commit(Lsn(lsn)).unwrap(), CommitOutcome::Fits);
        }
        // 500 bytes rewritten: the log is full, and the page recompressed
        // with the reserve no longer fits; packed, it does.
        let rewrite = noise(500);
        let mut redo = Redo::new(Arc::clone(&pool));
        let offset = (at + 100) as u32;
        let redone = redo
            .patches(PageId(1), Lsn(20), [(offset, &rewrite[..])])
            .unwrap();
        assert_eq!(redone, Redone::Packed);
        assert_eq!(redo.pages(), 1);
        let guard = pool.fix_shared(PageId(1)).unwrap();
        assert_eq!(&guard.page()[at + 100..at + 600], &rewrite[..]);
    }
}
