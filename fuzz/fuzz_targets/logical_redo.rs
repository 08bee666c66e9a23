//! Fuzzes the redo of logical log entries (`barracuda_btree::recipe`):
//! rebuild recipes, inserts and deletes, each applied to a page the way
//! recovery applies them. On a well-formed page built from the input's
//! records, a recipe encoded from a subset of them (some changed, some
//! added) must rebuild exactly the image the tree would build, and a logged
//! insert or delete must leave the page with the key present or absent.
//! Any bytes as a recipe, an insert or a delete, against that page or a
//! page with flipped bytes, may fail only with an error: never a panic.
#![no_main]

use arbitrary::Arbitrary;
use barracuda_btree::page::{self, HeapOrder, Layout, RecBuf, RecRef};
use barracuda_btree::recipe;
use barracuda_base::PageId;
use libfuzzer_sys::fuzz_target;

const PAGE: usize = 16 << 10;

#[derive(Arbitrary, Debug)]
struct Input {
    /// Records of the page: (key, value length), deduplicated and sorted.
    records: Vec<(Vec<u8>, u8)>,
    /// Which records a rebuild keeps, and which it changes.
    keep: Vec<bool>,
    change: Vec<bool>,
    key_order: bool,
    group_records: u8,
    /// A key to insert, then delete.
    key: Vec<u8>,
    /// Bytes flipped in the damaged copy: (offset, xor).
    flips: Vec<(u16, u8)>,
    /// Raw bytes tried as a recipe, an insert and a delete.
    raw: Vec<u8>,
}

fuzz_target!(|input: Input| {
    let mut records: Vec<(Vec<u8>, u8)> = input
        .records
        .into_iter()
        .map(|(mut k, v)| {
            k.truncate(64);
            (k, v)
        })
        .collect();
    records.sort();
    records.dedup_by(|a, b| a.0 == b.0);
    // As many as a page holds, with room for a directory slot each.
    let mut used = page::PAGE_HEADER_BYTES;
    let recs: Vec<RecBuf> = records
        .iter()
        .map(|(k, v)| RecBuf {
            key: k.clone(),
            flags: 0,
            value: vec![*v; usize::from(*v)],
            old_offset: None,
        })
        .take_while(|r| {
            used += r.len() + page::SLOT_BYTES;
            used <= PAGE
        })
        .collect();
    let layout = Layout {
        right: Some(PageId(3)),
        ..Layout::leaf()
    };
    let old = page::rebuilt_image(&vec![0u8; PAGE], &layout, &recs, HeapOrder::Key);

    // A rebuild of the page from its own records, some changed, one added.
    let mut kept: Vec<RecBuf> = page::read_all(&old)
        .into_iter()
        .zip(input.keep.iter().chain(std::iter::repeat(&true)))
        .filter(|(_, keep)| **keep)
        .map(|(r, _)| r)
        .collect();
    for (rec, change) in kept.iter_mut().zip(&input.change) {
        if *change {
            rec.value.push(7);
        }
    }
    let order = if input.key_order {
        HeapOrder::Key
    } else {
        HeapOrder::Kept
    };
    let groups = usize::from(input.group_records % 8) + 1;
    let recipe = recipe::encode(&old, &layout, &kept, groups, order);
    let image = recipe::build(&old, &recipe.bytes);
    let size = page::PAGE_HEADER_BYTES
        + kept.iter().map(RecBuf::len).sum::<usize>()
        + page::SLOT_BYTES * kept.len().div_ceil(groups);
    if size <= PAGE {
        let image = image.expect("a recipe of a page that fits builds");
        assert_eq!(page::read_all(&image).len(), kept.len());
        for (built, want) in page::read_all(&image).iter().zip(&kept) {
            assert_eq!((&built.key, &built.value), (&want.key, &want.value));
        }
    } else {
        assert!(image.is_err());
    }

    // An insert, then a delete of the same key.
    let mut key = input.key;
    key.truncate(page::KEY_BYTES_MAX);
    let value = [9u8; 20];
    let rec = RecRef {
        key: &key,
        flags: 0,
        value: &value,
    };
    let held = page::probe(&old, &key).found != 0;
    match recipe::redo_insert(&old, &recipe::encode_insert(rec)) {
        Ok(writes) => {
            assert!(!held);
            let mut page = old.clone();
            for patch in writes {
                let at = patch.offset as usize;
                page[at..at + patch.bytes.len()].copy_from_slice(&patch.bytes);
            }
            assert_ne!(page::probe(&page, &key).found, 0);
            let writes = recipe::redo_delete(&page, &recipe::encode_delete(&key, 0))
                .expect("a delete of a key the page holds");
            for patch in writes {
                let at = patch.offset as usize;
                page[at..at + patch.bytes.len()].copy_from_slice(&patch.bytes);
            }
            assert_eq!(page::probe(&page, &key).found, 0);
            assert_eq!(page::record_count(&page), recs.len());
        }
        Err(_) => assert!(held || !page::has_room(&old, rec.len(), PAGE)),
    }

    // Anything else is an error or a change, never a panic.
    let mut damaged = old.clone();
    for (at, xor) in input.flips {
        damaged[usize::from(at) % PAGE] ^= xor;
    }
    for page in [&old, &damaged] {
        let _ = recipe::build(page, &input.raw);
        let _ = recipe::build(page, &recipe.bytes);
        let _ = recipe::redo_rebuild(page, &input.raw);
        let _ = recipe::redo_insert(page, &input.raw);
        let _ = recipe::redo_delete(page, &input.raw);
        let _ = recipe::redo_insert(page, &recipe::encode_insert(rec));
    }
});
