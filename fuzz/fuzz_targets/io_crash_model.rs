//! Fuzzes the fault backend's crash model: arbitrary writes (every sector
//! with a distinct pattern), syncs, length changes and crashes over a memory
//! file. After each crash every sector must hold its synced content or the
//! content one unsynced write gave it (never a mix inside a sector), and
//! with nothing unsynced the file must be exactly the synced image.
#![no_main]

use std::sync::Arc;

use arbitrary::Arbitrary;
use barracuda_io::{AlignedBuf, BlockFile, FaultConfig, FaultFile, MemoryFile};

const SECTOR: usize = 512;
/// Bounded so a run stays small: 64 sectors, writes of up to 8.
const SPAN_SECTORS: u8 = 64;

#[derive(Arbitrary, Debug)]
enum Op {
    Write { first: u8, sectors: u8 },
    Sync,
    SetLen { sectors: u8 },
    Crash,
}

#[derive(Arbitrary, Debug)]
struct Input {
    seed: u64,
    tear: bool,
    ops: Vec<Op>,
}

struct Model {
    synced: Vec<u8>,
    current: Vec<u8>,
    /// Per sector, contents unsynced writes or shrinks may leave there.
    candidates: Vec<Vec<Vec<u8>>>,
}

fn pattern(write_id: usize, sector: usize) -> Vec<u8> {
    (0..SECTOR)
        .map(|i| (write_id * 131 + sector * 17 + i) as u8 ^ (write_id >> 8) as u8)
        .collect()
}

fn read_all(file: &dyn BlockFile) -> Vec<u8> {
    let len = file.len().expect("len") as usize;
    let mut buf = AlignedBuf::zeroed(len, SECTOR);
    file.read_at(0, &mut buf).expect("read");
    buf.to_vec()
}

libfuzzer_sys::fuzz_target!(|input: Input| {
    let config = FaultConfig::default()
        .seed(input.seed)
        .tear_writes(input.tear);
    let file = FaultFile::new(Arc::new(MemoryFile::new("fuzz")), config);
    let slots = SPAN_SECTORS as usize + 8;
    let mut model = Model {
        synced: Vec::new(),
        current: Vec::new(),
        candidates: vec![Vec::new(); slots],
    };
    for (write_id, op) in input.ops.iter().take(200).enumerate() {
        match *op {
            Op::Write { first, sectors } => {
                let first = (first % SPAN_SECTORS) as usize;
                let sectors = (sectors % 8) as usize + 1;
                let mut data = AlignedBuf::zeroed(sectors * SECTOR, SECTOR);
                for s in 0..sectors {
                    let p = pattern(write_id, first + s);
                    data[s * SECTOR..(s + 1) * SECTOR].copy_from_slice(&p);
                    model.candidates[first + s].push(p);
                }
                file.write_at((first * SECTOR) as u64, &data)
                    .expect("write");
                let end = (first + sectors) * SECTOR;
                if model.current.len() < end {
                    model.current.resize(end, 0);
                }
                model.current[first * SECTOR..end].copy_from_slice(&data);
            }
            Op::Sync => {
                file.sync_data().expect("sync");
                model.synced.clone_from(&model.current);
                model.candidates.iter_mut().for_each(Vec::clear);
            }
            Op::SetLen { sectors } => {
                let len = (sectors % (SPAN_SECTORS + 8)) as usize * SECTOR;
                // A shrink then regrow reads zeros: a candidate for those sectors.
                for s in len / SECTOR..slots {
                    model.candidates[s].push(vec![0; SECTOR]);
                }
                file.set_len(len as u64).expect("set_len");
                model.current.resize(len, 0);
            }
            Op::Crash => {
                let unsynced = file.unsynced_count();
                file.crash().expect("crash");
                let after = read_all(&file);
                if unsynced == 0 {
                    assert_eq!(
                        after, model.synced,
                        "nothing unsynced: exactly the synced image"
                    );
                }
                for (sector, chunk) in after.chunks(SECTOR).enumerate() {
                    let zeros = vec![0u8; SECTOR];
                    let old = model
                        .synced
                        .get(sector * SECTOR..(sector + 1) * SECTOR)
                        .unwrap_or(&zeros);
                    let ok = chunk == old
                        || model
                            .candidates
                            .get(sector)
                            .is_some_and(|c| c.iter().any(|v| v.as_slice() == chunk));
                    assert!(
                        ok,
                        "sector {sector} holds neither synced nor unsynced content"
                    );
                }
                model.synced = after.clone();
                model.current = after;
                model.candidates.iter_mut().for_each(Vec::clear);
            }
        }
    }
});
