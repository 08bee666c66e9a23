//! Fuzzes the differential crash simulator (`barracuda::testing::sim`): the
//! input's first eight bytes are the seed, which picks the configuration,
//! the operations and the crashes of three crash epochs; every recovery
//! must match the model at a moment between the last durable operation and
//! the last attempted one. A failure panics with its seed; rerun it with
//! `BARRACUDA_SIM_SEED=<seed> cargo test --release --test crash_sim`.
#![no_main]

use std::path::PathBuf;

use barracuda::testing::sim::run_seed;
use libfuzzer_sys::fuzz_target;

/// Crash epochs per input: short runs, many seeds.
const EPOCHS: u32 = 3;

/// tmpfs when there is one: the files then never reach a disk.
fn base_dir() -> PathBuf {
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        shm
    } else {
        std::env::temp_dir()
    }
}

fuzz_target!(|data: &[u8]| {
    let mut seed_bytes = [0u8; 8];
    let len = data.len().min(8);
    seed_bytes[..len].copy_from_slice(&data[..len]);
    let seed = u64::from_le_bytes(seed_bytes);
    // Every configuration the seed picks, as the default test: values of
    // several pages in a third of the seeds, every block size.
    let result = run_seed(&base_dir(), seed, EPOCHS);
    if let Err(failure) = result {
        panic!("{failure}");
    }
});
