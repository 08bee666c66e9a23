//! The model test of `common` (a state machine against `BTreeMap`: insert,
//! delete, get and range scans in both directions, every split policy,
//! `check_invariants()` after every step) on `MemStore`: uncompressed 4 and
//! 16 KiB pages; and real zlib blocks (`CodecBlocks`, 16 KiB pages in 8 KiB
//! blocks and 4 KiB pages in 2 KiB blocks) with mixed and with mostly
//! incompressible values, where commits fail to fit, pages split on
//! compression failure, and a delete can meet a page that no longer
//! compresses into its block. Every operation must either complete or fail
//! with `CompressionUnfit` having changed nothing.
#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

mod common;

use barracuda_base::{BlockSize, Geometry};
use barracuda_btree::MemStore;
use barracuda_btree::store::CodecBlocks;
use barracuda_codec::Codec;
use common::{Setup, TreeUnderTest, Values};
use proptest::prelude::*;
use proptest_state_machine::prop_state_machine;
use std::sync::Arc;

/// Uncompressed pages of 4 or 16 KiB.
struct Plain;

impl Setup for Plain {
    type Store = MemStore;
    type Variant = usize;
    const VALUES: Values = Values::Compressible;

    fn variants() -> BoxedStrategy<usize> {
        prop_oneof![Just(4096usize), Just(16384usize)].boxed()
    }

    fn store(page_size_bytes: &usize) -> (Arc<MemStore>, bool) {
        (Arc::new(MemStore::new(*page_size_bytes).unwrap()), false)
    }
}

/// Zlib blocks: (page size, block size).
fn zlib_variants() -> BoxedStrategy<(usize, BlockSize)> {
    prop_oneof![
        Just((16 << 10, BlockSize::Kib8)),
        Just((4 << 10, BlockSize::Kib2))
    ]
    .boxed()
}

fn zlib_store(
    &(page_size_bytes, block): &(usize, BlockSize),
) -> (Arc<MemStore<CodecBlocks>>, bool) {
    let geometry = Geometry::new(page_size_bytes, block).unwrap();
    let fit = CodecBlocks::new(Codec::zlib_default(), geometry).unwrap();
    let store = MemStore::with_fit(page_size_bytes, fit).unwrap();
    (Arc::new(store), true)
}

/// Zlib blocks, compressible values with some random ones.
struct ZlibMixed;

impl Setup for ZlibMixed {
    type Store = MemStore<CodecBlocks>;
    type Variant = (usize, BlockSize);
    const VALUES: Values = Values::Mixed;

    fn variants() -> BoxedStrategy<(usize, BlockSize)> {
        zlib_variants()
    }

    fn store(variant: &(usize, BlockSize)) -> (Arc<Self::Store>, bool) {
        zlib_store(variant)
    }
}

/// Zlib blocks, mostly random values.
struct ZlibIncompressible;

impl Setup for ZlibIncompressible {
    type Store = MemStore<CodecBlocks>;
    type Variant = (usize, BlockSize);
    const VALUES: Values = Values::Incompressible;

    fn variants() -> BoxedStrategy<(usize, BlockSize)> {
        zlib_variants()
    }

    fn store(variant: &(usize, BlockSize)) -> (Arc<Self::Store>, bool) {
        zlib_store(variant)
    }
}

prop_state_machine! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        max_shrink_iters: 2000,
        .. ProptestConfig::default()
    })]
    #[test]
    fn tree_matches_btreemap(sequential 1..300 => TreeUnderTest<Plain>);

    #[test]
    fn codec_blocks_with_mixed_values(sequential 1..300 => TreeUnderTest<ZlibMixed>);

    #[test]
    fn codec_blocks_with_incompressible_values(sequential 1..300 => TreeUnderTest<ZlibIncompressible>);
}
