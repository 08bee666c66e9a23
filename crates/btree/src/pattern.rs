//! A family of insert patterns with parameters, for measuring split
//! policies (`barracuda-bench fill --pattern family|sweep` and the tests),
//! and an offline oracle that knows every future insert.
//!
//! Real tables are written by many sequential streams at once, with noise
//! (the reference study's point): per-entity keys that grow, interleaved in
//! some way, with late arrivals and deletes. A [`Family`] describes one such
//! workload by its parameters, not by a name, so that a policy can be judged
//! on a grid of them rather than tuned to a list. Everything is seeded and
//! deterministic: the same parameters give the same operations.
//!
//! [`oracle_leaf_fill`] simulates only the leaf level of a tree (pages as
//! sorted record lists, without merges) and splits each full page at the
//! cut that packs the final contents best, knowing which keys will still
//! arrive: the left part takes as many records as leave room for exactly the
//! inserts that will land in it, else the right part does, else both get
//! equal final loads. It is a yardstick of what foresight buys, not a proven
//! optimum.

use crate::error::Result;
use crate::page::{self, OVERFLOW_REF_BYTES, PAGE_HEADER_BYTES, RECORD_HEADER_BYTES, SLOT_BYTES};
use crate::store::PageStore;
use crate::tree::BTree;
use std::collections::BTreeMap;

/// How a stream's keys are built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum KeyShape {
    /// Stream id `u32` BE, then a sequence number `u64` BE (12 bytes).
    Fixed,
    /// `user:<stream>:` (decimal, so the prefix's length varies), then a
    /// sequence number `u64` BE.
    VarPrefix,
    /// Several parts: a group `u16` BE, a short name, a zero byte, then a
    /// sequence number `u32` BE (like a composite primary key).
    Composite,
}

/// Which way a stream's sequence numbers run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum StreamOrder {
    /// Every stream ascends.
    Ascending,
    /// Every stream descends.
    Descending,
    /// Even streams ascend, odd streams descend.
    Mixed,
}

/// Which stream the next insert belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Interleave {
    /// Streams in turn.
    RoundRobin,
    /// A stream chosen uniformly at random.
    Random,
    /// The same stream again with probability 15/16, else a random one.
    Bursts,
    /// A stream chosen by a Zipf law (exponent 0.99) over a random
    /// permutation of the streams, so that hot streams are not neighbours.
    Zipf,
}

/// How long values are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum ValueSizes {
    /// All values have this many bytes.
    Fixed(usize),
    /// Uniform between the two bounds (inclusive).
    Variable(usize, usize),
}

/// One operation of a workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Insert (or update) a key.
    Insert(Vec<u8>, Vec<u8>),
    /// Delete a key that was inserted before.
    Delete(Vec<u8>),
}

/// The parameters of one workload of the family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Family {
    /// Seed of every random choice.
    pub seed: u64,
    /// Operations to generate.
    pub ops: usize,
    /// Number of streams, 1 to 100,000.
    pub streams: u32,
    /// Key shape of every stream.
    pub shape: KeyShape,
    /// Direction of the streams.
    pub order: StreamOrder,
    /// How the streams interleave.
    pub interleave: Interleave,
    /// Inserts (per mille) that are late arrivals: a key at a random earlier
    /// position of a random stream instead of the stream's next key.
    pub late_per_mille: u32,
    /// Operations (per mille) that delete a random live key.
    pub delete_per_mille: u32,
    /// Value lengths.
    pub values: ValueSizes,
    /// Values (percent) made of random bytes instead of text.
    pub incompressible_percent: u32,
}

impl Default for Family {
    fn default() -> Self {
        Self {
            seed: 1,
            ops: 100_000,
            streams: 1,
            shape: KeyShape::Fixed,
            order: StreamOrder::Ascending,
            interleave: Interleave::Random,
            late_per_mille: 0,
            delete_per_mille: 0,
            values: ValueSizes::Fixed(80),
            incompressible_percent: 0,
        }
    }
}

