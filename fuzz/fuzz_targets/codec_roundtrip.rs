//! Fuzz target: a structured page and a sequence of patches (through
//! `arbitrary`). The block must always decode to what a model holds that
//! writes the same patches into a plain buffer, through log-full
//! recompressions and compression failures.
#![no_main]

use arbitrary::Arbitrary;
use barracuda_codec::{
    BlockCodec, BlockSize, Codec, CompressOutcome, Geometry, Lsn, PAGE_HEADER_RESERVED_BYTES,
    PageId, PatchOutcome, append_patch, check_invariants, sample, seal, verify,
};

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
    patches: Vec<Patch>,
}

fn setup(input: &Input) -> Option<(BlockCodec, Vec<u8>)> {
    let page_size_bytes = 1usize << (12 + input.page_log2 % 5);
    let (codec, block_size) = match input.codec {
        CodecChoice::None => (Codec::None, BlockSize::Uncompressed),
        CodecChoice::Zlib(level) => (
            Codec::Zlib {
                level: 1 + u32::from(level % 9),
            },
            BlockSize::ALL[usize::from(input.block_index) % 5],
        ),
        CodecChoice::Zstd(level) => (
            Codec::Zstd {
                level: 1 + i32::from(level % FUZZ_ZSTD_LEVEL_MAX),
                dictionary: None,
            },
            BlockSize::ALL[usize::from(input.block_index) % 5],
        ),
    };
    let geometry = Geometry::new(page_size_bytes, block_size).ok()?;
    let coder = BlockCodec::new(codec, geometry).expect("levels and geometry are valid");
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
    Some((coder, page))
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
    let Some((mut coder, mut model)) = setup(&input) else {
        return;
    };
    let geometry = coder.geometry();
    let mut block = vec![0; geometry.block_size_bytes()];
    let mut frame = vec![0; geometry.page_size_bytes()];
    let page_id = PageId(3);
    match coder
        .compress(&model, page_id, Lsn(1), &mut block)
        .expect("compress")
    {
        CompressOutcome::Fits { .. } => {}
        CompressOutcome::DoesNotFit { needed_bytes } => {
            assert!(needed_bytes > block.len());
            return;
        }
    }
    check(&mut coder, &block, &model, &mut frame);
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
            check(&mut coder, &block, &model, &mut frame);
        }
    }
    check(&mut coder, &block, &model, &mut frame);
});
