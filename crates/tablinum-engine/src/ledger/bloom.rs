//! Per-file bloom filter over ledger keys.
//!
//! Owns building, encoding and probing the filter (double hashing from one
//! xxh3-64). A decoded filter is only trusted after its file's checksum.

use xxhash_rust::xxh3::xxh3_64;

/// A built or loaded bloom filter.
#[derive(Debug, Clone)]
pub struct Bloom {
    bits: Vec<u8>,
    k: u8,
}

/// Hash used to build and probe filters.
pub fn key_hash(key: &[u8]) -> u64 {
    xxh3_64(key)
}

impl Bloom {
    /// Builds a filter for `hashes` at `bits_per_key`.
    pub fn build(hashes: &[u64], bits_per_key: u32) -> Bloom {
        let nbits = (hashes.len() as u64 * bits_per_key as u64).max(64);
        let nbytes = nbits.div_ceil(8) as usize;
        let nbits = nbytes as u64 * 8;
        let k = ((bits_per_key as f64 * 0.69) as u8).clamp(1, 30);
        let mut bits = vec![0u8; nbytes];
        for &h in hashes {
            let (mut a, b) = (h as u32 as u64, (h >> 32) | 1);
            for _ in 0..k {
                let bit = a % nbits;
                bits[(bit / 8) as usize] |= 1 << (bit % 8);
                a = a.wrapping_add(b);
            }
        }
        Bloom { bits, k }
    }

    /// False means the key is certainly absent.
    pub fn may_contain(&self, h: u64) -> bool {
        let nbits = self.bits.len() as u64 * 8;
        if nbits == 0 {
            return true;
        }
        let (mut a, b) = (h as u32 as u64, (h >> 32) | 1);
        for _ in 0..self.k {
            let bit = a % nbits;
            if self.bits[(bit / 8) as usize] & (1 << (bit % 8)) == 0 {
                return false;
            }
            a = a.wrapping_add(b);
        }
        true
    }

    /// Encoding: `u8 k` then the bit array.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.k);
        out.extend_from_slice(&self.bits);
    }

    /// Decodes; `None` when malformed.
    pub fn decode(buf: &[u8]) -> Option<Bloom> {
        let (&k, bits) = buf.split_first()?;
        if k == 0 || k > 30 {
            return None;
        }
        Some(Bloom {
            bits: bits.to_vec(),
            k,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        let hs: Vec<u64> = (0..10_000u32).map(|i| key_hash(&i.to_be_bytes())).collect();
        let b = Bloom::build(&hs, 10);
        assert!(hs.iter().all(|&h| b.may_contain(h)));
        let fp = (10_000..110_000u32)
            .filter(|i| b.may_contain(key_hash(&i.to_be_bytes())))
            .count();
        assert!(fp < 2_500, "false positives {fp} of 100000");
    }
}
