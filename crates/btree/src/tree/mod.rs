//! The tree: a B+tree over a [`PageStore`], identified by its root page id.
//!
//! This module holds the [`BTree`] type, its configuration and counters, and
//! the helpers every operation shares; each operation lives in a module of
//! its own: descent with latch coupling ([`descend`]), reads ([`read`]),
//! long values on overflow chains ([`overflow`]), the entry count
//! ([`count`]), insert ([`insert`]), split staging and split-point choice
//! ([`split`]), and delete with rebalance ([`delete`]).

mod count;
mod delete;
mod descend;
mod insert;
mod overflow;
mod read;
mod shift;
mod split;

pub(crate) use overflow::decode_overflow_ref;
pub use read::PREFETCH_SAMPLE_KEYS;

use crate::change::{Change, Scratch};
use crate::error::{Error, Result};
use crate::page::{self, KEY_BYTES_MAX, Layout, PageType, VALUE_BYTES_MAX};
use crate::store::{Fit, OpContext, PageStore, PageWrite};
use barracuda_base::PageId;
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// How a full page is split; chosen per tree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SplitPolicy {
    /// Always split in the middle (by bytes).
    Half,
    /// The rule the reference study describes for InnoDB: an insert is
    /// sequential only if it and the page's previous insert were both the
    /// page's largest (or both its smallest) key; then split 15/16 : 1/16,
    /// otherwise in the middle.
    InnoDb,
    /// The study's proposal: the page remembers its last inserted record; an
    /// insert right next to it (either side) is sequential, wherever the page
    /// is in the tree, and the split moves only the records greater than the
    /// new key to the new page; otherwise split in the middle.
    #[default]
    Adaptive,
    /// InnoDB's actual `PAGE_LAST_INSERT` rule, for comparison
    /// (`btr_page_get_split_rec_to_right` / `_to_left`): an insert right
    /// after the last inserted record splits after the record following
    /// the insert point (or at the new record if it is the page's last);
    /// an insert right before it splits at the new record's successor.
    InnoDbLastInsert,
}

/// Per-tree configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeConfig {
    /// The split policy. Default = `Adaptive`.
    pub policy: SplitPolicy,
    /// A non-root page whose used bytes fall below this percentage of the
    /// page after a delete is merged or redistributed. Default = 50 (InnoDB's
    /// `MERGE_THRESHOLD` default).
    pub merge_threshold_percent: u8,
    /// Pages must fit a compressed block: enables adaptive padding and makes
    /// structure changes keep every ancestor latched (a compression failure
    /// can split a page the space check called safe). Default = false.
    pub compressed: bool,
    /// Leaves a forward scan hints to the store ([`crate::PageStore::prefetch`])
    /// each time it reaches the end of what it hinted before: the next
    /// leaves under the same parent (InnoDB's linear read-ahead, one window
    /// at a time). 0 disables read-ahead. Default = 8.
    pub read_ahead_pages: usize,
}

impl Default for TreeConfig {
    fn default() -> Self {
        Self {
            policy: SplitPolicy::Adaptive,
            merge_threshold_percent: /* InnoDB's default */ 50,
            compressed: false,
            read_ahead_pages: DEFAULT_READ_AHEAD_PAGES,
        }
    }
}

/// Default read-ahead window in leaves: enough to keep a few reads in flight
/// ahead of a scan, small enough not to flood the pool (InnoDB reads ahead
/// by extents of 64 pages, but its pages are not compressed blocks that a
/// hint makes the pool decompress).
const DEFAULT_READ_AHEAD_PAGES: usize = 8;

/// Why and how a page was split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SplitKind {
    Half,
    Sequential,
    CompressionFailure,
}

#[derive(Default)]
struct Counters {
    split_half: AtomicU64,
    split_sequential: AtomicU64,
    split_compression: AtomicU64,
    split_root: AtomicU64,
    split_many: AtomicU64,
    split_absorbing: AtomicU64,
    split_alone: AtomicU64,
    merges: AtomicU64,
    redistributions: AtomicU64,
    shifts: AtomicU64,
    compression_failures: AtomicU64,
    /// `Adaptive`'s moving average of the share of its splits that no
    /// insert stream explained, in 1/65536 (see [`BTree::policy_cut`]).
    unexplained_splits: AtomicU64,
    /// `Adaptive`'s moving average of the share of its splits that did not
    /// extend a long run (see [`BTree::policy_cut`]), in 1/65536. It starts
    /// at zero: a new tree takes its streams for long until its splits say
    /// otherwise (TPC-C order keys lost 0.003 of leaf fill when it started
    /// at one, the pattern family nothing measurable).
    short_run_splits: AtomicU64,
}

