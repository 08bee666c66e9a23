//! Point reads: values, value lengths, and read-ahead of the leaves a batch
//! of keys will touch.

use crate::error::{Error, Result};
use crate::page::{self, REC_OVERFLOW};
use crate::store::PageStore;
use crate::tree::overflow::{decode_overflow_ref, expect_overflow};
use crate::tree::{BTree, check_key};

/// Keys whose leaves [`BTree::prefetch_leaves`] reads ahead before it
/// decides whether the rest are worth the descents.
pub const PREFETCH_SAMPLE_KEYS: usize = 8;

impl<S: PageStore> BTree<S> {
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

    /// The value stored under `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut value = Vec::new();
        Ok(self.get_into(key, &mut value)?.then_some(value))
    }

    /// [`BTree::get`] into `out` (cleared first): true if `key` is present.
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

    /// [`BTree::load_value`] appended to `out`.
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
}
