//! The tree: descent with latch coupling, insert and split, delete and
//! rebalance, overflow values.

mod adaptive;
mod split;

use crate::change::{Change, Scratch};
use crate::error::{Error, Result};
use crate::page::{
    self, FLAG_GROWING, INSERT_WAS_MAX, INSERT_WAS_MIN, KEY_BYTES_MAX, Layout, PageType,
    REC_OVERFLOW, RecBuf, VALUE_BYTES_MAX,
};
use crate::store::{Fit, OpContext, PageStore, PageWrite};
use barracuda_codec::PageId;
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

/// A leaf found for a key ([`Tree::leaf_shared_following`]), latched, with
/// what its parent said about it.
pub(crate) struct FoundLeaf<G> {
    pub(crate) guard: G,
    pub(crate) id: PageId,
    /// Up to the asked number of leaves after it under the same parent.
    pub(crate) following: Vec<PageId>,
    /// The key span its parent gives it.
    pub(crate) span: Option<page::KeySpan>,
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
    compression_failures: AtomicU64,
    /// `Adaptive`'s moving average of the share of its splits that no
    /// insert stream explained, in 1/65536 (see [`Tree::policy_cut`]).
    unexplained_splits: AtomicU64,
    /// `Adaptive`'s moving average of the share of its splits that did not
    /// extend a long run (see [`Tree::policy_cut`]), in 1/65536. It starts
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
pub struct Tree<S: PageStore> {
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

/// An overflow chain (being read or freed) must only reach overflow pages.
fn expect_overflow(p: &[u8], page_id: PageId, doing: &str) -> Result<()> {
    if page::page_type(p) == Some(PageType::Overflow) {
        return Ok(());
    }
    Err(Error::Corrupted {
        page_id,
        reason: format!("{doing} an overflow chain that reaches a non-overflow page"),
    })
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

/// Bytes of records `recs[..cut]` before `cut`, for every cut.
fn prefix_bytes(recs: &[RecBuf]) -> Vec<usize> {
    let mut sums = Vec::with_capacity(recs.len() + 1);
    let mut total = 0;
    sums.push(0);
    for r in recs {
        total += r.len();
        sums.push(total);
    }
    sums
}

/// The cut in 1..n-1 whose left part is closest to `num/den` of the bytes.
fn fraction_cut(recs: &[RecBuf], num: usize, den: usize) -> usize {
    let sums = prefix_bytes(recs);
    let total = sums[recs.len()];
    let target = total * num / den;
    (1..recs.len())
        .min_by_key(|&c| sums[c].abs_diff(target))
        .unwrap_or(1)
}

/// Fixed-point one of `Counters::unexplained_splits`.
const UNEXPLAINED_SCALE: u64 = 1 << 16;
/// The average's weight of a new split: 1/256.
const UNEXPLAINED_SHIFT: u32 = 8;
/// `Adaptive` leaves headroom in the parts it freezes while more than 1 in
/// 100 of its recent splits were unexplained (measured on the pattern
/// family: 1 in 12 switched it off as soon as it worked, and ascending keys
/// with 2% late arrivals fell to 0.84).
const UNEXPLAINED_SPLITS_HEADROOM: u64 = UNEXPLAINED_SCALE / 100;
/// `Adaptive` takes the tree's streams for long (a stream fills pages of
/// its own, so that a cold part it would drag along is better left behind
/// once) while at most 1 in 10 of its recent splits did not extend a long
/// run. (Measured on the pattern family and TPC-C order keys: 1 in 4 put
/// one more family point below the simple policies and lowered the mean;
/// without the rule, each order stream carried a neighbour's first orders
/// to every page it filled, 0.92 of leaf fill instead of 0.95.)
const SHORT_RUN_SPLITS_LONG_STREAMS: u64 = UNEXPLAINED_SCALE / 10;

/// Keys whose leaves [`Tree::prefetch_leaves`] reads ahead before it
/// decides whether the rest are worth the descents.
pub const PREFETCH_SAMPLE_KEYS: usize = 8;

impl<S: PageStore> Tree<S> {
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

    pub(crate) fn threshold_bytes(&self) -> usize {
        self.page_size() * usize::from(self.config.merge_threshold_percent) / 100
    }

    /// Below this many used bytes, an underfull page that cannot merge with
    /// its sibling takes records from it; between this and
    /// [`Tree::threshold_bytes`] it only merges (InnoDB's `btr_compress`
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
        // Debug builds check each page's own structure at every commit, so a
        // bad change is caught where it is made, not by a later reader.
        #[cfg(debug_assertions)]
        if matches!(
            page::page_type(g),
            Some(PageType::Leaf | PageType::Internal)
        ) && let Err(e) = crate::check::check_structure(g, g.page_id())
        {
            panic!("commit of a malformed page: {e}");
        }
        let fits = g.commit(op) == Fit::Fits;
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

    // ---------------------------------------------------------------- descent

    /// Descends toward `key` from the root by latch coupling, every page
    /// fixed by `fix` (shared, or as a point read's: see
    /// [`PageStore::fix_shared_point`]), and returns the first page at
    /// `level` or below (0: the leaf) with its id. Every descent of a key
    /// goes through here.
    fn descend<'a>(
        &'a self,
        key: &[u8],
        level: u8,
        fix: impl Fn(PageId) -> Result<S::Shared<'a>>,
    ) -> Result<(S::Shared<'a>, PageId)> {
        let mut g = fix(self.root)?;
        let mut id = self.root;
        loop {
            expect_node(&g, id)?;
            if page::is_leaf(&g) || page::level(&g) <= level {
                return Ok((g, id));
            }
            id = page::child_for(&g, key).1;
            g = fix(id)?;
        }
    }

    /// The leaf covering `key`, latched shared, by latch coupling.
    pub(crate) fn leaf_shared(&self, key: &[u8]) -> Result<(S::Shared<'_>, PageId)> {
        self.descend(key, 0, |id| self.store.fix_shared(id))
    }

    /// Starts reading the leaves that `keys` fall in, asynchronously (a
    /// batch about to change them): the descents fix internal pages as
    /// usual, and the leaves go to [`PageStore::prefetch`], so a batch of
    /// random writes to data larger than the cache waits for its leaves'
    /// reads together instead of one after another. The leaves of the first
    /// [`PREFETCH_SAMPLE_KEYS`] keys go first: if all of them are cached,
    /// the rest most likely are too, and their descents would cost more
    /// than they save. A hint: an unreadable internal page ends it silently
    /// (the write that follows reports the error), and it never waits for
    /// a leaf. Returns how many reads it started.
    pub fn prefetch_leaves<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) -> usize {
        let mut keys = keys.into_iter();
        let sample = self.leaf_ids_for(keys.by_ref().take(PREFETCH_SAMPLE_KEYS));
        let started = self.store.prefetch(&sample);
        if started == 0 {
            return 0;
        }
        started + self.store.prefetch(&self.leaf_ids_for(keys))
    }

    /// The distinct leaves `keys` fall in (see [`Tree::leaf_id_for`]),
    /// sorted; as many as were found before an error.
    fn leaf_ids_for<'k>(&self, keys: impl Iterator<Item = &'k [u8]>) -> Vec<PageId> {
        let mut leaves = Vec::new();
        for key in keys {
            match self.leaf_id_for(key) {
                Ok(Some(leaf)) => leaves.push(leaf),
                // The root is the only leaf, and it is cached.
                Ok(None) | Err(_) => break,
            }
        }
        leaves.sort_unstable();
        leaves.dedup();
        leaves
    }

    /// The id of the leaf `key` falls in, read from its parent without
    /// fixing the leaf; `None` when the root is a leaf.
    fn leaf_id_for(&self, key: &[u8]) -> Result<Option<PageId>> {
        let (parent, _) = self.descend(key, 1, |id| self.store.fix_shared(id))?;
        Ok((!page::is_leaf(&parent)).then(|| page::child_for(&parent, key).1))
    }

    /// [`Tree::leaf_shared`] for a point read: every page is fixed with
    /// [`PageStore::fix_shared_point`].
    fn leaf_shared_point(&self, key: &[u8]) -> Result<(S::Shared<'_>, Option<page::KeySpan>)> {
        let found = self.leaf_found(key, 0, |id| self.store.fix_shared_point(id))?;
        Ok((found.guard, found.span))
    }

