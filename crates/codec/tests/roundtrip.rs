//! Property tests: pages of every kind survive compress/decompress, and a
//! sequence of patches (appended, logged, recompressed) decodes to what a
//! model that writes the same patches into a plain buffer holds.

// Helpers outside `#[test]` functions run only in tests, where unwrap is the
// clearest failure report (clippy.toml allows it inside `#[test]` only).
#![allow(clippy::unwrap_used)]

use barracuda_base::{BlockSize, Geometry, Lsn, PageId};
use barracuda_codec::{
    BlockCodec, Codec, CodecId, CompressOutcome, PAGE_HEADER_RESERVED_BYTES, PatchOutcome,
    append_patch, check_invariants, is_packed, log_reserve_bytes, read_header, sample, seal,
    verify,
};
use proptest::prelude::*;

/// What a page holds.
#[derive(Clone, Debug)]
enum Content {
    /// Random bytes: incompressible.
    Random(u64),
    /// Long runs of a few byte values: highly compressible.
    Runs(u64),
    /// db_bench-style text compressible to the ratio (percent).
    DbBench(u64, u8),
}

fn content() -> impl Strategy<Value = Content> {
    prop_oneof![
        any::<u64>().prop_map(Content::Random),
        any::<u64>().prop_map(Content::Runs),
        (any::<u64>(), 5u8..=100).prop_map(|(s, r)| Content::DbBench(s, r)),
    ]
}

fn fill(content: &Content, page: &mut [u8]) {
    use rand::{Rng, RngCore};
    match *content {
        Content::Random(seed) => sample::rng(seed).fill_bytes(page),
        Content::Runs(seed) => {
            let mut rng = sample::rng(seed);
            let mut at = 0;
            while at < page.len() {
                let run = rng.random_range(1..2000).min(page.len() - at);
                page[at..at + run].fill(rng.random_range(0..4));
                at += run;
            }
        }
        Content::DbBench(seed, percent) => {
            sample::fill_compressible(&mut sample::rng(seed), f64::from(percent) / 100.0, page)
        }
    }
}

fn codec() -> impl Strategy<Value = Codec> {
    prop_oneof![
        Just(Codec::None),
        (1u32..=9).prop_map(|level| Codec::Zlib { level }),
        (1i32..=12).prop_map(|level| Codec::Zstd {
            level,
            dictionary: None
        }),
    ]
}

/// A codec, a geometry it accepts, and a page's content.
fn setup() -> impl Strategy<Value = (Codec, Geometry, Content)> {
    (codec(), 12u32..=16, 0usize..5, content()).prop_map(
        |(codec, page_log2, block_index, content)| {
            let page_size_bytes = 1usize << page_log2;
            let block_size = if codec == Codec::None {
                BlockSize::Uncompressed
            } else {
                // The largest compressed size allowed by the page is index 4 or less.
                let allowed = (page_log2 as usize - 10).min(4);
                BlockSize::ALL[block_index.min(allowed)]
            };
            let geometry = Geometry::new(page_size_bytes, block_size).unwrap();
            (codec, geometry, content)
        },
    )
}

