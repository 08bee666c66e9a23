//! The page-store contract the tree runs on, and an in-memory store.
//!
//! # The contract
//!
//! A [`PageStore`] hands out pages by [`PageId`] under a *guard* that pins the
//! page and holds its latch:
//!
//! - [`PageStore::fix_shared`] returns a shared guard (shared latch), which
//!   derefs to the page's bytes and cannot change them.
//! - [`PageStore::fix_exclusive`] and [`PageStore::allocate`] return an
//!   exclusive guard ([`PageWrite`]). Its only way to change bytes is
//!   [`PageWrite::write`], which applies the bytes to the frame *and records
//!   the byte patch* `(offset, bytes)` together with the bytes it replaced.
//! - A logical change to a page (one insert, one delete, one rebuild) ends with
//!   [`PageWrite::commit`]. The store checks that the page still fits its
//!   compressed block and answers [`Fit::Fits`] (the patches move into the
//!   operation's [`OpContext`]) or [`Fit::DoesNotFit`] (the store has rolled the
//!   page back to its bytes at the previous commit, and the tree must split the
//!   page instead). An uncompressed store always answers `Fits`.
//! - Every tree operation (one insert, which may split several pages; one
//!   delete, which may merge several) collects all its committed patches in one
//!   [`OpContext`], in commit order, and hands it to [`PageStore::finish_op`]
//!   once the operation is done. The write-ahead log will write one
//!   `OpContext` as one atomic redo group; the buffer pool will append the same
//!   patches to each compressed block's modification log.
//! - Allocation and the free list belong to the store. A freed page must be
//!   exclusively latched by the caller (so nobody else can be looking at it).
//!
//! Latching order is the tree's business (see `docs/design.md`, "B+tree"); the
//! store only promises that shared guards exclude exclusive ones and that a
//! guard never blocks on anything but its own page's latch.

use crate::error::Result;
use barracuda_base::PageId;
use std::ops::{Deref, Range};

/// The result of [`PageWrite::commit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    /// The page fits its (compressed) block; its patches joined the operation.
    Fits,
    /// The page no longer fits its compressed block; the store rolled the page
    /// back to its bytes at the previous commit.
    DoesNotFit,
}

/// One byte patch: `bytes` written at `offset` of the uncompressed page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Patch {
    /// Byte offset in the page.
    pub offset: u32,
    /// The new bytes.
    pub bytes: Vec<u8>,
}

/// The committed patches of one page within one operation; their bytes
/// are kept by the operation ([`OpContext::patches`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PagePatches {
    /// The page changed.
    pub page_id: PageId,
    /// Its patches: a range of the operation's patch list.
    patches: Range<usize>,
    /// Or, instead of patches, the logical change that made them (see
    /// [`crate::recipe`]): its kind and a range of the operation's logical
    /// bytes.
    logical: Option<(LogicalKind, Range<usize>)>,
}

/// A change logged by what it did rather than by its bytes (see
/// [`crate::recipe`]); redo runs it again on the page as it finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogicalKind {
    /// The page rebuilt from its own records ([`crate::recipe::encode`]).
    Rebuild,
    /// A record inserted where the page's search puts it
    /// ([`crate::recipe::encode_insert`]).
    Insert,
    /// A record removed where the page's search finds it, and the page's
    /// flags set ([`crate::recipe::encode_delete`]).
    Delete,
}

impl PagePatches {
    /// How many patches this commit of the page made.
    #[must_use]
    pub fn patch_count(&self) -> usize {
        self.patches.len()
    }
}

/// Where one committed patch lies in its operation's byte buffer.
#[derive(Clone, Copy, Debug)]
struct PatchAt {
    offset: u32,
    start: usize,
    len: usize,
}

/// Patches kept in one byte buffer: a guard writes several per change, and
/// a `Vec` per patch would cost two allocations for every write.
#[derive(Debug, Default)]
struct PatchBuf {
    list: Vec<PatchAt>,
    bytes: Vec<u8>,
}

