//! A shard of the record cache: its records in a ring of bytes, their
//! index, and eviction (FIFO with reinsertion).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

use super::key_hash;
use super::sketch::Sketch;

/// Bytes of a record's header in a shard's ring (see [`Shard`]).
pub(super) const HEADER_BYTES: usize = 16;

/// Header flags.
pub(super) const FLAG_LIVE: u8 = 1;
pub(super) const FLAG_REFERENCED: u8 = 2;
pub(super) const FLAG_PADDING: u8 = 4;

/// One shard: its records one after another in a ring of bytes, allocated
/// at its first fill, so that the cache's memory is its budget whatever the
/// records' sizes (an allocation per record left the memory of 16 reading
/// threads' allocator arenas at twice the budget); and an index from each
/// key's hash to its record's offset.
///
/// A record: a header (`len` u32: the record's bytes, a multiple of 8;
/// `value_len` u32; `stored_len` u32: the value's bytes as stored, zstd
/// when they differ; `key_len` u16; flags u8; one zero byte), the key, the
/// stored value, zeros to the next multiple of 8. A record that does not
/// fit before the ring's end leaves a padding record there (or, with less
/// room than a header, nothing) and goes to the start.
///
/// New records go at the head; room is made at the tail (FIFO with
/// reinsertion, a CLOCK): a record read since it was added or moved is
/// moved to the head with its bit cleared when the head has room for it
/// right there, and evicted otherwise.
#[derive(Default)]
pub(super) struct Shard {
    pub(super) ring: Ring,
    pub(super) head: usize,
    pub(super) tail: usize,
    /// Bytes from the tail to the head, padding and dead records included.
    pub(super) used: usize,
    pub(super) index: HashMap<u64, u32, HashOnly>,
    pub(super) sketch: Sketch,
    scratch: Vec<u8>,
    pub(super) fills: u64,
    pub(super) fills_not_admitted: u64,
    pub(super) evictions: u64,
    pub(super) reinsertions: u64,
    pub(super) invalidations: u64,
}

/// A shard's ring of bytes, in an anonymous mapping of its own, zeroed:
/// dropping it gives the memory back to the kernel at once. As a heap
/// allocation (about 110 KiB), a released shard's ring would stay with the
/// allocator while the pool used the same bytes again, and the process
/// would hold both. Empty
/// (`Default`) until allocated.
#[derive(Default)]
pub(super) struct Ring(Option<memmap2::MmapMut>);

impl Ring {
    /// A zeroed ring of `len` bytes; `None` for 0 bytes (an empty ring is
    /// an unallocated one) or if the kernel refuses it.
    pub(super) fn new(len: usize) -> Option<Ring> {
        if len == 0 {
            return None;
        }
        memmap2::MmapMut::map_anon(len)
            .ok()
            .map(|map| Ring(Some(map)))
    }
}

impl std::ops::Deref for Ring {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.0.as_deref().unwrap_or_default()
    }
}

impl std::ops::DerefMut for Ring {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.0.as_deref_mut().unwrap_or_default()
    }
}

/// The index's keys are hashes already.
#[derive(Clone, Copy, Default)]
pub(super) struct HashOnly;

impl BuildHasher for HashOnly {
    type Hasher = PassThrough;
    fn build_hasher(&self) -> PassThrough {
        PassThrough(0)
    }
}

pub(super) struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 << 8) | u64::from(byte);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A record's header, read from or written to the ring.
#[derive(Clone, Copy, Debug)]
pub(super) struct Header {
    pub(super) len: usize,
    pub(super) value_len: usize,
    pub(super) stored_len: usize,
    pub(super) key_len: usize,
    pub(super) flags: u8,
}

impl Header {
    pub(super) fn read(ring: &[u8], at: usize) -> Header {
        let u32_at = |i: usize| {
            u32::from_le_bytes([
                ring[at + i],
                ring[at + i + 1],
                ring[at + i + 2],
                ring[at + i + 3],
            ]) as usize
        };
        Header {
            len: u32_at(0),
            value_len: u32_at(4),
            stored_len: u32_at(8),
            key_len: u16::from_le_bytes([ring[at + 12], ring[at + 13]]) as usize,
            flags: ring[at + 14],
        }
    }

    fn write(&self, ring: &mut [u8], at: usize) {
        let header = &mut ring[at..at + HEADER_BYTES];
        header[0..4].copy_from_slice(&(self.len as u32).to_le_bytes());
        header[4..8].copy_from_slice(&(self.value_len as u32).to_le_bytes());
        header[8..12].copy_from_slice(&(self.stored_len as u32).to_le_bytes());
        header[12..14].copy_from_slice(&(self.key_len as u16).to_le_bytes());
        header[14] = self.flags;
        header[15] = 0;
    }

    pub(super) fn record_len(key_len: usize, stored_len: usize) -> usize {
        (HEADER_BYTES + key_len + stored_len).next_multiple_of(8)
    }
}

pub(super) fn set_flags(ring: &mut [u8], at: usize, set: u8, clear: u8) {
    ring[at + 14] = (ring[at + 14] | set) & !clear;
}

/// What starts at `at` of a ring, and its bytes: a record (or a padding
/// record) with its header, or `None` for the rest of a ring too short for
/// a header (padding without one).
pub(super) fn record_at(ring: &[u8], at: usize) -> (Option<Header>, usize) {
    if ring.len() - at < HEADER_BYTES {
        return (None, ring.len() - at);
    }
    let header = Header::read(ring, at);
    (Some(header), header.len)
}

/// The key of the record at `at`, whose header is `header`.
pub(super) fn key_at<'r>(ring: &'r [u8], at: usize, header: &Header) -> &'r [u8] {
    &ring[at + HEADER_BYTES..at + HEADER_BYTES + header.key_len]
}