fn body(page: &[u8]) -> &[u8] {
    &page[PAGE_HEADER_RESERVED_BYTES..]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn pages_round_trip((codec, geometry, content) in setup(), page_id in any::<u64>(), lsn in any::<u64>()) {
        let mut coder = BlockCodec::new(codec, geometry).unwrap();
        let mut page = vec![0; geometry.page_size_bytes()];
        fill(&content, &mut page);
        let mut block = vec![0xAA; geometry.block_size_bytes()];
        match coder.compress(&page, PageId(page_id), Lsn(lsn), &mut block).unwrap() {
            CompressOutcome::Fits { compressed_len } => {
                let header = verify(&block, PageId(page_id)).unwrap();
                prop_assert_eq!(header.compressed_len_bytes, compressed_len);
                prop_assert_eq!(header.lsn, Lsn(lsn));
                if !geometry.is_uncompressed() {
                    prop_assert!(header.free_bytes() >= log_reserve_bytes(block.len()));
                }
                let mut frame = vec![0x55; geometry.page_size_bytes()];
                let info = coder.decompress(&block, &mut frame).unwrap();
                prop_assert_eq!(info, header);
                prop_assert_eq!(body(&frame), body(&page));
                prop_assert_eq!(&frame[..PAGE_HEADER_RESERVED_BYTES], &block[..PAGE_HEADER_RESERVED_BYTES]);
            }
            CompressOutcome::DoesNotFit { needed_bytes } => {
                prop_assert!(needed_bytes > block.len());
                prop_assert!(block.iter().all(|&b| b == 0xAA), "a page that does not fit leaves the block alone");
            }
        }
        // One store: sparse when the page fits its block without its free
        // space, else one compression attempt.
        let stats = coder.stats().snapshot();
        let row = stats.row(geometry.block_size()).unwrap();
        prop_assert_eq!(row.compress_ops + row.sparse_ops, 1);
        let sparse = read_header(&block).is_ok_and(|header| header.codec_id == CodecId::Sparse);
        prop_assert_eq!(sparse, row.sparse_ops == 1);
    }

    /// A page of incompressible bytes with a zeroed gap (a B+tree leaf's
    /// free space) is stored sparse, with no compression attempt, as long
    /// as its bytes fit the block; a fuller one goes to the compressor.
    #[test]
    fn pages_with_room_are_stored_sparse_not_compressed(
        (codec, geometry, _) in setup(),
        seed in any::<u64>(),
        used_per_mille in 0usize..=1000,
    ) {
        use rand::RngCore;
        prop_assume!(!geometry.is_uncompressed());
        let mut coder = BlockCodec::new(codec, geometry).unwrap();
        let mut page = vec![0; geometry.page_size_bytes()];
        let body_bytes = page.len() - PAGE_HEADER_RESERVED_BYTES;
        let used = body_bytes * used_per_mille / 1000;
        // Records from the start, a slot directory of 64 bytes at the end.
        let heap = used.saturating_sub(64);
        let mut rng = sample::rng(seed);
        rng.fill_bytes(&mut page[PAGE_HEADER_RESERVED_BYTES..PAGE_HEADER_RESERVED_BYTES + heap]);
        let tail = page.len() - (used - heap);
        rng.fill_bytes(&mut page[tail..]);
        let mut block = vec![0; geometry.block_size_bytes()];
        let outcome = coder.compress(&page, PageId(9), Lsn(3), &mut block).unwrap();
        let row = *coder.stats().snapshot().row(geometry.block_size()).unwrap();
        let room = block.len() - PAGE_HEADER_RESERVED_BYTES - log_reserve_bytes(block.len());
        // Random bytes leave no zero run worth the name but the gap (a run
        // of a few zero bytes at its edges may widen it).
        if used + 8 + 8 <= room {
            prop_assert_eq!((row.sparse_ops, row.compress_ops), (1, 0));
            let fits = matches!(outcome, CompressOutcome::Fits { .. });
            prop_assert!(fits);
        } else if used + 8 > room {
            prop_assert_eq!((row.sparse_ops, row.compress_ops), (0, 1));
        }
        if let CompressOutcome::Fits { .. } = outcome {
            verify(&block, PageId(9)).unwrap();
            let mut frame = vec![0x55; page.len()];
            coder.decompress(&block, &mut frame).unwrap();
            prop_assert_eq!(body(&frame), body(&page));
        }
    }
}

/// One step of a patch sequence.
#[derive(Clone, Debug)]
enum Step {
    /// Write `len` bytes of `byte` at `offset` (reduced into the page body).
    Patch { offset: usize, len: usize, byte: u8 },
    /// Recompress the block from itself (log applied).
    Recompress,
    /// Stamp an LSN and checksum, then verify.
    Seal,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => (any::<usize>(), 1usize..300, any::<u8>()).prop_map(|(offset, len, byte)| Step::Patch { offset, len, byte }),
        1 => Just(Step::Recompress),
        1 => Just(Step::Seal),
    ]
}

/// Tracks the block against a plain buffer that receives the same patches.
struct Harness {
    coder: BlockCodec,
    block: Vec<u8>,
    model: Vec<u8>,
    frame: Vec<u8>,
    lsn: u64,
}

impl Harness {
    fn check(&mut self) -> Result<(), TestCaseError> {
        check_invariants(&self.block).unwrap();
        self.coder.decompress(&self.block, &mut self.frame).unwrap();
        prop_assert_eq!(body(&self.frame), body(&self.model));
        Ok(())
    }

    fn patch(&mut self, offset: usize, len: usize, byte: u8) -> Result<(), TestCaseError> {
        let page = self.model.len();
        let offset = PAGE_HEADER_RESERVED_BYTES + offset % (page - PAGE_HEADER_RESERVED_BYTES);
        let bytes = vec![byte; len.min(page - offset)];
        match append_patch(&mut self.block, offset, &bytes).unwrap() {
            PatchOutcome::Appended => {
                self.model[offset..offset + bytes.len()].copy_from_slice(&bytes)
            }
            PatchOutcome::LogFull => {
                prop_assert!(
                    !self.coder.geometry().is_uncompressed(),
                    "uncompressed blocks are patched in place"
                );
                // What the pool does: recompress the patched page image.
                let mut candidate = self.model.clone();
                candidate[offset..offset + bytes.len()].copy_from_slice(&bytes);
                let before = self.block.clone();
                match self
                    .coder
                    .compress(&candidate, PageId(1), Lsn(self.lsn), &mut self.block)
                    .unwrap()
                {
                    CompressOutcome::Fits { .. } => self.model = candidate,
                    // A compression failure: the tree would split the page.
                    CompressOutcome::DoesNotFit { .. } => prop_assert_eq!(&self.block, &before),
                }
            }
        }
        Ok(())
    }