impl PatchBuf {
    fn push(&mut self, offset: usize, bytes: &[u8]) {
        self.list.push(PatchAt {
            offset: u32::try_from(offset).expect("page offsets are 16-bit"),
            start: self.bytes.len(),
            len: bytes.len(),
        });
        self.bytes.extend_from_slice(bytes);
    }

    fn clear(&mut self) {
        self.list.clear();
        self.bytes.clear();
    }

    fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    fn view(&self) -> Patches<'_> {
        Patches {
            list: &self.list,
            bytes: &self.bytes,
        }
    }
}

/// The patches a page's pending change wrote, in order, for a
/// [`FitCheck`]: each is the new bytes at an offset of the page.
#[derive(Clone, Copy, Debug)]
pub struct Patches<'a> {
    list: &'a [PatchAt],
    bytes: &'a [u8],
}

impl<'a> Patches<'a> {
    /// Each patch's page offset and new bytes, in the order written.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &'a [u8])> + 'a {
        let bytes = self.bytes;
        self.list
            .iter()
            .map(move |p| (p.offset as usize, &bytes[p.start..p.start + p.len]))
    }
}

/// Patches and patch bytes an operation makes room for at its first
/// patch commit (see [`OpContext::commit_page`]).
const PATCHES_FIRST: usize = 16;
const PATCH_BYTES_FIRST: usize = 1024;

/// Everything one tree operation changed: the unit of atomic redo.
///
/// The tree creates one per mutating call and passes it down every mutating
/// path; guards append their patches at each successful commit. Pages that
/// were allocated or freed by the operation are listed too, so that the log
/// can replay allocation changes in the same group.
#[derive(Debug, Default)]
pub struct OpContext {
    /// Committed page changes, in commit order (a page may appear more than
    /// once if it was committed more than once); their ranges index
    /// `patch_list`, so only this type's methods change the two.
    pages: Vec<PagePatches>,
    /// Pages this operation allocated.
    pub allocated: Vec<PageId>,
    /// Pages this operation freed.
    pub freed: Vec<PageId>,
    /// Entries its inserts added (deletes: removed) that the store's kept
    /// count does not have yet: [`crate::BTree::settle_entry_count`] adds
    /// them in one change of the meta page, so a batch of inserts logs one
    /// count instead of one per insert.
    pub entry_delta: i64,
    /// Split as for random inserts, whatever the page's last inserts say:
    /// the writer put these operations in key order itself, so an ascending
    /// run is its doing, not the caller's (a `barracuda::WriteBatch` or a
    /// `barracuda::ChunkedWriter`'s puts mostly out of order). Without it,
    /// a bulk load sorted for locality would leave its leaves full, and the
    /// random writes after it would split them all again.
    pub half_splits: bool,
    /// Fits are asked exactly: a store may not guess that compression
    /// cannot make a page fit its block ([`PageWrite::try_commit`],
    /// [`PageStore::would_fit`]). Set for the second try of an insert
    /// that did not fit with guesses, which a guess wrong for this page's
    /// kind of data (keys among values that do not compress) can cause.
    pub exact_fit: bool,
    /// Every committed patch, in commit order; `pages` index into it.
    patch_list: Vec<PatchAt>,
    /// The patches' bytes, one after the other: one buffer for the whole
    /// operation (a batch of writes commits thousands of patches).
    patch_bytes: Vec<u8>,
    /// The logical changes of commits logged as one, one after the other.
    logical_bytes: Vec<u8>,
}

impl OpContext {
    /// A new, empty operation.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Committed page changes, in commit order (a page may appear more than
    /// once if it was committed more than once).
    #[must_use]
    pub fn pages(&self) -> &[PagePatches] {
        &self.pages
    }

