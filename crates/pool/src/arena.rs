//! The one memory budget: an arena of page-size chunks allocated once at
//! open, aligned for `O_DIRECT`. A chunk holds either one uncompressed frame
//! or is split into compressed blocks of the pool's block size (a slab: the
//! one-size case of InnoDB's `buf_buddy`). Nothing is allocated after open.
//!
//! The arena is an anonymous private mapping: the kernel hands out zeroed,
//! page-aligned memory and backs each page on first touch. Opening a 1 GiB
//! pool therefore costs a `mmap`, not a 1 GiB `memset` (about a second of
//! CPU and the whole budget resident at once, which is what
//! `alloc_zeroed` with a 4 KiB alignment did), and the process's resident
//! memory grows with the chunks the pool has used. A thread of the arena's
//! faults the next chunks in before the pool takes them (`prefault.rs`).

use std::ptr::NonNull;

use crate::config::ARENA_ALIGNMENT_BYTES;
use crate::error::{PoolError, Result};
use crate::prefault::Prefault;

/// "No index": the end of a list, a free slot's owner, a missing frame.
pub(crate) const NIL: u32 = u32::MAX;

/// The raw memory. Access to the bytes of a chunk or slot is synchronized by
/// the pool (page latches and the pool mutex), not by the arena.
pub(crate) struct Arena {
    base: NonNull<u8>,
    size_bytes: usize,
    chunk_size_bytes: usize,
    chunk_count: u32,
    prefault: Prefault,
}

// SAFETY: the arena is plain memory owned by the pool; every access to its
// bytes goes through raw pointers whose use is synchronized by page latches.
unsafe impl Send for Arena {}
// SAFETY: as above; `&Arena` only hands out raw pointers.
unsafe impl Sync for Arena {}

impl Arena {
    /// Allocates `chunk_count` zeroed chunks of `chunk_size_bytes`, in
    /// transparent huge pages if `huge_pages` and the kernel agrees.
    pub(crate) fn new(chunk_size_bytes: usize, chunk_count: u32, huge_pages: bool) -> Result<Self> {
        let size_bytes = chunk_size_bytes
            .checked_mul(chunk_count as usize)
            .ok_or_else(|| PoolError::InvalidConfig {
                reason: "arena size overflows usize".into(),
            })?;
        assert!(
            size_bytes > 0,
            "the config check guarantees at least two chunks"
        );
        // SAFETY: a fresh anonymous private mapping of a non-zero length; no
        // existing memory is touched. The result is checked below.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(PoolError::InvalidConfig {
                reason: format!(
                    "cannot allocate a {size_bytes}-byte buffer pool: {}",
                    std::io::Error::last_os_error()
                ),
            });
        }
        // Mappings are page-aligned, which covers O_DIRECT's alignment.
        debug_assert_eq!(raw as usize % ARENA_ALIGNMENT_BYTES, 0);
        // Transparent huge pages where the kernel offers them: one fault
        // and one TLB entry per 2 MiB instead of per 4 KiB, for an arena
        // that a tree descent touches at random. Only advice: where it is
        // refused (no THP, `never`), the arena keeps base pages.
        // SAFETY: advice on the mapping just created, of its exact length.
        if huge_pages && unsafe { libc::madvise(raw, size_bytes, libc::MADV_HUGEPAGE) } != 0 {
            tracing::debug!(
                "buffer pool without huge pages: {}",
                std::io::Error::last_os_error()
            );
        }
        let base = NonNull::new(raw.cast::<u8>()).ok_or_else(|| PoolError::InvalidConfig {
            reason: "mmap returned a null buffer pool".into(),
        })?;
        Ok(Self {
            prefault: Prefault::new(base.as_ptr() as usize, chunk_size_bytes, chunk_count),
            base,
            size_bytes,
            chunk_size_bytes,
            chunk_count,
        })
    }

    /// Pointer to `len` bytes at `offset` of the arena.
    pub(crate) fn ptr(&self, offset: usize, len: usize) -> *mut u8 {
        assert!(
            offset + len <= self.size_bytes,
            "arena access out of bounds"
        );
        // SAFETY: in bounds of the single allocation (asserted above).
        unsafe { self.base.as_ptr().add(offset) }
    }

    /// Number of chunks.
    pub(crate) fn chunk_count(&self) -> u32 {
        self.chunk_count
    }

    /// Size of one chunk (the page size).
    pub(crate) fn chunk_size_bytes(&self) -> usize {
        self.chunk_size_bytes
    }

    /// The pool took `chunk` for a frame or a slab: the chunks after it are
    /// populated ahead (see `prefault.rs`).
    pub(crate) fn chunk_taken(&self, chunk: u32) {
        self.prefault.chunk_taken(chunk);
    }

    /// Gives the memory of `chunk`, lent out of the budget, back to the
    /// kernel (the mapping stays; a later touch would read zeros).
    pub(crate) fn release(&self, chunk: u32) {
        let ptr = self.ptr(
            chunk as usize * self.chunk_size_bytes,
            self.chunk_size_bytes,
        );
        // SAFETY: a whole chunk inside the mapping, which the pool no longer
        // uses (lent); `MADV_DONTNEED` on a private anonymous mapping only
        // drops its pages.
        let rc = unsafe { libc::madvise(ptr.cast(), self.chunk_size_bytes, libc::MADV_DONTNEED) };
        if rc != 0 {
            tracing::debug!(
                "madvise(MADV_DONTNEED) of a lent chunk: {}",
                std::io::Error::last_os_error()
            );
        }
    }

    /// Chunks populated ahead of the pool so far.
    pub(crate) fn prefaulted_chunks(&self) -> u64 {
        self.prefault.populated_chunks()
    }

    /// Whether a prefault thread runs now.
    #[cfg(test)]
    fn prefault_running(&self) -> bool {
        self.prefault.running()
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // The prefault thread advises on the mapping: it ends first.
        self.prefault.stop();
        // SAFETY: `base` was mapped in `new` with exactly `size_bytes`, and
        // nothing borrows the arena once it is dropped.
        let rc = unsafe { libc::munmap(self.base.as_ptr().cast(), self.size_bytes) };
        debug_assert_eq!(rc, 0, "munmap of the arena failed");
    }
}

