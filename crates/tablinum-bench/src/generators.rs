//! Seeded key and value generators.
//!
//! Owns the key distributions (uniform, basho_bench's pareto, sequential), the
//! key byte encodings and the value sources (incompressible slices of a random
//! block; semi-compressible half random, half text). Everything is a pure
//! function of the workload and an RNG the caller owns, so a seed reproduces a
//! run's key and value stream. It must never allocate per call on the `fixed`
//! value path, never read the clock, and never touch a target.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rand::rngs::Xoshiro256PlusPlus;
use rand::{Rng, RngExt, SeedableRng};

use crate::workload::{KeyEncoding, KeyGenerator, ValueGenerator, Workload};

/// The RNG every worker uses: fast, seedable, stable across platforms.
pub type BenchRng = Xoshiro256PlusPlus;

/// basho_bench's `PARETO_SHAPE`: gives ~80% of draws in the first 20% of keys.
pub const PARETO_SHAPE: f64 = 1.5;
/// basho_bench puts the pareto mean at this fraction of the key space.
pub const PARETO_MEAN_FRACTION: f64 = 0.2;
/// Smallest random block values are sliced from, bytes.
pub const VALUE_BLOCK_BYTES_MIN: usize = 16 << 20;
/// The random block is at least this many values long.
pub const VALUE_BLOCK_VALUES_MIN: usize = 4;
/// Size of the text block semi-compressible values take their text half from, bytes.
pub const TEXT_BLOCK_BYTES_MIN: usize = 1 << 20;
/// Words in the vocabulary of the text block.
pub const TEXT_VOCABULARY_WORDS: usize = 256;
/// Phrases (2 to 6 words) the text block is assembled from.
pub const TEXT_PHRASES: usize = 32;
/// Width of a decimal-encoded key, digits (`u64::MAX` has 20).
pub const DECIMAL_KEY_DIGITS: usize = 20;

/// The RNG of worker `worker` (and of the preload, which uses `worker = concurrent`).
pub fn worker_rng(seed: u64, worker: u64) -> BenchRng {
    BenchRng::seed_from_u64(seed.wrapping_add(worker))
}

/// Draws key numbers and encodes them as bytes. Shared by all workers (`&self`);
/// each worker passes its own RNG.
#[derive(Debug, Clone)]
pub struct KeySource {
    generator: KeyGenerator,
    keys: u64,
    encoding: KeyEncoding,
    prefix: Vec<u8>,
    /// basho_bench's `S1 = -1 / Shape`.
    pareto_s1: f64,
    /// basho_bench's `S2 = Mean * (Shape - 1)`.
    pareto_s2: f64,
    /// The one global sequence of `sequential`.
    next_sequential: Arc<AtomicU64>,
}

impl KeySource {
    /// A key source for `workload` (which must be valid).
    pub fn new(workload: &Workload) -> KeySource {
        // basho_bench: pareto(trunc(MaxKey * 0.2), ?PARETO_SHAPE)
        let mean = (workload.keys as f64 * PARETO_MEAN_FRACTION).trunc();
        KeySource {
            generator: workload.key_generator,
            keys: workload.keys,
            encoding: workload.key_encoding,
            prefix: workload.key_prefix.as_bytes().to_vec(),
            pareto_s1: -1.0 / PARETO_SHAPE,
            pareto_s2: mean * (PARETO_SHAPE - 1.0),
            next_sequential: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The key space size.
    pub fn keys(&self) -> u64 {
        self.keys
    }

    /// The next key number.
    pub fn next_number<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        match self.generator {
            KeyGenerator::Uniform => rng.random_range(0..self.keys),
            KeyGenerator::Pareto => self.pareto(rng),
            KeyGenerator::TruncatedPareto => self.pareto(rng).min(self.keys - 1),
            KeyGenerator::Sequential => {
                self.next_sequential.fetch_add(1, Ordering::Relaxed) % self.keys
            }
        }
    }

    /// basho_bench `pareto/2`: `trunc((U^(-1/shape) - 1) * mean * (shape - 1))`
    /// with `U` in `(0, 1]`. Unbounded above (saturates at `u64::MAX`).
    fn pareto<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        let u = 1.0 - rng.random::<f64>(); // random() is in [0, 1)
        let x = (u.powf(self.pareto_s1) - 1.0) * self.pareto_s2;
        // `as` saturates: +inf and huge values become u64::MAX.
        x as u64
    }

