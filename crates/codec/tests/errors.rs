//! One test per `CodecError` variant: each bad input gives its typed error,
//! naming the page, and never a panic.

// Helpers outside `#[test]` functions run only in tests, where unwrap is the
// clearest failure report (clippy.toml allows it inside `#[test]` only).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use barracuda_base::{BLOCK_HEADER_BYTES, BlockSize, Geometry, Lsn, PageId};
use barracuda_codec::{
    BlockCodec, Codec, CodecError, CompressOutcome, PAGE_HEADER_RESERVED_BYTES, PatchOutcome,
    append_patch, block_checksum, read_header, sample, seal, verify,
};

const PAGE_ID: PageId = PageId(42);
const PAGE_BYTES: usize = 16 << 10;

/// Header field offsets, as in the byte diagram of docs/design.md.
const VERSION_AT: usize = 4;
const CODEC_AT: usize = 5;
const PAGE_SIZE_LOG2_AT: usize = 6;
const BLOCK_SIZE_LOG2_AT: usize = 7;
const COMPRESSED_LEN_AT: usize = 24;
const LOG_LEN_AT: usize = 28;
const CHECKSUM_AT: usize = 36;

fn page() -> Vec<u8> {
    let mut page = vec![0; PAGE_BYTES];
    sample::fill_compressible(&mut sample::rng(5), 0.5, &mut page);
    page
}

/// A sealed zlib block of `page()` in 8 KiB, and its codec.
fn zlib_block() -> (BlockCodec, Vec<u8>) {
    let geometry = Geometry::new(PAGE_BYTES, BlockSize::Kib8).unwrap();
    let mut codec = BlockCodec::new(Codec::zlib_default(), geometry).unwrap();
    let mut block = vec![0; geometry.block_size_bytes()];
    let outcome = codec
        .compress(&page(), PAGE_ID, Lsn(7), &mut block)
        .unwrap();
    assert!(
        matches!(outcome, CompressOutcome::Fits { .. }),
        "{outcome:?}"
    );
    (codec, block)
}

fn reseal_checksum(block: &mut [u8]) {
    let crc = block_checksum(block);
    block[CHECKSUM_AT..CHECKSUM_AT + 4].copy_from_slice(&crc.to_le_bytes());
}

