//! Journal record encoding: one write (put or delete) with its sequence
//! number, key, metadata, index terms and value, under one CRC-32C.
//!
//! Owns the byte layout documented in `docs/format.md` ("Journal record").
//! Decoding treats input as hostile: every length is checked against the
//! buffer and the named limits before use. Knows nothing of files.

use std::borrow::Cow;

use crate::codec::{crc, Put, Reader};
use crate::options::{
    INDEX_NAME_BYTES_MAX, INDEX_TERMS_MAX, INDEX_TERM_BYTES_MAX, KEY_BYTES_MAX, METADATA_BYTES_MAX,
    VALUE_BYTES_MAX,
};

/// Bytes of the fixed record header.
pub const HEADER_BYTES: usize = 32;
/// Largest record any valid write can produce (header, longest key,
/// metadata, index terms and value): a bound for lengths read from disk.
pub const RECORD_BYTES_MAX: usize =
    HEADER_BYTES + KEY_BYTES_MAX + METADATA_BYTES_MAX + u16::MAX as usize + VALUE_BYTES_MAX;
/// Sequence numbers at or above this are treated as corruption, so that
/// `seq + 1` can never overflow.
pub const SEQ_LIMIT: u64 = 1 << 62;
/// Kind byte of a put.
pub const KIND_PUT: u8 = 1;
/// Kind byte of a delete (tombstone).
pub const KIND_DELETE: u8 = 2;
/// Flag: the stored value is lz4-compressed.
pub const FLAG_LZ4: u8 = 1;
/// Flag: more records of the same atomic batch follow.
pub const FLAG_BATCH_CONTINUES: u8 = 2;
/// Flag: zero bytes sit between the index terms and the stored value, so
/// that the value starts on a page boundary (journal version 2 on).
pub const FLAG_PADDED: u8 = 4;
const FLAGS_KNOWN: u8 = FLAG_LZ4 | FLAG_BATCH_CONTINUES | FLAG_PADDED;
/// Page size values are aligned to in the journal, bytes: a value read
/// costs the pages it spans, in the device's reads and in the page cache.
pub const PAGE_BYTES: u64 = 4096;

/// One secondary-index term: (index name, term).
pub type IndexTerm = (Vec<u8>, Vec<u8>);

/// A decoded record borrowing from the buffer it was read from.
#[derive(Debug, Clone)]
pub struct Record<'a> {
    /// `KIND_PUT` or `KIND_DELETE`.
    pub kind: u8,
    /// Flag bits (`FLAG_*`).
    pub flags: u8,
    /// Sequence number.
    pub seq: u64,
    /// User key.
    pub key: &'a [u8],
    /// User metadata.
    pub meta: &'a [u8],
    /// Encoded index terms (see [`decode_terms`]).
    pub terms: &'a [u8],
    /// Stored value bytes (compressed when `FLAG_LZ4`).
    pub stored_value: &'a [u8],
    /// Length of the value once decompressed.
    pub value_len: u32,
}

impl<'a> Record<'a> {
    /// Its parts, to journal it again elsewhere (its sequence number apart;
    /// padding belongs to a place in a file: [`encode_padded`] sets or
    /// clears its flag from the padding it is given).
    pub fn parts(&self) -> RecordParts<'a> {
        RecordParts {
            kind: self.kind,
            flags: self.flags,
            key: self.key,
            meta: self.meta,
            terms: self.terms,
            stored_value: self.stored_value,
            value_len: self.value_len,
        }
    }
}

/// What a caller wants journaled; the value is already in stored form.
#[derive(Debug, Clone, Copy)]
pub struct RecordParts<'a> {
    /// `KIND_PUT` or `KIND_DELETE`.
    pub kind: u8,
    /// Flag bits.
    pub flags: u8,
    /// User key.
    pub key: &'a [u8],
    /// User metadata.
    pub meta: &'a [u8],
    /// Encoded index terms.
    pub terms: &'a [u8],
    /// Stored value bytes.
    pub stored_value: &'a [u8],
    /// Decompressed value length.
    pub value_len: u32,
}

/// Bytes before the stored value of an unpadded record: header, key,
/// metadata and index terms.
fn head_len(key_len: usize, meta_len: usize, terms_len: usize) -> usize {
    HEADER_BYTES + key_len + meta_len + terms_len
}

