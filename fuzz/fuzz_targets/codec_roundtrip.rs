//! Fuzz target: a structured page and a sequence of patches (through
//! `arbitrary`). The block must always decode to what a model holds that
//! writes the same patches into a plain buffer, through log-full
//! recompressions and compression failures, also from a packed block (no
//! log reserve, as a compaction writes them).
#![no_main]

use std::cell::RefCell;
use std::collections::HashMap;

use arbitrary::Arbitrary;
use barracuda_base::{BlockSize, Geometry, Lsn, PageId};
use barracuda_codec::{BlockCodec, Codec, CompressOutcome, PAGE_HEADER_RESERVED_BYTES, PatchOutcome, append_patch, check_invariants, is_packed, sample, seal, verify};

/// Patches per input: enough to fill the log of a 16 KiB block several times.
const PATCH_COUNT_MAX: usize = 64;
/// Decoding a 64 KiB page after every patch would dominate the run time; a
/// divergence is still caught by the periodic and the final check.
const CHECK_EVERY_STEPS: usize = 8;
/// zstd levels above this take milliseconds per 64 KiB page, which would
/// starve the fuzzer; the levels share one code path.
const FUZZ_ZSTD_LEVEL_MAX: u8 = 9;

#[derive(Arbitrary, Debug)]
enum CodecChoice {
    None,
    Zlib(u8),
    Zstd(u8),
}

#[derive(Arbitrary, Debug)]
enum Content {
    /// These bytes repeated to fill the page.
    Bytes(Vec<u8>),
    /// db_bench-style text compressible to `percent`.
    DbBench { seed: u64, percent: u8 },
}

#[derive(Arbitrary, Debug)]
struct Patch {
    offset: u16,
    data: Vec<u8>,
    /// Recompress the block from itself after this patch.
    recompress: bool,
    /// Seal and verify after this patch.
    seal: bool,
}

#[derive(Arbitrary, Debug)]
struct Input {
    codec: CodecChoice,
    page_log2: u8,
    block_index: u8,
    content: Content,
    /// Compress the page first with no log reserve, as a compaction packs
    /// it (`compress_reserving(.., 0)`); the patches then use the reserve.
    packed: bool,
    patches: Vec<Patch>,
}

/// Codec objects by (codec kind, level, page log2, block size index): creating
/// zstd and zlib contexts per input would dominate the run time under the
/// sanitizers, and reuse across inputs is what the pool does anyway.
type CoderKey = (u8, u8, u8, usize);

thread_local! {
    static CODERS: RefCell<HashMap<CoderKey, BlockCodec>> = RefCell::new(HashMap::new());
}

fn coder_for(input: &Input) -> Option<(CoderKey, BlockCodec)> {
    let page_log2 = 12 + input.page_log2 % 5;
    let block_index = usize::from(input.block_index) % 5;
    let (key, codec, block_size) = match input.codec {
        CodecChoice::None => ((0, 0, page_log2, 5), Codec::None, BlockSize::Uncompressed),
        CodecChoice::Zlib(level) => {
            let level = 1 + level % 9;
            (
                (1, level, page_log2, block_index),
                Codec::Zlib {
                    level: u32::from(level),
                },
                BlockSize::ALL[block_index],
            )
        }
        CodecChoice::Zstd(level) => {
            let level = 1 + level % FUZZ_ZSTD_LEVEL_MAX;
            let codec = Codec::Zstd {
                level: i32::from(level),
                dictionary: None,
            };
            (
                (2, level, page_log2, block_index),
                codec,
                BlockSize::ALL[block_index],
            )
        }
    };
    if let Some(coder) = CODERS.with(|c| c.borrow_mut().remove(&key)) {
        return Some((key, coder));
    }
    let geometry = Geometry::new(1usize << page_log2, block_size).ok()?;
    Some((
        key,
        BlockCodec::new(codec, geometry).expect("levels and geometry are valid"),
    ))
}