/// What a chunk currently holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChunkUse {
    /// On the free list.
    Free,
    /// One uncompressed frame.
    Frame,
    /// Split into blocks; `used_mask` has a bit per used slot.
    Slab { used_mask: u64 },
    /// Lent out of the budget ([`crate::BufferPool::lend_bytes`]): the pool
    /// does not use it until it is given back
    /// ([`crate::BufferPool::return_bytes`]), and its memory went back to
    /// the kernel.
    Lent,
}

/// Bookkeeping of which chunk and slot holds what. Lives under the pool mutex.
pub(crate) struct ChunkAllocator {
    uses: Vec<ChunkUse>,
    free_chunks: Vec<u32>,
    /// Slab chunks with at least one free slot, and each chunk's position.
    partial_slabs: Vec<u32>,
    partial_position: Vec<u32>,
    slots_per_chunk: u32,
    free_slot_count: u32,
    lent_chunk_count: u32,
}

impl ChunkAllocator {
    /// All chunks free. `slots_per_chunk` is `page / block` (1 when the pool
    /// is uncompressed), at most 64 so a `u64` mask covers a slab.
    pub(crate) fn new(chunk_count: u32, slots_per_chunk: u32) -> Self {
        assert!((1..=64).contains(&slots_per_chunk));
        Self {
            uses: vec![ChunkUse::Free; chunk_count as usize],
            free_chunks: (0..chunk_count).rev().collect(),
            partial_slabs: Vec::with_capacity(chunk_count as usize),
            partial_position: vec![NIL; chunk_count as usize],
            slots_per_chunk,
            free_slot_count: 0,
            lent_chunk_count: 0,
        }
    }

    /// Blocks per chunk.
    pub(crate) fn slots_per_chunk(&self) -> u32 {
        self.slots_per_chunk
    }

    /// Chunks not in use.
    pub(crate) fn free_chunk_count(&self) -> u32 {
        self.free_chunks.len() as u32
    }

    /// Free slots inside slab chunks (not counting free chunks).
    pub(crate) fn free_slot_count(&self) -> u32 {
        self.free_slot_count
    }

    /// What a chunk holds.
    pub(crate) fn chunk_use(&self, chunk: u32) -> ChunkUse {
        self.uses[chunk as usize]
    }