/// Sequence numbers start here, so that descending streams stay positive.
const SEQ_BASE: u64 = 1 << 31;
/// Zipf exponent of [`Interleave::Zipf`] (YCSB's default).
const ZIPF_THETA: f64 = 0.99;
/// A burst continues with probability `1 - 1/BURST_MEAN`.
const BURST_MEAN: u64 = 16;

/// SplitMix64: small, fast and good enough for workload generation.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    /// A generator whose state is `state` as given (the crash simulator's
    /// seeds name states, and must replay the same streams).
    pub fn from_state(state: u64) -> Self {
        Self(state)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `per_mille / 1000`.
    pub fn per_mille(&mut self, per_mille: u32) -> bool {
        self.below(1000) < u64::from(per_mille)
    }
}

impl Family {
    /// A short description, for tables.
    pub fn label(&self) -> String {
        let shape = match self.shape {
            KeyShape::Fixed => "fixed",
            KeyShape::VarPrefix => "varprefix",
            KeyShape::Composite => "composite",
        };
        let order = match self.order {
            StreamOrder::Ascending => "asc",
            StreamOrder::Descending => "desc",
            StreamOrder::Mixed => "mixed",
        };
        let inter = match self.interleave {
            Interleave::RoundRobin => "rr",
            Interleave::Random => "random",
            Interleave::Bursts => "bursts",
            Interleave::Zipf => "zipf",
        };
        let values = match self.values {
            ValueSizes::Fixed(n) => format!("v{n}"),
            ValueSizes::Variable(a, b) => format!("v{a}-{b}"),
        };
        format!(
            "s{} {shape} {order} {inter} late{} del{} {values} inc{}",
            self.streams,
            per_mille_str(self.late_per_mille),
            per_mille_str(self.delete_per_mille),
            self.incompressible_percent
        )
    }

    /// Average records per stream.
    pub fn records_per_stream(&self) -> usize {
        self.ops / self.streams.max(1) as usize
    }

    /// This workload with its operations raised so that every stream gets
    /// `records` records on average, if that takes at most `ops_max`
    /// operations; else as it is. A stream of a few records is no stream
    /// to a split policy: with fewer records per stream than a leaf holds,
    /// the streams' inserts land all over each leaf, as random inserts do.
    pub fn with_records_per_stream(self, records: usize, ops_max: usize) -> Self {
        let wanted = records.saturating_mul(self.streams.max(1) as usize);
        if wanted > self.ops && wanted <= ops_max {
            Self {
                ops: wanted,
                ..self
            }
        } else {
            self
        }
    }

    /// The key of stream `s`'s `q`-th record.
    fn key(&self, s: u32, q: u64) -> Vec<u8> {
        let descending = match self.order {
            StreamOrder::Ascending => false,
            StreamOrder::Descending => true,
            StreamOrder::Mixed => s % 2 == 1,
        };
        let seq = if descending {
            SEQ_BASE - q.min(SEQ_BASE - 1)
        } else {
            SEQ_BASE + q
        };
        match self.shape {
            KeyShape::Fixed => {
                let mut k = s.to_be_bytes().to_vec();
                k.extend_from_slice(&seq.to_be_bytes());
                k
            }
            KeyShape::VarPrefix => {
                let mut k = format!("user:{s}:").into_bytes();
                k.extend_from_slice(&seq.to_be_bytes());
                k
            }
            KeyShape::Composite => {
                let group = (s / 64) as u16;
                let mut k = group.to_be_bytes().to_vec();
                k.extend_from_slice(format!("n{:x}", s % 64).as_bytes());
                k.push(0);
                k.extend_from_slice(&(seq as u32).to_be_bytes());
                k
            }
        }
    }

    fn value(&self, rng: &mut Rng, i: usize) -> Vec<u8> {
        let len = match self.values {
            ValueSizes::Fixed(n) => n,
            ValueSizes::Variable(a, b) => a + rng.below((b - a + 1) as u64) as usize,
        };
        if rng.below(100) < u64::from(self.incompressible_percent) {
            return (0..len).map(|_| rng.next_u64() as u8).collect();
        }
        let mut v = Vec::with_capacity(len);
        v.extend_from_slice(&(i as u64).to_le_bytes());
        let filler = b"order-line carrier 5 items 10 all-local 1 ";
        while v.len() < len {
            v.push(filler[v.len() % filler.len()]);
        }
        v.truncate(len);
        v
    }

