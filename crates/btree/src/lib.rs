//! Barracuda's B+tree: slotted pages with a sparse directory, variable-length
//! keys and values, overflow chains, sequential-insert-aware split policies,
//! latch-coupled concurrency and an invariant checker.
//!
//! # What it is
//!
//! A [`BTree`] is a B+tree over a [`store::PageStore`]: the store hands out
//! latched pages and records every byte the tree changes as a patch (see the
//! [`store`] module for the full contract). [`store::MemStore`] implements it
//! in memory, uncompressed ([`store::AlwaysFits`]) or with a real
//! `barracuda-codec` block per page ([`store::CodecBlocks`]); `barracuda-mtr`'s
//! `PoolStore` implements it on the buffer pool, whose compressed blocks
//! take the patches into their modification logs, and turns each
//! operation's patches into its redo records. The tree does not depend on
//! the pool. The first
//! `barracuda_codec::PAGE_HEADER_RESERVED_BYTES` of every page belong to the
//! codec; the tree's header follows ([`PAGE_HEADER_BYTES`] in all).
//! A tree is identified by its root page id, which never changes: a root
//! split moves the root's contents into two new children.
//!
//! # What it is not
//!
//! Not transactional: each `insert` or `delete` is atomic (its patches form
//! one [`store::OpContext`]), but there are no multi-operation transactions or
//! snapshots. Cursors see a weakly consistent view (see [`cursor`]).
//!
//! # Limits
//!
//! - Page size: [`PAGE_SIZE_BYTES_MIN`]..=[`PAGE_SIZE_BYTES_MAX`], a power of two.
//! - Keys: at most [`KEY_BYTES_MAX`] bytes ([`Error::KeyTooLong`]).
//! - Values: at most [`VALUE_BYTES_MAX`] bytes ([`Error::ValueTooLong`]);
//!   values above [`page::value_inline_bytes_max`] (an eighth of the page)
//!   live in overflow page chains, and so does a shorter value whose record
//!   does not compress into any block.
//!
//! # Invariants ([`BTree::check_invariants`])
//!
//! Key order within and across pages; separators bound their children; all
//! leaves at one depth; leaf sibling links agree with key order; every
//! non-root page is above the merge threshold (minus one maximal record, the
//! granularity of variable-length records) unless it carries the
//! `FLAG_GROWING` mark that splits and unresolvable rebalances set, which the
//! next delete on that page acts upon; overflow chains are well formed and
//! hold exactly the value's length; no page is reachable twice; free pages are
//! disjoint from the tree; each page's record list, heap accounting and
//! directory agree; the entry count the store keeps ([`BTree::len`]) equals
//! the leaves' records.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use barracuda_btree::{MemStore, SplitPolicy, BTree, TreeConfig};
//!
//! let store = Arc::new(MemStore::new(16 * 1024)?);
//! let config = TreeConfig { policy: SplitPolicy::Adaptive, ..TreeConfig::default() };
//! let tree = BTree::create(store, config)?;
//! tree.insert(b"apple", b"red")?;
//! tree.insert(b"banana", b"yellow")?;
//! assert_eq!(tree.get(b"apple")?.as_deref(), Some(&b"red"[..]));
//! let mut cursor = tree.cursor();
//! assert!(cursor.last()?);
//! assert_eq!(cursor.key(), Some(&b"banana"[..]));
//! tree.delete(b"banana")?;
//! assert_eq!(tree.len()?, 1);
//! tree.check_invariants()?;
//! # Ok::<(), barracuda_btree::Error>(())
//! ```

mod change;
mod check;
pub mod cursor;
mod error;
pub mod page;
pub mod pattern;
pub mod recipe;
pub mod scan;
pub mod store;
mod tree;

pub use check::TreeStats;
pub use cursor::{Cursor, Entry};
pub use error::{Error, Result};
pub use page::{
    KEY_BYTES_MAX, PAGE_HEADER_BYTES, PAGE_SIZE_BYTES_MAX, PAGE_SIZE_BYTES_MIN, VALUE_BYTES_MAX,
};
pub use store::{Fit, LogicalKind, MemStore, OpContext, PagePatches, PageStore, PageWrite};
pub use tree::{BTree, PREFETCH_SAMPLE_KEYS, SplitCounts, SplitPolicy, TreeConfig};