    /// Moves `other`'s pages (with their patches), allocated and freed
    /// pages after this operation's own.
    pub fn append_changes(&mut self, mut other: OpContext) {
        let list_base = self.patch_list.len();
        let bytes_base = self.patch_bytes.len();
        self.patch_list
            .extend(other.patch_list.iter().map(|p| PatchAt {
                start: p.start + bytes_base,
                ..*p
            }));
        self.patch_bytes.append(&mut other.patch_bytes);
        let logical_base = self.logical_bytes.len();
        self.logical_bytes.append(&mut other.logical_bytes);
        self.pages.extend(other.pages.into_iter().map(|page| {
            PagePatches {
                page_id: page.page_id,
                patches: page.patches.start + list_base..page.patches.end + list_base,
                logical: page
                    .logical
                    .map(|(kind, r)| (kind, r.start + logical_base..r.end + logical_base)),
            }
        }));
        self.allocated.append(&mut other.allocated);
        self.freed.append(&mut other.freed);
    }

    /// Records a commit of `page_id` that made `patches` (offset, new
    /// bytes), in the order they were applied.
    pub fn commit_page<'a>(
        &mut self,
        page_id: PageId,
        patches: impl IntoIterator<Item = (usize, &'a [u8])>,
    ) {
        // An insert logs a few hundred bytes in a handful of patches: room
        // for them at the first commit spares doubling up from empty, and an
        // operation that logs only logical records allocates nothing here.
        if self.patch_bytes.capacity() == 0 {
            self.patch_list.reserve(PATCHES_FIRST);
            self.patch_bytes.reserve(PATCH_BYTES_FIRST);
        }
        let first = self.patch_list.len();
        for (offset, bytes) in patches {
            self.patch_list.push(PatchAt {
                offset: u32::try_from(offset).expect("page offsets are 16-bit"),
                start: self.patch_bytes.len(),
                len: bytes.len(),
            });
            self.patch_bytes.extend_from_slice(bytes);
        }
        self.pages.push(PagePatches {
            page_id,
            patches: first..self.patch_list.len(),
            logical: None,
        });
    }

    /// Records a commit of `page_id` whose whole change is the logical
    /// change `bytes` of `kind` ([`crate::recipe`]): the log carries it
    /// instead of the patches.
    pub fn commit_page_logical(&mut self, page_id: PageId, kind: LogicalKind, bytes: &[u8]) {
        let start = self.logical_bytes.len();
        self.logical_bytes.extend_from_slice(bytes);
        self.pages.push(PagePatches {
            page_id,
            patches: self.patch_list.len()..self.patch_list.len(),
            logical: Some((kind, start..self.logical_bytes.len())),
        });
    }

    /// The logical change of one of this operation's commits, if it was
    /// committed as one ([`Self::commit_page_logical`]).
    #[must_use]
    pub fn logical(&self, page: &PagePatches) -> Option<(LogicalKind, &[u8])> {
        page.logical
            .clone()
            .map(|(kind, r)| (kind, &self.logical_bytes[r]))
    }

    /// Takes back the last [`Self::commit_page`] (the store could not
    /// commit it after all).
    pub fn forget_last_commit(&mut self) {
        if let Some(page) = self.pages.pop() {
            if let Some((_, logical)) = page.logical {
                self.logical_bytes.truncate(logical.start);
            }
            if let Some(first) = self.patch_list.get(page.patches.start) {
                self.patch_bytes.truncate(first.start);
            }
            self.patch_list.truncate(page.patches.start);
        }
    }