/// Split, merge and compression counters of a tree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SplitCounts {
    /// Splits in the middle.
    pub half: u64,
    /// Splits the policy took as sequential (15/16 or at the insert point).
    pub sequential: u64,
    /// Splits forced by a page that no longer fit its compressed block.
    pub compression_failure: u64,
    /// Root splits (the tree grew by a level); also counted by kind above.
    pub root: u64,
    /// Splits into three or more pages, because no cut into two fitted the
    /// compressed blocks; also counted by kind above.
    pub many: u64,
    /// Splits that packed a full right sibling's records too, because it
    /// could not take its new left link; also counted by kind above.
    pub absorbing: u64,
    /// Full leaves split on their own first, because a neighbour under
    /// another parent had to split and could not change them; also counted
    /// by kind above.
    pub alone: u64,
    /// Merges of two siblings.
    pub merges: u64,
    /// Redistributions between two siblings.
    pub redistributions: u64,
    /// Full leaves that gave records to a sibling instead of splitting.
    pub shifts: u64,
    /// Commits that did not fit their compressed block.
    pub compression_failures: u64,
}

/// InnoDB's `zip_pad`: after too many compression failures in a round of
/// commits, the tree aims below the page size when filling pages.
struct ZipPad {
    pad_bytes: AtomicUsize,
    round: Mutex<PadRound>,
}

#[derive(Default)]
struct PadRound {
    commit_count: u32,
    failure_count: u32,
    success_rounds: u32,
}

/// Commits per padding round (InnoDB's `ZIP_PAD_ROUND_LEN`).
const ZIP_PAD_ROUND_COMMITS: u32 = 128;

/// Failure rate that grows the pad (InnoDB's
/// `innodb_compression_failure_threshold_pct` default).
const ZIP_PAD_FAILURE_PERCENT: u32 = 5;

/// Clean rounds after which the pad shrinks (InnoDB's
/// `ZIP_PAD_SUCCESSFUL_ROUND_LIMIT`).
const ZIP_PAD_SUCCESS_ROUNDS: u32 = 5;

/// Pad step: 1/128 of the page (InnoDB's `ZIP_PAD_INCR` is 128 bytes of 16 KiB).
const ZIP_PAD_STEP_DIVISOR: usize = 128;

/// The pad never exceeds this percentage of the page
/// (`innodb_compression_pad_pct_max` default).
const ZIP_PAD_MAX_PERCENT: usize = 50;

impl ZipPad {
    fn note(&self, fits: bool, page_size_bytes: usize) {
        let mut r = self.round.lock();
        r.commit_count += 1;
        r.failure_count += u32::from(!fits);
        if r.commit_count < ZIP_PAD_ROUND_COMMITS {
            return;
        }
        let step = page_size_bytes / ZIP_PAD_STEP_DIVISOR;
        let pad = self.pad_bytes.load(Ordering::Relaxed);
        if r.failure_count * 100 > ZIP_PAD_FAILURE_PERCENT * r.commit_count {
            let max = page_size_bytes * ZIP_PAD_MAX_PERCENT / 100;
            self.pad_bytes
                .store((pad + step).min(max), Ordering::Relaxed);
            r.success_rounds = 0;
        } else {
            r.success_rounds += 1;
            if r.success_rounds >= ZIP_PAD_SUCCESS_ROUNDS {
                self.pad_bytes
                    .store(pad.saturating_sub(step), Ordering::Relaxed);
                r.success_rounds = 0;
            }
        }
        r.commit_count = 0;
        r.failure_count = 0;
    }
}

/// Outcome of an insert or delete on an exclusively latched path.
enum Attempt {
    /// Done; whether the key was there.
    Done(bool),
    /// Nothing was changed: the leaf holding this key (the full right
    /// neighbour of a leaf that had to split) must split on its own first.
    SplitFirst(Vec<u8>),
}

/// Tries of an insert or delete that meets full neighbours under other
/// parents, and leaves split on their own for one: each split fixes one
/// neighbour, and a chain of full leaves that each end a parent is short.
const RETRIES_MAX: usize = 8;

/// Outcome of trying a change within one leaf.
enum LeafOutcome {
    Done(bool),
    Full,
    Unfit,
}

/// A B+tree over a [`PageStore`], identified by its root page id, which never
/// changes.
pub struct BTree<S: PageStore> {
    pub(crate) store: Arc<S>,
    pub(crate) root: PageId,
    pub(crate) config: TreeConfig,
    counters: Counters,
    zip_pad: ZipPad,
}

pub(crate) fn check_key(key: &[u8]) -> Result<()> {
    if key.len() > KEY_BYTES_MAX {
        return Err(Error::KeyTooLong {
            len_bytes: key.len(),
            max_bytes: KEY_BYTES_MAX,
        });
    }
    Ok(())
}

