//! The tree: descent with latch coupling, insert and split, delete and
//! rebalance, overflow values.

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
}

impl Default for TreeConfig {
    fn default() -> Self {
        Self {
            policy: SplitPolicy::Adaptive,
            merge_threshold_percent: /* InnoDB's default */ 50,
            compressed: false,
        }
    }
}

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
    merges: AtomicU64,
    redistributions: AtomicU64,
    compression_failures: AtomicU64,
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

fn strip_offsets(recs: &[RecBuf]) -> Vec<RecBuf> {
    recs.iter()
        .map(|r| RecBuf {
            old_offset: None,
            ..r.clone()
        })
        .collect()
}

impl<S: PageStore> Tree<S> {
    /// Creates an empty tree: allocates its root page.
    pub fn create(store: Arc<S>, config: TreeConfig) -> Result<Self> {
        let mut op = OpContext::new();
        let root = {
            let mut g = store.allocate(&mut op)?;
            let layout = Layout {
                page_type: PageType::Leaf,
                level: 0,
                flags: 0,
                left: None,
                right: None,
                last_insert: None,
                insert_flags: 0,
            };
            page::rebuild(&mut g, &layout, &[]);
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

    fn commit_or_err<G: PageWrite>(&self, g: &mut G, op: &mut OpContext) -> Result<()> {
        if self.commit(g, op) {
            Ok(())
        } else {
            Err(Error::CompressionUnfit {
                page_id: g.page_id(),
            })
        }
    }

    // ---------------------------------------------------------------- descent

    /// The leaf covering `key`, latched shared, by latch coupling.
    pub(crate) fn leaf_shared(&self, key: &[u8]) -> Result<(S::Shared<'_>, PageId)> {
        let mut g = self.store.fix_shared(self.root)?;
        let mut id = self.root;
        loop {
            expect_node(&g, id)?;
            if page::is_leaf(&g) {
                return Ok((g, id));
            }
            id = page::child_for(&g, key).1;
            let child = self.store.fix_shared(id)?;
            g = child;
        }
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
    /// the way down (the optimistic path).
    fn leaf_exclusive(&self, key: &[u8]) -> Result<S::Exclusive<'_>> {
        loop {
            let mut g = self.store.fix_shared(self.root)?;
            let mut id = self.root;
            expect_node(&g, id)?;
            if page::is_leaf(&g) {
                drop(g);
                let x = self.store.fix_exclusive(self.root)?;
                if page::is_leaf(&x) {
                    return Ok(x);
                }
                // The root split while unlatched: descend again.
                continue;
            }
            loop {
                let child = page::child_for(&g, key).1;
                if page::level(&g) == 1 {
                    let x = self.store.fix_exclusive(child)?;
                    expect_node(&x, child)?;
                    return Ok(x);
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
        check_key(key)?;
        let (leaf, _) = self.leaf_shared(key)?;
        let pr = page::probe(&leaf, key);
        if pr.found == 0 {
            return Ok(None);
        }
        self.load_value(&leaf, pr.found).map(Some)
    }

    /// Reads the value of the record at `off`, following an overflow chain
    /// (while the caller keeps the leaf latched, so the chain cannot be freed).
    pub(crate) fn load_value(&self, p: &[u8], off: usize) -> Result<Vec<u8>> {
        let stored = page::rec_value(p, off);
        if page::rec_flags(p, off) & REC_OVERFLOW == 0 {
            return Ok(stored.to_vec());
        }
        let (first, total) = decode_overflow_ref(stored);
        let mut out = Vec::with_capacity(total);
        let mut next = Some(first);
        while let Some(id) = next {
            let g = self.store.fix_shared(id)?;
            if page::page_type(&g) != Some(PageType::Overflow) {
                return Err(Error::Corrupted {
                    page_id: id,
                    reason: "overflow chain reaches a non-overflow page".into(),
                });
            }
            out.extend_from_slice(page::overflow_payload(&g));
            next = page::right(&g);
            if out.len() > total {
                break;
            }
        }
        if out.len() != total {
            return Err(Error::Corrupted {
                page_id: first,
                reason: format!("overflow chain holds {} of {total} bytes", out.len()),
            });
        }
        Ok(out)
    }

    // ---------------------------------------------------------------- values

    fn encode_value(&self, op: &mut OpContext, value: &[u8]) -> Result<(u8, Vec<u8>)> {
        if value.len() <= page::value_inline_bytes_max(self.page_size()) {
            return Ok((0, value.to_vec()));
        }
        let chunk_max = self.page_size() - page::PAGE_HEADER_BYTES;
        // Smallest chunk tried when a page will not compress into its block.
        const CHUNK_BYTES_MIN: usize = 64;
        let mut guards: Vec<S::Exclusive<'_>> = Vec::new();
        let mut rest = value;
        while !rest.is_empty() {
            let mut g = self.store.allocate(op)?;
            let mut take = chunk_max.min(rest.len());
            loop {
                page::write_overflow(&mut g, &rest[..take], None);
                if self.commit(&mut g, op) {
                    break;
                }
                if take <= CHUNK_BYTES_MIN {
                    return Err(Error::CompressionUnfit {
                        page_id: g.page_id(),
                    });
                }
                take /= 2;
            }
            if let Some(prev) = guards.last_mut() {
                page::set_right(prev, Some(g.page_id()));
                self.commit_or_err(prev, op)?;
            }
            rest = &rest[take..];
            guards.push(g);
        }
        let first = guards[0].page_id();
        let mut stored = first.0.to_le_bytes().to_vec();
        stored.extend_from_slice(&(value.len() as u64).to_le_bytes());
        Ok((REC_OVERFLOW, stored))
    }

    /// Frees the overflow chain of a record that was removed or replaced.
    fn free_value(&self, op: &mut OpContext, rec: &RecBuf) -> Result<()> {
        if rec.flags & REC_OVERFLOW == 0 {
            return Ok(());
        }
        let mut next = Some(decode_overflow_ref(&rec.value).0);
        while let Some(id) = next {
            let g = self.store.fix_exclusive(id)?;
            if page::page_type(&g) != Some(PageType::Overflow) {
                return Err(Error::Corrupted {
                    page_id: id,
                    reason: "freeing an overflow chain that reaches a non-overflow page".into(),
                });
            }
            next = page::right(&g);
            self.store.free(g, op)?;
        }
        Ok(())
    }

    // ---------------------------------------------------------------- insert

    /// Inserts or replaces `key`; true if it replaced a value.
    pub fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        let mut op = OpContext::new();
        let result = self.insert_in(&mut op, key, value);
        self.store.finish_op(op);
        result
    }

    /// [`Tree::insert`] within the caller's operation context (for a caller
    /// that logs several tree operations as one group).
    pub fn insert_in(&self, op: &mut OpContext, key: &[u8], value: &[u8]) -> Result<bool> {
        check_key(key)?;
        check_value(value)?;
        let (flags, stored) = self.encode_value(op, value)?;
        let rec = RecBuf {
            key: key.to_vec(),
            flags,
            value: stored,
            old_offset: None,
        };
        {
            let mut leaf = self.leaf_exclusive(key)?;
            if let LeafOutcome::Done(existed) = self.leaf_upsert(&mut leaf, op, &rec)? {
                return Ok(existed);
            }
        }
        let len = rec.len();
        let mut path = self.path_exclusive(key, self.config.compressed, |p| {
            self.safe_for_insert(p, len)
        })?;
        self.insert_on_path(&mut path, op, rec)
    }

    fn leaf_upsert<G: PageWrite>(
        &self,
        leaf: &mut G,
        op: &mut OpContext,
        rec: &RecBuf,
    ) -> Result<LeafOutcome> {
        let pr = page::probe(leaf, &rec.key);
        let old = (pr.found != 0).then(|| RecBuf::read(leaf, pr.found));
        let limit = self.limit_bytes();
        match &old {
            Some(o) if o.value.len() == rec.value.len() => {
                page::overwrite_value(leaf, pr.found, rec.flags, &rec.value);
            }
            Some(o) => {
                if page::used_bytes(leaf) - o.len() + rec.len() + 2 * page::SLOT_BYTES > limit {
                    return Ok(LeafOutcome::Full);
                }
                page::remove(leaf, pr);
                let pr = page::probe(leaf, &rec.key);
                page::insert(leaf, pr, rec);
            }
            None => {
                if !page::has_room(leaf, rec.len(), limit) {
                    return Ok(LeafOutcome::Full);
                }
                page::insert(leaf, pr, rec);
            }
        }
        self.mark_if_sparse(leaf);
        if !self.commit(leaf, op) {
            return Ok(LeafOutcome::Unfit);
        }
        if let Some(o) = &old {
            self.free_value(op, o)?;
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
    ) -> Result<bool> {
        let last = path.len() - 1;
        let kind = match self.leaf_upsert(&mut path[last], op, &rec)? {
            LeafOutcome::Done(existed) => return Ok(existed),
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
        let mut carry = self.split(path, last, recs, new_idx, kind, op)?;
        let mut i = last;
        while let Some(sep) = carry {
            i -= 1;
            carry = self.insert_internal(path, i, sep, op)?;
        }
        if let Some(o) = &old {
            self.free_value(op, o)?;
        }
        Ok(old.is_some())
    }

    fn insert_internal<'a>(
        &'a self,
        path: &mut [S::Exclusive<'a>],
        i: usize,
        sep: RecBuf,
        op: &mut OpContext,
    ) -> Result<Option<RecBuf>> {
        let g = &mut path[i];
        let pr = page::probe(g, &sep.key);
        debug_assert_eq!(pr.found, 0, "separator already in parent");
        let mut kind = None;
        if page::has_room(g, sep.len(), self.limit_bytes()) {
            page::insert(g, pr, &sep);
            if self.commit(g, op) {
                return Ok(None);
            }
            kind = Some(SplitKind::CompressionFailure);
        }
        let mut recs = page::read_all(g);
        let new_idx = 1 + recs[1..].partition_point(|r| r.key < sep.key);
        recs.insert(new_idx, sep);
        self.split(path, i, recs, new_idx, kind, op)
    }

    /// Candidate cuts for splitting `recs` (the page's records plus the new
    /// one at `new_idx`), best first, and the kind of the first.
    fn cuts(&self, p: &[u8], recs: &[RecBuf], new_idx: usize) -> (Vec<usize>, SplitKind) {
        let n = recs.len();
        let limit = self.limit_bytes();
        let fits = |c: usize| {
            (1..n).contains(&c)
                && page::image_bytes(&recs[..c]) <= limit
                && page::image_bytes(&recs[c..]) <= limit
        };
        let policy_cut = match self.config.policy {
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
                let li = last_insert_index(p, recs);
                match li {
                    Some(l) if l + 1 == new_idx || new_idx + 1 == l => {
                        let keep_new =
                            new_idx + 1 < n && page::image_bytes(&recs[..=new_idx]) <= limit;
                        Some(if keep_new {
                            new_idx + 1
                        } else {
                            new_idx.max(1)
                        })
                    }
                    _ => None,
                }
            }
        };
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

    /// Splits `path[i]`, whose new contents `recs` do not fit, into itself
    /// and a new right sibling; returns the separator to insert into the
    /// parent (`None` after a root split).
    fn split<'a>(
        &'a self,
        path: &mut [S::Exclusive<'a>],
        i: usize,
        recs: Vec<RecBuf>,
        new_idx: usize,
        cause: Option<SplitKind>,
        op: &mut OpContext,
    ) -> Result<Option<RecBuf>> {
        if path[i].page_id() == self.root {
            self.split_root(&mut path[i], recs, new_idx, cause, op)?;
            return Ok(None);
        }
        assert!(
            i > 0,
            "splitting {} without its parent latched",
            path[i].page_id()
        );
        let (cuts, policy_kind) = self.cuts(&path[i], &recs, new_idx);
        let old = &mut path[i];
        let leaf = page::is_leaf(old);
        let mut n = self.store.allocate(op)?;
        for (k, &cut) in cuts.iter().enumerate() {
            let (l, r) = recs.split_at(cut);
            let mut rl = self.part_layout(old, r, new_idx.checked_sub(cut));
            rl.left = leaf.then_some(old.page_id());
            rl.right = if leaf { page::right(old) } else { None };
            page::rebuild(&mut n, &rl, &strip_offsets(r));
            if !self.commit(&mut n, op) {
                continue;
            }
            let mut ll = self.part_layout(old, l, (new_idx < cut).then_some(new_idx));
            ll.right = leaf.then_some(n.page_id());
            let rr = page::right(old);
            page::rebuild(old, &ll, l);
            if !self.commit(old, op) {
                continue;
            }
            if let (true, Some(rr)) = (leaf, rr) {
                let mut g = self.store.fix_exclusive(rr)?;
                page::set_left(&mut g, Some(n.page_id()));
                self.commit_or_err(&mut g, op)?;
            }
            let kind = cause.unwrap_or(if k == 0 { policy_kind } else { SplitKind::Half });
            self.count_split(kind);
            return Ok(Some(RecBuf::child(r[0].key.clone(), n.page_id())));
        }
        let page_id = old.page_id();
        self.store.free(n, op)?;
        Err(Error::CompressionUnfit { page_id })
    }

    fn count_split(&self, kind: SplitKind) {
        let c = match kind {
            SplitKind::Half => &self.counters.split_half,
            SplitKind::Sequential => &self.counters.split_sequential,
            SplitKind::CompressionFailure => &self.counters.split_compression,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Splits the root: its contents move into two new children and the root
    /// page becomes their parent, keeping its id.
    fn split_root<G: PageWrite>(
        &self,
        root: &mut G,
        recs: Vec<RecBuf>,
        new_idx: usize,
        cause: Option<SplitKind>,
        op: &mut OpContext,
    ) -> Result<()> {
        let (cuts, policy_kind) = self.cuts(root, &recs, new_idx);
        let leaf = page::is_leaf(root);
        let level = page::level(root);
        let mut lg = self.store.allocate(op)?;
        let mut rg = self.store.allocate(op)?;
        for (k, &cut) in cuts.iter().enumerate() {
            let (l, r) = recs.split_at(cut);
            let mut ll = self.part_layout(root, l, (new_idx < cut).then_some(new_idx));
            ll.left = None;
            ll.right = leaf.then_some(rg.page_id());
            let mut rl = self.part_layout(root, r, new_idx.checked_sub(cut));
            rl.left = leaf.then_some(lg.page_id());
            rl.right = None;
            page::rebuild(&mut lg, &ll, &strip_offsets(l));
            page::rebuild(&mut rg, &rl, &strip_offsets(r));
            if !self.commit(&mut lg, op) || !self.commit(&mut rg, op) {
                continue;
            }
            let top = [
                RecBuf::child(Vec::new(), lg.page_id()),
                RecBuf::child(r[0].key.clone(), rg.page_id()),
            ];
            let layout = Layout {
                page_type: PageType::Internal,
                level: level + 1,
                flags: 0,
                left: None,
                right: None,
                last_insert: None,
                insert_flags: 0,
            };
            page::rebuild(root, &layout, &top);
            self.commit_or_err(root, op)?;
            let kind = cause.unwrap_or(if k == 0 { policy_kind } else { SplitKind::Half });
            self.count_split(kind);
            self.counters.split_root.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        self.store.free(lg, op)?;
        self.store.free(rg, op)?;
        Err(Error::CompressionUnfit { page_id: self.root })
    }

    // ---------------------------------------------------------------- delete

    /// Deletes `key`; true if it was present.
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        let mut op = OpContext::new();
        let result = self.delete_in(&mut op, key);
        self.store.finish_op(op);
        result
    }

    /// [`Tree::delete`] within the caller's operation context.
    pub fn delete_in(&self, op: &mut OpContext, key: &[u8]) -> Result<bool> {
        check_key(key)?;
        {
            let mut leaf = self.leaf_exclusive(key)?;
            let pr = page::probe(&leaf, key);
            if pr.found == 0 {
                return Ok(false);
            }
            let len = page::rec_len(&leaf, pr.found);
            let stays_full = page::used_bytes(&leaf) - len >= self.threshold_bytes();
            if leaf.page_id() == self.root || stays_full {
                let old = RecBuf::read(&leaf, pr.found);
                page::remove(&mut leaf, pr);
                let f = page::flags(&leaf) & !FLAG_GROWING;
                page::set_flags(&mut leaf, f);
                if self.commit(&mut leaf, op) {
                    self.free_value(op, &old)?;
                    return Ok(true);
                }
            }
        }
        let mut path =
            self.path_exclusive(key, self.config.compressed, |p| self.safe_for_delete(p))?;
        self.delete_on_path(&mut path, op, key)
    }

    fn delete_on_path<'a>(
        &'a self,
        path: &mut Vec<S::Exclusive<'a>>,
        op: &mut OpContext,
        key: &[u8],
    ) -> Result<bool> {
        let last = path.len() - 1;
        let leaf = &mut path[last];
        let pr = page::probe(leaf, key);
        if pr.found == 0 {
            return Ok(false);
        }
        let old = RecBuf::read(leaf, pr.found);
        page::remove(leaf, pr);
        let f = page::flags(leaf) & !FLAG_GROWING;
        page::set_flags(leaf, f);
        if !self.commit(leaf, op) {
            // Removing a record made the page compress worse: rebuild it
            // compactly, which drops the removed bytes.
            let recs: Vec<RecBuf> = page::read_all(leaf)
                .into_iter()
                .filter(|r| r.key != key)
                .collect();
            let layout = page::layout_of(leaf);
            page::compact(leaf, &layout, &strip_offsets(&recs));
            self.commit_or_err(leaf, op)?;
        }
        self.rebalance_up(path, last, op)?;
        self.free_value(op, &old)?;
        Ok(true)
    }

    fn rebalance_up<'a>(
        &'a self,
        path: &mut Vec<S::Exclusive<'a>>,
        mut i: usize,
        op: &mut OpContext,
    ) -> Result<()> {
        loop {
            if path[i].page_id() == self.root {
                return self.collapse_root(&mut path[i], op);
            }
            let g = &path[i];
            if page::used_bytes(g) >= self.threshold_bytes() || page::flags(g) & FLAG_GROWING != 0 {
                return Ok(());
            }
            if i == 0 {
                // Only a page judged safe is left without its parent, and a
                // safe page does not fall below the threshold.
                debug_assert!(false, "{} underflowed without its parent", g.page_id());
                return Ok(());
            }
            self.rebalance_child(path, i, op)?;
            path.truncate(i);
            i -= 1;
        }
    }

    /// Fixes an underfull `path[i]` with a sibling under `path[i - 1]`: merge
    /// if both fit one page, else redistribute.
    fn rebalance_child<'a>(
        &'a self,
        path: &mut Vec<S::Exclusive<'a>>,
        i: usize,
        op: &mut OpContext,
    ) -> Result<()> {
        let child_id = path[i].page_id();
        let children: Vec<(usize, PageId)> = {
            let parent = &path[i - 1];
            page::records(parent)
                .map(|off| (off, page::rec_child(parent, off)))
                .collect()
        };
        let pos = children
            .iter()
            .position(|c| c.1 == child_id)
            .ok_or_else(|| Error::Corrupted {
                page_id: path[i - 1].page_id(),
                reason: format!("does not point to its child {child_id}"),
            })?;
        if children.len() == 1 {
            let g = &mut path[i];
            let f = page::flags(g) | FLAG_GROWING;
            page::set_flags(g, f);
            return self.commit_or_err(g, op);
        }
        // Latch siblings left to right: with the right sibling, keep the
        // child; with the left one, release the child first (nobody can reach
        // it meanwhile: its parent is latched exclusively).
        let (mut left, mut right, right_pos) = if pos + 1 < children.len() {
            let right = self.store.fix_exclusive(children[pos + 1].1)?;
            let left = path.pop().ok_or_else(|| unreachable_err(child_id))?;
            (left, right, pos + 1)
        } else {
            drop(path.pop());
            let left = self.store.fix_exclusive(children[pos - 1].1)?;
            let right = self.store.fix_exclusive(child_id)?;
            (left, right, pos)
        };
        let parent = &mut path[i - 1];
        let sep_key = page::rec_key(parent, children[right_pos].0).to_vec();
        let mut recs = page::read_all(&left);
        let mut right_recs = strip_offsets(&page::read_all(&right));
        if let Some(first) = right_recs.first_mut()
            && !page::is_leaf(&right)
        {
            first.key.clone_from(&sep_key);
        }
        recs.append(&mut right_recs);
        if page::image_bytes(&recs) <= self.limit_bytes() {
            self.merge(parent, &mut left, right, &recs, &sep_key, op)
        } else {
            self.redistribute(parent, &mut left, &mut right, &recs, &sep_key, op)
        }
    }

    fn merge<'a>(
        &'a self,
        parent: &mut S::Exclusive<'a>,
        left: &mut S::Exclusive<'a>,
        right: S::Exclusive<'a>,
        recs: &[RecBuf],
        sep_key: &[u8],
        op: &mut OpContext,
    ) -> Result<()> {
        let leaf = page::is_leaf(left);
        let mut layout = page::layout_of(left);
        layout.right = if leaf { page::right(&right) } else { None };
        layout.flags = if page::image_bytes(recs) < self.threshold_bytes() {
            FLAG_GROWING
        } else {
            0
        };
        page::rebuild(left, &layout, recs);
        if !self.commit(left, op) {
            // The merged page does not compress into its block: keep both
            // pages, marked sparse.
            self.mark_growing(left, op)?;
            let mut right = right;
            return self.mark_growing(&mut right, op);
        }
        if let (true, Some(rr)) = (leaf, page::right(&right)) {
            let mut g = self.store.fix_exclusive(rr)?;
            page::set_left(&mut g, Some(left.page_id()));
            self.commit_or_err(&mut g, op)?;
        }
        self.store.free(right, op)?;
        let pr = page::probe(parent, sep_key);
        debug_assert_ne!(pr.found, 0, "separator of merged child missing");
        page::remove(parent, pr);
        self.commit_or_err(parent, op)?;
        self.counters.merges.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn redistribute<'a>(
        &'a self,
        parent: &mut S::Exclusive<'a>,
        left: &mut S::Exclusive<'a>,
        right: &mut S::Exclusive<'a>,
        recs: &[RecBuf],
        sep_key: &[u8],
        op: &mut OpContext,
    ) -> Result<()> {
        let cut = fraction_cut(recs, 1, 2);
        let new_sep = RecBuf::child(recs[cut].key.clone(), right.page_id());
        let pr = page::probe(parent, sep_key);
        let old_len = page::rec_len(parent, pr.found);
        let room = page::used_bytes(parent) - old_len + new_sep.len() + page::SLOT_BYTES;
        if room > self.limit_bytes() {
            // The parent cannot take the new separator without splitting,
            // which a delete never does: leave the child marked sparse.
            self.mark_growing(right, op)?;
            return self.mark_growing(left, op);
        }
        let (l, r) = recs.split_at(cut);
        let left_before = page::read_all(left);
        let left_layout = page::layout_of(left);
        let right_layout = page::layout_of(right);
        let mut layouts = [(l, page::layout_of(left)), (r, page::layout_of(right))];
        for (part, layout) in &mut layouts {
            layout.flags = if page::image_bytes(part) < self.threshold_bytes() {
                FLAG_GROWING
            } else {
                0
            };
        }
        page::rebuild(left, &layouts[0].1, l);
        let left_fits = self.commit(left, op);
        let right_fits = left_fits && {
            page::rebuild(right, &layouts[1].1, r);
            self.commit(right, op)
        };
        if !right_fits {
            // A page does not compress into its block: put the left page
            // back as it was and keep both, marked sparse.
            if left_fits {
                page::compact(left, &left_layout, &left_before);
                self.commit_or_err(left, op)?;
            }
            self.mark_growing(left, op)?;
            return self.mark_growing(right, op);
        }
        page::remove(parent, pr);
        let pr = page::probe(parent, &new_sep.key);
        page::insert(parent, pr, &new_sep);
        if !self.commit(parent, op) {
            // The parent does not compress with the new separator: undo the
            // redistribution (both pages fitted before) and keep them sparse.
            let right_before: Vec<RecBuf> = strip_offsets(&recs[left_before.len()..]);
            let right_before = internal_first_key_elided(right_before, page::is_leaf(right));
            page::compact(right, &right_layout, &right_before);
            self.commit_or_err(right, op)?;
            page::compact(left, &left_layout, &left_before);
            self.commit_or_err(left, op)?;
            self.mark_growing(left, op)?;
            return self.mark_growing(right, op);
        }
        self.counters
            .redistributions
            .fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn mark_growing<G: PageWrite>(&self, g: &mut G, op: &mut OpContext) -> Result<()> {
        let f = page::flags(g) | FLAG_GROWING;
        page::set_flags(g, f);
        if self.commit(g, op) {
            return Ok(());
        }
        // Even the flag tipped the block over: compact the page (dropping
        // its garbage) while setting it.
        let mut layout = page::layout_of(g);
        layout.flags = f;
        let recs = strip_offsets(&page::read_all(g));
        page::compact(g, &layout, &recs);
        self.commit_or_err(g, op)
    }

    /// While the root is internal with a single child, pulls that child's
    /// contents into the root (the root keeps its id) and frees the child.
    fn collapse_root<G: PageWrite>(&self, root: &mut G, op: &mut OpContext) -> Result<()> {
        while !page::is_leaf(root) && page::record_count(root) == 1 {
            let child_id = page::rec_child(root, page::first_record(root));
            let child = self.store.fix_exclusive(child_id)?;
            let recs = strip_offsets(&page::read_all(&child));
            let mut layout = page::layout_of(&child);
            layout.flags = 0;
            layout.left = None;
            layout.right = None;
            page::compact(root, &layout, &recs);
            self.commit_or_err(root, op)?;
            self.store.free(child, op)?;
        }
        Ok(())
    }
}

/// Where the page's last inserted record is in `recs`, if known.
fn last_insert_index(p: &[u8], recs: &[RecBuf]) -> Option<usize> {
    let last = page::last_insert(p);
    recs.iter()
        .position(|r| last != 0 && r.old_offset == Some(last))
}

/// The first record of an internal page is stored without a key.
fn internal_first_key_elided(mut recs: Vec<RecBuf>, leaf: bool) -> Vec<RecBuf> {
    if let (false, Some(first)) = (leaf, recs.first_mut()) {
        first.key.clear();
    }
    recs
}

fn unreachable_err(page_id: PageId) -> Error {
    Error::Corrupted {
        page_id,
        reason: "latch path is empty".into(),
    }
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
