//! Fuzz target: arbitrary bytes as a block. Verifying, parsing, walking the
//! log, decompressing, patching and sealing must never panic or read out of
//! bounds; only typed errors are allowed.
//!
//! Raw bytes rarely pass the magic and the size checks, so the first byte
//! chooses a mode: as they are, or "fixed up" into a block of a valid size
//! with a valid magic and version (and optionally a valid checksum), so the
//! fuzzer spends its time past the header checks.
#![no_main]

use std::cell::RefCell;

use barracuda_base::{BlockSize, Geometry, Lsn, PAGE_SIZE_BYTES_MAX, PageId};
use barracuda_codec::{BLOCK_MAGIC, BlockCodec, Codec, FORMAT_VERSION, append_patch, block_checksum, check_invariants, log_entries, read_header, seal, verify};

/// Block sizes the fixed-up mode produces (the format's 1 KiB .. 64 KiB).
const BLOCK_SIZES_BYTES: [usize; 7] = [
    1 << 10,
    2 << 10,
    4 << 10,
    8 << 10,
    16 << 10,
    32 << 10,
    64 << 10,
];
const CHECKSUM_AT: usize = 36;

thread_local! {
    static CODEC: RefCell<BlockCodec> = RefCell::new(
        BlockCodec::new(
            Codec::zlib_default(),
            Geometry::new(16 << 10, BlockSize::Kib8).expect("a valid geometry"),
        )
        .expect("a valid codec"),
    );
}

fn fix_up(data: &[u8]) -> Vec<u8> {
    let selector = data[0];
    let size = BLOCK_SIZES_BYTES[usize::from(selector & 0x7) % BLOCK_SIZES_BYTES.len()];
    let mut block = data[1..].to_vec();
    block.resize(size, 0);
    block[..4].copy_from_slice(&BLOCK_MAGIC.to_le_bytes());
    block[4] = FORMAT_VERSION;
    if selector & 0x10 != 0 {
        // Codec ids 0..=3 (3 is unknown) so all codecs are reached.
        block[5] &= 0x3;
    }
    if selector & 0x20 != 0 {
        let crc = block_checksum(&block);
        block[CHECKSUM_AT..CHECKSUM_AT + 4].copy_from_slice(&crc.to_le_bytes());
    }
    block
}

fn exercise(block: &mut [u8]) {
    let verified = verify(block, PageId(7));
    let parsed = read_header(block);
    let invariants = check_invariants(block);
    if verified.is_ok() {
        assert!(
            invariants.is_ok(),
            "verify passed but check_invariants failed"
        );
    }
    if let Ok(entries) = log_entries(block) {
        for entry in entries {
            let _ = entry;
        }
    }
    let frame_bytes = parsed.map_or(PAGE_SIZE_BYTES_MAX, |h| h.geometry.page_size_bytes());
    let mut frame = vec![0; frame_bytes];
    let decoded = CODEC.with(|c| c.borrow_mut().decompress(block, &mut frame));
    if decoded.is_ok() {
        assert!(
            invariants.is_ok(),
            "decompress passed but check_invariants failed"
        );
    }
    let _ = append_patch(block, 100, b"fuzz");
    let _ = append_patch(
        block,
        usize::from(block.get(8).copied().unwrap_or(0)) * 256,
        &[1, 2, 3],
    );
    if seal(block, Lsn(9)).is_ok() {
        assert!(
            !matches!(
                verify(block, PageId(7)),
                Err(barracuda_codec::CodecError::ChecksumMismatch { .. })
            ),
            "a sealed block must pass its checksum"
        );
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 || rest.is_empty() {
        exercise(&mut rest.to_vec());
    } else {
        exercise(&mut fix_up(rest));
    }
});