    /// Writes the key bytes of `n` into `buf` (cleared first).
    pub fn encode(&self, n: u64, buf: &mut Vec<u8>) {
        buf.clear();
        buf.extend_from_slice(&self.prefix);
        match self.encoding {
            KeyEncoding::Be64 => buf.extend_from_slice(&n.to_be_bytes()),
            KeyEncoding::Decimal => {
                use std::io::Write;
                // Writing to a Vec cannot fail.
                let _ = write!(buf, "{n:0width$}", width = DECIMAL_KEY_DIGITS);
            }
        }
    }

    /// The key bytes of `n`.
    pub fn key(&self, n: u64) -> Vec<u8> {
        let mut buf = Vec::with_capacity(self.prefix.len() + DECIMAL_KEY_DIGITS);
        self.encode(n, &mut buf);
        buf
    }
}

/// Produces values. Shared by all workers; built once per run from the seed.
#[derive(Debug, Clone)]
pub struct ValueSource {
    generator: ValueGenerator,
    size_bytes: usize,
    random_block: Arc<Vec<u8>>,
    text_block: Arc<Vec<u8>>,
}

impl ValueSource {
    /// Builds the blocks for `workload` (which must be valid) from `seed`.
    pub fn new(workload: &Workload, seed: u64) -> ValueSource {
        // Validated: value_size_bytes <= VALUE_SIZE_BYTES_MAX (16 MiB) fits usize.
        let size_bytes = usize::try_from(workload.value_size_bytes).unwrap_or(usize::MAX);
        let mut rng = BenchRng::seed_from_u64(seed ^ 0x7661_6c75_6573_0000); // "values"
        let block_bytes =
            VALUE_BLOCK_BYTES_MIN.max(size_bytes.saturating_mul(VALUE_BLOCK_VALUES_MIN));
        let mut random_block = vec![0u8; block_bytes];
        rng.fill_bytes(&mut random_block);
        let text_block = match workload.value_generator {
            ValueGenerator::Fixed => Vec::new(),
            ValueGenerator::SemiCompressible => text_block(
                &mut rng,
                TEXT_BLOCK_BYTES_MIN.max(size_bytes.saturating_mul(2)),
            ),
        };
        ValueSource {
            generator: workload.value_generator,
            size_bytes,
            random_block: Arc::new(random_block),
            text_block: Arc::new(text_block),
        }
    }

    /// Value size, bytes.
    pub fn size_bytes(&self) -> usize {
        self.size_bytes
    }

    /// The next value: a slice of the random block (`fixed`, no copy) or a value
    /// assembled in `buf` (`semi_compressible`).
    pub fn next<'a, R: Rng + ?Sized>(&'a self, rng: &mut R, buf: &'a mut Vec<u8>) -> &'a [u8] {
        match self.generator {
            ValueGenerator::Fixed => slice_of(&self.random_block, self.size_bytes, rng),
            ValueGenerator::SemiCompressible => {
                let random_half = self.size_bytes / 2;
                let text_half = self.size_bytes - random_half;
                buf.clear();
                buf.extend_from_slice(slice_of(&self.random_block, random_half, rng));
                buf.extend_from_slice(slice_of(&self.text_block, text_half, rng));
                buf
            }
        }
    }
}

/// A random `len`-byte window of `block` (`block.len() >= len`).
fn slice_of<'a, R: Rng + ?Sized>(block: &'a [u8], len: usize, rng: &mut R) -> &'a [u8] {
    let room = block.len().saturating_sub(len);
    let start = if room == 0 {
        0
    } else {
        rng.random_range(0..=room)
    };
    &block[start..start + len.min(block.len())]
}