    /// The workload's operations, in order.
    pub fn operations(&self) -> Vec<Op> {
        let streams = self.streams.max(1);
        let mut rng = Rng::new(self.seed);
        let mut next = vec![0u64; streams as usize];
        let zipf =
            (self.interleave == Interleave::Zipf).then(|| ZipfStreams::new(streams, &mut rng));
        let mut live: Vec<Vec<u8>> = Vec::new();
        let mut out = Vec::with_capacity(self.ops);
        let mut current = 0u32;
        for i in 0..self.ops {
            if !live.is_empty() && rng.per_mille(self.delete_per_mille) {
                let at = rng.below(live.len() as u64) as usize;
                out.push(Op::Delete(live.swap_remove(at)));
                continue;
            }
            let s = match self.interleave {
                Interleave::RoundRobin => (i as u64 % u64::from(streams)) as u32,
                Interleave::Random => rng.below(u64::from(streams)) as u32,
                Interleave::Bursts => {
                    if i == 0 || rng.below(BURST_MEAN) == 0 {
                        current = rng.below(u64::from(streams)) as u32;
                    }
                    current
                }
                Interleave::Zipf => zipf.as_ref().map_or(0, |z| z.pick(&mut rng)),
            };
            let late = rng.per_mille(self.late_per_mille);
            let key = if late && next[s as usize] > 0 {
                // Between two keys the stream already has: the earlier key
                // plus a suffix sorts right after it.
                let q = rng.below(next[s as usize]);
                let mut k = self.key(s, q);
                k.extend_from_slice(&(rng.next_u64() as u16).to_be_bytes());
                k
            } else {
                let q = next[s as usize];
                next[s as usize] += 1;
                self.key(s, q)
            };
            live.push(key.clone());
            out.push(Op::Insert(key, self.value(&mut rng, i)));
        }
        out
    }
}

/// Applies `ops` to `tree` in order.
pub fn apply<S: PageStore>(tree: &BTree<S>, ops: &[Op]) -> Result<()> {
    for op in ops {
        match op {
            Op::Insert(k, v) => {
                tree.insert(k, v)?;
            }
            Op::Delete(k) => {
                tree.delete(k)?;
            }
        }
    }
    Ok(())
}

fn per_mille_str(p: u32) -> String {
    if p.is_multiple_of(10) {
        format!("{}%", p / 10)
    } else {
        format!("{}.{}%", p / 10, p % 10)
    }
}

/// Zipf-distributed picks over a random permutation of the streams.
struct ZipfStreams {
    cdf: Vec<f64>,
    perm: Vec<u32>,
}

impl ZipfStreams {
    fn new(streams: u32, rng: &mut Rng) -> Self {
        let mut sum = 0.0;
        let cdf = (1..=streams)
            .map(|rank| {
                sum += 1.0 / f64::from(rank).powf(ZIPF_THETA);
                sum
            })
            .collect();
        let mut perm: Vec<u32> = (0..streams).collect();
        for i in (1..perm.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            perm.swap(i, j);
        }
        Self { cdf, perm }
    }

    fn pick(&self, rng: &mut Rng) -> u32 {
        let total = self.cdf.last().copied().unwrap_or(1.0);
        let u = rng.unit() * total;
        let rank = self
            .cdf
            .partition_point(|c| *c < u)
            .min(self.perm.len() - 1);
        self.perm[rank]
    }
}

