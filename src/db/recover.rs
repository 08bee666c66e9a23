//! Recovery: the log's groups after the last checkpoint are replayed into
//! the trees' pools at open, each change unless the page's block in the
//! data file already holds it.

use std::collections::HashMap;
use std::sync::Arc;

use barracuda_base::{Lsn, PageId};
use barracuda_io::BlockFile;
use barracuda_pool::{BufferPool, CommitOutcome};

use super::{RecoveryStats, split_logged_page_id};
use crate::error::{Error, Result};
use crate::wal::{LoggedGroup, RedoEntry};

/// Replays one logged group into the pools. `replayed` maps each page
/// replayed so far to the LSN its changes apply after: the LSN of its
/// block in the data file when its first entry was patches (the changes
/// the block holds are skipped), or zero after an image (every later
/// change applies).
pub(super) fn replay(
    pools: &HashMap<u16, (Arc<BufferPool>, Arc<dyn BlockFile>)>,
    group: &LoggedGroup,
    replayed: &mut HashMap<(u16, PageId), Lsn>,
    stats: &mut RecoveryStats,
) -> Result<()> {
    for entry in group.entries()? {
        match entry {
            RedoEntry::FullBlock { page_id, block } => {
                let (tree_id, page_id) = split_logged_page_id(page_id);
                // A tree missing from the catalog was never created: its
                // creation writes the catalog before logging anything.
                let Some((pool, _)) = pools.get(&tree_id) else {
                    continue;
                };
                pool.install_image(page_id, &block, group.end_lsn)?;
                replayed.insert((tree_id, page_id), Lsn(0));
                stats.images_installed += 1;
            }
            RedoEntry::Patches { page_id, patches } => {
                let (tree_id, page_id) = split_logged_page_id(page_id);
                let Some((pool, _)) = pools.get(&tree_id) else {
                    continue;
                };
                replay_change(
                    pool,
                    tree_id,
                    page_id,
                    group.into(),
                    replayed,
                    stats,
                    |guard| {
                        for (offset, bytes) in patches {
                            guard.write(offset as usize, bytes)?;
                        }
                        Ok(())
                    },
                )?;
            }
            RedoEntry::Rebuild { page_id, recipe } => {
                let applied = replay_writes(pools, page_id, group, replayed, stats, |page| {
                    barracuda_btree::recipe::redo_rebuild(page, recipe)
                })?;
                stats.rebuilds_applied += u64::from(applied);
            }
            RedoEntry::Insert { page_id, record } => {
                let applied = replay_writes(pools, page_id, group, replayed, stats, |page| {
                    barracuda_btree::recipe::redo_insert(page, record)
                })?;
                stats.inserts_applied += u64::from(applied);
            }
            RedoEntry::Delete { page_id, key } => {
                let applied = replay_writes(pools, page_id, group, replayed, stats, |page| {
                    barracuda_btree::recipe::redo_delete(page, key)
                })?;
                stats.deletes_applied += u64::from(applied);
            }
        }
    }
    Ok(())
}

/// Replays a logged rebuild, insert or delete: `writes` answers the writes
/// it makes on the page as redo finds it ([`replay_change`]). Returns
/// whether it applied them.
fn replay_writes(
    pools: &HashMap<u16, (Arc<BufferPool>, Arc<dyn BlockFile>)>,
    logged_page_id: PageId,
    group: &LoggedGroup,
    replayed: &mut HashMap<(u16, PageId), Lsn>,
    stats: &mut RecoveryStats,
    writes: impl Fn(&[u8]) -> std::result::Result<Vec<barracuda_btree::store::Patch>, &'static str>,
) -> Result<bool> {
    let (tree_id, page_id) = split_logged_page_id(logged_page_id);
    let Some((pool, _)) = pools.get(&tree_id) else {
        return Ok(false);
    };
    replay_change(
        pool,
        tree_id,
        page_id,
        group.into(),
        replayed,
        stats,
        |guard| {
            let writes = writes(guard.page()).map_err(|reason| Error::LogCorrupted {
                lsn: group.lsn,
                reason,
            })?;
            for patch in writes {
                guard.write(patch.offset as usize, &patch.bytes)?;
            }
            Ok(())
        },
    )
}

