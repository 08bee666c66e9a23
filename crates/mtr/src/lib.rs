//! Barracuda's mini-transaction: the home of one change's way from the
//! tree's pages to the log and back.
//!
//! A change (one put, one delete, or every operation of one atomic write)
//! runs as a mini-transaction, as InnoDB's `mtr` does:
//!
//! 1. **Pages.** The tree ([`barracuda_btree::BTree`]) changes pages of a
//!    [`PoolStore`], the buffer pool as its [`barracuda_btree::PageStore`].
//!    Each page commit leaves the page dirty at the pool's pending LSN,
//!    pinned in memory, and records its patches, or the logical record that
//!    makes them (an insert, a delete, a rebuild recipe), in the change's
//!    [`barracuda_btree::OpContext`].
//! 2. **Redo records.** [`Mtr::write_redo`] turns the change's operations
//!    into redo records in a [`RedoSink`] (the log group being built): an
//!    image of each page whose block the data file does not hold yet, then
//!    every commit as its logical record or its patches.
//! 3. **Log and stamp.** The owner appends the group to its log and calls
//!    [`Mtr::stamp`] with the group's end: every changed page gets that LSN,
//!    and the pool may write it once the log is durable there.
//! 4. **Redo.** At recovery, [`Redo`] applies each logged record to the page
//!    as the data file holds it, unless the block already holds the change;
//!    logical records go through the tree's own redo
//!    ([`barracuda_btree::recipe::redo`]).
//!
//! The pages do not log, and the owner (the `barracuda` facade) touches no
//! pool guard and no codec header: it names trees and appends groups.

mod log;
mod redo;
mod store;

pub use log::{Mtr, MtrTree, RedoSink};
pub use redo::{Redo, RedoError, Redone, meta_block_lsn};
pub use store::{LsnCounter, LsnMode, META_PAGE_ID, PoolExclusive, PoolStore, image_room_bytes};