/// A grid of `points` workloads of `ops` operations each, seeded by
/// `seed`: the stream counts, key shapes and interleavings cover every
/// combination in turn; late arrivals, deletes, directions and values are
/// drawn at random per point.
pub fn grid(points: usize, ops: usize, seed: u64) -> Vec<Family> {
    const STREAMS: [u32; 10] = [1, 3, 16, 160, 1_000, 2_000, 5_000, 10_000, 30_000, 100_000];
    const SHAPES: [KeyShape; 3] = [KeyShape::Fixed, KeyShape::VarPrefix, KeyShape::Composite];
    const INTERLEAVES: [Interleave; 4] = [
        Interleave::Random,
        Interleave::RoundRobin,
        Interleave::Bursts,
        Interleave::Zipf,
    ];
    const LATE: [u32; 7] = [0, 0, 5, 10, 20, 50, 100];
    const DELETES: [u32; 5] = [0, 0, 0, 20, 50];
    const ORDERS: [StreamOrder; 4] = [
        StreamOrder::Ascending,
        StreamOrder::Ascending,
        StreamOrder::Descending,
        StreamOrder::Mixed,
    ];
    let mut rng = Rng::new(seed);
    (0..points)
        .map(|i| {
            let pick = |rng: &mut Rng, n: usize| rng.below(n as u64) as usize;
            let values = match pick(&mut rng, 4) {
                0 | 1 => ValueSizes::Fixed(80),
                2 => ValueSizes::Variable(10, 400),
                _ => ValueSizes::Fixed(200),
            };
            Family {
                seed: rng.next_u64(),
                ops,
                streams: STREAMS[i % STREAMS.len()],
                shape: SHAPES[(i / STREAMS.len()) % SHAPES.len()],
                interleave: INTERLEAVES[(i / (STREAMS.len() * SHAPES.len())) % INTERLEAVES.len()],
                order: ORDERS[pick(&mut rng, ORDERS.len())],
                late_per_mille: LATE[pick(&mut rng, LATE.len())],
                delete_per_mille: DELETES[pick(&mut rng, DELETES.len())],
                values,
                incompressible_percent: if pick(&mut rng, 3) == 0 { 20 } else { 0 },
            }
        })
        .collect()
}

/// Bytes a record of this key and value takes in a leaf (without its
/// share of the directory), with values above the inline limit overflowed.
fn record_bytes(key: &[u8], value: &[u8], page_size_bytes: usize) -> usize {
    let inline = if value.len() > page::value_inline_bytes_max(page_size_bytes) {
        OVERFLOW_REF_BYTES
    } else {
        value.len()
    };
    RECORD_HEADER_BYTES + key.len() + inline
}

/// Bytes a leaf with `count` records of `rec_bytes` bytes in all uses (as
/// [`page::image_bytes`] counts them).
fn page_bytes(count: usize, rec_bytes: usize) -> usize {
    PAGE_HEADER_BYTES + rec_bytes + SLOT_BYTES * count.div_ceil(page::GROUP_RECORDS_BUILD)
}

/// Sums over key ranks of the inserts still to come (a Fenwick tree).
struct Future {
    tree: Vec<i64>,
}

impl Future {
    fn new(n: usize) -> Self {
        Self {
            tree: vec![0; n + 1],
        }
    }
    fn add(&mut self, rank: usize, delta: i64) {
        let mut i = rank + 1;
        while i < self.tree.len() {
            self.tree[i] += delta;
            i += i & i.wrapping_neg();
        }
    }
    /// Sum over ranks `0..end`.
    fn prefix(&self, end: usize) -> i64 {
        let mut i = end.min(self.tree.len() - 1);
        let mut s = 0;
        while i > 0 {
            s += self.tree[i];
            i -= i & i.wrapping_neg();
        }
        s
    }
    /// Sum over ranks `lo..hi`.
    fn range(&self, lo: usize, hi: usize) -> usize {
        if hi <= lo {
            return 0;
        }
        (self.prefix(hi) - self.prefix(lo)).max(0) as usize
    }
}

/// One simulated leaf: records `(key rank, bytes)` in key order.
#[derive(Default)]
struct Leaf {
    recs: Vec<(usize, usize)>,
    rec_bytes: usize,
}

