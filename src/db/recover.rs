//! Recovery: the log's groups after the last checkpoint are replayed into
//! the trees' pools at open, each change unless the page's block in the
//! data file already holds it (`barracuda_mtr::Redo`).

use std::collections::HashMap;

use barracuda_btree::LogicalKind;
use barracuda_mtr::{Redo, RedoError, Redone};

use super::{RecoveryStats, split_logged_page_id};
use crate::error::{Error, Result};
use crate::wal::{LoggedGroup, RedoEntry};

/// Replays one logged group into the trees' pools, each tree's through its
/// [`Redo`].
pub(super) fn replay(
    redo: &mut HashMap<u16, Redo>,
    group: &LoggedGroup,
    stats: &mut RecoveryStats,
) -> Result<()> {
    let unusable = |error: RedoError| match error {
        RedoError::Unusable { reason } => Error::LogCorrupted {
            lsn: group.lsn,
            reason,
        },
        RedoError::Pool(error) => Error::from(error),
        _ => Error::Internal {
            message: error.to_string(),
        },
    };
    for entry in group.entries()? {
        let (logged_page_id, change) = match entry {
            RedoEntry::FullBlock { page_id, block } => {
                let (tree_id, page_id) = split_logged_page_id(page_id);
                // A tree missing from the catalog was never created: its
                // creation writes the catalog before logging anything.
                let Some(redo) = redo.get_mut(&tree_id) else {
                    continue;
                };
                redo.image(page_id, &block, group.end_lsn)
                    .map_err(unusable)?;
                stats.images_installed += 1;
                continue;
            }
            RedoEntry::Patches { page_id, patches } => (page_id, Change::Patches(patches)),
            RedoEntry::Rebuild { page_id, recipe } => {
                (page_id, Change::Logical(LogicalKind::Rebuild, recipe))
            }
            RedoEntry::Insert { page_id, record } => {
                (page_id, Change::Logical(LogicalKind::Insert, record))
            }
            RedoEntry::Delete { page_id, key } => {
                (page_id, Change::Logical(LogicalKind::Delete, key))
            }
        };
        let (tree_id, page_id) = split_logged_page_id(logged_page_id);
        let Some(redo) = redo.get_mut(&tree_id) else {
            continue;
        };
        let redone = match change {
            Change::Patches(patches) => redo.patches(page_id, group.end_lsn, patches),
            Change::Logical(kind, body) => redo.logical(page_id, group.end_lsn, kind, body),
        }
        .map_err(unusable)?;
        match redone {
            Redone::Skipped => stats.changes_skipped += 1,
            Redone::Applied | Redone::Packed => {
                stats.changes_applied += 1;
                if redone == Redone::Packed {
                    stats.changes_packed += 1;
                }
                if let Change::Logical(kind, _) = change {
                    match kind {
                        LogicalKind::Rebuild => stats.rebuilds_applied += 1,
                        LogicalKind::Insert => stats.inserts_applied += 1,
                        LogicalKind::Delete => stats.deletes_applied += 1,
                    }
                }
            }
        }
    }
    Ok(())
}

/// One page commit of a group: patches, or a logical record.
#[derive(Clone, Copy)]
enum Change<'a> {
    Patches(crate::wal::Patches<'a>),
    Logical(LogicalKind, &'a [u8]),
}