    /// The patches of one of this operation's commits, as (offset, new
    /// bytes) in the order they were applied.
    pub fn patches<'a>(&'a self, page: &PagePatches) -> impl Iterator<Item = (u32, &'a [u8])> {
        self.patch_list[page.patches.clone()]
            .iter()
            .map(|p| (p.offset, &self.patch_bytes[p.start..p.start + p.len]))
    }

    /// Moves the pages this operation changed, allocated and freed to
    /// `logged`, without their patches (they are in the log now), and
    /// drops the patches.
    pub fn move_logged_to(&mut self, logged: &mut OpContext) {
        logged
            .pages
            .extend(self.pages.drain(..).map(|page| PagePatches {
                page_id: page.page_id,
                patches: 0..0,
                logical: None,
            }));
        logged.allocated.append(&mut self.allocated);
        logged.freed.append(&mut self.freed);
        self.patch_list.clear();
        self.patch_bytes.clear();
        self.logical_bytes.clear();
    }

    /// The total number of patch bytes (payload only) in this operation,
    /// and of its logical changes.
    #[must_use]
    pub fn patch_bytes(&self) -> usize {
        self.pages
            .iter()
            .flat_map(|page| self.patch_list[page.patches.clone()].iter())
            .map(|p| p.len)
            .sum::<usize>()
            + self.logical_bytes.len()
    }
}

/// An exclusive guard: pin + exclusive latch, the only way to change a page.
pub trait PageWrite: Deref<Target = [u8]> {
    /// The page this guard holds.
    fn page_id(&self) -> PageId;

    /// Writes `bytes` at `offset`, recording the patch (and the replaced bytes,
    /// for rollback). Panics if the range is outside the page (a tree bug).
    fn write(&mut self, offset: usize, bytes: &[u8]);

    /// Ends one logical change: checks the compressed fit and either moves the
    /// pending patches into `op` or rolls the page back (see [`Fit`]).
    fn commit(&mut self, op: &mut OpContext) -> Fit;

    /// [`PageWrite::commit`] for a change the tree answers another way when
    /// it does not fit (an insert by splitting the leaf, a delete by
    /// compacting it): a store may answer `DoesNotFit` without compressing
    /// a page fuller than its block when its recent pages say compression
    /// cannot make it fit.
    /// Never for a change whose fit was promised by
    /// [`PageStore::would_fit`]. The default commits.
    fn try_commit(&mut self, op: &mut OpContext) -> Fit {
        self.commit(op)
    }

    /// Writes only the byte ranges where `image` differs from the page, so
    /// that rebuilding a page in place logs only what really changed.
    fn write_diff(&mut self, image: &[u8]) {
        assert_eq!(image.len(), self.len(), "image size must equal page size");
        // The runs are found on one borrow of the page (a guard's deref is
        // not free, and pages are 4 to 64 KiB), then written.
        for (start, end) in diff_runs(self, image) {
            self.write(start, &image[start..end]);
        }
    }

    /// Writes `image`, a rebuild of this page, as [`PageWrite::write_diff`]
    /// does. `recipe` answers, given the page before the rebuild, the
    /// recipe that made it ([`crate::recipe`]): a store that logs may log
    /// it instead of the bytes, and asks for it only then; the default
    /// ignores it.
    fn write_rebuilt(&mut self, image: &[u8], recipe: impl FnOnce(&[u8]) -> Recipe)
    where
        Self: Sized,
    {
        let _ = recipe;
        self.write_diff(image);
    }

    /// Runs `change`, a change of `kind` that redo can make again from its
    /// logged form, which `change` returns ([`crate::recipe::encode_insert`],
    /// [`crate::recipe::encode_delete`]). A store that logs may log that
    /// instead of the bytes; the default ignores it.
    fn write_logged(&mut self, kind: LogicalKind, change: &mut dyn FnMut(&mut Self) -> Vec<u8>)
    where
        Self: Sized,
    {
        let _ = kind;
        change(self);
    }
}

/// A rebuild recipe ([`crate::recipe`]), with a fingerprint of the page it
/// was made from: it rebuilds its image only from exactly that page. It is
/// defined here, with the guards that may log it, and made by the recipe
/// layer above.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recipe {
    /// The encoded recipe (the byte layout in [`crate::recipe`]).
    pub bytes: Vec<u8>,
    /// CRC32C of the page it was encoded against.
    pub(crate) basis: u32,
}