    /// Takes a free chunk for a frame.
    pub(crate) fn alloc_frame(&mut self) -> Option<u32> {
        let chunk = self.free_chunks.pop()?;
        self.uses[chunk as usize] = ChunkUse::Frame;
        Some(chunk)
    }

    /// Returns a frame's chunk.
    pub(crate) fn free_frame(&mut self, chunk: u32) {
        self.leave_frame(chunk, ChunkUse::Free);
        self.free_chunks.push(chunk);
    }

    /// Lends a chunk just taken for a frame out of the budget, for good.
    pub(crate) fn lend(&mut self, chunk: u32) {
        self.leave_frame(chunk, ChunkUse::Lent);
        self.lent_chunk_count += 1;
    }

    /// Takes back one chunk lent out of the budget: free again (its memory
    /// went back to the kernel, and reads as zeros until written). `None`
    /// if none is lent.
    pub(crate) fn take_back(&mut self) -> Option<u32> {
        if self.lent_chunk_count == 0 {
            return None;
        }
        let chunk = self.uses.iter().rposition(|u| *u == ChunkUse::Lent)? as u32;
        self.uses[chunk as usize] = ChunkUse::Free;
        self.free_chunks.push(chunk);
        self.lent_chunk_count -= 1;
        Some(chunk)
    }

    /// Turns a frame's chunk into `next` (free or lent).
    fn leave_frame(&mut self, chunk: u32, next: ChunkUse) {
        let chunk_use = &mut self.uses[chunk as usize];
        assert_eq!(*chunk_use, ChunkUse::Frame, "chunk {chunk} is no frame");
        *chunk_use = next;
    }

    /// Chunks lent out of the budget.
    pub(crate) fn lent_chunk_count(&self) -> u32 {
        self.lent_chunk_count
    }

    /// Takes a block slot, from a partly used slab or by splitting a free chunk.
    pub(crate) fn alloc_slot(&mut self) -> Option<u32> {
        let chunk = match self.partial_slabs.last() {
            Some(&chunk) => chunk,
            None => {
                let chunk = self.free_chunks.pop()?;
                self.uses[chunk as usize] = ChunkUse::Slab { used_mask: 0 };
                self.free_slot_count += self.slots_per_chunk;
                self.partial_insert(chunk);
                chunk
            }
        };
        let ChunkUse::Slab { used_mask } = self.uses[chunk as usize] else {
            unreachable!("partial slab list holds slab chunks only")
        };
        let slot_in_chunk = (!used_mask).trailing_zeros();
        let used_mask = used_mask | (1 << slot_in_chunk);
        self.uses[chunk as usize] = ChunkUse::Slab { used_mask };
        self.free_slot_count -= 1;
        if used_mask.count_ones() == self.slots_per_chunk {
            self.partial_remove(chunk);
        }
        Some(chunk * self.slots_per_chunk + slot_in_chunk)
    }

    /// Returns a block slot; an emptied slab chunk becomes free.
    pub(crate) fn free_slot(&mut self, slot: u32) {
        let chunk = slot / self.slots_per_chunk;
        let bit = 1u64 << (slot % self.slots_per_chunk);
        let ChunkUse::Slab { used_mask } = self.uses[chunk as usize] else {
            panic!("freeing slot {slot} of chunk {chunk}, which is no slab")
        };
        assert!(used_mask & bit != 0, "double free of slot {slot}");
        let was_full = used_mask.count_ones() == self.slots_per_chunk;
        let used_mask = used_mask & !bit;
        self.free_slot_count += 1;
        if was_full {
            self.partial_insert(chunk);
        }
        if used_mask == 0 {
            self.partial_remove(chunk);
            self.free_slot_count -= self.slots_per_chunk;
            self.uses[chunk as usize] = ChunkUse::Free;
            self.free_chunks.push(chunk);
        } else {
            self.uses[chunk as usize] = ChunkUse::Slab { used_mask };
        }
    }

    /// Partly used slab chunks, fewest used slots first (compaction order).
    pub(crate) fn partial_slabs_by_use(&self) -> Vec<u32> {
        let mut chunks = self.partial_slabs.clone();
        chunks.sort_by_key(|&c| match self.uses[c as usize] {
            ChunkUse::Slab { used_mask } => used_mask.count_ones(),
            _ => u32::MAX,
        });
        chunks
    }