    fn recompress(&mut self) -> Result<(), TestCaseError> {
        let before = self.block.clone();
        let mut scratch = vec![0; self.model.len()];
        if let CompressOutcome::DoesNotFit { .. } = self
            .coder
            .recompress(&mut self.block, &mut scratch)
            .unwrap()
        {
            prop_assert_eq!(&self.block, &before);
        }
        Ok(())
    }
}

/// A codec and a block holding `model`, at the geometry's block size or the
/// next larger one that fits (so that most cases exercise the log).
fn first_fit(codec: &Codec, geometry: Geometry, model: &[u8]) -> Option<(BlockCodec, Vec<u8>)> {
    let sizes = BlockSize::ALL
        .iter()
        .filter(|&&size| size >= geometry.block_size());
    for &size in sizes {
        let Ok(geometry) = Geometry::new(geometry.page_size_bytes(), size) else {
            break;
        };
        let Ok(mut coder) = BlockCodec::new(codec.clone(), geometry) else {
            break;
        };
        let mut block = vec![0; geometry.block_size_bytes()];
        if let CompressOutcome::Fits { .. } = coder
            .compress(model, PageId(1), Lsn(1), &mut block)
            .unwrap()
        {
            return Some((coder, block));
        }
    }
    None
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn patch_sequences_match_the_model((codec, geometry, content) in setup(), steps in prop::collection::vec(step(), 1..60)) {
        let mut model = vec![0; geometry.page_size_bytes()];
        fill(&content, &mut model);
        let Some((coder, block)) = first_fit(&codec, geometry, &model) else {
            return Ok(());
        };
        let frame = vec![0; model.len()];
        let mut h = Harness { coder, block, model, frame, lsn: 1 };
        for step in steps {
            h.lsn += 1;
            match step {
                Step::Patch { offset, len, byte } => h.patch(offset, len, byte)?,
                Step::Recompress => h.recompress()?,
                Step::Seal => {
                    let _ = seal(&mut h.block, Lsn(h.lsn)).unwrap();
                    prop_assert_eq!(verify(&h.block, PageId(1)).unwrap().lsn, Lsn(h.lsn));
                }
            }
            h.check()?;
        }
    }
}

/// A page that fits its block only without the modification-log reserve: the
/// policy's `compress` refuses it, `compress_reserving(.., 0)` packs it, the
/// packed block decodes to the page, and a patch larger than the little room
/// left is `LogFull` (the pool then recompresses it, packed again).
#[test]
fn a_packed_block_holds_what_the_reserve_would_refuse() {
    use rand::RngCore;
    let geometry = Geometry::new(16 * 1024, BlockSize::Kib8).unwrap();
    let block_bytes = geometry.block_size_bytes();
    let mut page = vec![0; geometry.page_size_bytes()];
    // Incompressible bytes filling the block but for half the reserve.
    let random_bytes = block_bytes - 40 - log_reserve_bytes(block_bytes) / 2;
    sample::rng(7).fill_bytes(&mut page[PAGE_HEADER_RESERVED_BYTES..][..random_bytes]);
    let mut coder = BlockCodec::new(Codec::zstd_default(), geometry).unwrap();
    let mut block = vec![0; block_bytes];
    let empty = vec![0; page.len()];
    let normal = coder
        .compress(&empty, PageId(5), Lsn(8), &mut block)
        .unwrap();
    assert!(matches!(normal, CompressOutcome::Fits { .. }), "{normal:?}");
    assert!(!is_packed(&block));
    let refused = coder
        .compress(&page, PageId(5), Lsn(9), &mut block)
        .unwrap();
    assert!(
        matches!(refused, CompressOutcome::DoesNotFit { needed_bytes } if needed_bytes > block_bytes),
        "{refused:?}"
    );
    let packed = coder
        .compress_reserving(&page, PageId(5), Lsn(9), &mut block, 0)
        .unwrap();
    let CompressOutcome::Fits { compressed_len } = packed else {
        panic!("a packed page must fit: {packed:?}");
    };
    assert!(40 + compressed_len > block_bytes - log_reserve_bytes(block_bytes));
    assert!(is_packed(&block));
    verify(&block, PageId(5)).unwrap();
    let mut frame = vec![0; page.len()];
    coder.decompress(&block, &mut frame).unwrap();
    assert_eq!(body(&frame), body(&page));
    let patch = vec![0xAB; log_reserve_bytes(block_bytes)];
    assert_eq!(
        append_patch(&mut block, 100, &patch).unwrap(),
        PatchOutcome::LogFull
    );
}