/// Total encoded length of a record with these parts.
pub fn encoded_len(p: &RecordParts<'_>) -> usize {
    head_len(p.key.len(), p.meta.len(), p.terms.len()) + p.stored_value.len()
}

/// Zero bytes to put before the stored value of a record that starts at
/// byte `at` of its segment, so that the value spans as few pages as its
/// length allows: the distance to the next page boundary when the value
/// would otherwise span one page more, else 0. Only uncompressed values of
/// at least `min_bytes` are padded (`min_bytes` 0: none), so a reader can
/// tell a padded record from a compressed one by its length alone
/// ([`value_span`]).
pub fn pad_for(at: u64, p: &RecordParts<'_>, min_bytes: usize) -> usize {
    let len = p.stored_value.len() as u64;
    if min_bytes == 0 || (len as usize) < min_bytes || p.flags & FLAG_LZ4 != 0 {
        return 0;
    }
    let start = at + head_len(p.key.len(), p.meta.len(), p.terms.len()) as u64;
    let into_page = start % PAGE_BYTES;
    if into_page == 0 || (into_page + len).div_ceil(PAGE_BYTES) == len.div_ceil(PAGE_BYTES) {
        return 0;
    }
    (PAGE_BYTES - into_page) as usize
}

/// Where the uncompressed value of a journal record lies within it, as
/// (offset from the record's start, length), worked out from what its
/// ledger entry knows: the record's length, and the lengths of its key,
/// metadata, index terms and value. `None` when the record's value is
/// stored compressed (the record is shorter than its parts), or when the
/// lengths cannot belong to one record; the whole record must then be read.
pub fn value_span(
    record_len: u64,
    key_len: usize,
    meta_len: usize,
    terms_len: usize,
    value_len: u32,
) -> Option<(u64, u64)> {
    let parts = head_len(key_len, meta_len, terms_len) as u64;
    let plain = parts + u64::from(value_len);
    let pad = record_len.checked_sub(plain)?;
    (pad < PAGE_BYTES && value_len > 0).then_some((parts + pad, u64::from(value_len)))
}

/// Appends the record to `buf` with sequence number `seq`; returns its length.
/// Callers have validated lengths against the limits.
pub fn encode(buf: &mut Vec<u8>, p: &RecordParts<'_>, seq: u64) -> usize {
    encode_padded(buf, p, seq, 0)
}

/// [`encode`] with `pad` zero bytes before the stored value (see
/// [`pad_for`]); `pad` > 0 sets [`FLAG_PADDED`].
pub fn encode_padded(buf: &mut Vec<u8>, p: &RecordParts<'_>, seq: u64, pad: usize) -> usize {
    debug_assert!((pad as u64) < PAGE_BYTES);
    let start = buf.len();
    let total = encoded_len(p) + pad;
    let flags = if pad > 0 {
        p.flags | FLAG_PADDED
    } else {
        p.flags & !FLAG_PADDED
    };
    buf.put_u32(0); // crc, patched below
    buf.put_u32((total - 8) as u32);
    buf.put_u8(p.kind);
    buf.put_u8(flags);
    buf.put_u64(seq);
    buf.put_u16(p.key.len() as u16);
    buf.put_u32(p.stored_value.len() as u32);
    buf.put_u32(p.value_len);
    buf.put_u16(p.meta.len() as u16);
    buf.put_u16(p.terms.len() as u16);
    buf.extend_from_slice(p.key);
    buf.extend_from_slice(p.meta);
    buf.extend_from_slice(p.terms);
    buf.resize(buf.len() + pad, 0);
    buf.extend_from_slice(p.stored_value);
    let c = crc(&buf[start + 4..]);
    buf[start..start + 4].copy_from_slice(&c.to_le_bytes());
    total
}

/// Reads the total record length from the first 8 bytes, if plausible.
pub fn peek_len(header: &[u8]) -> Option<usize> {
    let mut r = Reader::new(header);
    let _crc = r.u32()?;
    let body = r.u32()? as usize;
    let total = body.checked_add(8)?;
    if !(HEADER_BYTES..=RECORD_BYTES_MAX).contains(&total) {
        return None;
    }
    Some(total)
}