impl Shard {
    /// Drops every record, the index and the frequency sketch (their
    /// memory goes back to the pool); returns the ring.
    pub(super) fn release(&mut self) -> Ring {
        self.index = HashMap::default();
        self.sketch = Sketch::default();
        self.head = 0;
        self.tail = 0;
        self.used = 0;
        std::mem::take(&mut self.ring)
    }

    /// TinyLFU's admission: true if the ring has room for `len` more bytes
    /// without evicting, or if the record of `hash` was read more often
    /// lately than the record it would evict (or none is found among the
    /// first few from the tail).
    pub(super) fn admit(&mut self, hash: u64, len: usize) -> bool {
        if self.used + len <= self.ring.len() || self.ring.is_empty() {
            return true;
        }
        let Some(victim) = self.tail_record_hash() else {
            return true;
        };
        let admitted = self.sketch.estimate(hash) > self.sketch.estimate(victim);
        if !admitted {
            self.fills_not_admitted += 1;
        }
        admitted
    }

    /// The hash of the record eviction would take next: the first live,
    /// unreferenced one from the tail, among the first few.
    fn tail_record_hash(&self) -> Option<u64> {
        let mut at = self.tail;
        let mut walked = 0;
        for _ in 0..8 {
            if walked >= self.used {
                return None;
            }
            let (header, len) = record_at(&self.ring, at);
            // A referenced record would move to the head, not go.
            if let Some(header) = header
                && header.flags & (FLAG_LIVE | FLAG_REFERENCED) == FLAG_LIVE
            {
                return Some(key_hash(key_at(&self.ring, at, &header)));
            }
            walked += len;
            at = (at + len) % self.ring.len();
        }
        None
    }

    /// The offset of `key`'s live record, if indexed.
    pub(super) fn find(&self, hash: u64, key: &[u8]) -> Option<usize> {
        let at = *self.index.get(&hash)? as usize;
        let header = Header::read(&self.ring, at);
        (header.flags & FLAG_LIVE != 0 && key_at(&self.ring, at, &header) == key).then_some(at)
    }

    /// Appends a record (replacing any under the same hash), making room at
    /// the tail.
    pub(super) fn insert(&mut self, hash: u64, header: &Header, key: &[u8], stored: &[u8]) {
        debug_assert!(!self.ring.is_empty(), "the ring is allocated first");
        if let Some(at) = self.index.remove(&hash) {
            set_flags(&mut self.ring, at as usize, 0, FLAG_LIVE);
        }
        let at = self.make_room(header.len);
        header.write(&mut self.ring, at);
        let key_at = at + HEADER_BYTES;
        self.ring[key_at..key_at + key.len()].copy_from_slice(key);
        let stored_at = key_at + key.len();
        self.ring[stored_at..stored_at + stored.len()].copy_from_slice(stored);
        self.ring[stored_at + stored.len()..at + header.len].fill(0);
        // A record that ends at the ring's end leaves the head at its start.
        self.head = (at + header.len) % self.ring.len();
        self.used += header.len;
        self.index.insert(hash, at as u32);
        self.fills += 1;
    }

    /// Room for `len` contiguous bytes at the head: returns where they
    /// start (the head, or the ring's start after a padding record). The
    /// caller writes them and moves the head past them.
    fn make_room(&mut self, len: usize) -> usize {
        loop {
            if self.used == 0 {
                self.head = 0;
                self.tail = 0;
            }
            let wrapped = self.head < self.tail || (self.used > 0 && self.head == self.tail);
            if wrapped {
                if self.tail - self.head >= len {
                    return self.head;
                }
            } else {
                if self.ring.len() - self.head >= len {
                    return self.head;
                }
                // Pad to the end and go on at the start.
                let rest = self.ring.len() - self.head;
                if rest >= HEADER_BYTES {
                    let padding = Header {
                        len: rest,
                        value_len: 0,
                        stored_len: 0,
                        key_len: 0,
                        flags: FLAG_PADDING,
                    };
                    padding.write(&mut self.ring, self.head);
                }
                self.used += rest;
                self.head = 0;
                continue;
            }
            self.reclaim_tail();
        }
    }

    /// Frees the record at the tail: skips padding and dead records,
    /// evicts an unreferenced one, and moves a referenced one to the head
    /// (bit cleared) if the head has room for it there, evicting it
    /// otherwise.
    fn reclaim_tail(&mut self) {
        let at = self.tail;
        let (header, len) = record_at(&self.ring, at);
        self.tail = (at + len) % self.ring.len();
        self.used -= len;
        let Some(header) = header.filter(|header| header.flags & FLAG_LIVE != 0) else {
            return;
        };
        let hash = key_hash(key_at(&self.ring, at, &header));
        let referenced = header.flags & FLAG_REFERENCED != 0;
        // After the tail moved, room at the head right there: the gap up
        // to the tail (wrapped), which now includes this record's bytes.
        let room = if self.used == 0 {
            self.ring.len()
        } else {
            self.tail.saturating_sub(self.head)
        };
        if referenced && room >= header.len && self.used > 0 {
            let mut scratch = std::mem::take(&mut self.scratch);
            scratch.clear();
            scratch.extend_from_slice(&self.ring[at..at + header.len]);
            let to = self.head;
            self.ring[to..to + header.len].copy_from_slice(&scratch);
            set_flags(&mut self.ring, to, 0, FLAG_REFERENCED);
            self.head = (to + header.len) % self.ring.len();
            self.used += header.len;
            self.index.insert(hash, to as u32);
            self.scratch = scratch;
            self.reinsertions += 1;
        } else {
            self.index.remove(&hash);
            self.evictions += 1;
        }
    }
}
