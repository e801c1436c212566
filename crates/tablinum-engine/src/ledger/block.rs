//! Ledger data blocks: sorted (key, entry) pairs with an offset array,
//! lz4-compressed on disk when that pays, under a CRC-32C.
//!
//! Owns the block layout (see `docs/format.md`, "Ledger block"). Decoding
//! checks the checksum, then every offset and length, before any lookup.

use crate::codec::{crc, Put, Reader};

/// Bytes of the on-disk block trailer: compression u8, raw_len u32, crc u32.
pub const TRAILER_BYTES: usize = 9;
const COMP_NONE: u8 = 0;
const COMP_LZ4: u8 = 1;

/// Accumulates entries for one block.
#[derive(Debug, Default)]
pub struct BlockBuilder {
    buf: Vec<u8>,
    offsets: Vec<u32>,
}

impl BlockBuilder {
    /// Adds an entry; keys must arrive in increasing order.
    pub fn add(&mut self, key: &[u8], value: &[u8]) {
        self.offsets.push(self.buf.len() as u32);
        self.buf.put_u16(key.len() as u16);
        self.buf.put_u32(value.len() as u32);
        self.buf.extend_from_slice(key);
        self.buf.extend_from_slice(value);
    }
    /// Uncompressed size so far.
    pub fn size(&self) -> usize {
        self.buf.len() + 4 * self.offsets.len() + 4
    }
    /// True when no entry was added.
    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }
    /// Finishes the block into its on-disk form and resets the builder.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut raw = std::mem::take(&mut self.buf);
        for o in &self.offsets {
            raw.put_u32(*o);
        }
        raw.put_u32(self.offsets.len() as u32);
        self.offsets.clear();
        let compressed = lz4_flex::block::compress(&raw);
        let (mut out, comp) = if compressed.len() * 8 <= raw.len() * 7 {
            (compressed, COMP_LZ4)
        } else {
            (raw.clone(), COMP_NONE)
        };
        out.put_u8(comp);
        out.put_u32(raw.len() as u32);
        let c = crc(&out);
        out.put_u32(c);
        out
    }
}

/// A decoded, checked block.
#[derive(Debug)]
pub struct Block {
    data: Vec<u8>,
    offsets: Vec<u32>,
}

impl Block {
    /// Checks and decodes an on-disk block. Errors name the failed check.
    pub fn decode(disk: &[u8], raw_len_max: usize) -> Result<Block, &'static str> {
        if disk.len() < TRAILER_BYTES {
            return Err("block shorter than trailer");
        }
        let (body, trailer) = disk.split_at(disk.len() - 4);
        let stored = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]);
        if crc(body) != stored {
            return Err("block checksum mismatch");
        }
        let (payload, t) = body.split_at(body.len() - 5);
        let comp = t[0];
        let raw_len = u32::from_le_bytes([t[1], t[2], t[3], t[4]]) as usize;
        if raw_len > raw_len_max {
            return Err("block raw length over limit");
        }
        let data = match comp {
            COMP_NONE => payload.to_vec(),
            COMP_LZ4 => {
                let mut out = vec![0u8; raw_len];
                let n = lz4_flex::block::decompress_into(payload, &mut out)
                    .map_err(|_| "block does not decompress")?;
                if n != raw_len {
                    return Err("block raw length mismatch");
                }
                out
            }
            _ => return Err("unknown block compression"),
        };
        if data.len() != raw_len || data.len() < 4 {
            return Err("block raw length mismatch");
        }
        let n =
            u32::from_le_bytes(data[data.len() - 4..].try_into().map_err(|_| "short")?) as usize;
        let table = n.checked_mul(4).ok_or("bad entry count")?;
        if table + 4 > data.len() {
            return Err("bad entry count");
        }
        let table_start = data.len() - 4 - table;
        let mut r = Reader::new(&data[table_start..data.len() - 4]);
        let mut offsets = Vec::with_capacity(n);
        let mut prev = None;
        for _ in 0..n {
            let o = r.u32().ok_or("short offsets")?;
            if (o as usize) >= table_start || prev.is_some_and(|p| o <= p) {
                return Err("bad entry offset");
            }
            prev = Some(o);
            offsets.push(o);
        }
        let block = Block { data, offsets };
        // Check every entry's bounds once so lookups never fail on lengths.
        let mut last: Option<&[u8]> = None;
        for i in 0..n {
            let (k, _) = block
                .raw_entry(i, table_start)
                .ok_or("entry out of bounds")?;
            if last.is_some_and(|l| l >= k) {
                return Err("keys out of order");
            }
            last = Some(k);
        }
        Ok(block)
    }

    fn raw_entry(&self, i: usize, limit: usize) -> Option<(&[u8], &[u8])> {
        let start = *self.offsets.get(i)? as usize;
        let end = self.offsets.get(i + 1).map_or(limit, |&o| o as usize);
        let mut r = Reader::new(self.data.get(start..end)?);
        let kl = r.u16()? as usize;
        let vl = r.u32()? as usize;
        let k = r.bytes(kl)?;
        let v = r.bytes(vl)?;
        (r.remaining() == 0).then_some((k, v))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    /// True when empty.
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// Entry `i` as (key, encoded entry). Bounds were checked at decode.
    pub fn entry(&self, i: usize) -> Option<(&[u8], &[u8])> {
        let limit = self.data.len() - 4 - 4 * self.offsets.len();
        self.raw_entry(i, limit)
    }

    /// Index of the first entry with key >= `key`.
    pub fn seek(&self, key: &[u8]) -> usize {
        let (mut lo, mut hi) = (0, self.offsets.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.entry(mid) {
                Some((k, _)) if k < key => lo = mid + 1,
                _ => hi = mid,
            }
        }
        lo
    }

    /// Memory held.
    pub fn bytes(&self) -> usize {
        self.data.len() + 4 * self.offsets.len() + 48
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_decode_seek_and_detect_flips() {
        let mut b = BlockBuilder::default();
        for i in 0..100u32 {
            b.add(format!("key{i:05}").as_bytes(), &i.to_le_bytes().repeat(3));
        }
        let disk = b.finish();
        let blk = Block::decode(&disk, 1 << 20).unwrap();
        assert_eq!(blk.len(), 100);
        assert_eq!(blk.entry(blk.seek(b"key00042")).unwrap().0, b"key00042");
        assert_eq!(blk.seek(b"zzz"), 100);
        for i in 0..disk.len() {
            let mut d = disk.clone();
            d[i] ^= 0x10;
            assert!(
                Block::decode(&d, 1 << 20).is_err(),
                "flip at {i} undetected"
            );
        }
    }
}