/// Decodes one whole record (exactly `buf`), checking the checksum and every
/// length. Errors say which check failed.
pub fn decode(buf: &[u8]) -> Result<Record<'_>, &'static str> {
    if buf.len() < HEADER_BYTES {
        return Err("record shorter than its header");
    }
    let mut r = Reader::new(buf);
    let stored_crc = r.u32().ok_or("short header")?;
    let body = r.u32().ok_or("short header")? as usize;
    if body + 8 != buf.len() {
        return Err("record length does not match");
    }
    if crc(&buf[4..]) != stored_crc {
        return Err("record checksum mismatch");
    }
    let kind = r.u8().ok_or("short header")?;
    let flags = r.u8().ok_or("short header")?;
    let seq = r.u64().ok_or("short header")?;
    let key_len = r.u16().ok_or("short header")? as usize;
    let stored_len = r.u32().ok_or("short header")? as usize;
    let value_len = r.u32().ok_or("short header")?;
    let meta_len = r.u16().ok_or("short header")? as usize;
    let terms_len = r.u16().ok_or("short header")? as usize;
    if seq >= SEQ_LIMIT {
        return Err("sequence number out of range");
    }
    if kind != KIND_PUT && kind != KIND_DELETE {
        return Err("unknown record kind");
    }
    if flags & !FLAGS_KNOWN != 0 {
        return Err("unknown record flags");
    }
    if key_len == 0
        || key_len > KEY_BYTES_MAX
        || meta_len > METADATA_BYTES_MAX
        || value_len as usize > VALUE_BYTES_MAX
    {
        return Err("record field over its limit");
    }
    if flags & FLAG_LZ4 == 0 && stored_len != value_len as usize {
        return Err("uncompressed value length mismatch");
    }
    let key = r.bytes(key_len).ok_or("key past record end")?;
    let meta = r.bytes(meta_len).ok_or("metadata past record end")?;
    let terms = r.bytes(terms_len).ok_or("terms past record end")?;
    let pad = r.remaining().checked_sub(stored_len).ok_or("value past record end")?;
    if flags & FLAG_PADDED == 0 {
        if pad != 0 {
            return Err("trailing bytes in record");
        }
    } else if pad == 0 || pad as u64 >= PAGE_BYTES || flags & FLAG_LZ4 != 0 {
        return Err("padding out of range");
    }
    let padding = r.bytes(pad).ok_or("value past record end")?;
    if padding.iter().any(|&b| b != 0) {
        return Err("padding is not zero");
    }
    let stored_value = r.bytes(stored_len).ok_or("value past record end")?;
    decode_terms(terms).ok_or("malformed index terms")?;
    Ok(Record {
        kind,
        flags,
        seq,
        key,
        meta,
        terms,
        stored_value,
        value_len,
    })
}

/// Header-only consistency check used when looking for valid records after a
/// bad one (cheap filter before a checksum).
pub fn plausible_header(buf: &[u8]) -> bool {
    if buf.len() < HEADER_BYTES {
        return false;
    }
    let kind = buf[8];
    let flags = buf[9];
    (kind == KIND_PUT || kind == KIND_DELETE) && flags & !FLAGS_KNOWN == 0
}

/// Encodes index terms: per term `u8 name_len, name, u16 term_len, term`.
pub fn encode_terms(terms: &[IndexTerm]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, term) in terms {
        out.put_u8(name.len() as u8);
        out.extend_from_slice(name);
        out.put_u16(term.len() as u16);
        out.extend_from_slice(term);
    }
    out
}

/// Decodes index terms; `None` if malformed or over the limits.
pub fn decode_terms(buf: &[u8]) -> Option<Vec<IndexTerm>> {
    let mut r = Reader::new(buf);
    let mut out = Vec::new();
    while r.remaining() > 0 {
        if out.len() >= INDEX_TERMS_MAX {
            return None;
        }
        let n = r.u8()? as usize;
        if n == 0 || n > INDEX_NAME_BYTES_MAX {
            return None;
        }
        let name = r.bytes(n)?.to_vec();
        let t = r.u16()? as usize;
        if t > INDEX_TERM_BYTES_MAX {
            return None;
        }
        let term = r.bytes(t)?.to_vec();
        out.push((name, term));
    }
    Some(out)
}

/// Values shorter than this are never compressed, bytes.
pub const COMPRESS_MIN_BYTES: usize = 128;
/// Values longer than this are tried on two 512-byte samples before a whole
/// lz4 pass, bytes.
pub const COMPRESS_SAMPLED_ABOVE_BYTES: usize = 2048;