impl Recipe {
    /// Whether `page` is the page this recipe was made from (a page changed
    /// since would rebuild into another image).
    #[must_use]
    pub fn made_from(&self, page: &[u8]) -> bool {
        crc32c::crc32c(page) == self.basis
    }
}

/// The byte ranges `[start, end)` where `new` differs from `old` (same
/// length), runs closer than a patch header merged: what
/// [`PageWrite::write_diff`] writes. Compares eight bytes at a time, so an
/// unchanged stretch costs one comparison per word, not per byte.
#[must_use]
pub fn diff_runs(old: &[u8], new: &[u8]) -> Vec<(usize, usize)> {
    // Runs closer than this are merged: a patch header costs about as much
    // as this many unchanged bytes would.
    const GAP_MERGE_BYTES: usize = 8;
    debug_assert_eq!(old.len(), new.len());
    let len = old.len().min(new.len());
    let mut runs = Vec::new();
    let mut i = 0;
    while let Some(start) = first_difference(old, new, i, len) {
        let end = run_end(old, new, start + 1, GAP_MERGE_BYTES);
        runs.push((start, end));
        i = end;
    }
    runs
}

/// Where a run of differences that reaches `end` stops: the end of the last
/// difference followed by more than `gap` equal bytes (or the slice's end).
/// Eight bytes at a time: the differences within one word are never more
/// than `gap` apart when `gap >= 7`, so a word whose first difference is in
/// reach joins the run whole.
fn run_end(a: &[u8], b: &[u8], mut end: usize, gap: usize) -> usize {
    const WORD: usize = 8;
    debug_assert!(gap >= WORD - 1);
    let len = a.len().min(b.len());
    let mut k = end;
    while k + WORD <= len {
        let x = word_at(a, k) ^ word_at(b, k);
        if x == 0 {
            k += WORD;
            if k > end + gap {
                return end;
            }
            continue;
        }
        // Little-endian: trailing zero bytes come first in memory.
        let first = k + x.trailing_zeros() as usize / 8;
        if first > end + gap {
            return end;
        }
        end = k + WORD - x.leading_zeros() as usize / 8;
        k += WORD;
    }
    while k < len && k <= end + gap {
        if a[k] != b[k] {
            end = k + 1;
        }
        k += 1;
    }
    end
}

fn word_at(s: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(s[at..at + 8].try_into().expect("eight bytes"))
}

/// The first index in `[from, to)` where `a` and `b` differ.
fn first_difference(a: &[u8], b: &[u8], from: usize, to: usize) -> Option<usize> {
    let mut k = from;
    while k + 8 <= to {
        let x = word_at(a, k) ^ word_at(b, k);
        if x != 0 {
            // Little-endian: the lowest differing byte is the first one.
            return Some(k + x.trailing_zeros() as usize / 8);
        }
        k += 8;
    }
    (k..to).find(|&i| a[i] != b[i])
}

/// A store of fixed-size pages with latches, allocation and patch recording.
pub trait PageStore: Send + Sync {
    /// Shared guard: pin + shared latch, derefs to the page bytes.
    type Shared<'a>: Deref<Target = [u8]>
    where
        Self: 'a;
    /// Exclusive guard: pin + exclusive latch; see [`PageWrite`].
    type Exclusive<'a>: PageWrite
    where
        Self: 'a;

    /// The logical page size, a power of two in 4..=64 KiB.
    fn page_size_bytes(&self) -> usize;

    /// Fixes a page in shared mode, blocking until the latch is granted.
    fn fix_shared(&self, page_id: PageId) -> Result<Self::Shared<'_>>;

