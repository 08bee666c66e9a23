//! Aligned buffers and the pool they are allocated from once, at open.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{IoError, OpKind};

/// The smallest alignment the file layer accepts: the classic sector size,
/// and the unit at which the fault backend tears writes.
pub const SECTOR_SIZE_BYTES: usize = 512;

/// What a file requires of a request: offsets and lengths a multiple of
/// `offset_bytes`, buffer addresses a multiple of `mem_bytes`. Both are
/// powers of two, at least [`SECTOR_SIZE_BYTES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Alignment {
    /// Multiple for offsets and lengths (statx `stx_dio_offset_align`).
    pub offset_bytes: usize,
    /// Alignment of buffer addresses (statx `stx_dio_mem_align`).
    pub mem_bytes: usize,
}

impl Default for Alignment {
    fn default() -> Self {
        Alignment {
            offset_bytes: SECTOR_SIZE_BYTES,
            mem_bytes: SECTOR_SIZE_BYTES,
        }
    }
}

impl Alignment {
    /// Rounds both values up to a power of two of at least 512.
    pub fn at_least_sector(offset_bytes: usize, mem_bytes: usize) -> Alignment {
        let fix = |v: usize| v.max(SECTOR_SIZE_BYTES).next_power_of_two();
        Alignment {
            offset_bytes: fix(offset_bytes),
            mem_bytes: fix(mem_bytes),
        }
    }

    /// Checks a new file length: lengths stay multiples of `offset_bytes`
    /// so that O_DIRECT can read every byte.
    pub fn check_len(&self, path: &Path, len_bytes: u64) -> Result<(), IoError> {
        if len_bytes.is_multiple_of(self.offset_bytes as u64) {
            return Ok(());
        }
        self.check(path, OpKind::SetLen, len_bytes, 0, 0)
    }

    /// Checks one request; the error names the file, offset, length and buffer.
    pub fn check(
        &self,
        path: &Path,
        op: OpKind,
        offset_bytes: u64,
        buf_addr: usize,
        len_bytes: usize,
    ) -> Result<(), IoError> {
        let offset_ok = offset_bytes.is_multiple_of(self.offset_bytes as u64);
        let len_ok = len_bytes.is_multiple_of(self.offset_bytes);
        let addr_ok = buf_addr.is_multiple_of(self.mem_bytes);
        if offset_ok && len_ok && addr_ok {
            return Ok(());
        }
        Err(IoError::Misaligned {
            op,
            path: path.to_path_buf(),
            offset_bytes,
            len_bytes,
            buf_addr,
            offset_align_bytes: self.offset_bytes,
            mem_align_bytes: self.mem_bytes,
        })
    }
}

/// Where a buffer's memory came from.
enum Origin {
    /// Its own allocation, freed on drop.
    Heap { layout: Layout },
    /// A slot of a [`BufPool`], returned to it on drop.
    Pool {
        pool: Arc<PoolShared>,
        slot_index: u32,
    },
}

/// An owned, aligned, zero-initialised byte buffer. Derefs to `[u8]`.
///
/// Buffers from [`BufPool::take`] (and so from `BlockFile::alloc_buf`) are
/// registered with the io_uring backend's rings, which then use
/// `ReadFixed`/`WriteFixed` for them.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len_bytes: usize,
    origin: Origin,
}

// SAFETY: an AlignedBuf owns its memory exclusively (a heap allocation, or a
// pool slot taken off the free list until drop), like a Box<[u8]>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out `&[u8]`; mutation needs `&mut self`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `len_bytes` zeroed bytes aligned to `align_bytes`.
    ///
    /// # Panics
    /// If `align_bytes` is not a power of two (a bug in the caller).
    pub fn zeroed(len_bytes: usize, align_bytes: usize) -> AlignedBuf {
        assert!(
            align_bytes.is_power_of_two(),
            "alignment {align_bytes} is not a power of two"
        );
        // A zero-size allocation is undefined behaviour; allocate one unit.
        let size_bytes = len_bytes.max(align_bytes);
        let layout = match Layout::from_size_align(size_bytes, align_bytes) {
            Ok(layout) => layout,
            Err(e) => panic!("buffer of {len_bytes} bytes aligned to {align_bytes}: {e}"),
        };
        // SAFETY: the layout has a non-zero size (at least align_bytes >= 1).
        let raw = unsafe { alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            std::alloc::handle_alloc_error(layout)
        };
        AlignedBuf {
            ptr,
            len_bytes,
            origin: Origin::Heap { layout },
        }
    }

    /// Copies `data` into a new buffer aligned to `align_bytes`.
    pub fn from_slice(data: &[u8], align_bytes: usize) -> AlignedBuf {
        let mut buf = AlignedBuf::zeroed(data.len(), align_bytes);
        buf.copy_from_slice(data);
        buf
    }

    /// The buffer's length in bytes.
    pub fn len(&self) -> usize {
        self.len_bytes
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len_bytes == 0
    }

    /// Whether this buffer is a slot of a pool (and so registered with
    /// io_uring rings when the pool is).
    pub fn is_pooled(&self) -> bool {
        matches!(self.origin, Origin::Pool { .. })
    }

    /// The buffer's address as an integer.
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr points to len_bytes initialised bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len_bytes) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len_bytes) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        match &self.origin {
            // SAFETY: ptr was allocated with exactly this layout in `zeroed`.
            Origin::Heap { layout } => unsafe { dealloc(self.ptr.as_ptr(), *layout) },
            Origin::Pool { pool, slot_index } => pool.free.lock().push(*slot_index),
        }
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len_bytes", &self.len_bytes)
            .field("pooled", &self.is_pooled())
            .finish()
    }
}