/// Returns the value in stored form and its flag: lz4 when that saves at
/// least 1/8 of the bytes. A 512-byte sample from the start and the middle is
/// tried first so incompressible values cost almost nothing.
pub fn compress_value(value: &[u8], enabled: bool) -> (Cow<'_, [u8]>, u8) {
    const SAMPLE_BYTES: usize = COMPRESS_SAMPLED_ABOVE_BYTES / 4;
    if !enabled || value.len() < COMPRESS_MIN_BYTES {
        return (Cow::Borrowed(value), 0);
    }
    if value.len() > COMPRESS_SAMPLED_ABOVE_BYTES {
        let mid = value.len() / 2;
        let a = lz4_flex::block::compress(&value[..SAMPLE_BYTES]);
        let b = lz4_flex::block::compress(&value[mid..mid + SAMPLE_BYTES]);
        if (a.len() + b.len()) * 8 > 2 * SAMPLE_BYTES * 7 {
            return (Cow::Borrowed(value), 0);
        }
    }
    let c = lz4_flex::block::compress(value);
    if c.len() * 8 <= value.len() * 7 {
        (Cow::Owned(c), FLAG_LZ4)
    } else {
        (Cow::Borrowed(value), 0)
    }
}

/// Values in a row lz4 did not shrink by 1/8 after which [`CompressGate`]
/// stops trying every value.
pub const COMPRESS_MISSES_MAX: u32 = 32;
/// Once past [`COMPRESS_MISSES_MAX`], one value in this many is still tried
/// (a success resumes trying every value).
pub const COMPRESS_PROBE_EVERY: u32 = 64;

/// Skips lz4 for a store's short values while they keep not compressing:
/// every value of [`COMPRESS_MIN_BYTES`] up to
/// [`COMPRESS_SAMPLED_ABOVE_BYTES`] costs a whole lz4 pass (longer ones are
/// sampled first and do not go through the gate), and a stream of small
/// incompressible values (generated or encrypted records) paid that pass
/// for nothing. After [`COMPRESS_MISSES_MAX`] misses in a row, only one
/// value in [`COMPRESS_PROBE_EVERY`] is tried until one compresses again.
/// A value stored uncompressed is read back like any other (its flag says
/// so): the gate changes cost and size, never content.
#[derive(Debug, Default)]
pub struct CompressGate {
    misses: std::sync::atomic::AtomicU32,
    skipped: std::sync::atomic::AtomicU32,
}

impl CompressGate {
    /// [`compress_value`] unless the recent values said it is not worth it.
    pub fn compress<'a>(&self, value: &'a [u8], enabled: bool) -> (Cow<'a, [u8]>, u8) {
        use std::sync::atomic::Ordering::Relaxed;
        if !enabled || value.len() < COMPRESS_MIN_BYTES {
            return (Cow::Borrowed(value), 0);
        }
        // Long values are sampled first anyway (cheap when they do not
        // compress): the gate would only store compressible ones raw.
        if value.len() > COMPRESS_SAMPLED_ABOVE_BYTES {
            return compress_value(value, true);
        }
        if self.misses.load(Relaxed) >= COMPRESS_MISSES_MAX
            && !self
                .skipped
                .fetch_add(1, Relaxed)
                .is_multiple_of(COMPRESS_PROBE_EVERY)
        {
            return (Cow::Borrowed(value), 0);
        }
        let (stored, flag) = compress_value(value, true);
        if flag == 0 {
            let _ = self
                .misses
                .fetch_update(Relaxed, Relaxed, |m| Some(m.saturating_add(1)));
        } else {
            self.misses.store(0, Relaxed);
        }
        (stored, flag)
    }
}