/// Where a logged group starts and ends.
#[derive(Clone, Copy)]
struct GroupLsns {
    lsn: Lsn,
    end_lsn: Lsn,
}

impl From<&LoggedGroup> for GroupLsns {
    fn from(group: &LoggedGroup) -> Self {
        GroupLsns {
            lsn: group.lsn,
            end_lsn: group.end_lsn,
        }
    }
}

/// Replays one change of a group (patches, or a logical change, which
/// `change` writes into the page) onto page `page_id` of tree `tree_id`, unless the
/// data file's block holds it already (see [`replay`]). Returns whether it
/// applied the change.
///
/// Each entry is one commit of the running system, redone as one commit
/// from the block the running system had, so a compressed page's block
/// goes through the same appends and recompressions and fits as it did.
/// Should it not (a codec library whose output grew since the log was
/// written), the change is committed once more into a packed block (no
/// room kept for the modification log): the page holds no more than it
/// held in the running system, whose block held it with a log, and a
/// compaction or the next split makes room again. Only a page that fits
/// no block at all is `LogCorrupted`.
fn replay_change(
    pool: &BufferPool,
    tree_id: u16,
    page_id: PageId,
    group: GroupLsns,
    replayed: &mut HashMap<(u16, PageId), Lsn>,
    stats: &mut RecoveryStats,
    mut change: impl FnMut(&mut barracuda_pool::ExclusiveGuard<'_>) -> Result<()>,
) -> Result<bool> {
    let mut guard = pool.fix_exclusive(page_id)?;
    let after = *replayed
        .entry((tree_id, page_id))
        .or_insert_with(|| barracuda_codec::header_lsn(guard.page()));
    if group.end_lsn <= after {
        // The data file's block was written after this change.
        stats.changes_skipped += 1;
        return Ok(false);
    }
    stats.changes_applied += 1;
    change(&mut guard)?;
    if guard.commit(group.end_lsn)? == CommitOutcome::Fits {
        return Ok(true);
    }
    // The commit rolled the page back; recovery runs on one thread, so
    // packing is on for this commit alone.
    tracing::warn!("{page_id}: a redone change did not fit its block as logged; packing it");
    stats.changes_packed += 1;
    pool.set_packing(true);
    let packed = change(&mut guard).and_then(|()| Ok(guard.commit(group.end_lsn)?));
    pool.set_packing(false);
    if packed? == CommitOutcome::DoesNotFit {
        return Err(Error::LogCorrupted {
            lsn: group.lsn,
            reason: "a logged change no longer fits its page's block",
        });
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use barracuda_base::{BlockSize, Geometry};
    use barracuda_codec::{Codec, PAGE_HEADER_RESERVED_BYTES};
    use barracuda_pool::{CodecService, FileService, PageFormat, Services};
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
        let config = barracuda_pool::PoolConfig::default()
            .format(PageFormat::Compressed {
                block_size_bytes: 8192,
            })
            .buffer_pool_bytes(1 << 20);
        let pool = BufferPool::open(config, services).unwrap();
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
        let mut replayed = HashMap::new();
        let mut stats = RecoveryStats::default();
        let lsns = GroupLsns {
            lsn: Lsn(10),
            end_lsn: Lsn(20),
        };
        let applied = replay_change(
            &pool,
            1,
            PageId(1),
            lsns,
            &mut replayed,
            &mut stats,
            |guard| Ok(guard.write(at + 100, &rewrite)?),
        )
        .unwrap();
        assert!(applied);
        assert_eq!(stats.changes_packed, 1);
        let guard = pool.fix_shared(PageId(1)).unwrap();
        assert_eq!(&guard.page()[at + 100..at + 600], &rewrite[..]);
    }
}