/// The memory of a pool: one slab cut into equal slots.
pub(crate) struct PoolShared {
    base: NonNull<u8>,
    layout: Layout,
    slot_size_bytes: usize,
    slot_count: usize,
    free: Mutex<Vec<u32>>,
}

// SAFETY: the slab is only reached through AlignedBufs (each owning one slot
// exclusively) and through the free list behind a mutex.
unsafe impl Send for PoolShared {}
// SAFETY: as above.
unsafe impl Sync for PoolShared {}

impl Drop for PoolShared {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout in BufPool::new; every slot's
        // AlignedBuf holds an Arc, so none is alive any more.
        unsafe { dealloc(self.base.as_ptr(), self.layout) }
    }
}

/// A fixed set of equal aligned buffers, allocated once. Taking and
/// returning a buffer does not allocate.
#[derive(Clone)]
pub struct BufPool {
    shared: Arc<PoolShared>,
}

impl fmt::Debug for BufPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufPool")
            .field("slot_count", &self.shared.slot_count)
            .field("slot_size_bytes", &self.shared.slot_size_bytes)
            .field("free", &self.shared.free.lock().len())
            .finish()
    }
}

impl BufPool {
    /// Allocates `slot_count` buffers of `slot_size_bytes`, each aligned to
    /// `align_bytes` (a power of two, at most `slot_size_bytes`).
    ///
    /// # Panics
    /// If the sizes are zero, not powers of two, or overflow (caller bugs;
    /// [`crate::IoOptions::validate`] checks user input first).
    pub fn new(slot_count: usize, slot_size_bytes: usize, align_bytes: usize) -> BufPool {
        assert!(
            slot_count > 0 && slot_count <= u32::MAX as usize,
            "slot_count {slot_count}"
        );
        assert!(slot_size_bytes.is_power_of_two() && align_bytes.is_power_of_two());
        assert!(align_bytes <= slot_size_bytes, "alignment above slot size");
        let total_bytes = slot_count
            .checked_mul(slot_size_bytes)
            .expect("pool size overflows");
        let layout = match Layout::from_size_align(total_bytes, align_bytes) {
            Ok(layout) => layout,
            Err(e) => panic!("pool of {total_bytes} bytes: {e}"),
        };
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let Some(base) = NonNull::new(raw) else {
            std::alloc::handle_alloc_error(layout)
        };
        let free = (0..slot_count as u32).rev().collect();
        let shared = PoolShared {
            base,
            layout,
            slot_size_bytes,
            slot_count,
            free: Mutex::new(free),
        };
        BufPool {
            shared: Arc::new(shared),
        }
    }

    /// Takes a free buffer of `len_bytes` (at most the slot size), or `None`
    /// if all are in use or it is too large. Its contents are whatever the
    /// last user left.
    pub fn take(&self, len_bytes: usize) -> Option<AlignedBuf> {
        if len_bytes > self.shared.slot_size_bytes {
            return None;
        }
        let slot_index = self.shared.free.lock().pop()?;
        let offset_bytes = slot_index as usize * self.shared.slot_size_bytes;
        // SAFETY: slot_index < slot_count, so the offset is inside the slab.
        let ptr = unsafe { self.shared.base.add(offset_bytes) };
        let origin = Origin::Pool {
            pool: Arc::clone(&self.shared),
            slot_index,
        };
        Some(AlignedBuf {
            ptr,
            len_bytes,
            origin,
        })
    }

    /// Takes a free buffer as [`BufPool::take`] does, if the pool's
    /// buffers are aligned to at least `align_bytes` (a pool shared by
    /// files of different devices may not suit every one).
    pub fn take_aligned(&self, len_bytes: usize, align_bytes: usize) -> Option<AlignedBuf> {
        if self.shared.layout.align() < align_bytes {
            return None;
        }
        self.take(len_bytes)
    }

    /// How many buffers are free now.
    pub fn free_count(&self) -> usize {
        self.shared.free.lock().len()
    }

    /// The size of each slot.
    pub fn slot_size_bytes(&self) -> usize {
        self.shared.slot_size_bytes
    }

    /// One iovec per slot, for `io_uring_register_buffers`.
    pub(crate) fn iovecs(&self) -> Vec<libc::iovec> {
        (0..self.shared.slot_count)
            .map(|i| libc::iovec {
                // SAFETY: i < slot_count, inside the slab.
                iov_base: unsafe { self.shared.base.add(i * self.shared.slot_size_bytes) }
                    .as_ptr()
                    .cast(),
                iov_len: self.shared.slot_size_bytes,
            })
            .collect()
    }

    /// The slot holding `[addr, addr + len_bytes)`, if the range lies inside
    /// one slot of this pool (the io_uring backend then uses `ReadFixed`).
    pub(crate) fn slot_of(&self, addr: usize, len_bytes: usize) -> Option<u16> {
        let base = self.shared.base.as_ptr() as usize;
        let size = self.shared.slot_size_bytes;
        if addr < base || addr >= base + self.shared.slot_count * size {
            return None;
        }
        let slot_index = (addr - base) / size;
        let fits = addr + len_bytes <= base + (slot_index + 1) * size;
        // Registered buffer indexes are 16-bit in the SQE.
        (fits && slot_index <= u16::MAX as usize).then_some(slot_index as u16)
    }
}