    /// Like [`Tree::leaf_shared`], and also the ids of up to `max` leaves
    /// after it under the same parent (empty when the root is the leaf) and
    /// the key span the parent gives the leaf (for [`page::probe_in`]).
    pub(crate) fn leaf_shared_following(
        &self,
        key: &[u8],
        max: usize,
    ) -> Result<FoundLeaf<S::Shared<'_>>> {
        self.leaf_found(key, max, |id| self.store.fix_shared(id))
    }

    /// [`Tree::leaf_shared_following`], every page fixed with `fix`.
    fn leaf_found<'a>(
        &'a self,
        key: &[u8],
        max: usize,
        fix: impl Fn(PageId) -> Result<S::Shared<'a>>,
    ) -> Result<FoundLeaf<S::Shared<'a>>> {
        let (parent, parent_id) = self.descend(key, 1, &fix)?;
        if page::is_leaf(&parent) {
            return Ok(FoundLeaf {
                guard: parent,
                id: parent_id,
                following: Vec::new(),
                span: None,
            });
        }
        let (off, id) = page::child_for(&parent, key);
        let span = page::KeySpan::of_child(&parent, off);
        let following = page::records(&parent)
            .skip_while(|&o| o != off)
            .skip(1)
            .take(max)
            .map(|o| page::rec_child(&parent, o))
            .collect();
        // Fixed while the parent is still latched (latch coupling).
        let leaf = fix(id)?;
        expect_node(&leaf, id)?;
        if !page::is_leaf(&leaf) {
            return Err(Error::Corrupted {
                page_id: id,
                reason: "a child of a level-1 page is not a leaf".into(),
            });
        }
        drop(parent);
        Ok(FoundLeaf {
            guard: leaf,
            id,
            following,
            span,
        })
    }

    /// The leftmost or rightmost leaf, latched shared.
    pub(crate) fn edge_leaf_shared(&self, rightmost: bool) -> Result<(S::Shared<'_>, PageId)> {
        let mut g = self.store.fix_shared(self.root)?;
        let mut id = self.root;
        loop {
            expect_node(&g, id)?;
            if page::is_leaf(&g) {
                return Ok((g, id));
            }
            let off = if rightmost {
                page::records(&g).last()
            } else {
                page::records(&g).next()
            };
            let off = off.ok_or_else(|| Error::Corrupted {
                page_id: id,
                reason: "internal page without records".into(),
            })?;
            id = page::rec_child(&g, off);
            let child = self.store.fix_shared(id)?;
            g = child;
        }
    }

    /// The leaf covering `key`, latched exclusively, with shared latches on
    /// the way down (the optimistic path), and what the parent said of it
    /// when the descent passed (hints: the parent is no longer latched).
    fn leaf_exclusive(&self, key: &[u8]) -> Result<(S::Exclusive<'_>, LeafHint)> {
        loop {
            let mut g = self.store.fix_shared(self.root)?;
            let mut id = self.root;
            expect_node(&g, id)?;
            if page::is_leaf(&g) {
                drop(g);
                let x = self.store.fix_exclusive(self.root)?;
                if page::is_leaf(&x) {
                    return Ok((x, LeafHint::default()));
                }
                // The root split while unlatched: descend again.
                continue;
            }
            loop {
                let (off, child) = page::child_for(&g, key);
                if page::level(&g) == 1 {
                    let hint = LeafHint {
                        right_in_parent: page::rec_next(&g, off) != 0,
                        span: page::KeySpan::of_child(&g, off),
                    };
                    let x = self.store.fix_exclusive(child)?;
                    expect_node(&x, child)?;
                    return Ok((x, hint));
                }
                id = child;
                let next = self.store.fix_shared(id)?;
                g = next;
                expect_node(&g, id)?;
            }
        }
    }

    /// The path to the leaf covering `key`, latched exclusively top-down;
    /// ancestors are released as soon as a child is `safe` (unless
    /// `keep_all`). The first element is the root or the parent of the
    /// highest page a structure change may reach.
    fn path_exclusive(
        &self,
        key: &[u8],
        keep_all: bool,
        safe: impl Fn(&[u8]) -> bool,
    ) -> Result<Vec<S::Exclusive<'_>>> {
        let mut path = vec![self.store.fix_exclusive(self.root)?];
        loop {
            let top = &path[path.len() - 1];
            expect_node(top, top.page_id())?;
            if page::is_leaf(top) {
                return Ok(path);
            }
            let child = page::child_for(top, key).1;
            let g = self.store.fix_exclusive(child)?;
            if !keep_all && safe(&g) {
                path.clear();
            }
            path.push(g);
        }
    }

    fn safe_for_insert(&self, p: &[u8], leaf_record_bytes: usize) -> bool {
        let need = if page::is_leaf(p) {
            leaf_record_bytes
        } else {
            self.record_bytes_max(false)
        };
        page::has_room(p, need, self.limit_bytes())
    }

    fn safe_for_delete(&self, p: &[u8]) -> bool {
        page::used_bytes(p) >= self.threshold_bytes() + self.record_bytes_max(page::is_leaf(p))
    }

    // ------------------------------------------------------------------ reads

    /// The value stored under `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut value = Vec::new();
        Ok(self.get_into(key, &mut value)?.then_some(value))
    }

    /// [`Tree::get`] into `out` (cleared first): true if `key` is present.
    /// A caller that reuses one buffer allocates nothing per get.
    pub fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        check_key(key)?;
        out.clear();
        let (leaf, span) = self.leaf_shared_point(key)?;
        let pr = page::probe_in(&leaf, key, span.as_ref());
        if pr.found == 0 {
            return Ok(false);
        }
        self.load_value_into(&leaf, pr.found, out)?;
        Ok(true)
    }

    /// The length of `key`'s value, if present, without reading it: an
    /// overflowed value's length is in its record. A caller sizing a
    /// write that replaces or removes the value asks this first.
    pub fn value_len(&self, key: &[u8]) -> Result<Option<usize>> {
        check_key(key)?;
        let (leaf, span) = self.leaf_shared_point(key)?;
        let pr = page::probe_in(&leaf, key, span.as_ref());
        if pr.found == 0 {
            return Ok(None);
        }
        let stored = page::rec_value(&leaf, pr.found);
        if page::rec_flags(&leaf, pr.found) & REC_OVERFLOW == 0 {
            return Ok(Some(stored.len()));
        }
        Ok(Some(decode_overflow_ref(stored).1))
    }

    /// Reads the value of the record at `off`, following an overflow chain
    /// (while the caller keeps the leaf latched, so the chain cannot be freed).
    pub(crate) fn load_value(&self, p: &[u8], off: usize) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.load_value_into(p, off, &mut out)?;
        Ok(out)
    }

    /// [`Tree::load_value`] appended to `out`.
    pub(crate) fn load_value_into(&self, p: &[u8], off: usize, out: &mut Vec<u8>) -> Result<()> {
        let stored = page::rec_value(p, off);
        if page::rec_flags(p, off) & REC_OVERFLOW == 0 {
            out.extend_from_slice(stored);
            return Ok(());
        }
        let (first, total) = decode_overflow_ref(stored);
        out.reserve(total);
        let start = out.len();
        let mut next = Some(first);
        while let Some(id) = next {
            let g = self.store.fix_shared(id)?;
            expect_overflow(&g, id, "reading")?;
            out.extend_from_slice(page::overflow_payload(&g));
            next = page::right(&g);
            if out.len() - start > total {
                break;
            }
        }
        if out.len() - start != total {
            return Err(Error::Corrupted {
                page_id: first,
                reason: format!(
                    "overflow chain holds {} of {total} bytes",
                    out.len() - start
                ),
            });
        }
        Ok(())
    }

    // ---------------------------------------------------------------- values

    /// The record value to store for `value`: itself if it is short enough
    /// to be inline and `inline` allows it, else a reference to a new
    /// overflow chain holding it.
    fn encode_value<'v>(
        &self,
        op: &mut OpContext,
        value: &'v [u8],
        inline: bool,
    ) -> Result<(u8, std::borrow::Cow<'v, [u8]>)> {
        if inline && value.len() <= page::value_inline_bytes_max(self.page_size()) {
            return Ok((0, std::borrow::Cow::Borrowed(value)));
        }
        let mut first = None;
        if let Err(e) = self.write_chain(op, value, &mut first) {
            if let Some(id) = first {
                // The first error is the one to report; a chain that cannot
                // be freed stays allocated.
                let _ = self.free_chain(op, id);
            }
            return Err(e);
        }
        let first = first.ok_or_else(|| unreachable_err(self.root))?;
        let mut stored = first.0.to_le_bytes().to_vec();
        stored.extend_from_slice(&(value.len() as u64).to_le_bytes());
        Ok((REC_OVERFLOW, std::borrow::Cow::Owned(stored)))
    }

    /// Writes `value` into a new overflow chain, from its end, so that each
    /// page is written once, its next link already known; `first` is the
    /// chain written so far.
    ///
    /// A page takes as much of the value as its block holds: a full page
    /// body if it compresses into the block, else the largest chunk found
    /// by asking the store ([`PageStore::would_fit`], which changes
    /// nothing) for halves and then a binary search, to within 1/128. The
    /// next pages try the chunk that fitted first, as a value's bytes tend
    /// to compress alike, so the search runs about once per value. Random
    /// bytes so fill about a block per page rather than half of one
    /// (halving alone lands anywhere between half and all of the block's
    /// room), which halves their pages, log and pool use.
    fn write_chain(
        &self,
        op: &mut OpContext,
        value: &[u8],
        first: &mut Option<PageId>,
    ) -> Result<()> {
        let page_size = self.page_size();
        let chunk_max = page::overflow_payload_bytes_max(page_size);
        // Smallest chunk tried when a page will not compress into its block.
        const CHUNK_BYTES_MIN: usize = 64;
        let mut hint = chunk_max;
        let mut end = value.len();
        while end > 0 {
            let mut g = self.store.allocate(op)?;
            let next = *first;
            let chunk = |take: usize| &value[end - take..end];
            let mut take = hint.min(end);
            // Most pages fit at the first try (a compressible value at a
            // full page, the rest of a random one at the chunk that
            // fitted): one compression, in the commit itself.
            page::write_overflow(&mut g, chunk(take), next);
            if self.commit(&mut g, op) {
                *first = Some(g.page_id());
                end -= take;
                continue;
            }
            if self.config.compressed {
                let fits = |take: usize, g: &S::Exclusive<'_>, op: &mut OpContext| {
                    let image = page::overflow_image(page_size, chunk(take), next);
                    self.store.would_fit(g, &image, op)
                };
                let mut failed = take;
                loop {
                    if take <= CHUNK_BYTES_MIN {
                        let page_id = g.page_id();
                        self.store.free(g, op)?;
                        return Err(Error::CompressionUnfit { page_id });
                    }
                    take /= 2;
                    if fits(take, &g, op)? {
                        break;
                    }
                    failed = take;
                }
                while failed - take > (failed / 128).max(8) {
                    let mid = take + (failed - take) / 2;
                    if fits(mid, &g, op)? {
                        take = mid;
                    } else {
                        failed = mid;
                    }
                }
                hint = take;
            }
            // `would_fit` is conservative, so this commit fits; should a
            // store still refuse it, smaller chunks are tried as before.
            loop {
                page::write_overflow(&mut g, chunk(take), next);
                if self.commit(&mut g, op) {
                    break;
                }
                if take <= CHUNK_BYTES_MIN {
                    let page_id = g.page_id();
                    self.store.free(g, op)?;
                    return Err(Error::CompressionUnfit { page_id });
                }
                take /= 2;
                hint = take;
            }
            *first = Some(g.page_id());
            end -= take;
        }
        Ok(())
    }

    /// Frees the overflow chain of a record that was removed or replaced.
    fn free_value(&self, op: &mut OpContext, rec: &RecBuf) -> Result<()> {
        let chain = (rec.flags & REC_OVERFLOW != 0).then(|| decode_overflow_ref(&rec.value).0);
        self.free_chain_of(op, chain)
    }

    /// Frees the chain [`overflow_chain`] found, if any.
    fn free_chain_of(&self, op: &mut OpContext, chain: Option<PageId>) -> Result<()> {
        match chain {
            Some(first) => self.free_chain(op, first),
            None => Ok(()),
        }
    }

    /// Frees an overflow chain from its first page.
    fn free_chain(&self, op: &mut OpContext, first: PageId) -> Result<()> {
        let mut next = Some(first);
        while let Some(id) = next {
            let g = self.store.fix_exclusive(id)?;
            expect_overflow(&g, id, "freeing")?;
            next = page::right(&g);
            self.store.free(g, op)?;
        }
        Ok(())
    }

    // ---------------------------------------------------------------- count

    /// The number of entries: the count the store keeps, changed by every
    /// insert of a new key and every delete of a present one in the same
    /// operation, so reading it costs one shared latch of the store's meta
    /// page. A store that keeps no count yet (a file written before counts
    /// were kept) is counted leaf by leaf instead, until
    /// [`Tree::recount_in`] stores the count.
    ///
    /// Under concurrent writers the count may lag an operation that has
    /// changed its leaf but not yet the count.
    pub fn len(&self) -> Result<u64> {
        match self.store.entry_count()? {
            Some(count) => Ok(count),
            None => self.count_entries(),
        }
    }

    /// Whether the tree holds no entry ([`Tree::len`] is 0).
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Counts the leaves' entries and stores the count in the store within
    /// `op`: the upgrade of a store that kept none. Expects no concurrent
    /// writer. Returns the count.
    pub fn recount_in(&self, op: &mut OpContext) -> Result<u64> {
        let count = self.count_entries()?;
        self.store.set_entry_count(count, op)?;
        Ok(count)
    }

    /// The entries in the leaves, following the right links from the
    /// leftmost leaf with latch coupling (reads every leaf).
    pub(crate) fn count_entries(&self) -> Result<u64> {
        let (mut g, mut id) = self.edge_leaf_shared(false)?;
        let mut count = 0u64;
        loop {
            if !page::is_leaf(&g) {
                return Err(Error::Corrupted {
                    page_id: id,
                    reason: "a leaf's right link leads to a non-leaf".into(),
                });
            }
            count += page::record_count(&g) as u64;
            let Some(next) = page::right(&g) else {
                return Ok(count);
            };
            let right = self.store.fix_shared(next)?;
            (g, id) = (right, next);
        }
    }

    // ---------------------------------------------------------------- insert

    /// Inserts or replaces `key`; true if it replaced a value.
    pub fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        let mut op = OpContext::new();
        let result = self.insert_in(&mut op, key, value);
        let settled = self.settle_entry_count(&mut op);
        self.store.finish_op(op);
        let existed = result?;
        settled?;
        Ok(existed)
    }

    /// Adds the entries `op`'s inserts and deletes counted
    /// ([`OpContext::entry_delta`]) to the store's kept count, within `op`.
    /// A caller of the `_in` operations calls this once before logging
    /// `op`; [`Tree::insert`] and [`Tree::delete`] do it themselves. Takes
    /// the meta page's latch: call it with no latch of this tree held.
    pub fn settle_entry_count(&self, op: &mut OpContext) -> Result<()> {
        let delta = std::mem::take(&mut op.entry_delta);
        if delta == 0 {
            return Ok(());
        }
        self.store.add_entry_count(delta, op)
    }

    /// [`Tree::insert`] within the caller's operation context (for a caller
    /// that logs several tree operations as one group).
    pub fn insert_in(&self, op: &mut OpContext, key: &[u8], value: &[u8]) -> Result<bool> {
        check_key(key)?;
        check_value(value)?;
        match self.insert_encoded(op, key, value, true) {
            // A record whose value does not compress may not fit a block
            // even alone (a value of up to an eighth of the page, in a block
            // of less than that), nor with any neighbours: with its value in
            // overflow pages, which hold any bytes, the record keeps only
            // the key and a reference. The failed try changed no contents.
            Err(Error::CompressionUnfit { .. })
                if self.config.compressed && value.len() > page::OVERFLOW_REF_BYTES =>
            {
                self.insert_encoded(op, key, value, false)
            }
            result => result,
        }
    }

    /// [`Tree::insert_in`] of a checked key and value, inline if `inline`
    /// allows it ([`Tree::encode_value`]).
    fn insert_encoded(
        &self,
        op: &mut OpContext,
        key: &[u8],
        value: &[u8],
        inline: bool,
    ) -> Result<bool> {
        let (flags, stored) = self.encode_value(op, value, inline)?;
        let rec = page::RecRef {
            key,
            flags,
            value: &stored,
        };
        let chain = (flags & REC_OVERFLOW != 0).then(|| decode_overflow_ref(rec.value).0);
        let result = self.upsert(op, rec);
        match (result, chain) {
            (Err(e), Some(first)) => {
                // Nothing of the insert was committed but its new overflow
                // chain: give it back. (The first error is the one to
                // report.)
                let _ = self.free_chain(op, first);
                Err(e)
            }
            (Err(e), None) => Err(e),
            (Ok(true), _) => Ok(true),
            (Ok(false), _) => {
                // A new key: counted in the same operation, when it settles
                // (`settle_entry_count`, after every tree latch was
                // released: the meta page comes last).
                op.entry_delta += 1;
                Ok(false)
            }
        }
    }

    /// Inserts or replaces `rec`: optimistically in its leaf, else on an
    /// exclusively latched path, splitting as needed.
    fn upsert(&self, op: &mut OpContext, rec: page::RecRef<'_>) -> Result<bool> {
        let key = rec.key;
        {
            let (mut leaf, hint) = self.leaf_exclusive(key)?;
            let span = hint.span.as_ref();
            if let LeafOutcome::Done(existed) = self.leaf_upsert(&mut leaf, op, rec, span)? {
                return Ok(existed);
            }
        }
        let len = rec.len();
        for _ in 0..RETRIES_MAX {
            let mut path = self.path_exclusive(key, self.config.compressed, |p| {
                self.safe_for_insert(p, len)
            })?;
            match self.insert_on_path(&mut path, op, rec.to_buf())? {
                Attempt::Done(existed) => return Ok(existed),
                Attempt::SplitFirst(first) => {
                    drop(path);
                    self.split_alone(op, first)?;
                }
            }
        }
        Err(Error::CompressionUnfit { page_id: self.root })
    }

    /// Inserts or replaces `rec` in `leaf` if it fits, finding its place
    /// from `span` (the leaf's key range as its parent gave it, if known).
    fn leaf_upsert<G: PageWrite>(
        &self,
        leaf: &mut G,
        op: &mut OpContext,
        rec: page::RecRef<'_>,
        span: Option<&page::KeySpan>,
    ) -> Result<LeafOutcome> {
        let pr = page::probe_in(leaf, rec.key, span);
        // The replaced record: its length, its value's, and its chain.
        let old = (pr.found != 0).then(|| {
            (
                page::rec_len(leaf, pr.found),
                page::rec_value(leaf, pr.found).len(),
                overflow_chain(leaf, pr.found),
            )
        });
        let limit = self.limit_bytes();
        match old {
            Some((_, value_len, _)) if value_len == rec.value.len() => {
                page::overwrite_value(leaf, pr.found, rec.flags, rec.value);
            }
            Some((old_len, _, _)) => {
                if page::used_bytes(leaf) - old_len + rec.len() + 2 * page::SLOT_BYTES > limit {
                    return Ok(LeafOutcome::Full);
                }
                page::remove(leaf, pr);
                let pr = page::probe_in(leaf, rec.key, span);
                page::insert(leaf, pr, rec);
            }
            None => {
                if !page::has_room(leaf, rec.len(), limit) {
                    return Ok(LeafOutcome::Full);
                }
                page::insert_logged(leaf, pr, rec);
            }
        }
        self.mark_if_sparse(leaf);
        if !self.commit(leaf, op) {
            return Ok(LeafOutcome::Unfit);
        }
        if let Some((_, _, chain)) = old {
            self.free_chain_of(op, chain)?;
        }
        Ok(LeafOutcome::Done(old.is_some()))
    }

    /// A value that shrank in place can leave a page below the merge
    /// threshold without a delete: mark it so the next delete rebalances it.
    fn mark_if_sparse<G: PageWrite>(&self, g: &mut G) {
        if g.page_id() != self.root
            && page::used_bytes(g) < self.threshold_bytes()
            && page::flags(g) & FLAG_GROWING == 0
        {
            let f = page::flags(g) | FLAG_GROWING;
            page::set_flags(g, f);
        }
    }

    fn insert_on_path<'a>(
        &'a self,
        path: &mut [S::Exclusive<'a>],
        op: &mut OpContext,
        rec: RecBuf,
    ) -> Result<Attempt> {
        let last = path.len() - 1;
        let cause = match self.leaf_upsert(&mut path[last], op, rec.borrowed(), None)? {
            LeafOutcome::Done(existed) => return Ok(Attempt::Done(existed)),
            LeafOutcome::Full => None,
            LeafOutcome::Unfit => Some(SplitKind::CompressionFailure),
        };
        let leaf = &path[last];
        let mut recs = page::read_all(leaf);
        let old = match recs.binary_search_by(|r| r.key.as_slice().cmp(&rec.key)) {
            Ok(i) => Some(recs.remove(i)),
            Err(_) => None,
        };
        let new_idx = recs.partition_point(|r| r.key < rec.key);
        recs.insert(new_idx, rec);
        let job = Overfull {
            recs,
            new_idx: Some(new_idx),
            cause,
        };
        if let Some(first) = self.split_up(path, last, job, op)? {
            return Ok(Attempt::SplitFirst(first));
        }
        if let Some(o) = &old {
            self.free_value(op, o)?;
        }
        Ok(Attempt::Done(old.is_some()))
    }

    /// Candidate cuts for splitting `recs` (the page's records plus the new
    /// one at `new_idx`, if the split makes room for one), best first, and
    /// the kind of the first. The split policy has no say when `op` asks
    /// for half splits ([`OpContext::half_splits`]).
    fn cuts(
        &self,
        p: &[u8],
        recs: &[RecBuf],
        new_idx: Option<usize>,
        op: &OpContext,
    ) -> (Vec<usize>, SplitKind) {
        let n = recs.len();
        let limit = self.limit_bytes();
        let fits = |c: usize| {
            (1..n).contains(&c)
                && page::image_bytes(&recs[..c]) <= limit
                && page::image_bytes(&recs[c..]) <= limit
        };
        let policy_cut = new_idx
            .filter(|_| !op.half_splits)
            .and_then(|new_idx| self.policy_cut(p, recs, new_idx));
        let mid = fraction_cut(recs, 1, 2);
        let mut out = Vec::new();
        let mut kind = SplitKind::Half;
        if let Some(c) = policy_cut.filter(|&c| fits(c)) {
            out.push(c);
            kind = SplitKind::Sequential;
        }
        out.push(mid);
        // Last resorts when padding squeezes the limit: any cut that fits.
        out.extend((1..n).filter(|&c| c != mid && fits(c)).take(2));
        (out, kind)
    }

    /// The cut the split policy asks for, if the insert is sequential.
    fn policy_cut(&self, p: &[u8], recs: &[RecBuf], new_idx: usize) -> Option<usize> {
        let n = recs.len();
        match self.config.policy {
            SplitPolicy::Half => None,
            SplitPolicy::InnoDb => {
                let f = page::insert_flags(p);
                if new_idx == n - 1 && f & INSERT_WAS_MAX != 0 {
                    Some(fraction_cut(recs, 15, 16).min(n - 1))
                } else if new_idx == 0 && f & INSERT_WAS_MIN != 0 {
                    Some(fraction_cut(recs, 1, 16).max(1))
                } else {
                    None
                }
            }
            SplitPolicy::InnoDbLastInsert => match last_insert_index(p, recs) {
                Some(l) if l + 1 == new_idx => {
                    // Keep one record after the new one on the left, for
                    // the next insert (InnoDB's comment), if there is one
                    // more after it; else the new record starts the right.
                    Some(if new_idx + 2 < n {
                        new_idx + 2
                    } else {
                        new_idx
                    })
                }
                Some(l) if new_idx + 1 == l => Some(new_idx + 1),
                _ => None,
            },
            SplitPolicy::Adaptive => {
                let sums = prefix_bytes(recs);
                // Two moving averages over the tree's recent splits steer
                // the cut. They are updated without a lock: a lost update
                // under concurrent splits only delays them.
                let unexplained = &self.counters.unexplained_splits;
                let short_runs = &self.counters.short_run_splits;
                let unexplained_score = unexplained.load(Ordering::Relaxed);
                let short_run_score = short_runs.load(Ordering::Relaxed);
                let trends = adaptive::Trends {
                    // Headroom once splits that no stream explains are
                    // common (late arrivals into pages a stream left
                    // behind).
                    headroom: unexplained_score >= UNEXPLAINED_SPLITS_HEADROOM,
                    // Streams are long once nearly every split extends a
                    // run that fills half of its page or more.
                    long_streams: short_run_score <= SHORT_RUN_SPLITS_LONG_STREAMS,
                };
                let outcome =
                    adaptive::cut(recs, new_idx, last_insert_index(p, recs), &sums, trends);
                let average = |avg: &AtomicU64, score: u64, hit: bool| {
                    let target = if hit { UNEXPLAINED_SCALE } else { 0 };
                    avg.store(
                        score - (score >> UNEXPLAINED_SHIFT) + (target >> UNEXPLAINED_SHIFT),
                        Ordering::Relaxed,
                    );
                };
                average(unexplained, unexplained_score, !outcome.explained);
                average(short_runs, short_run_score, !outcome.long_run);
                outcome.cut
            }
        }
    }

    fn part_layout(&self, p: &[u8], part: &[RecBuf], new_in_part: Option<usize>) -> Layout {
        let mut layout = page::layout_of(p);
        layout.flags = if page::image_bytes(part) < self.threshold_bytes() {
            FLAG_GROWING
        } else {
            0
        };
        layout.last_insert = new_in_part;
        layout.insert_flags = match new_in_part {
            Some(i) => {
                let mut f = 0;
                if i + 1 == part.len() {
                    f |= INSERT_WAS_MAX;
                }
                if i == 0 {
                    f |= INSERT_WAS_MIN;
                }
                f
            }
            None => 0,
        };
        layout
    }

    /// Splits `path[i]`, whose new contents do not fit it, and carries the
    /// separators up as far as needed. Every page is staged and checked
    /// first: if some page does not fit, nothing is written, the pages
    /// allocated for the split are freed, and the error names `path[i]`;
    /// or, if only a full leaf this path does not reach stands in the way,
    /// nothing is written and a key of that leaf is returned: split it on
    /// its own ([`Tree::split_alone`]) and try again.
    fn split_up<'a>(
        &'a self,
        path: &mut [S::Exclusive<'a>],
        i: usize,
        job: Overfull,
        op: &mut OpContext,
    ) -> Result<Option<Vec<u8>>> {
        let page_id = path[i].page_id();
        let mut change = Change::new();
        match self.stage_splits(path, i, job, &mut change, op) {
            Ok(Some(kinds)) => {
                self.apply(path, change, op)?;
                for (kind, root) in kinds {
                    self.count_split(kind);
                    if root {
                        self.counters.split_root.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok(None)
            }
            Ok(None) => {
                let first = change.split_first.take();
                self.abandon(change, op)?;
                match first {
                    Some(key) => Ok(Some(key)),
                    None => Err(Error::CompressionUnfit { page_id }),
                }
            }
            Err(e) => {
                // The first error is the one to report; pages the abandoned
                // split could not free stay allocated.
                let _ = self.abandon(change, op);
                Err(e)
            }
        }
    }

    /// Stages the split of `path[j]` and of every ancestor the separators
    /// do not fit; the kinds of the splits (and whether each was the
    /// root's), or `None` if some split cannot be made to fit.
    fn stage_splits<'a>(
        &'a self,
        path: &[S::Exclusive<'a>],
        mut j: usize,
        mut job: Overfull,
        change: &mut Change<'a, S>,
        op: &mut OpContext,
    ) -> Result<Option<Vec<(SplitKind, bool)>>> {
        let mut kinds = Vec::new();
        // A separator an ancestor owes a right sibling that gave records.
        let mut rebound: Option<Rebound> = None;
        loop {
            if self.stage_compacted(&path[j], &job, change, op)? {
                // No split at this level, so no separators for the parent;
                // only a separator owed higher up is left to stage.
                let Some(rb) = &rebound else {
                    return Ok(Some(kinds));
                };
                j = rb.at;
                match self.stage_edits(&path[j], &[], rebound.as_ref(), change, op)? {
                    Edited::Staged => return Ok(Some(kinds)),
                    Edited::Split(next) => {
                        rebound = None;
                        job = next;
                        continue;
                    }
                }
            }
            if job.recs.len() < 2 {
                return Ok(None);
            }
            if path[j].page_id() == self.root {
                let Some(kind) = self.stage_root_split(&path[j], &job, change, op)? else {
                    return Ok(None);
                };
                kinds.push((kind, true));
                return Ok(Some(kinds));
            }
            if j == 0 {
                // Only a page judged safe is latched without its parent, and
                // a safe page does not split (unless the store is compressed
                // while the tree is not configured so).
                return Ok(None);
            }
            let Some(split) = self.stage_split(path, j, &job, change, op)? else {
                return Ok(None);
            };
            kinds.push((split.kind, false));
            if split.rebound.is_some() {
                rebound = split.rebound;
            }
            j -= 1;
            let mut seps = split.seps;
            // Hand the separators to the parent, and the rebound to the
            // ancestor that holds it, in place while they fit.
            loop {
                let owed = rebound.as_ref().filter(|rb| rb.at == j);
                let edited = self.stage_edits(&path[j], &seps, owed, change, op)?;
                if owed.is_some() {
                    rebound = None;
                }
                match (edited, &rebound) {
                    (Edited::Staged, None) => return Ok(Some(kinds)),
                    (Edited::Staged, Some(rb)) => {
                        j = rb.at;
                        seps = Vec::new();
                    }
                    (Edited::Split(next), _) => {
                        job = next;
                        break;
                    }
                }
            }
        }
    }

    /// Stages `g` rebuilt from the job's records if the job is a page that
    /// did not fit its block (`SplitKind::CompressionFailure`) and the
    /// rebuilt image does: true if it did. A page's heap keeps the bytes of
    /// removed and replaced records until it is compacted, and those bytes
    /// are compressed with it; random values replaced in place fill a page
    /// with such garbage until the page no longer compresses into its block
    /// although its live records would. Rebuilding drops the garbage, as
    /// InnoDB reorganizes a page before it splits it; a page of one record
    /// has no other way to fit.
    fn stage_compacted<'a>(
        &'a self,
        g: &S::Exclusive<'a>,
        job: &Overfull,
        change: &mut Change<'a, S>,
        op: &mut OpContext,
    ) -> Result<bool> {
        if job.cause != Some(SplitKind::CompressionFailure)
            || job.recs.is_empty()
            || page::image_bytes(&job.recs) > self.limit_bytes()
        {
            return Ok(false);
        }
        let layout = self.part_layout(g, &job.recs, job.new_idx);
        let image = Scratch::rebuilt(g, &layout, &job.recs, page::HeapOrder::Kept);
        if !self.would_fit(g, &image, op)? {
            return Ok(false);
        }
        change.stage(image);
        Ok(true)
    }

    /// Stages `seps` (and the rebound `owed`, if any) into `g` in place;
    /// if they do not fit, the split job `g` becomes instead.
    fn stage_edits<'a>(
        &'a self,
        g: &S::Exclusive<'a>,
        seps: &[RecBuf],
        owed: Option<&Rebound>,
        change: &mut Change<'a, S>,
        op: &mut OpContext,
    ) -> Result<Edited> {
        let limit = self.limit_bytes();
        let mut image = Scratch::of_guard(g);
        let mut room = true;
        if let Some(rb) = owed {
            let off = page::records(&image)
                .find(|&o| page::rec_child(&image, o) == rb.child)
                .ok_or_else(|| unreachable_err(rb.child))?;
            let pr = page::probe(&image, page::rec_key(&image, off));
            page::remove(&mut image, pr);
            let rec = RecBuf::child(rb.key.clone(), rb.child);
            room = page::has_room(&image, rec.len(), limit);
            if room {
                let pr = page::probe(&image, &rec.key);
                page::insert(&mut image, pr, rec.borrowed());
            }
        }
        for sep in seps {
            room = room && page::has_room(&image, sep.len(), limit);
            if room {
                let pr = page::probe(&image, &sep.key);
                debug_assert_eq!(pr.found, 0, "separator already in parent");
                page::insert(&mut image, pr, sep.borrowed());
            }
        }
        let mut cause = None;
        if room {
            if self.would_fit(g, &image, op)? {
                change.stage(image);
                return Ok(Edited::Staged);
            }
            cause = Some(SplitKind::CompressionFailure);
        }
        let mut recs = page::read_all(g);
        if let Some(rb) = owed
            && let Some(r) = recs
                .iter_mut()
                .skip(1)
                .find(|r| r.value == rb.child.0.to_le_bytes())
        {
            r.key.clone_from(&rb.key);
        }
        let mut new_idx = None;
        for sep in seps {
            let at = 1 + recs[1..].partition_point(|r| r.key < sep.key);
            recs.insert(at, sep.clone());
            new_idx = Some(at);
        }
        Ok(Edited::Split(Overfull {
            recs,
            new_idx,
            cause,
        }))
    }

    /// Stages the split of the non-root leaf or internal page `path[j]`:
    /// into itself and a new right sibling at a cut of the split policy if
    /// one fits, else into as many pages as it needs (see [`split`]). A
    /// leaf whose right sibling cannot take its new left link packs that
    /// sibling's records too if it is under the same parent, else sets
    /// `change.split_first` to have it split on its own first. `None` if
    /// nothing fits.
    fn stage_split<'a>(
        &'a self,
        path: &[S::Exclusive<'a>],
        j: usize,
        job: &Overfull,
        change: &mut Change<'a, S>,
        op: &mut OpContext,
    ) -> Result<Option<Split>> {
        let old = &path[j];
        let leaf = page::is_leaf(old);
        let n = self.store.allocate(op)?;
        let n_id = n.page_id();
        change.allocated.push(n_id);
        change.held.push(n);
        let mut spare = vec![n_id];
        let rr = if leaf { page::right(old) } else { None };
        let mut rr_takes_link = true;
        if let Some(rr) = rr {
            // Left to right: the new page, then the old right sibling.
            let g = self.store.fix_exclusive(rr)?;
            let mut image = Scratch::of_guard(&g);
            page::set_left(&mut image, Some(n_id));
            rr_takes_link = self.would_fit(&g, &image, op)?;
            change.held.push(g);
            if rr_takes_link {
                change.stage(image);
            }
        }
        if rr_takes_link {
            if let Some(split) = self.stage_split_two(old, job, n_id, rr, change, op)? {
                return Ok(Some(split));
            }
            let split = self.stage_split_many(old, job, rr, &mut spare, change, op)?;
            self.free_spare(spare, change, op)?;
            // If the page's own records cannot be packed, neither can they
            // with the sibling's.
            return Ok(split);
        }
        let Some(rr) = rr else {
            return Ok(None);
        };
        let Some((at, child)) = right_bound(path, j) else {
            return Ok(None);
        };
        if at + 1 != j {
            // `rr` is under another parent, which this split does not hold:
            // a reader latched on it may be waiting for `rr`, and would miss
            // the records `rr` gave away (and taking that parent would latch
            // bottom-up). Instead, the caller splits `rr` on its own, from
            // the root, and tries again.
            let g = change.held(rr).ok_or_else(|| unreachable_err(rr))?;
            change.split_first = page::records(g)
                .next()
                .map(|o| page::rec_key(g, o).to_vec());
            return Ok(None);
        }
        let bound = Rebound {
            at,
            child,
            key: Vec::new(),
        };
        let split = self.stage_split_absorbing(old, job, rr, bound, &mut spare, change, op)?;
        self.free_spare(spare, change, op)?;
        Ok(split)
    }

    /// The split of `old` into itself and the new page `n_id` at a cut of
    /// the split policy (or the middle, or any cut) that fits; `rr` took its
    /// new left link already.
    fn stage_split_two<'a>(
        &'a self,
        old: &S::Exclusive<'a>,
        job: &Overfull,
        n_id: PageId,
        rr: Option<PageId>,
        change: &mut Change<'a, S>,
        op: &mut OpContext,
    ) -> Result<Option<Split>> {
        let recs = &job.recs;
        let (cuts, policy_kind) = self.cuts(old, recs, job.new_idx, op);
        let leaf = page::is_leaf(old);
        for (k, &cut) in cuts.iter().enumerate() {
            let (l, r) = recs.split_at(cut);
            let n = change.held(n_id).ok_or_else(|| unreachable_err(n_id))?;
            let mut rl = self.part_layout(old, r, job.new_idx.and_then(|x| x.checked_sub(cut)));
            rl.left = leaf.then_some(old.page_id());
            rl.right = rr;
            let right = Scratch::rebuilt(n, &rl, r, page::HeapOrder::Key);
            let mut ll = self.part_layout(old, l, job.new_idx.filter(|&x| x < cut));
            ll.right = leaf.then_some(n_id);
            let left = Scratch::rebuilt(old, &ll, l, page::HeapOrder::Kept);
            if !self.would_fit(n, &right, op)? || !self.would_fit(old, &left, op)? {
                continue;
            }
            change.stage(right);
            change.stage(left);
            let kind = job
                .cause
                .unwrap_or(if k == 0 { policy_kind } else { SplitKind::Half });
            let seps = vec![RecBuf::child(r[0].key.clone(), n_id)];
            return Ok(Some(Split {
                kind,
                seps,
                rebound: None,
            }));
        }
        Ok(None)
    }

    /// The split of `old` into three or more pages, when no cut into two
    /// fits; the old right sibling `rr` (if any) takes its new left link.
    fn stage_split_many<'a>(
        &'a self,
        old: &S::Exclusive<'a>,
        job: &Overfull,
        rr: Option<PageId>,
        spare: &mut Vec<PageId>,
        change: &mut Change<'a, S>,
        op: &mut OpContext,
    ) -> Result<Option<Split>> {
        let leaf = page::is_leaf(old);
        let run = split::Run {
            recs: &job.recs,
            new_idx: job.new_idx,
            first: Some(old.page_id()),
            last: None,
            from_first: job.recs.len(),
            from_last: job.recs.len(),
            left_end: page::left(old).filter(|_| leaf),
            right_end: rr,
        };
        let Some(packed) = self.pack(old, &run, 3, spare, change, op)? else {
            return Ok(None);
        };
        packed.take_from(spare);
        if let Some(rr) = rr {
            let last = packed.pages[packed.pages.len() - 1];
            let g = change.held(rr).ok_or_else(|| unreachable_err(rr))?;
            let mut image = Scratch::of_guard(g);
            page::set_left(&mut image, Some(last));
            if !self.would_fit(g, &image, op)? {
                // Its pages go back to the spares, for the caller's next try.
                spare.extend(packed.pages[1..].iter().copied());
                return Ok(None);
            }
            change.stage(image);
        }
        let seps = packed.separators(&run);
        for image in packed.images {
            change.stage(image);
        }
        self.counters.split_many.fetch_add(1, Ordering::Relaxed);
        Ok(Some(Split {
            kind: Self::packed_kind(job.cause),
            seps,
            rebound: None,
        }))
    }

    /// The split of leaf `old` whose right sibling `rr` (held by the change)
    /// cannot take a new left link: both pages' records are packed over
    /// `old`, new pages and `rr`, and `bound` gets `rr`'s new first key.
    #[allow(
        clippy::too_many_arguments,
        reason = "the split's pages, owed bound and change, as the callers hold them"
    )]
    fn stage_split_absorbing<'a>(
        &'a self,
        old: &S::Exclusive<'a>,
        job: &Overfull,
        rr: PageId,
        mut bound: Rebound,
        spare: &mut Vec<PageId>,
        change: &mut Change<'a, S>,
        op: &mut OpContext,
    ) -> Result<Option<Split>> {
        let g = change.held(rr).ok_or_else(|| unreachable_err(rr))?;
        let mut recs = job.recs.clone();
        recs.extend(page::read_all(g));
        let run = split::Run {
            recs: &recs,
            new_idx: job.new_idx,
            first: Some(old.page_id()),
            last: Some(rr),
            from_first: job.recs.len(),
            from_last: job.recs.len(),
            left_end: page::left(old),
            right_end: page::right(g),
        };
        let Some(packed) = self.pack(old, &run, 3, spare, change, op)? else {
            return Ok(None);
        };
        packed.take_from(spare);
        let seps = packed.separators(&run);
        bound.key = packed.last_key(&run);
        for image in packed.images {
            change.stage(image);
        }
        self.counters
            .split_absorbing
            .fetch_add(1, Ordering::Relaxed);
        Ok(Some(Split {
            kind: Self::packed_kind(job.cause),
            seps,
            rebound: Some(bound),
        }))
    }

    fn count_split(&self, kind: SplitKind) {
        let c = match kind {
            SplitKind::Half => &self.counters.split_half,
            SplitKind::Sequential => &self.counters.split_sequential,
            SplitKind::CompressionFailure => &self.counters.split_compression,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Stages a root split: the root's contents move into two new children
    /// and the root page becomes their parent, keeping its id. The split's
    /// kind, or `None` if no cut fits.
    fn stage_root_split<'a>(
        &'a self,
        root: &S::Exclusive<'a>,
        job: &Overfull,
        change: &mut Change<'a, S>,
        op: &mut OpContext,
    ) -> Result<Option<SplitKind>> {
        let recs = &job.recs;
        let (cuts, policy_kind) = self.cuts(root, recs, job.new_idx, op);
        let leaf = page::is_leaf(root);
        let level = page::level(root);
        let mut ids = [root.page_id(); 2];
        for id in &mut ids {
            let g = self.store.allocate(op)?;
            *id = g.page_id();
            change.allocated.push(*id);
            change.held.push(g);
        }
        let [l_id, r_id] = ids;
        for (k, &cut) in cuts.iter().enumerate() {
            let (l, r) = recs.split_at(cut);
            let mut ll = self.part_layout(root, l, job.new_idx.filter(|&x| x < cut));
            ll.left = None;
            ll.right = leaf.then_some(r_id);
            let mut rl = self.part_layout(root, r, job.new_idx.and_then(|x| x.checked_sub(cut)));
            rl.left = leaf.then_some(l_id);
            rl.right = None;
            let lg = change.held(l_id).ok_or_else(|| unreachable_err(l_id))?;
            let rg = change.held(r_id).ok_or_else(|| unreachable_err(r_id))?;
            let left = Scratch::rebuilt(lg, &ll, l, page::HeapOrder::Key);
            let right = Scratch::rebuilt(rg, &rl, r, page::HeapOrder::Key);
            let top = [
                RecBuf::child(Vec::new(), l_id),
                RecBuf::child(r[0].key.clone(), r_id),
            ];
            let layout = Layout::new_root(level + 1);
            let top_image = Scratch::rebuilt(root, &layout, &top, page::HeapOrder::Kept);
            if !self.would_fit(lg, &left, op)?
                || !self.would_fit(rg, &right, op)?
                || !self.would_fit(root, &top_image, op)?
            {
                continue;
            }
            change.stage(left);
            change.stage(right);
            change.stage(top_image);
            let kind = job
                .cause
                .unwrap_or(if k == 0 { policy_kind } else { SplitKind::Half });
            return Ok(Some(kind));
        }
        self.stage_root_split_many(root, job, ids.to_vec(), change, op)
    }

    /// A root split into three or more children, when no cut into two fits
    /// (`spare`: the two pages allocated for a split in two).
    fn stage_root_split_many<'a>(
        &'a self,
        root: &S::Exclusive<'a>,
        job: &Overfull,
        mut spare: Vec<PageId>,
        change: &mut Change<'a, S>,
        op: &mut OpContext,
    ) -> Result<Option<SplitKind>> {
        let run = split::Run {
            recs: &job.recs,
            new_idx: job.new_idx,
            first: None,
            last: None,
            from_first: 0,
            from_last: job.recs.len(),
            left_end: None,
            right_end: None,
        };
        let Some(packed) = self.pack(root, &run, 3, &mut spare, change, op)? else {
            return Ok(None);
        };
        let mut top: Vec<RecBuf> = packed.separators(&run);
        top[0].key.clear();
        let layout = Layout::new_root(page::level(root) + 1);
        let top_image = Scratch::rebuilt(root, &layout, &top, page::HeapOrder::Kept);
        if !self.would_fit(root, &top_image, op)? {
            return Ok(None);
        }
        packed.take_from(&mut spare);
        for image in packed.images {
            change.stage(image);
        }
        change.stage(top_image);
        self.free_spare(spare, change, op)?;
        self.counters.split_many.fetch_add(1, Ordering::Relaxed);
        Ok(Some(Self::packed_kind(job.cause)))
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

    // ---------------------------------------------------------------- delete

    /// Deletes `key`; true if it was present.
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        let mut op = OpContext::new();
        let result = self.delete_in(&mut op, key);
        let settled = self.settle_entry_count(&mut op);
        self.store.finish_op(op);
        let existed = result?;
        settled?;
        Ok(existed)
    }

    /// [`Tree::delete`] within the caller's operation context.
    pub fn delete_in(&self, op: &mut OpContext, key: &[u8]) -> Result<bool> {
        let existed = self.remove(op, key)?;
        if existed {
            // Counted in the same operation when it settles.
            op.entry_delta -= 1;
        }
        Ok(existed)
    }

    /// Removes `key` if present: optimistically from its leaf, else on an
    /// exclusively latched path, rebalancing as needed. True if it was
    /// present.
    fn remove(&self, op: &mut OpContext, key: &[u8]) -> Result<bool> {
        check_key(key)?;
        {
            let (mut leaf, hint) = self.leaf_exclusive(key)?;
            let pr = page::probe_in(&leaf, key, hint.span.as_ref());
            if pr.found == 0 {
                return Ok(false);
            }
            let len = page::rec_len(&leaf, pr.found);
            let stays_full = page::used_bytes(&leaf) - len >= self.threshold_bytes();
            let root = leaf.page_id() == self.root;
            if root || stays_full || (hint.right_in_parent && self.stays_unmerged(&leaf, len)?) {
                let chain = overflow_chain(&leaf, pr.found);
                page::remove_logged(&mut leaf, pr, key, |p| {
                    if root || stays_full {
                        page::flags(p) & !FLAG_GROWING
                    } else {
                        page::flags(p) | FLAG_GROWING
                    }
                });
                if self.commit(&mut leaf, op) {
                    self.free_chain_of(op, chain)?;
                    return Ok(true);
                }
            }
        }
        for _ in 0..RETRIES_MAX {
            let mut path =
                self.path_exclusive(key, self.config.compressed, |p| self.safe_for_delete(p))?;
            match self.delete_on_path(&mut path, op, key)? {
                Attempt::Done(existed) => return Ok(existed),
                Attempt::SplitFirst(first) => {
                    drop(path);
                    self.split_alone(op, first)?;
                }
            }
        }
        Err(Error::CompressionUnfit { page_id: self.root })
    }

    /// Whether the pessimistic path would leave `leaf`, once `len` bytes of
    /// record are removed from it, as it is (underfull, marked growing):
    /// no redistribution is due, and its right neighbour (its merge
    /// sibling, when the parent has a child after it) holds too many
    /// records for both to fit one page ([`Tree::merge_may_fit`]).
    /// [`Tree::rebalance_child`]'s first test, made with the leaf's right neighbour latched shared (left to
    /// right, the latch order) instead of the whole path exclusively: most
    /// deletes from an underfull leaf find no merge that fits, and latching
    /// the whole path for each of them would serialise them for nothing.
    fn stays_unmerged(&self, leaf: &S::Exclusive<'_>, len: usize) -> Result<bool> {
        // A removal can also drop two directory slots.
        let used_after = page::used_bytes(leaf) - len - 2 * page::SLOT_BYTES;
        if used_after < self.redistribution_bytes() {
            return Ok(false);
        }
        let Some(right_id) = page::right(leaf) else {
            return Ok(false);
        };
        let right = self.store.fix_shared(right_id)?;
        expect_node(&right, right_id)?;
        let records_bytes = page::record_bytes(leaf) - len + page::record_bytes(&right);
        Ok(!self.merge_may_fit(records_bytes))
    }

    /// Whether two siblings holding `records_bytes` of records together may
    /// merge: a merged page holds at least those records and a header (its
    /// directory comes on top, checked once the records are copied).
    fn merge_may_fit(&self, records_bytes: usize) -> bool {
        page::PAGE_HEADER_BYTES + records_bytes <= self.limit_bytes()
    }

    /// Splits the leaf covering `first` on its own, in `op`: a full leaf
    /// whose neighbour's split could not change it. Its contents stay; only
    /// the tree's shape changes. Splitting it may first need its own right
    /// neighbour split, and so on, at most [`RETRIES_MAX`] leaves.
    fn split_alone(&self, op: &mut OpContext, first: Vec<u8>) -> Result<()> {
        let mut todo = vec![first];
        for _ in 0..RETRIES_MAX {
            let Some(key) = todo.last() else {
                return Ok(());
            };
            let mut path = self.path_exclusive(key, true, |_| false)?;
            let last = path.len() - 1;
            let recs = page::read_all(&path[last]);
            if recs.len() < 2 || path[last].page_id() == self.root {
                todo.pop();
                continue;
            }
            let job = Overfull {
                recs,
                new_idx: None,
                cause: Some(SplitKind::CompressionFailure),
            };
            match self.split_up(&mut path, last, job, op)? {
                None => {
                    self.counters.split_alone.fetch_add(1, Ordering::Relaxed);
                    todo.pop();
                }
                Some(next) => todo.push(next),
            }
        }
        if todo.is_empty() {
            return Ok(());
        }
        Err(Error::CompressionUnfit { page_id: self.root })
    }

    fn delete_on_path<'a>(
        &'a self,
        path: &mut Vec<S::Exclusive<'a>>,
        op: &mut OpContext,
        key: &[u8],
    ) -> Result<Attempt> {
        let last = path.len() - 1;
        let leaf = &mut path[last];
        let pr = page::probe(leaf, key);
        if pr.found == 0 {
            return Ok(Attempt::Done(false));
        }
        let chain = overflow_chain(leaf, pr.found);
        // A page left underfull is marked in the same commit, so that a
        // rebalance that cannot be made leaves a valid tree behind.
        let root = leaf.page_id() == self.root;
        let threshold = self.threshold_bytes();
        let flags = page::remove_logged(leaf, pr, key, |p| {
            if !root && page::used_bytes(p) < threshold {
                page::flags(p) | FLAG_GROWING
            } else {
                page::flags(p) & !FLAG_GROWING
            }
        });
        if !self.commit(leaf, op) {
            // Removing a record can make the page compress worse, or meet a
            // full modification log: rebuild it compactly, which drops the
            // removed bytes.
            let recs: Vec<RecBuf> = page::read_all(leaf)
                .into_iter()
                .filter(|r| r.key != key)
                .collect();
            let mut layout = page::layout_of(leaf);
            layout.flags = flags;
            page::compact(leaf, &layout, &recs, page::HeapOrder::Key);
            if !self.commit(leaf, op) {
                // Not even the compact page fits its block: split it, as an
                // insert would (nothing is committed if that fails too).
                let job = Overfull {
                    recs,
                    new_idx: None,
                    cause: Some(SplitKind::CompressionFailure),
                };
                if let Some(first) = self.split_up(path, last, job, op)? {
                    return Ok(Attempt::SplitFirst(first));
                }
                self.free_chain_of(op, chain)?;
                return Ok(Attempt::Done(true));
            }
        }
        self.rebalance_up(path, last, key, op)?;
        self.free_chain_of(op, chain)?;
        Ok(Attempt::Done(true))
    }

    /// Rebalances `path[i]` (just left underfull by this operation) and, as
    /// long as each rebalance leaves the parent underfull, the parent. Never
    /// fails for want of space: a rebalance that does not fit is skipped,
    /// and the page keeps the `FLAG_GROWING` mark it was committed with.
    fn rebalance_up<'a>(
        &'a self,
        path: &mut Vec<S::Exclusive<'a>>,
        mut i: usize,
        key: &[u8],
        op: &mut OpContext,
    ) -> Result<()> {
        loop {
            if path[i].page_id() == self.root {
                return self.collapse_root(&mut path[i], op);
            }
            let g = &path[i];
            if page::used_bytes(g) >= self.threshold_bytes() {
                return Ok(());
            }
            if i == 0 {
                // Only a page judged safe is left without its parent, and a
                // safe page does not fall below the threshold.
                debug_assert!(false, "{} underflowed without its parent", g.page_id());
                return Ok(());
            }
            if !self.rebalance_child(path, i, key, op)? {
                return Ok(());
            }
            path.truncate(i);
            i -= 1;
        }
    }

    /// Fixes an underfull `path[i]` with a sibling under `path[i - 1]`: merge
    /// if both fit one page; else, if the page fell below half the
    /// threshold, redistribute; else leave it underfull with its
    /// `FLAG_GROWING` mark (see [`Tree::redistribution_bytes`]). True if the
    /// parent changed and should be looked at next (it was not already
    /// marked growing).
    fn rebalance_child<'a>(
        &'a self,
        path: &mut Vec<S::Exclusive<'a>>,
        i: usize,
        key: &[u8],
        op: &mut OpContext,
    ) -> Result<bool> {
        let child_id = path[i].page_id();
        let redistribute = page::used_bytes(&path[i]) < self.redistribution_bytes();
        let Some(siblings) = Self::merge_sibling(&path[i - 1], key, child_id)? else {
            // No sibling: the page stays as committed, marked growing.
            return Ok(false);
        };
        // Latch siblings left to right: with the right sibling, keep the
        // child; with the left one, release the child first (nobody can reach
        // it meanwhile: its parent is latched exclusively).
        let (left, right, right_off) = match siblings {
            Sibling::Right { off, id } => {
                let right = self.store.fix_exclusive(id)?;
                let left = path.pop().ok_or_else(|| unreachable_err(child_id))?;
                (left, right, off)
            }
            Sibling::Left { id, child_off } => {
                drop(path.pop());
                let left = self.store.fix_exclusive(id)?;
                let right = self.store.fix_exclusive(child_id)?;
                (left, right, child_off)
            }
        };
        // When no merge can fit and no redistribution is due, stop before
        // copying the records (a page left this way is retried on each
        // delete that reaches this path).
        let records_bytes = page::record_bytes(&left) + page::record_bytes(&right);
        if !redistribute && !self.merge_may_fit(records_bytes) {
            return Ok(false);
        }
        let parent = &path[i - 1];
        let parent_was_growing = page::flags(parent) & FLAG_GROWING != 0;
        let sep_key = page::rec_key(parent, right_off).to_vec();
        let mut recs = page::read_all(&left);
        // The right page's records are new to the left one: after its own,
        // in key order.
        let mut right_recs = page::read_all(&right);
        for r in &mut right_recs {
            r.old_offset = None;
        }
        if let Some(first) = right_recs.first_mut()
            && !page::is_leaf(&right)
        {
            first.key.clone_from(&sep_key);
        }
        recs.append(&mut right_recs);
        let pair = Siblings {
            left: &left,
            right: &right,
            recs: &recs,
            sep_key: &sep_key,
        };
        let mut change = Change::new();
        let merge = page::image_bytes(&recs) <= self.limit_bytes();
        if !merge && !redistribute {
            return Ok(false);
        }
        let staged = if merge {
            self.stage_merge(parent, &pair, &mut change, op)?
        } else {
            self.stage_redistribute(parent, &pair, &mut change, op)?
        };
        if !staged {
            // Nothing was written; the child keeps its growing mark.
            return Ok(false);
        }
        change.held.push(left);
        change.held.push(right);
        self.apply(&mut path[..i], change, op)?;
        let counter = if merge {
            &self.counters.merges
        } else {
            &self.counters.redistributions
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(!parent_was_growing)
    }

    /// The sibling of `child_id` that [`Tree::rebalance_child`] merges it
    /// with, under `parent`, whose child covering `key` it is: the next
    /// child, else the one before (the last child), else none. The child's
    /// record is found by a probe, not a walk over the parent's hundreds
    /// of records; only the last child walks, to find its predecessor.
    fn merge_sibling(
        parent: &S::Exclusive<'_>,
        key: &[u8],
        child_id: PageId,
    ) -> Result<Option<Sibling>> {
        let (child_off, id) = page::child_for(parent, key);
        if id != child_id {
            return Err(Error::Corrupted {
                page_id: parent.page_id(),
                reason: format!("does not point to its child {child_id}"),
            });
        }
        let next = page::rec_next(parent, child_off);
        if next != 0 {
            let id = page::rec_child(parent, next);
            return Ok(Some(Sibling::Right { off: next, id }));
        }
        let before = page::records(parent)
            .take_while(|&off| off != child_off)
            .last();
        Ok(before.map(|off| Sibling::Left {
            id: page::rec_child(parent, off),
            child_off,
        }))
    }

    /// Stages the merge of `pair.right` into `pair.left`: the left page's
    /// new image, the right-right sibling's left link, and the parent
    /// without the separator; the right page is freed once applied. False if
    /// some page would not fit.
    fn stage_merge<'a>(
        &'a self,
        parent: &S::Exclusive<'a>,
        pair: &Siblings<'_, 'a, S>,
        change: &mut Change<'a, S>,
        op: &mut OpContext,
    ) -> Result<bool> {
        let (left, right) = (pair.left, pair.right);
        let leaf = page::is_leaf(left);
        let mut layout = page::layout_of(left);
        layout.right = if leaf { page::right(right) } else { None };
        layout.flags = if page::image_bytes(pair.recs) < self.threshold_bytes() {
            FLAG_GROWING
        } else {
            0
        };
        let left_image = Scratch::rebuilt(left, &layout, pair.recs, page::HeapOrder::Kept);
        if !self.would_fit(left, &left_image, op)? {
            return Ok(false);
        }
        if let (true, Some(rr)) = (leaf, page::right(right)) {
            let g = self.store.fix_exclusive(rr)?;
            let mut image = Scratch::of_guard(&g);
            page::set_left(&mut image, Some(left.page_id()));
            let fits = self.would_fit(&g, &image, op)?;
            change.held.push(g);
            if !fits {
                return Ok(false);
            }
            change.stage(image);
        }
        let mut parent_image = Scratch::of_guard(parent);
        let pr = page::probe(&parent_image, pair.sep_key);
        debug_assert_ne!(pr.found, 0, "separator of merged child missing");
        page::remove(&mut parent_image, pr);
        self.mark_if_sparse(&mut parent_image);
        if !self.would_fit(parent, &parent_image, op)? {
            return Ok(false);
        }
        change.stage(left_image);
        change.stage(parent_image);
        change.to_free.push(right.page_id());
        Ok(true)
    }

    /// Stages a redistribution of `pair.recs` between the two siblings, by
    /// bytes, and the parent's new separator. False if the parent has no
    /// room for the new separator (a delete never splits) or some page would
    /// not fit.
    fn stage_redistribute<'a>(
        &'a self,
        parent: &S::Exclusive<'a>,
        pair: &Siblings<'_, 'a, S>,
        change: &mut Change<'a, S>,
        op: &mut OpContext,
    ) -> Result<bool> {
        let (left, right, recs) = (pair.left, pair.right, pair.recs);
        let cut = fraction_cut(recs, 1, 2);
        let new_sep = RecBuf::child(recs[cut].key.clone(), right.page_id());
        let pr = page::probe(parent, pair.sep_key);
        let old_len = page::rec_len(parent, pr.found);
        let room = page::used_bytes(parent) - old_len + new_sep.len() + page::SLOT_BYTES;
        if room > self.limit_bytes() {
            return Ok(false);
        }
        let (l, r) = recs.split_at(cut);
        let images = [(left, l), (right, r)].map(|(g, part)| {
            let mut layout = page::layout_of(g);
            layout.flags = if page::image_bytes(part) < self.threshold_bytes() {
                FLAG_GROWING
            } else {
                0
            };
            Scratch::rebuilt(g, &layout, part, page::HeapOrder::Kept)
        });
        let mut parent_image = Scratch::of_guard(parent);
        page::remove(&mut parent_image, pr);
        let pr = page::probe(&parent_image, &new_sep.key);
        page::insert(&mut parent_image, pr, new_sep.borrowed());
        self.mark_if_sparse(&mut parent_image);
        let [left_image, right_image] = images;
        if !self.would_fit(left, &left_image, op)?
            || !self.would_fit(right, &right_image, op)?
            || !self.would_fit(parent, &parent_image, op)?
        {
            return Ok(false);
        }
        change.stage(left_image);
        change.stage(right_image);
        change.stage(parent_image);
        Ok(true)
    }

    /// While the root is internal with a single child, pulls that child's
    /// contents into the root (the root keeps its id) and frees the child.
    /// A root whose block cannot take the child's contents keeps its single
    /// child (a valid tree, one level taller than needed).
    fn collapse_root<G: PageWrite>(&self, root: &mut G, op: &mut OpContext) -> Result<()> {
        while !page::is_leaf(root) && page::record_count(root) == 1 {
            let child_id = page::rec_child(root, page::first_record(root));
            let child = self.store.fix_exclusive(child_id)?;
            let recs = page::read_all(&child);
            let mut layout = page::layout_of(&child);
            layout.flags = 0;
            layout.left = None;
            layout.right = None;
            page::compact(root, &layout, &recs, page::HeapOrder::Key);
            if !self.commit(root, op) {
                return Ok(());
            }
            self.store.free(child, op)?;
        }
        Ok(())
    }
}