    /// [`PageStore::fix_shared`] for one page of a point read (`get`),
    /// which touches each page once: a cache may treat the access as a new
    /// reference (the pool makes an old page young at once; see
    /// `barracuda_pool::Access`). The default is `fix_shared`.
    fn fix_shared_point(&self, page_id: PageId) -> Result<Self::Shared<'_>> {
        self.fix_shared(page_id)
    }

    /// Fixes a page in exclusive mode, blocking until the latch is granted.
    fn fix_exclusive(&self, page_id: PageId) -> Result<Self::Exclusive<'_>>;

    /// Allocates a zeroed page and returns it fixed exclusively.
    fn allocate(&self, op: &mut OpContext) -> Result<Self::Exclusive<'_>>;

    /// Frees a page the caller holds exclusively; it returns to the free list.
    fn free(&self, guard: Self::Exclusive<'_>, op: &mut OpContext) -> Result<()>;

    /// The pages currently on the free list (for invariant checks).
    fn free_page_ids(&self) -> Vec<PageId>;

    /// Whether committing `guard`'s page with its bytes changed to `image`
    /// would answer [`Fit::Fits`], without changing anything.
    ///
    /// The tree asks this for every page of a structure change (split,
    /// merge, redistribution) before it writes any of them, so that a change
    /// that would not fit is abandoned with nothing committed. The answer
    /// must be *conservative*: if it is true, writing the bytes where
    /// `image` differs and committing answers `Fits`. `guard` has no pending
    /// patches. Uncompressed stores answer true.
    ///
    /// The default is correct for any store but slow and more conservative
    /// than need be: it allocates a scratch page, writes and commits `image`
    /// there (a page's first commit compresses it afresh, and a page that
    /// compresses afresh fits whatever its modification log holds) and frees
    /// it again, all inside `op`. A store should answer from its codec and
    /// the page's block instead.
    fn would_fit(
        &self,
        guard: &Self::Exclusive<'_>,
        image: &[u8],
        op: &mut OpContext,
    ) -> Result<bool> {
        let _ = guard;
        let mut scratch = self.allocate(op)?;
        let mut bytes = image.to_vec();
        // The codec's reserved bytes are not the tree's to write.
        let reserved = barracuda_codec::PAGE_HEADER_RESERVED_BYTES;
        bytes[..reserved].copy_from_slice(&scratch[..reserved]);
        scratch.write_diff(&bytes);
        let fit = scratch.commit(op);
        self.free(scratch, op)?;
        Ok(fit == Fit::Fits)
    }

    /// Whether a fix of `page_id` would find it in memory, without a read
    /// from the file: a hint (the page may leave or arrive right after).
    /// The tree skips optional work that would read a page while it holds
    /// latches (a shift to a sibling that is not cached). The default says
    /// every page is (a store in memory).
    fn is_cached(&self, page_id: PageId) -> bool {
        let _ = page_id;
        true
    }

    /// A hint that these pages will be read soon (a range scan about to
    /// reach them), so the store may start reading them asynchronously.
    /// Must never block on a page latch and never fail. Returns how many
    /// reads it started (none for pages already cached); the default
    /// ignores the hint and returns 0.
    fn prefetch(&self, page_ids: &[PageId]) -> usize {
        let _ = page_ids;
        0
    }

    /// Called once per tree operation, after all its latches were released,
    /// with everything it changed. The default drops it.
    fn finish_op(&self, op: OpContext) {
        drop(op);
    }

    /// The number of entries (keys) of the store's tree, as the store keeps
    /// it, or `None` if it keeps none (a file written before counts were
    /// kept, until [`crate::BTree::recount_in`] stores one).
    ///
    /// One store holds one tree. No default: a store that wraps another
    /// must forward the count, or the tree's length would silently be lost.
    fn entry_count(&self) -> Result<Option<u64>>;

    /// Adds `delta` (+1 for an insert of a new key, -1 for the delete of a
    /// present one) to the kept count within `op`, so that the count
    /// changes atomically with the entry it counts. Called with no tree
    /// page latched. Does nothing if the store keeps no count. A count
    /// that would go below zero or overflow is [`Error::Corrupted`](crate::Error::Corrupted).
    fn add_entry_count(&self, delta: i64, op: &mut OpContext) -> Result<()>;

    /// Sets the kept count to `count` within `op` (after counting the
    /// leaves of a tree whose store kept none).
    fn set_entry_count(&self, count: u64, op: &mut OpContext) -> Result<()>;
}

