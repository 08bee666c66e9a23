//! The frequency sketch of a shard's admission (TinyLFU).

use super::RECORD_BYTES_PLANNED_MIN;

/// A shard's frequency sketch has this many counters per record its ring
/// holds when full of records of the planned size, and halves them all
/// after ten gets per record (TinyLFU's sample).
const SKETCH_COUNTERS_PER_RECORD: usize = 4;
const SKETCH_SAMPLE_PER_RECORD: usize = 10;

/// How often each key was read lately: a count-min sketch of two rows in
/// one table of saturating 8-bit counters (conservative increments), all
/// halved after a sample of reads (TinyLFU's aging). Allocated at its
/// first read.
#[derive(Default)]
pub(super) struct Sketch {
    counters: Vec<u8>,
    reads: usize,
    sample: usize,
}

impl Sketch {
    fn slots(&self, hash: u64) -> [usize; 2] {
        let mask = self.counters.len() - 1;
        [hash as usize & mask, (hash >> 32) as usize & mask]
    }

    /// Counts a read of the key of `hash`.
    pub(super) fn record(&mut self, ring_bytes: usize, hash: u64) {
        if self.counters.is_empty() {
            let records = (ring_bytes / RECORD_BYTES_PLANNED_MIN).max(1);
            self.counters = vec![0; (records * SKETCH_COUNTERS_PER_RECORD).next_power_of_two()];
            self.sample = records * SKETCH_SAMPLE_PER_RECORD;
        }
        let [a, b] = self.slots(hash);
        let least = self.counters[a].min(self.counters[b]);
        for slot in [a, b] {
            if self.counters[slot] == least {
                self.counters[slot] = least.saturating_add(1);
            }
        }
        self.reads += 1;
        if self.reads >= self.sample {
            self.reads /= 2;
            for counter in &mut self.counters {
                *counter /= 2;
            }
        }
    }

    /// How often the key of `hash` was read lately (an overestimate).
    pub(super) fn estimate(&self, hash: u64) -> u8 {
        if self.counters.is_empty() {
            return 0;
        }
        let [a, b] = self.slots(hash);
        self.counters[a].min(self.counters[b])
    }
}