/// Text made of phrases drawn from a small pool (themselves made of made-up
/// words): LZ-style compressors shrink any 4 KiB window of it about 3:1
/// (checked in the tests with lz4), because phrases recur within a value.
fn text_block<R: Rng + ?Sized>(rng: &mut R, len: usize) -> Vec<u8> {
    const LETTERS: &[u8] = b"etaoinshrdlucmfwypvbgkjqxz";
    let word = |rng: &mut R| -> Vec<u8> {
        let word_len = rng.random_range(2..=9);
        (0..word_len)
            // Skewed towards frequent letters, as in English.
            .map(|_| {
                let i = rng.random_range(0..LETTERS.len());
                LETTERS[rng.random_range(0..=i)]
            })
            .collect()
    };
    let vocabulary: Vec<Vec<u8>> = (0..TEXT_VOCABULARY_WORDS).map(|_| word(rng)).collect();
    let phrases: Vec<Vec<u8>> = (0..TEXT_PHRASES)
        .map(|_| {
            let words = rng.random_range(2..=6);
            let mut p = Vec::new();
            for _ in 0..words {
                p.extend_from_slice(&vocabulary[rng.random_range(0..vocabulary.len())]);
                p.push(b' ');
            }
            p
        })
        .collect();
    let mut text = Vec::with_capacity(len + 64);
    while text.len() < len {
        text.extend_from_slice(&phrases[rng.random_range(0..phrases.len())]);
        if rng.random_range(0..4) == 0 {
            // A fresh word now and then keeps the text from being one long repeat.
            text.extend_from_slice(&vocabulary[rng.random_range(0..vocabulary.len())]);
            text.push(if rng.random_range(0..2) == 0 {
                b'.'
            } else {
                b','
            });
            text.push(b' ');
        }
    }
    text.truncate(len);
    text
}

/// Chooses ops by weight (basho_bench expands weights by duplication and draws
/// uniformly; this is the same distribution with a cumulative table).
#[derive(Debug, Clone)]
pub struct OpChooser {
    cumulative: Vec<(u64, crate::workload::Op)>,
    total: u64,
}

impl OpChooser {
    /// A chooser for `ops` (which must have a non-zero total weight).
    pub fn new(ops: &crate::workload::Operations) -> OpChooser {
        let mut cumulative = Vec::new();
        let mut total = 0u64;
        for op in crate::workload::Op::ALL {
            let w = u64::from(ops.weight(op));
            if w > 0 {
                total += w;
                cumulative.push((total, op));
            }
        }
        OpChooser { cumulative, total }
    }