fn put_u32(block: &mut [u8], at: usize, value: u32) {
    block[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

fn decode(codec: &mut BlockCodec, block: &[u8]) -> Result<(), CodecError> {
    let mut frame = vec![0; PAGE_BYTES];
    codec.decompress(block, &mut frame).map(|_| ())
}

#[test]
fn checksum_mismatch() {
    let (_, mut block) = zlib_block();
    block[BLOCK_HEADER_BYTES + 10] ^= 0x40;
    let err = verify(&block, PAGE_ID).unwrap_err();
    assert!(
        matches!(
            err,
            CodecError::ChecksumMismatch {
                page_id: PAGE_ID,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("page 42"), "{err}");
}

#[test]
fn checksum_covers_the_padding() {
    let (_, mut block) = zlib_block();
    let last = block.len() - 1;
    block[last] = 1;
    assert!(matches!(
        verify(&block, PAGE_ID),
        Err(CodecError::ChecksumMismatch { .. })
    ));
}

#[test]
fn bad_magic() {
    let (mut codec, mut block) = zlib_block();
    block[0] ^= 0xff;
    let err = verify(&block, PAGE_ID).unwrap_err();
    assert!(
        matches!(
            err,
            CodecError::BadMagic {
                page_id: PAGE_ID,
                ..
            }
        ),
        "{err}"
    );
    let zeroed = vec![0; block.len()];
    let err = decode(&mut codec, &zeroed).unwrap_err();
    assert!(
        matches!(
            err,
            CodecError::BadMagic {
                page_id: PageId(0),
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn unsupported_version() {
    let (mut codec, mut block) = zlib_block();
    block[VERSION_AT] = 2;
    reseal_checksum(&mut block);
    let err = verify(&block, PAGE_ID).unwrap_err();
    assert!(
        matches!(
            err,
            CodecError::UnsupportedVersion {
                page_id: PAGE_ID,
                found: 2,
                ..
            }
        ),
        "{err}"
    );
    assert!(matches!(
        decode(&mut codec, &block),
        Err(CodecError::UnsupportedVersion { .. })
    ));
}

#[test]
fn unknown_codec() {
    let (mut codec, mut block) = zlib_block();
    block[CODEC_AT] = 200;
    reseal_checksum(&mut block);
    let err = verify(&block, PAGE_ID).unwrap_err();
    assert!(
        matches!(
            err,
            CodecError::UnknownCodec {
                page_id: PAGE_ID,
                codec_id: 200
            }
        ),
        "{err}"
    );
    let err = decode(&mut codec, &block).unwrap_err();
    assert!(
        matches!(
            err,
            CodecError::UnknownCodec {
                page_id: PAGE_ID,
                ..
            }
        ),
        "{err}"
    );
}

/// A way to damage a block.
type Corruption = Box<dyn Fn(&mut Vec<u8>)>;

/// Every length check: block, page size, block size, image, log, frame.
#[test]
fn impossible_lengths() {
    let (mut codec, block) = zlib_block();
    let cases: Vec<(&str, Corruption)> = vec![
        ("block length", Box::new(|b: &mut Vec<u8>| b.truncate(20))),
        ("block length", Box::new(|b: &mut Vec<u8>| b.truncate(4096))),
        (
            "page size",
            Box::new(|b: &mut Vec<u8>| b[PAGE_SIZE_LOG2_AT] = 17),
        ),
        (
            "page size",
            Box::new(|b: &mut Vec<u8>| b[PAGE_SIZE_LOG2_AT] = 255),
        ),
        (
            "block size",
            Box::new(|b: &mut Vec<u8>| b[BLOCK_SIZE_LOG2_AT] = 9),
        ),
        (
            "block size",
            Box::new(|b: &mut Vec<u8>| b[BLOCK_SIZE_LOG2_AT] = 15),
        ),
        (
            "compressed length",
            Box::new(|b: &mut Vec<u8>| put_u32(b, COMPRESSED_LEN_AT, 0)),
        ),
        (
            "compressed length",
            Box::new(|b: &mut Vec<u8>| put_u32(b, COMPRESSED_LEN_AT, u32::MAX)),
        ),
        (
            "modification log length",
            Box::new(|b: &mut Vec<u8>| put_u32(b, LOG_LEN_AT, 8192)),
        ),
        (
            "modification log entry header",
            Box::new(|b: &mut Vec<u8>| put_u32(b, LOG_LEN_AT, 3)),
        ),
    ];
    for (what, corrupt) in cases {
        let mut bad = block.clone();
        corrupt(&mut bad);
        let err = decode(&mut codec, &bad).unwrap_err();
        assert!(
            matches!(&err, CodecError::ImpossibleLength { what: w, .. } if w.starts_with(what)),
            "{what}: {err}"
        );
        reseal_if_long_enough(&mut bad);
        let err = verify(&bad, PAGE_ID).unwrap_err();
        assert!(
            matches!(
                err,
                CodecError::ImpossibleLength {
                    page_id: PAGE_ID,
                    ..
                }
            ),
            "{what}: {err}"
        );
    }
    let mut small_frame = vec![0; PAGE_BYTES / 2];
    let err = codec.decompress(&block, &mut small_frame).unwrap_err();
    assert!(
        matches!(
            err,
            CodecError::ImpossibleLength {
                page_id: PAGE_ID,
                ..
            }
        ),
        "{err}"
    );
}

fn reseal_if_long_enough(block: &mut [u8]) {
    if block.len() >= BLOCK_HEADER_BYTES {
        reseal_checksum(block);
    }
}

#[test]
fn log_entry_longer_than_the_log() {
    let (mut codec, mut block) = zlib_block();
    assert_eq!(
        append_patch(&mut block, 100, &[1; 10]).unwrap(),
        PatchOutcome::Appended
    );
    let log_len = u32::from_le_bytes(block[LOG_LEN_AT..LOG_LEN_AT + 4].try_into().unwrap());
    put_u32(&mut block, LOG_LEN_AT, log_len - 1);
    let err = decode(&mut codec, &block).unwrap_err();
    assert!(
        matches!(
            err,
            CodecError::ImpossibleLength {
                what: "modification log entry length",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn page_id_mismatch() {
    let (_, block) = zlib_block();
    let err = verify(&block, PageId(43)).unwrap_err();
    assert_eq!(
        err,
        CodecError::PageIdMismatch {
            expected: PageId(43),
            found: PAGE_ID
        }
    );
}

#[test]
fn patch_out_of_bounds_on_append() {
    let (_, mut block) = zlib_block();
    let before = block.clone();
    for (offset, len) in [
        (0, 1),
        (PAGE_HEADER_RESERVED_BYTES - 1, 1),
        (PAGE_BYTES - 3, 4),
        (PAGE_BYTES, 1),
        (usize::MAX, 2),
    ] {
        let err = append_patch(&mut block, offset, &vec![7; len]).unwrap_err();
        assert!(
            matches!(
                err,
                CodecError::PatchOutOfBounds {
                    page_id: PAGE_ID,
                    ..
                }
            ),
            "{offset} {len}: {err}"
        );
    }
    assert_eq!(block, before, "a refused patch leaves the block unchanged");
}

#[test]
fn patch_out_of_bounds_in_the_log() {
    let (mut codec, mut block) = zlib_block();
    assert_eq!(
        append_patch(&mut block, 100, &[1; 10]).unwrap(),
        PatchOutcome::Appended
    );
    let header = read_header(&block).unwrap();
    let entry_at = BLOCK_HEADER_BYTES + header.compressed_len_bytes;
    block[entry_at..entry_at + 2].copy_from_slice(&10u16.to_le_bytes());
    let err = decode(&mut codec, &block).unwrap_err();
    assert!(
        matches!(
            err,
            CodecError::PatchOutOfBounds {
                page_id: PAGE_ID,
                offset: 10,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn corrupted_zlib_image() {
    let (mut codec, mut block) = zlib_block();
    let header = read_header(&block).unwrap();
    for byte in &mut block[BLOCK_HEADER_BYTES + 2..BLOCK_HEADER_BYTES + header.compressed_len_bytes]
    {
        *byte = !*byte;
    }
    let err = decode(&mut codec, &block).unwrap_err();
    assert!(
        matches!(
            err,
            CodecError::Corrupted {
                page_id: PAGE_ID,
                codec: "zlib",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn corrupted_zstd_image_and_short_image() {
    let geometry = Geometry::new(PAGE_BYTES, BlockSize::Kib16).unwrap();
    let mut codec = BlockCodec::new(Codec::zstd_default(), geometry).unwrap();
    let mut block = vec![0; geometry.block_size_bytes()];
    let _ = codec
        .compress(&page(), PAGE_ID, Lsn(1), &mut block)
        .unwrap();
    let mut truncated = block.clone();
    let len = read_header(&block).unwrap().compressed_len_bytes;
    put_u32(
        &mut truncated,
        COMPRESSED_LEN_AT,
        u32::try_from(len / 2).unwrap(),
    );
    let err = decode(&mut codec, &truncated).unwrap_err();
    assert!(
        matches!(
            err,
            CodecError::Corrupted {
                page_id: PAGE_ID,
                codec: "zstd",
                ..
            }
        ),
        "{err}"
    );
    block[BLOCK_HEADER_BYTES] ^= 0xff; // the frame magic
    let err = decode(&mut codec, &block).unwrap_err();
    assert!(
        matches!(err, CodecError::Corrupted { codec: "zstd", .. }),
        "{err}"
    );
}

#[test]
fn dictionary_mismatch() {
    let geometry = Geometry::new(PAGE_BYTES, BlockSize::Kib8).unwrap();
    let dictionary = |seed| {
        let mut d = vec![0; 4096];
        sample::fill_compressible(&mut sample::rng(seed), 0.5, &mut d);
        Some(Arc::<[u8]>::from(d))
    };
    let mut with_a = BlockCodec::new(
        Codec::Zstd {
            level: 3,
            dictionary: dictionary(1),
        },
        geometry,
    )
    .unwrap();
    let mut with_b = BlockCodec::new(
        Codec::Zstd {
            level: 3,
            dictionary: dictionary(2),
        },
        geometry,
    )
    .unwrap();
    let mut block = vec![0; geometry.block_size_bytes()];
    let _ = with_a
        .compress(&page(), PAGE_ID, Lsn(1), &mut block)
        .unwrap();
    let mut frame = vec![0; PAGE_BYTES];
    with_a.decompress(&block, &mut frame).unwrap();
    assert_eq!(frame[BLOCK_HEADER_BYTES..], page()[BLOCK_HEADER_BYTES..]);
    let err = with_b.decompress(&block, &mut frame).unwrap_err();
    assert!(
        matches!(
            err,
            CodecError::DictionaryMismatch {
                page_id: PAGE_ID,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn invalid_level_geometry_and_config() {
    let geometry = Geometry::new(PAGE_BYTES, BlockSize::Kib8).unwrap();
    let err = BlockCodec::new(Codec::Zlib { level: 0 }, geometry).unwrap_err();
    assert!(
        matches!(
            err,
            CodecError::InvalidLevel {
                codec: "zlib",
                level: 0,
                ..
            }
        ),
        "{err}"
    );
    let err = BlockCodec::new(
        Codec::Zstd {
            level: 22,
            dictionary: None,
        },
        geometry,
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            CodecError::InvalidLevel {
                codec: "zstd",
                level: 22,
                ..
            }
        ),
        "{err}"
    );
    // The base crate checks geometries; the codec passes its error on with
    // the same message.
    let err = CodecError::from(Geometry::new(4096, BlockSize::Kib8).unwrap_err());
    assert!(matches!(err, CodecError::InvalidGeometry { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "invalid geometry: page 4096 bytes, block 8192 bytes: \
         a compressed block may not be larger than its page"
    );
    let err = BlockCodec::new(Codec::None, geometry).unwrap_err();
    assert!(
        matches!(err, CodecError::InvalidConfig { codec: "none", .. }),
        "{err}"
    );
    let uncompressed = Geometry::uncompressed(PAGE_BYTES).unwrap();
    let err = BlockCodec::new(Codec::zlib_default(), uncompressed).unwrap_err();
    assert!(
        matches!(err, CodecError::InvalidConfig { codec: "zlib", .. }),
        "{err}"
    );
}

#[test]
fn recompress_refuses_a_block_of_another_geometry() {
    let (mut codec, block) = zlib_block();
    let other = Geometry::new(PAGE_BYTES, BlockSize::Kib4).unwrap();
    let mut other_codec = BlockCodec::new(Codec::zlib_default(), other).unwrap();
    let mut block_copy = block.clone();
    let mut scratch = vec![0; PAGE_BYTES];
    let err = other_codec
        .recompress(&mut block_copy, &mut scratch)
        .unwrap_err();
    assert!(matches!(err, CodecError::InvalidConfig { .. }), "{err}");
    assert_eq!(block_copy, block);
    assert!(decode(&mut codec, &block).is_ok());
}

#[test]
fn seal_refreshes_a_stale_checksum() {
    let (_, mut block) = zlib_block();
    assert_eq!(
        append_patch(&mut block, 1000, b"patched").unwrap(),
        PatchOutcome::Appended
    );
    assert!(matches!(
        verify(&block, PAGE_ID),
        Err(CodecError::ChecksumMismatch { .. })
    ));
    let header = seal(&mut block, Lsn(99)).unwrap();
    assert_eq!(header.lsn, Lsn(99));
    assert_eq!(verify(&block, PAGE_ID).unwrap().lsn, Lsn(99));
}