mod mem;

pub(crate) use mem::PatchRecorder;
pub use mem::{
    AlwaysFits, CodecBlocks, FitCheck, Frame, MemExclusive, MemShared, MemStore, MemStoreStats,
    NonZeroBudget,
};

#[cfg(test)]
mod tests {
    use super::{LogicalKind, OpContext, diff_runs};
    use barracuda_base::PageId;
    use proptest::prelude::*;

    fn patches_of(op: &OpContext, i: usize) -> Vec<(u32, Vec<u8>)> {
        op.patches(&op.pages()[i])
            .map(|(offset, bytes)| (offset, bytes.to_vec()))
            .collect()
    }

    #[test]
    fn an_operation_keeps_each_commits_patches_apart_and_takes_the_last_back() {
        let mut op = OpContext::new();
        op.commit_page(PageId(3), [(10, &b"abc"[..]), (20, &b"d"[..])]);
        op.commit_page(PageId(4), [(30, &b"efgh"[..])]);
        op.commit_page(PageId(3), [(40, &b"ij"[..])]);
        assert_eq!(
            patches_of(&op, 0),
            [(10, b"abc".to_vec()), (20, b"d".to_vec())]
        );
        assert_eq!(patches_of(&op, 2), [(40, b"ij".to_vec())]);
        assert_eq!(op.patch_bytes(), 10);

        op.forget_last_commit();
        assert_eq!(op.pages().len(), 2);
        assert_eq!(op.patch_bytes(), 8);
        op.commit_page(PageId(5), [(50, &b"k"[..])]);
        assert_eq!(patches_of(&op, 1), [(30, b"efgh".to_vec())]);
        assert_eq!(patches_of(&op, 2), [(50, b"k".to_vec())]);

        let mut logged = OpContext::new();
        op.allocated.push(PageId(5));
        op.move_logged_to(&mut logged);
        assert!(op.pages().is_empty() && op.allocated.is_empty());
        assert_eq!(op.patch_bytes(), 0);
        let ids: Vec<_> = logged.pages().iter().map(|p| p.page_id).collect();
        assert_eq!(ids, [PageId(3), PageId(4), PageId(5)]);
        assert!(logged.pages().iter().all(|p| p.patch_count() == 0));
        assert_eq!(logged.allocated, [PageId(5)]);
        // The emptied operation records new commits from a clean buffer.
        op.commit_page(PageId(6), [(60, &b"lm"[..])]);
        assert_eq!(patches_of(&op, 0), [(60, b"lm".to_vec())]);

        // Appended changes keep their own patches after the receiver's.
        let mut other = OpContext::new();
        other.commit_page(PageId(7), [(70, &b"no"[..]), (80, &b"pqr"[..])]);
        other.freed.push(PageId(8));
        op.append_changes(other);
        assert_eq!(op.pages().len(), 2);
        assert_eq!(patches_of(&op, 0), [(60, b"lm".to_vec())]);
        assert_eq!(
            patches_of(&op, 1),
            [(70, b"no".to_vec()), (80, b"pqr".to_vec())]
        );
        assert_eq!(op.freed, [PageId(8)]);
        assert_eq!(op.patch_bytes(), 7);
    }