    /// The next op.
    pub fn next<R: Rng + ?Sized>(&self, rng: &mut R) -> crate::workload::Op {
        let x = rng.random_range(0..self.total.max(1));
        self.cumulative
            .iter()
            .find(|(upto, _)| x < *upto)
            .or(self.cumulative.last())
            .map(|&(_, op)| op)
            .unwrap_or(crate::workload::Op::Get)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{Op, Operations};

    fn workload(generator: KeyGenerator, keys: u64) -> Workload {
        Workload {
            keys,
            key_generator: generator,
            ..Workload::default()
        }
    }

    #[test]
    fn pareto_matches_basho_bench_eighty_twenty() {
        let keys = 1_000_000;
        let src = KeySource::new(&workload(KeyGenerator::Pareto, keys));
        let mut rng = worker_rng(7, 0);
        let draws = 200_000;
        let mut first_fifth = 0u64;
        let mut beyond = 0u64;
        let mut zero_to_1pct = 0u64;
        for _ in 0..draws {
            let n = src.next_number(&mut rng);
            if n < keys / 5 {
                first_fifth += 1;
            }
            if n >= keys {
                beyond += 1;
            }
            if n < keys / 100 {
                zero_to_1pct += 1;
            }
        }
        // P(X < 0.2 K) = 1 - (0.2/0.1 + 1)^-1.5 = 0.808
        let f = first_fifth as f64 / draws as f64;
        assert!((0.79..0.83).contains(&f), "first 20% share {f}");
        // P(X >= K) = 11^-1.5 = 0.0274: pareto_int is not capped.
        let b = beyond as f64 / draws as f64;
        assert!((0.022..0.033).contains(&b), "beyond share {b}");
        // P(X < 0.01 K) = 1 - 1.1^-1.5 = 0.133: the head is hot.
        let h = zero_to_1pct as f64 / draws as f64;
        assert!((0.12..0.15).contains(&h), "first 1% share {h}");
    }

    #[test]
    fn truncated_pareto_stays_in_key_space() {
        let keys = 1000;
        let src = KeySource::new(&workload(KeyGenerator::TruncatedPareto, keys));
        let mut rng = worker_rng(1, 0);
        assert!((0..50_000).all(|_| src.next_number(&mut rng) < keys));
    }

    #[test]
    fn uniform_covers_key_space_evenly() {
        let keys = 10;
        let src = KeySource::new(&workload(KeyGenerator::Uniform, keys));
        let mut rng = worker_rng(3, 0);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[src.next_number(&mut rng) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (9_000..11_000).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn sequential_is_one_global_sequence_wrapping_at_keys() {
        let src = KeySource::new(&workload(KeyGenerator::Sequential, 5));
        let clone = src.clone();
        let mut rng = worker_rng(0, 0);
        let mut got: Vec<u64> = (0..4).map(|_| src.next_number(&mut rng)).collect();
        got.extend((0..3).map(|_| clone.next_number(&mut rng)));
        assert_eq!(got, vec![0, 1, 2, 3, 4, 0, 1]);
    }

    #[test]
    fn same_seed_same_stream_other_seed_other_stream() {
        let w = workload(KeyGenerator::Pareto, 1_000_000);
        let src = KeySource::new(&w);
        let draw = |seed| {
            let mut rng = worker_rng(seed, 2);
            (0..100)
                .map(|_| src.next_number(&mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(42), draw(42));
        assert_ne!(draw(42), draw(43));
        let values = |seed| {
            let vs = ValueSource::new(&w, seed);
            let mut rng = worker_rng(seed, 0);
            let mut buf = Vec::new();
            vs.next(&mut rng, &mut buf).to_vec()
        };
        assert_eq!(values(5), values(5));
        assert_ne!(values(5), values(6));
    }

    #[test]
    fn key_encodings_sort_like_numbers() {
        let mut w = workload(KeyGenerator::Uniform, 1000);
        w.key_prefix = "k/".into();
        let be = KeySource::new(&w);
        assert_eq!(be.key(258), b"k/\0\0\0\0\0\0\x01\x02".to_vec());
        w.key_encoding = KeyEncoding::Decimal;
        let dec = KeySource::new(&w);
        assert_eq!(dec.key(42), b"k/00000000000000000042".to_vec());
        assert_eq!(dec.key(u64::MAX).len(), 2 + DECIMAL_KEY_DIGITS);
        for src in [be, dec] {
            assert!(src.key(9) < src.key(10) && src.key(99) < src.key(100));
        }
    }

    #[test]
    fn fixed_values_are_incompressible_and_semi_compressible_compress() {
        let mut w = workload(KeyGenerator::Uniform, 10);
        w.value_size_bytes = 8192;
        let mut rng = worker_rng(9, 0);
        let mut buf = Vec::new();
        let fixed = ValueSource::new(&w, 9);
        let v = fixed.next(&mut rng, &mut buf).to_vec();
        assert_eq!(v.len(), 8192);
        let ratio = |v: &[u8]| v.len() as f64 / lz4_flex::compress(v).len() as f64;
        assert!(ratio(&v) < 1.01, "fixed ratio {}", ratio(&v));

        w.value_generator = ValueGenerator::SemiCompressible;
        let semi = ValueSource::new(&w, 9);
        let (mut text_ratio, mut whole_ratio) = (0.0, 0.0);
        let samples = 20;
        for _ in 0..samples {
            let v = semi.next(&mut rng, &mut buf).to_vec();
            assert_eq!(v.len(), 8192);
            text_ratio += ratio(&v[4096..]) / samples as f64;
            whole_ratio += ratio(&v) / samples as f64;
        }
        // ~3:1 on the text half, so ~1.5:1 on the whole value.
        assert!(
            (2.6..3.5).contains(&text_ratio),
            "text half lz4 ratio {text_ratio}"
        );
        assert!(
            (1.3..1.6).contains(&whole_ratio),
            "whole value lz4 ratio {whole_ratio}"
        );
    }

    #[test]
    fn op_chooser_follows_weights() {
        let ops = Operations {
            get: 3,
            put: 1,
            ..Operations::default()
        };
        let chooser = OpChooser::new(&ops);
        let mut rng = worker_rng(11, 0);
        let mut gets = 0;
        for _ in 0..40_000 {
            match chooser.next(&mut rng) {
                Op::Get => gets += 1,
                Op::Put => {}
                other => panic!("unexpected op {other:?}"),
            }
        }
        assert!((29_000..31_000).contains(&gets), "gets {gets}");
    }
}