fn check_value(value: &[u8]) -> Result<()> {
    if value.len() > VALUE_BYTES_MAX {
        return Err(Error::ValueTooLong {
            len_bytes: value.len(),
            max_bytes: VALUE_BYTES_MAX,
        });
    }
    Ok(())
}

pub(crate) fn expect_node(p: &[u8], page_id: PageId) -> Result<()> {
    match page::page_type(p) {
        Some(PageType::Leaf | PageType::Internal) => Ok(()),
        other => Err(Error::Corrupted {
            page_id,
            reason: format!("expected a tree page, found {other:?}"),
        }),
    }
}

fn unreachable_err(page_id: PageId) -> Error {
    Error::Corrupted {
        page_id,
        reason: "latch path is empty".into(),
    }
}

impl<S: PageStore> BTree<S> {
    /// Creates an empty tree: allocates its root page.
    pub fn create(store: Arc<S>, config: TreeConfig) -> Result<Self> {
        let mut op = OpContext::new();
        let root = {
            let mut g = store.allocate(&mut op)?;
            page::rebuild(&mut g, &Layout::leaf(), &[], page::HeapOrder::Kept);
            if g.commit(&mut op) != Fit::Fits {
                return Err(Error::CompressionUnfit {
                    page_id: g.page_id(),
                });
            }
            g.page_id()
        };
        store.finish_op(op);
        Ok(Self::open(store, root, config))
    }

    /// Opens the tree whose root is `root`.
    pub fn open(store: Arc<S>, root: PageId, config: TreeConfig) -> Self {
        Self {
            store,
            root,
            config,
            counters: Counters::default(),
            zip_pad: ZipPad {
                pad_bytes: AtomicUsize::new(0),
                round: Mutex::new(PadRound::default()),
            },
        }
    }

    /// The root page id (never changes).
    pub fn root_page_id(&self) -> PageId {
        self.root
    }

    /// The store.
    pub fn store(&self) -> &Arc<S> {
        &self.store
    }

    /// The configuration.
    pub fn config(&self) -> TreeConfig {
        self.config
    }

    /// The current compression pad in bytes (0 for uncompressed trees).
    pub fn zip_pad_bytes(&self) -> usize {
        self.zip_pad.pad_bytes.load(Ordering::Relaxed)
    }

    /// Split, merge and compression counters.
    pub fn split_counts(&self) -> SplitCounts {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        SplitCounts {
            half: get(&c.split_half),
            sequential: get(&c.split_sequential),
            compression_failure: get(&c.split_compression),
            root: get(&c.split_root),
            many: get(&c.split_many),
            absorbing: get(&c.split_absorbing),
            alone: get(&c.split_alone),
            merges: get(&c.merges),
            redistributions: get(&c.redistributions),
            shifts: get(&c.shifts),
            compression_failures: get(&c.compression_failures),
        }
    }

    pub(crate) fn page_size(&self) -> usize {
        self.store.page_size_bytes()
    }

    /// Used bytes a page may reach: the page minus the compression pad.
    fn limit_bytes(&self) -> usize {
        self.page_size() - self.zip_pad_bytes()
    }

    /// Below this many used bytes a page is underfull and merges: the
    /// merge threshold of what a page may hold now ([`BTree::limit_bytes`]).
    /// A compressed tree whose data does not compress holds at most its
    /// block's worth per page, and its compression pad says so; against the
    /// whole page, every such page would be underfull from its first
    /// record, and every delete would rebalance.
    pub(crate) fn threshold_bytes(&self) -> usize {
        self.limit_bytes() * usize::from(self.config.merge_threshold_percent) / 100
    }

    /// The lowest [`BTree::threshold_bytes`] can be, with the largest pad:
    /// the fill a page that is not growing never goes below (less a
    /// record), whatever the pad was when it last changed. What
    /// `check_invariants` checks.
    pub(crate) fn merge_floor_bytes(&self) -> usize {
        let pad_max = if self.config.compressed {
            self.page_size() * ZIP_PAD_MAX_PERCENT / 100
        } else {
            0
        };
        (self.page_size() - pad_max) * usize::from(self.config.merge_threshold_percent) / 100
    }

    /// Below this many used bytes, an underfull page that cannot merge with
    /// its sibling takes records from it; between this and
    /// [`BTree::threshold_bytes`] it only merges (InnoDB's `btr_compress`
    /// merges and never redistributes). Redistributing at once rewrote two
    /// pages that the next deletes made underfull again (measured in
    /// docs/design.md, "Split policies").
    pub(crate) fn redistribution_bytes(&self) -> usize {
        self.threshold_bytes() / 2
    }