/// Leaf fill (bytes used / (leaves x page size), as
/// [`crate::TreeStats::leaf_fill`]) that splits with foresight reach on
/// `ops` (see the module's documentation): the best over
/// [`ORACLE_MIN_FINAL_PERCENT`].
pub fn oracle_leaf_fill(ops: &[Op], page_size_bytes: usize) -> f64 {
    let mut best = 0.0f64;
    for &p in &ORACLE_MIN_FINAL_PERCENT {
        for right_first in [false, true] {
            best = best.max(oracle_fill_with(ops, page_size_bytes, p, right_first));
        }
    }
    best
}

/// A cut that lets one part end full is taken only if that part's final
/// load is at least this percentage of the page: a part that ends full
/// but small is waste too. The oracle tries each, with the left or the
/// right part tried first, and keeps the best.
pub const ORACLE_MIN_FINAL_PERCENT: [usize; 4] = [0, 50, 75, 90];

fn oracle_fill_with(
    ops: &[Op],
    page_size_bytes: usize,
    min_final_percent: usize,
    right_first: bool,
) -> f64 {
    let mut keys: Vec<&[u8]> = ops
        .iter()
        .map(|op| match op {
            Op::Insert(k, _) | Op::Delete(k) => k.as_slice(),
        })
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let rank = |k: &[u8]| keys.binary_search(&k).unwrap_or(0);
    let n_keys = keys.len();
    let mut future = Future::new(n_keys);
    let sizes: Vec<(usize, usize)> = ops
        .iter()
        .map(|op| match op {
            Op::Insert(k, v) => (rank(k), record_bytes(k, v, page_size_bytes)),
            Op::Delete(k) => (rank(k), 0),
        })
        .collect();
    for &(r, b) in &sizes {
        future.add(r, b as i64);
    }
    // Leaves by the rank of their lower bound (the first leaf's is 0).
    let mut leaves: BTreeMap<usize, Leaf> = BTreeMap::new();
    leaves.insert(0, Leaf::default());
    for (op, &(r, b)) in ops.iter().zip(&sizes) {
        future.add(r, -(b as i64));
        let (&lo, _) = leaves
            .range(..=r)
            .next_back()
            .unwrap_or((&0, &Leaf::default()));
        let hi = leaves.range(r + 1..).next().map_or(n_keys, |(&k, _)| k);
        let Some(leaf) = leaves.get_mut(&lo) else {
            continue;
        };
        let at = leaf.recs.partition_point(|&(k, _)| k < r);
        let exists = leaf.recs.get(at).is_some_and(|&(k, _)| k == r);
        match op {
            Op::Delete(_) => {
                if exists {
                    leaf.rec_bytes -= leaf.recs[at].1;
                    leaf.recs.remove(at);
                }
                continue;
            }
            Op::Insert(..) if exists => {
                leaf.rec_bytes = leaf.rec_bytes - leaf.recs[at].1 + b;
                leaf.recs[at].1 = b;
            }
            Op::Insert(..) => {
                leaf.recs.insert(at, (r, b));
                leaf.rec_bytes += b;
            }
        }
        if page_bytes(leaf.recs.len(), leaf.rec_bytes) <= page_size_bytes {
            continue;
        }
        let cut = oracle_cut(
            &leaf.recs,
            lo,
            hi,
            &future,
            (page_size_bytes, min_final_percent),
            right_first,
        );
        let right = leaf.recs.split_off(cut);
        let right_bytes: usize = right.iter().map(|&(_, b)| b).sum();
        leaf.rec_bytes -= right_bytes;
        let right_lo = right[0].0;
        leaves.insert(
            right_lo,
            Leaf {
                recs: right,
                rec_bytes: right_bytes,
            },
        );
    }
    let used: usize = leaves
        .values()
        .map(|l| page_bytes(l.recs.len(), l.rec_bytes))
        .sum();
    used as f64 / (leaves.len() * page_size_bytes) as f64
}