/// Returns the decompressed value of a record, checking its length.
pub fn value_of(rec: &Record<'_>) -> Result<Vec<u8>, &'static str> {
    if rec.flags & FLAG_LZ4 != 0 {
        let mut out = vec![0u8; rec.value_len as usize];
        let n = lz4_flex::block::decompress_into(rec.stored_value, &mut out)
            .map_err(|_| "value does not decompress")?;
        if n != out.len() {
            return Err("decompressed value length mismatch");
        }
        Ok(out)
    } else {
        Ok(rec.stored_value.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_backs_off_from_incompressible_values_and_resumes_on_success() {
        let gate = CompressGate::default();
        // Incompressible: a pseudo-random byte string.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let noise: Vec<u8> = (0..900)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect();
        let text = b"level=INFO message=the same words again ".repeat(20);
        for _ in 0..COMPRESS_MISSES_MAX {
            assert_eq!(gate.compress(&noise, true).1, 0);
        }
        // Backing off: most compressible values are now stored as they
        // are, but one in COMPRESS_PROBE_EVERY is tried and resets it.
        let mut tried = None;
        for i in 0..COMPRESS_PROBE_EVERY {
            if gate.compress(&text, true).1 == FLAG_LZ4 {
                tried = Some(i);
                break;
            }
        }
        assert!(tried.is_some(), "a probe ran within COMPRESS_PROBE_EVERY values");
        for _ in 0..10 {
            assert_eq!(gate.compress(&text, true).1, FLAG_LZ4, "every value tried again");
        }
        // Long values skip the gate (they are sampled instead).
        for _ in 0..COMPRESS_MISSES_MAX {
            assert_eq!(gate.compress(&noise, true).1, 0);
        }
        let long = text.repeat(4);
        assert!(long.len() > COMPRESS_SAMPLED_ABOVE_BYTES);
        assert_eq!(gate.compress(&long, true).1, FLAG_LZ4);
        // Disabled and short values are never compressed.
        assert_eq!(gate.compress(&text, false).1, 0);
        assert_eq!(gate.compress(&text[..COMPRESS_MIN_BYTES - 1], true).1, 0);
    }

    fn parts<'a>(key: &'a [u8], val: &'a [u8], terms: &'a [u8]) -> RecordParts<'a> {
        RecordParts {
            kind: KIND_PUT,
            flags: 0,
            key,
            meta: b"m",
            terms,
            stored_value: val,
            value_len: val.len() as u32,
        }
    }

    #[test]
    fn roundtrip_and_every_flipped_bit_is_caught() {
        let terms = encode_terms(&[(b"idx".to_vec(), b"t1".to_vec())]);
        let mut buf = Vec::new();
        let n = encode(&mut buf, &parts(b"key", b"value", &terms), 42);
        assert_eq!(n, buf.len());
        let r = decode(&buf).unwrap();
        assert_eq!(
            (r.seq, r.key, r.meta, r.stored_value),
            (42, &b"key"[..], &b"m"[..], &b"value"[..])
        );
        assert_eq!(decode_terms(r.terms).unwrap()[0].1, b"t1");
        for i in 0..buf.len() * 8 {
            let mut b = buf.clone();
            b[i / 8] ^= 1 << (i % 8);
            assert!(decode(&b).is_err(), "bit {i} not detected");
        }
    }

    #[test]
    fn compression_only_when_it_pays() {
        let text = b"abcabcabc".repeat(1000);
        let (s, f) = compress_value(&text, true);
        assert_eq!(f, FLAG_LZ4);
        assert!(s.len() < text.len() / 2);
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let random: Vec<u8> = (0..8192)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect();
        let (s2, f2) = compress_value(&random, true);
        assert_eq!(f2, 0);
        assert_eq!(s2, random);
        let mut buf = Vec::new();
        let p = RecordParts {
            kind: KIND_PUT,
            flags: f,
            key: b"k",
            meta: b"",
            terms: b"",
            stored_value: &s,
            value_len: text.len() as u32,
        };
        encode(&mut buf, &p, 1);
        assert_eq!(value_of(&decode(&buf).unwrap()).unwrap(), text);
    }

    #[test]
    fn padded_values_start_on_a_page_and_decode_like_any_other() {
        let value = vec![7u8; 8192];
        let p = parts(b"key", &value, b"");
        // 20 bytes into a page, the value (8 KiB) would span three pages.
        let at = 3 * PAGE_BYTES + 20;
        let pad = pad_for(at, &p, 4096);
        let value_at = at + (HEADER_BYTES + 3 + 1) as u64 + pad as u64;
        assert_eq!(value_at % PAGE_BYTES, 0);
        let mut buf = Vec::new();
        let n = encode_padded(&mut buf, &p, 5, pad);
        assert_eq!(n, encoded_len(&p) + pad);
        let r = decode(&buf).unwrap();
        assert_eq!(r.flags & FLAG_PADDED, FLAG_PADDED);
        assert_eq!((r.key, r.stored_value), (&b"key"[..], &value[..]));
        // The ledger's lengths find the value without decoding the record.
        let (off, len) = value_span(n as u64, 3, 1, 0, 8192).unwrap();
        assert_eq!(&buf[off as usize..(off + len) as usize], &value[..]);
        assert_eq!(at + off, value_at);
        // Journaled again elsewhere, the record carries no padding.
        let mut again = Vec::new();
        assert_eq!(encode(&mut again, &r.parts(), 9), encoded_len(&p));
        assert_eq!(decode(&again).unwrap().flags & FLAG_PADDED, 0);
        for i in 0..buf.len() * 8 {
            let mut b = buf.clone();
            b[i / 8] ^= 1 << (i % 8);
            assert!(decode(&b).is_err(), "bit {i} not detected");
        }
    }

    #[test]
    fn padding_only_where_it_saves_a_page() {
        let value = vec![1u8; 8192];
        let p = parts(b"key", &value, b"");
        let fixed = (HEADER_BYTES + 3 + 1) as u64;
        // Already on a boundary: nothing to gain.
        assert_eq!(pad_for(PAGE_BYTES - fixed, &p, 4096), 0);
        // Off by one byte either way: pad to the next boundary.
        assert_eq!(pad_for(PAGE_BYTES - fixed + 1, &p, 4096), 4095);
        assert_eq!(pad_for(PAGE_BYTES - fixed - 1, &p, 4096), 1);
        // Off by any amount and not a page multiple: padded only when the
        // value would span more pages than its length needs.
        let small = vec![1u8; 5000];
        let q = parts(b"key", &small, b"");
        assert_eq!(pad_for(2 * PAGE_BYTES - fixed + 100, &q, 4096), 0);
        assert_eq!(pad_for(2 * PAGE_BYTES - fixed + 3500, &q, 4096), 596);
        // Below the threshold, turned off, or compressed: never.
        assert_eq!(pad_for(PAGE_BYTES - fixed + 1, &p, 8193), 0);
        assert_eq!(pad_for(PAGE_BYTES - fixed + 1, &p, 0), 0);
        let lz = RecordParts {
            flags: FLAG_LZ4,
            value_len: 20000,
            ..p
        };
        assert_eq!(pad_for(PAGE_BYTES - fixed + 1, &lz, 4096), 0);
    }

    #[test]
    fn value_span_refuses_compressed_and_impossible_lengths() {
        // Unpadded, uncompressed: the value ends the record.
        assert_eq!(value_span(32 + 3 + 1 + 100, 3, 1, 0, 100), Some((36, 100)));
        // Shorter than its parts: stored compressed.
        assert_eq!(value_span(32 + 3 + 1 + 50, 3, 1, 0, 100), None);
        // Longer by a page or more: not a record these lengths describe.
        assert_eq!(value_span(32 + 3 + 1 + 100 + 4096, 3, 1, 0, 100), None);
        assert_eq!(value_span(36, 3, 1, 0, 0), None);
    }

    #[test]
    fn bad_padding_is_refused() {
        let value = vec![3u8; 5000];
        let p = parts(b"k", &value, b"");
        let mut buf = Vec::new();
        encode_padded(&mut buf, &p, 1, 10);
        let fix_crc = |b: &mut Vec<u8>| {
            let c = crc(&b[4..]);
            b[..4].copy_from_slice(&c.to_le_bytes());
        };
        // Non-zero padding under a valid checksum.
        let pad_at = HEADER_BYTES + 1 + 1;
        let mut b = buf.clone();
        b[pad_at] = 1;
        fix_crc(&mut b);
        assert_eq!(decode(&b).unwrap_err(), "padding is not zero");
        // Padding without the flag, and the flag without padding.
        let mut b = buf.clone();
        b[9] &= !FLAG_PADDED;
        fix_crc(&mut b);
        assert_eq!(decode(&b).unwrap_err(), "trailing bytes in record");
        let mut plain = Vec::new();
        encode(&mut plain, &p, 1);
        plain[9] |= FLAG_PADDED;
        fix_crc(&mut plain);
        assert_eq!(decode(&plain).unwrap_err(), "padding out of range");
    }
}