    /// The largest record (plus its slot share) a page of this kind holds.
    pub(crate) fn record_bytes_max(&self, leaf: bool) -> usize {
        let value = if leaf {
            page::value_inline_bytes_max(self.page_size())
        } else {
            page::CHILD_BYTES
        };
        page::RECORD_HEADER_BYTES + KEY_BYTES_MAX + value + page::SLOT_BYTES
    }

    fn commit<G: PageWrite>(&self, g: &mut G, op: &mut OpContext) -> bool {
        self.commit_with(g, op, false)
    }

    /// [`BTree::commit`] of a change the tree answers another way when it
    /// does not fit ([`PageWrite::try_commit`]).
    fn try_commit<G: PageWrite>(&self, g: &mut G, op: &mut OpContext) -> bool {
        self.commit_with(g, op, true)
    }

    fn commit_with<G: PageWrite>(&self, g: &mut G, op: &mut OpContext, or_split: bool) -> bool {
        // Debug builds check each page's own structure at every commit, so a
        // bad change is caught where it is made, not by a later reader.
        #[cfg(debug_assertions)]
        if matches!(
            page::page_type(g),
            Some(PageType::Leaf | PageType::Internal)
        ) && let Err(e) = page::check_structure(g, g.page_id())
        {
            panic!("commit of a malformed page: {e}");
        }
        let fit = if or_split {
            g.try_commit(op)
        } else {
            g.commit(op)
        };
        let fits = fit == Fit::Fits;
        if self.config.compressed {
            self.zip_pad.note(fits, self.page_size());
        }
        if !fits {
            self.counters
                .compression_failures
                .fetch_add(1, Ordering::Relaxed);
        }
        fits
    }

    /// Whether `image` would fit `g`'s block (always, for an uncompressed
    /// tree); a no counts as a compression failure.
    fn would_fit(&self, g: &S::Exclusive<'_>, image: &[u8], op: &mut OpContext) -> Result<bool> {
        if !self.config.compressed {
            return Ok(true);
        }
        let fits = self.store.would_fit(g, image, op)?;
        self.zip_pad.note(fits, self.page_size());
        if !fits {
            self.counters
                .compression_failures
                .fetch_add(1, Ordering::Relaxed);
        }
        Ok(fits)
    }

    /// Writes and commits every staged image, then frees the pages the
    /// change gave up.
    fn apply<'a>(
        &'a self,
        path: &mut [S::Exclusive<'a>],
        mut change: Change<'a, S>,
        op: &mut OpContext,
    ) -> Result<()> {
        for image in std::mem::take(&mut change.images) {
            let id = image.page_id();
            let g = match path.iter_mut().find(|g| g.page_id() == id) {
                Some(g) => g,
                None => change
                    .held
                    .iter_mut()
                    .find(|g| g.page_id() == id)
                    .ok_or_else(|| unreachable_err(id))?,
            };
            image.write_into(g);
            if !self.commit(g, op) {
                // The store promised this commit would fit (`would_fit`);
                // a store that breaks that promise breaks atomicity too.
                return Err(Error::CompressionUnfit { page_id: id });
            }
        }
        for id in std::mem::take(&mut change.to_free) {
            let g = change.take_held(id).ok_or_else(|| unreachable_err(id))?;
            self.store.free(g, op)?;
        }
        Ok(())
    }

    /// `parent` staged with its separator `old_key` replaced by `new_sep`
    /// (a child whose first key changed: a redistribution or a shift).
    /// `None` if the new separator does not fit; an error if `old_key` is
    /// not there.
    fn with_separator<G: PageWrite>(
        &self,
        parent: &G,
        old_key: &[u8],
        new_sep: &page::RecBuf,
    ) -> Result<Option<Scratch>> {
        let mut image = Scratch::of_guard(parent);
        let pr = page::probe(&image, old_key);
        if pr.found == 0 {
            return Err(Error::Corrupted {
                page_id: parent.page_id(),
                reason: "a child's separator is missing".into(),
            });
        }
        page::remove(&mut image, pr);
        if !page::has_room(&image, new_sep.len(), self.limit_bytes()) {
            return Ok(None);
        }
        let pr = page::probe(&image, &new_sep.key);
        page::insert(&mut image, pr, new_sep.borrowed());
        self.mark_if_sparse(&mut image);
        Ok(Some(image))
    }

    /// Gives up a staged change: nothing was written; the pages it allocated
    /// return to the free list.
    fn abandon<'a>(&'a self, mut change: Change<'a, S>, op: &mut OpContext) -> Result<()> {
        for id in std::mem::take(&mut change.allocated) {
            if let Some(g) = change.take_held(id) {
                self.store.free(g, op)?;
            }
        }
        Ok(())
    }
}
