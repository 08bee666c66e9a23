//! Long values: a value above the inline limit (or one whose record does
//! not compress into any block) is stored on a chain of overflow pages, and
//! its record holds a reference to the chain.

use crate::error::{Error, Result};
use crate::page::{self, PageType, REC_OVERFLOW, RecBuf};
use crate::store::{OpContext, PageStore, PageWrite};
use crate::tree::{BTree, unreachable_err};
use barracuda_base::PageId;

/// An overflow chain (being read or freed) must only reach overflow pages.
pub(super) fn expect_overflow(p: &[u8], page_id: PageId, doing: &str) -> Result<()> {
    if page::page_type(p) == Some(PageType::Overflow) {
        return Ok(());
    }
    Err(Error::Corrupted {
        page_id,
        reason: format!("{doing} an overflow chain that reaches a non-overflow page"),
    })
}

/// The first page of the overflow chain of record `off` of leaf `p`, if
/// its value overflowed: what removing or replacing it must free, read
/// without copying the record.
pub(super) fn overflow_chain(p: &[u8], off: usize) -> Option<PageId> {
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

impl<S: PageStore> BTree<S> {
    /// The record value to store for `value`: itself if it is short enough
    /// to be inline and `inline` allows it, else a reference to a new
    /// overflow chain holding it.
    pub(super) fn encode_value<'v>(
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
    pub(super) fn free_value(&self, op: &mut OpContext, rec: &RecBuf) -> Result<()> {
        let chain = (rec.flags & REC_OVERFLOW != 0).then(|| decode_overflow_ref(&rec.value).0);
        self.free_chain_of(op, chain)
    }

    /// Frees the chain [`overflow_chain`] found, if any.
    pub(super) fn free_chain_of(&self, op: &mut OpContext, chain: Option<PageId>) -> Result<()> {
        match chain {
            Some(first) => self.free_chain(op, first),
            None => Ok(()),
        }
    }

    /// Frees an overflow chain from its first page.
    pub(super) fn free_chain(&self, op: &mut OpContext, first: PageId) -> Result<()> {
        let mut next = Some(first);
        while let Some(id) = next {
            let g = self.store.fix_exclusive(id)?;
            expect_overflow(&g, id, "freeing")?;
            next = page::right(&g);
            self.store.free(g, op)?;
        }
        Ok(())
    }
}