/// The new contents of a page that must split: its records plus the new
/// one (at `new_idx`; none when a delete splits a page that no longer fits
/// its block), and why, if not for the split policy to say.
struct Overfull {
    recs: Vec<RecBuf>,
    new_idx: Option<usize>,
    cause: Option<SplitKind>,
}

/// What a staged split of a non-root page asks of the levels above.
struct Split {
    kind: SplitKind,
    /// Separators of the new pages, in key order, for the parent.
    seps: Vec<RecBuf>,
    /// Set when a right sibling gave records to the split.
    rebound: Option<Rebound>,
}

/// A right sibling that gave records to a split has a new first key: the
/// separator that bounds its subtree from the left, in `path[at]` (the
/// lowest common ancestor of the two leaves), must become `key`.
struct Rebound {
    at: usize,
    /// The child of `path[at]` whose separator changes.
    child: PageId,
    key: Vec<u8>,
}

/// What became of the separators handed to a page.
enum Edited {
    /// They fit in place; its new image is staged.
    Staged,
    /// They do not: the page must split with these contents.
    Split(Overfull),
}

/// The ancestor that holds the separator bounding the right neighbour of
/// leaf `path[j]` from the left: the lowest `path[at]` whose child on the
/// path is not its last; that separator's index and child. `None` if the
/// path does not reach up that far.
fn right_bound<G: PageWrite>(path: &[G], j: usize) -> Option<(usize, PageId)> {
    (0..j).rev().find_map(|at| {
        let p = &path[at];
        let below = path[at + 1].page_id();
        let mut offs = page::records(p).skip_while(|&o| page::rec_child(p, o) != below);
        offs.next()?;
        offs.next().map(|next| (at, page::rec_child(p, next)))
    })
}