/// The oracle's cut of a full leaf `recs` covering ranks `lo..hi`, for
/// pages of `cap` bytes that a part ending full must fill to
/// `min_final_percent`.
fn oracle_cut(
    recs: &[(usize, usize)],
    lo: usize,
    hi: usize,
    future: &Future,
    (cap, min_final_percent): (usize, usize),
    right_first: bool,
) -> usize {
    let min_final = cap * min_final_percent / 100;
    let n = recs.len();
    let mut prefix = vec![0usize; n + 1];
    for (i, &(_, b)) in recs.iter().enumerate() {
        prefix[i + 1] = prefix[i] + b;
    }
    let left_now = |c: usize| page_bytes(c, prefix[c]);
    let right_now = |c: usize| page_bytes(n - c, prefix[n] - prefix[c]);
    let left_final = |c: usize| left_now(c) + future.range(lo, recs[c].0);
    let right_final = |c: usize| right_now(c) + future.range(recs[c].0, hi);
    let fits = |c: usize| left_now(c) <= cap && right_now(c) <= cap;
    // The left part ends full: the largest cut whose final load fits.
    let left_full = || {
        (1..n)
            .rev()
            .find(|&c| fits(c) && left_final(c) <= cap)
            .filter(|&c| left_final(c) >= min_final)
    };
    // The right part ends full: the smallest such cut.
    let right_full = || {
        (1..n)
            .find(|&c| fits(c) && right_final(c) <= cap)
            .filter(|&c| right_final(c) >= min_final)
    };
    let chosen = if right_first {
        right_full().or_else(left_full)
    } else {
        left_full().or_else(right_full)
    };
    // Else equal final loads.
    chosen.unwrap_or_else(|| {
        (1..n)
            .filter(|&c| fits(c))
            .min_by_key(|&c| left_final(c).abs_diff(right_final(c)))
            .unwrap_or(n / 2)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_is_deterministic_and_keys_are_new_or_late() {
        for (i, f) in grid(30, 2_000, 7).into_iter().enumerate() {
            let a = f.operations();
            assert_eq!(a, f.operations(), "point {i}");
            assert_eq!(a.len(), 2_000);
            let inserts = a.iter().filter(|o| matches!(o, Op::Insert(..))).count();
            assert!(inserts >= 1_800, "point {i}: {inserts} inserts");
        }
    }

    #[test]
    fn stream_keys_are_contiguous_and_ordered() {
        for shape in [KeyShape::Fixed, KeyShape::VarPrefix, KeyShape::Composite] {
            for order in [StreamOrder::Ascending, StreamOrder::Descending] {
                let f = Family {
                    shape,
                    order,
                    ..Family::default()
                };
                // Consecutive keys of a stream move in its direction, and
                // no key of another stream falls between them.
                for s in [0u32, 1, 9, 10, 63, 64, 99] {
                    let (a, b) = (f.key(s, 5), f.key(s, 6));
                    assert_eq!(a < b, order == StreamOrder::Ascending);
                    let (lo, hi) = if a < b { (a, b) } else { (b, a) };
                    for t in [0u32, 1, 9, 10, 11, 63, 64, 65, 100, 999] {
                        if t != s {
                            let k = f.key(t, 3);
                            assert!(k < lo || k > hi, "{shape:?} {s} {t}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn records_per_stream_raise_operations_up_to_the_cap() {
        let f = Family {
            ops: 30_000,
            streams: 1_000,
            ..Family::default()
        };
        let raised = f.with_records_per_stream(100, 200_000);
        assert_eq!(raised.ops, 100_000);
        assert_eq!(raised.records_per_stream(), 100);
        // Past the cap, or already long enough: unchanged.
        let many = Family {
            streams: 5_000,
            ..f
        };
        assert_eq!(many.with_records_per_stream(100, 200_000), many);
        assert_eq!(f.with_records_per_stream(10, 200_000), f);
    }

    #[test]
    fn oracle_packs_an_ascending_stream_full() {
        for page in [4096, 16384] {
            let f = Family {
                ops: 20_000,
                ..Family::default()
            };
            let fill = oracle_leaf_fill(&f.operations(), page);
            assert!(fill > 0.97, "{page}: {fill}");
        }
    }
}