    /// Logical commits keep their bytes apart from the patches, are taken
    /// back whole, follow appended changes, and are dropped once logged.
    #[test]
    fn an_operation_keeps_logical_commits_with_their_kind() {
        let mut op = OpContext::new();
        op.commit_page(PageId(3), [(10, &b"abc"[..])]);
        op.commit_page_logical(PageId(4), LogicalKind::Insert, b"record");
        op.commit_page_logical(PageId(3), LogicalKind::Rebuild, b"recipe");
        assert_eq!(op.logical(&op.pages()[0]), None);
        assert_eq!(
            op.logical(&op.pages()[1]),
            Some((LogicalKind::Insert, &b"record"[..]))
        );
        assert_eq!(op.pages()[1].patch_count(), 0);
        assert_eq!(op.patch_bytes(), 3 + 6 + 6);

        op.forget_last_commit();
        assert_eq!(op.patch_bytes(), 3 + 6);
        op.commit_page_logical(PageId(5), LogicalKind::Delete, b"key");
        assert_eq!(
            op.logical(&op.pages()[2]),
            Some((LogicalKind::Delete, &b"key"[..]))
        );

        let mut other = OpContext::new();
        other.commit_page_logical(PageId(7), LogicalKind::Rebuild, b"other");
        op.append_changes(other);
        assert_eq!(
            op.logical(&op.pages()[1]),
            Some((LogicalKind::Insert, &b"record"[..]))
        );
        assert_eq!(
            op.logical(&op.pages()[3]),
            Some((LogicalKind::Rebuild, &b"other"[..]))
        );

        let mut logged = OpContext::new();
        op.move_logged_to(&mut logged);
        assert_eq!(op.patch_bytes(), 0);
        assert!(logged.pages().iter().all(|p| logged.logical(p).is_none()));
        op.commit_page_logical(PageId(8), LogicalKind::Insert, b"again");
        assert_eq!(
            op.logical(&op.pages()[0]),
            Some((LogicalKind::Insert, &b"again"[..]))
        );
    }

    /// The byte-at-a-time scan `diff_runs` replaced: the same runs.
    fn diff_runs_bytewise(old: &[u8], new: &[u8]) -> Vec<(usize, usize)> {
        let mut runs = Vec::new();
        let mut i = 0;
        while i < new.len() {
            if new[i] == old[i] {
                i += 1;
                continue;
            }
            let start = i;
            let mut end = i + 1;
            let mut j = end;
            while j < new.len() && j - end <= 8 {
                if new[j] != old[j] {
                    end = j + 1;
                }
                j += 1;
            }
            runs.push((start, end));
            i = end;
        }
        runs
    }

    proptest! {
        #[test]
        fn diff_runs_match_a_bytewise_scan(
            old in proptest::collection::vec(0u8..4, 0..300),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..4), 0..40),
        ) {
            let mut new = old.clone();
            for (at, by) in flips {
                if !new.is_empty() {
                    let k = at.index(new.len());
                    new[k] = new[k].wrapping_add(by);
                }
            }
            let runs = diff_runs(&old, &new);
            prop_assert_eq!(&runs, &diff_runs_bytewise(&old, &new));
            let mut patched = old.clone();
            for &(s, e) in &runs {
                patched[s..e].copy_from_slice(&new[s..e]);
            }
            prop_assert_eq!(patched, new);
        }

        /// Long stretches where every byte differs, broken by equal
        /// stretches of every length around the merge gap: a rebuilt page.
        #[test]
        fn diff_runs_of_rebuilt_pages_match_a_bytewise_scan(
            old in proptest::collection::vec(any::<u8>(), 0..2000),
            stretches in proptest::collection::vec((0usize..80, any::<bool>()), 0..60),
            seed in any::<u8>(),
        ) {
            let mut new = old.clone();
            let mut at = 0;
            for (len, differ) in stretches {
                for k in at..(at + len).min(new.len()) {
                    if differ {
                        // Never equal: the added byte is not zero.
                        new[k] = old[k].wrapping_add(1 + (seed ^ k as u8) % 255);
                    }
                }
                at += len;
            }
            let runs = diff_runs(&old, &new);
            prop_assert_eq!(&runs, &diff_runs_bytewise(&old, &new));
        }
    }
}