/// What the parent said of a leaf as an optimistic descent passed it.
#[derive(Default)]
struct LeafHint {
    /// The parent had a child after the leaf: the leaf's right link was
    /// its merge sibling.
    right_in_parent: bool,
    /// The leaf's key range (for [`page::probe_in`]).
    span: Option<page::KeySpan>,
}

/// The sibling an underfull child is rebalanced with
/// ([`Tree::merge_sibling`]).
enum Sibling {
    /// The next child: its page and its record in the parent (whose key is
    /// the separator).
    Right { off: usize, id: PageId },
    /// The child before (the underfull child is the parent's last): its
    /// page, and the underfull child's record in the parent.
    Left { id: PageId, child_off: usize },
}

/// Two adjacent children of one parent being rebalanced: their records in
/// order (the right one's first key restored from the separator) and the
/// separator between them.
struct Siblings<'g, 'a, S: PageStore + 'a> {
    left: &'g S::Exclusive<'a>,
    right: &'g S::Exclusive<'a>,
    recs: &'g [RecBuf],
    sep_key: &'g [u8],
}

/// Where the page's last inserted record is in `recs`, if known.
fn last_insert_index(p: &[u8], recs: &[RecBuf]) -> Option<usize> {
    let last = page::last_insert(p);
    recs.iter()
        .position(|r| last != 0 && r.old_offset == Some(last))
}

fn unreachable_err(page_id: PageId) -> Error {
    Error::Corrupted {
        page_id,
        reason: "latch path is empty".into(),
    }
}

/// The first page of the overflow chain of record `off` of leaf `p`, if
/// its value overflowed: what removing or replacing it must free, read
/// without copying the record.
fn overflow_chain(p: &[u8], off: usize) -> Option<PageId> {
    (page::rec_flags(p, off) & REC_OVERFLOW != 0)
        .then(|| decode_overflow_ref(page::rec_value(p, off)).0)
}

pub(crate) fn decode_overflow_ref(stored: &[u8]) -> (PageId, usize) {
    let mut a = [0u8; 8];
    let mut b = [0u8; 8];
    a.copy_from_slice(&stored[..8]);
    b.copy_from_slice(&stored[8..16]);
    (
        PageId(u64::from_le_bytes(a)),
        u64::from_le_bytes(b) as usize,
    )
}
