//! The hot path allocates nothing: after a warm-up, compressing, decompressing,
//! appending patches and sealing make no heap allocation. Checked with a
//! counting global allocator (this test binary's own) that counts only the
//! allocations of the thread being measured.

// Helpers outside `#[test]` functions run only in tests, where unwrap is the
// clearest failure report (clippy.toml allows it inside `#[test]` only).
#![allow(clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use barracuda_base::{BlockSize, Geometry, Lsn, PageId};
use barracuda_codec::{BlockCodec, Codec, CompressOutcome, append_patch, sample, seal, verify};

/// Counts the allocations made by the current thread. Only that thread's
/// count is read: the test harness's main thread allocates while it
/// reports the test started, at the same time as the first measurement
/// (about one run in three of a debug build saw its 4 allocations), and
/// the codecs under test allocate on the calling thread only.
struct CountingAllocator;

thread_local! {
    // Const-initialised and without a destructor: reading it never
    // allocates, which matters inside the allocator.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards every call unchanged to the system allocator, which upholds
// the `GlobalAlloc` contract; the counter has no effect on the memory returned.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|count| count.set(count.get() + 1));
        // SAFETY: the caller's layout obligations are passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (see `alloc`).
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

fn allocations_during(f: impl FnOnce()) -> usize {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

fn check(codec: Codec, block_size: BlockSize) {
    let geometry = Geometry::new(16 << 10, block_size).unwrap();
    let mut coder = BlockCodec::new(codec.clone(), geometry).unwrap();
    let mut page = vec![0; geometry.page_size_bytes()];
    sample::fill_compressible(&mut sample::rng(1), 0.5, &mut page);
    let mut block = vec![0; geometry.block_size_bytes()];
    let mut frame = vec![0; geometry.page_size_bytes()];
    // Warm-up: libraries may size internal buffers on first use.
    let _ = coder
        .compress(&page, PageId(1), Lsn(1), &mut block)
        .unwrap();
    coder.decompress(&block, &mut frame).unwrap();
    let count = allocations_during(|| {
        for round in 0..10u64 {
            let outcome = coder
                .compress(&page, PageId(1), Lsn(round), &mut block)
                .unwrap();
            assert!(matches!(outcome, CompressOutcome::Fits { .. }));
            let _ = append_patch(&mut block, 500, b"a patch").unwrap();
            let _ = seal(&mut block, Lsn(round + 1)).unwrap();
            let _ = verify(&block, PageId(1)).unwrap();
            let _ = coder.decompress(&block, &mut frame).unwrap();
        }
    });
    assert_eq!(count, 0, "{codec:?} {block_size:?} allocated {count} times");
}

#[test]
fn hot_path_allocates_nothing() {
    let sanity = allocations_during(|| drop(std::hint::black_box(vec![1u8; 10])));
    assert_eq!(sanity, 1, "the counting allocator counts");
    check(Codec::Zlib { level: 1 }, BlockSize::Kib16);
    check(Codec::zlib_default(), BlockSize::Kib16);
    check(Codec::zstd_default(), BlockSize::Kib16);
    check(Codec::None, BlockSize::Uncompressed);
}