fn page_for(input: &Input, page_size_bytes: usize) -> Vec<u8> {
    let mut page = vec![0; page_size_bytes];
    match &input.content {
        Content::Bytes(bytes) if !bytes.is_empty() => {
            for (dst, src) in page.iter_mut().zip(bytes.iter().cycle()) {
                *dst = *src;
            }
        }
        Content::Bytes(_) => {}
        Content::DbBench { seed, percent } => {
            sample::fill_compressible(
                &mut sample::rng(*seed),
                f64::from(*percent) / 255.0,
                &mut page,
            );
        }
    }
    page
}

fn check(coder: &mut BlockCodec, block: &[u8], model: &[u8], frame: &mut [u8]) {
    check_invariants(block).expect("a block we wrote is well formed");
    coder
        .decompress(block, frame)
        .expect("a block we wrote decodes");
    assert_eq!(
        frame[PAGE_HEADER_RESERVED_BYTES..],
        model[PAGE_HEADER_RESERVED_BYTES..],
        "decode differs from the model"
    );
}

libfuzzer_sys::fuzz_target!(|input: Input| {
    let Some((key, mut coder)) = coder_for(&input) else {
        return;
    };
    run(&input, &mut coder);
    CODERS.with(|c| c.borrow_mut().insert(key, coder));
});

fn run(input: &Input, coder: &mut BlockCodec) {
    let mut model = page_for(input, coder.geometry().page_size_bytes());
    let geometry = coder.geometry();
    let mut block = vec![0; geometry.block_size_bytes()];
    let mut frame = vec![0; geometry.page_size_bytes()];
    let page_id = PageId(3);
    let first = if input.packed {
        coder.compress_reserving(&model, page_id, Lsn(1), &mut block, 0)
    } else {
        coder.compress(&model, page_id, Lsn(1), &mut block)
    };
    match first.expect("compress") {
        // The policy's compress never leaves a block that reads as packed.
        CompressOutcome::Fits { .. } => assert!(input.packed || !is_packed(&block)),
        CompressOutcome::DoesNotFit { needed_bytes } => {
            assert!(needed_bytes > block.len());
            return;
        }
    }
    check(coder, &block, &model, &mut frame);
    for (step, patch) in input.patches.iter().take(PATCH_COUNT_MAX).enumerate() {
        let lsn = Lsn(2 + step as u64);
        let span = geometry.page_size_bytes() - PAGE_HEADER_RESERVED_BYTES;
        let offset = PAGE_HEADER_RESERVED_BYTES + usize::from(patch.offset) % span;
        let data = &patch.data[..patch.data.len().min(geometry.page_size_bytes() - offset)];
        match append_patch(&mut block, offset, data).expect("an in-bounds patch") {
            PatchOutcome::Appended => model[offset..offset + data.len()].copy_from_slice(data),
            PatchOutcome::LogFull => {
                let mut candidate = model.clone();
                candidate[offset..offset + data.len()].copy_from_slice(data);
                let before = block.clone();
                match coder
                    .compress(&candidate, page_id, lsn, &mut block)
                    .expect("compress")
                {
                    CompressOutcome::Fits { .. } => model = candidate,
                    CompressOutcome::DoesNotFit { .. } => {
                        assert_eq!(block, before, "block changed")
                    }
                }
            }
        }
        if patch.recompress {
            let before = block.clone();
            let mut scratch = vec![0; geometry.page_size_bytes()];
            if let CompressOutcome::DoesNotFit { .. } = coder
                .recompress(&mut block, &mut scratch)
                .expect("recompress")
            {
                assert_eq!(block, before, "block changed");
            }
        }
        if patch.seal {
            seal(&mut block, lsn).expect("seal");
            assert_eq!(verify(&block, page_id).expect("verify").lsn, lsn);
        }
        if step % CHECK_EVERY_STEPS == 0 {
            check(coder, &block, &model, &mut frame);
        }
    }
    check(coder, &block, &model, &mut frame);
}