    /// Used slots of a slab chunk.
    pub(crate) fn used_slots(&self, chunk: u32) -> impl Iterator<Item = u32> + '_ {
        let mask = match self.uses[chunk as usize] {
            ChunkUse::Slab { used_mask } => used_mask,
            _ => 0,
        };
        (0..self.slots_per_chunk)
            .filter(move |s| mask & (1 << s) != 0)
            .map(move |s| chunk * self.slots_per_chunk + s)
    }

    /// Takes a free slot outside `avoid_chunk` (for relocation).
    pub(crate) fn alloc_slot_outside(&mut self, avoid_chunk: u32) -> Option<u32> {
        let position = self.partial_slabs.iter().position(|&c| c != avoid_chunk)?;
        let last = self.partial_slabs.len() - 1;
        self.partial_slabs.swap(position, last);
        self.partial_position[self.partial_slabs[position] as usize] = position as u32;
        self.partial_position[self.partial_slabs[last] as usize] = last as u32;
        self.alloc_slot()
    }

    fn partial_insert(&mut self, chunk: u32) {
        debug_assert_eq!(self.partial_position[chunk as usize], NIL);
        self.partial_position[chunk as usize] = self.partial_slabs.len() as u32;
        self.partial_slabs.push(chunk);
    }

    fn partial_remove(&mut self, chunk: u32) {
        let position = self.partial_position[chunk as usize];
        debug_assert_ne!(position, NIL);
        self.partial_slabs.swap_remove(position as usize);
        if let Some(&moved) = self.partial_slabs.get(position as usize) {
            self.partial_position[moved as usize] = position;
        }
        self.partial_position[chunk as usize] = NIL;
    }

    /// Chunks holding frames, and block slots in use.
    pub(crate) fn usage(&self) -> (u32, u32) {
        let mut frames = 0;
        let mut slots = 0;
        for chunk_use in &self.uses {
            match chunk_use {
                ChunkUse::Free | ChunkUse::Lent => {}
                ChunkUse::Frame => frames += 1,
                ChunkUse::Slab { used_mask } => slots += used_mask.count_ones(),
            }
        }
        (frames, slots)
    }

    /// Checks the free lists against the chunk uses.
    pub(crate) fn check_invariants(&self) {
        let mut free_slots = 0;
        let mut lent = 0;
        for (chunk, chunk_use) in self.uses.iter().enumerate() {
            let in_free = self.free_chunks.contains(&(chunk as u32));
            let in_partial = self.partial_position[chunk] != NIL;
            match chunk_use {
                ChunkUse::Free => assert!(in_free && !in_partial, "free chunk {chunk} lists"),
                ChunkUse::Frame => assert!(!in_free && !in_partial, "frame chunk {chunk} listed"),
                ChunkUse::Lent => {
                    assert!(!in_free && !in_partial, "lent chunk {chunk} listed");
                    lent += 1;
                }
                ChunkUse::Slab { used_mask } => {
                    let used = used_mask.count_ones();
                    assert!(used > 0 && !in_free, "empty or free-listed slab {chunk}");
                    // A 64-slot chunk uses every bit (and a shift by 64
                    // overflows): test its width first.
                    assert!(self.slots_per_chunk == 64 || *used_mask >> self.slots_per_chunk == 0);
                    assert_eq!(
                        in_partial,
                        used < self.slots_per_chunk,
                        "slab {chunk} partial list"
                    );
                    free_slots += self.slots_per_chunk - used;
                }
            }
        }
        assert_eq!(free_slots, self.free_slot_count, "free slot count");
        assert_eq!(lent, self.lent_chunk_count, "lent chunk count");
        for (position, &chunk) in self.partial_slabs.iter().enumerate() {
            assert_eq!(self.partial_position[chunk as usize], position as u32);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's THP mode, if it has one (`always`, `madvise`, `never`).
    fn thp_mode() -> Option<String> {
        let modes = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
        let start = modes.find('[')? + 1;
        let end = modes[start..].find(']')? + start;
        Some(modes[start..end].to_string())
    }

    /// Kilobytes of huge pages backing the mapping that holds `base`. The
    /// kernel may have merged the arena's mapping with an adjacent one that
    /// another test thread made (same flags, no huge-page advice), so it
    /// is the mapping that contains `base`, not one that starts there.
    fn huge_kib(base: *const u8) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let base = base as usize;
        let holds_base = |line: &str| {
            let Some((range, _)) = line.split_once(' ') else {
                return false;
            };
            let Some((start, end)) = range.split_once('-') else {
                return false;
            };
            match (
                usize::from_str_radix(start, 16),
                usize::from_str_radix(end, 16),
            ) {
                (Ok(start), Ok(end)) => (start..end).contains(&base),
                _ => false,
            }
        };
        let mut lines = smaps.lines().skip_while(|line| !holds_base(line));
        assert!(lines.next().is_some(), "no mapping holds {base:x}");
        // The first `AnonHugePages` after the mapping's header is its own.
        lines
            .find_map(|line| line.strip_prefix("AnonHugePages:"))
            .map_or(0, |kib| {
                kib.trim().trim_end_matches("kB").trim().parse().unwrap()
            })
    }

    fn touched_arena(huge_pages: bool) -> Arena {
        let arena = Arena::new(16 << 10, 1024, huge_pages).unwrap();
        for chunk in 0..arena.chunk_count() as usize {
            let at = chunk * arena.chunk_size_bytes();
            // SAFETY: inside the arena, which nothing else uses.
            unsafe { arena.ptr(at, 1).write(1) };
        }
        arena
    }

    /// Whether the first OS page of `chunk` is resident (`mincore`).
    fn resident(arena: &Arena, chunk: usize) -> bool {
        let mut vec = [0u8; 1];
        let at = arena.ptr(chunk * arena.chunk_size_bytes(), 1);
        // SAFETY: one OS page inside the arena's mapping, page-aligned (the
        // mapping and the chunk size are); `vec` has room for its one entry.
        let rc = unsafe { libc::mincore(at.cast(), 1, vec.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        vec[0] & 1 == 1
    }

    #[test]
    fn chunks_ahead_of_the_taken_ones_are_populated_and_no_further() {
        // 64 MiB of 16 KiB chunks, in base pages.
        let arena = Arena::new(16 << 10, 4096, false).unwrap();
        assert!(!resident(&arena, 0));
        for chunk in 0..300 {
            arena.chunk_taken(chunk);
        }
        // Taking chunk 299 leaves at least half of a window of 256 chunks
        // (4 MiB) asked for after it, and at most a whole one.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while arena.prefaulted_chunks() < 299 + 128 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        if arena.prefaulted_chunks() == 0 {
            return; // A kernel without MADV_POPULATE_WRITE (before 5.14).
        }
        assert!(arena.prefaulted_chunks() >= 299 + 128);
        assert!(arena.prefaulted_chunks() <= 300 + 256);
        for chunk in [0, 150, 299, 300, 420] {
            assert!(resident(&arena, chunk), "chunk {chunk} not populated");
        }
        // Far enough past the window (556 chunks at most, 8.7 MiB) that a
        // kernel backing the arena with 2 MiB huge pages anyway (THP
        // `always`) leaves them alone too.
        for chunk in [1000, 2000, 4095] {
            assert!(!resident(&arena, chunk), "chunk {chunk} populated");
        }
        // With nothing more asked for, the thread ends; a new request
        // starts one again.
        let idle = |arena: &Arena| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while arena.prefault_running() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            !arena.prefault_running()
        };
        assert!(
            idle(&arena),
            "the prefault thread still runs with nothing to do"
        );
        let before = arena.prefaulted_chunks();
        for chunk in 300..600 {
            arena.chunk_taken(chunk);
        }
        assert!(idle(&arena));
        assert!(
            arena.prefaulted_chunks() >= before + 128,
            "a new thread populated more"
        );
        assert!(resident(&arena, 700), "chunk 700 not populated");
    }

    #[test]
    fn the_arena_is_in_huge_pages_only_when_asked() {
        let Some(mode) = thp_mode() else {
            return; // No transparent huge pages in this kernel.
        };
        let asked = touched_arena(true);
        if mode != "never" {
            assert!(huge_kib(asked.ptr(0, 1)) > 0, "THP mode {mode}");
        }
        let not_asked = touched_arena(false);
        if mode != "always" {
            assert_eq!(huge_kib(not_asked.ptr(0, 1)), 0, "THP mode {mode}");
        }
    }
}
