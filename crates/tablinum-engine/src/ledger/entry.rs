//! Ledger keys and entries: what the LSM stores per key.
//!
//! Owns the ledger key space (object keys and secondary-index keys, encoded
//! so byte order equals the intended order) and the entry encoding. The
//! location inside an entry is opaque here: the ledger never reads it.

use crate::codec::{Put, Reader};

/// First byte of an object key in the ledger key space.
pub const SPACE_OBJECT: u8 = 0;
/// First byte of a secondary-index key.
pub const SPACE_INDEX: u8 = 1;

/// Where a journal record lives: segment id, byte offset, record length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Loc {
    /// Journal segment id.
    pub segment: u64,
    /// Byte offset of the record in the segment.
    pub offset: u64,
    /// Length of the whole record in bytes.
    pub len: u32,
}

/// What a ledger entry says about its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A live object.
    Object,
    /// A deleted object.
    Tombstone,
    /// A secondary-index posting (the key encodes index, term and object key).
    Index,
    /// A removed secondary-index posting.
    IndexTombstone,
}

impl EntryKind {
    fn byte(self) -> u8 {
        match self {
            EntryKind::Object => 1,
            EntryKind::Tombstone => 2,
            EntryKind::Index => 3,
            EntryKind::IndexTombstone => 4,
        }
    }
    fn from_byte(b: u8) -> Option<Self> {
        Some(match b {
            1 => EntryKind::Object,
            2 => EntryKind::Tombstone,
            3 => EntryKind::Index,
            4 => EntryKind::IndexTombstone,
            _ => return None,
        })
    }
    /// True for kinds that hide older versions and hold no data.
    pub fn is_tombstone(self) -> bool {
        matches!(self, EntryKind::Tombstone | EntryKind::IndexTombstone)
    }
}

/// One ledger entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Sequence number of the write that produced it.
    pub seq: u64,
    /// What it is.
    pub kind: EntryKind,
    /// Length of the value in bytes (objects).
    pub value_len: u32,
    /// xxh3-64 of the value (objects).
    pub value_hash: u64,
    /// Journal record of the write (objects and tombstones).
    pub loc: Loc,
    /// User metadata.
    pub meta: Vec<u8>,
    /// Encoded index terms of the object.
    pub terms: Vec<u8>,
    /// The value itself when below the inline threshold.
    pub inline: Option<Vec<u8>>,
}

impl Entry {
    /// A secondary-index posting (or its removal) at `seq`.
    pub fn index(seq: u64, present: bool) -> Self {
        Entry {
            seq,
            kind: if present {
                EntryKind::Index
            } else {
                EntryKind::IndexTombstone
            },
            value_len: 0,
            value_hash: 0,
            loc: Loc::default(),
            meta: Vec::new(),
            terms: Vec::new(),
            inline: None,
        }
    }

    /// Approximate bytes this entry occupies in memory or on disk.
    pub fn approx_bytes(&self) -> usize {
        48 + self.meta.len() + self.terms.len() + self.inline.as_ref().map_or(0, Vec::len)
    }

    /// Appends the encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u64(self.seq);
        out.put_u8(self.kind.byte());
        if matches!(self.kind, EntryKind::Index | EntryKind::IndexTombstone) {
            return;
        }
        out.put_u8(u8::from(self.inline.is_some()));
        out.put_u32(self.value_len);
        out.put_u64(self.value_hash);
        out.put_u64(self.loc.segment);
        out.put_u64(self.loc.offset);
        out.put_u32(self.loc.len);
        out.put_u16(self.meta.len() as u16);
        out.extend_from_slice(&self.meta);
        out.put_u16(self.terms.len() as u16);
        out.extend_from_slice(&self.terms);
        if let Some(v) = &self.inline {
            out.put_u32(v.len() as u32);
            out.extend_from_slice(v);
        }
    }

    /// Decodes an entry; `None` when malformed.
    pub fn decode(buf: &[u8]) -> Option<Entry> {
        let mut r = Reader::new(buf);
        let seq = r.u64()?;
        let kind = EntryKind::from_byte(r.u8()?)?;
        if matches!(kind, EntryKind::Index | EntryKind::IndexTombstone) {
            return (r.remaining() == 0).then(|| Entry::index(seq, kind == EntryKind::Index));
        }
        let has_inline = r.u8()?;
        if has_inline > 1 {
            return None;
        }
        let value_len = r.u32()?;
        let value_hash = r.u64()?;
        let loc = Loc {
            segment: r.u64()?,
            offset: r.u64()?,
            len: r.u32()?,
        };
        let ml = r.u16()? as usize;
        let meta = r.bytes(ml)?.to_vec();
        let tl = r.u16()? as usize;
        let terms = r.bytes(tl)?.to_vec();
        let inline = if has_inline == 1 {
            let n = r.u32()? as usize;
            let v = r.bytes(n)?.to_vec();
            if v.len() != value_len as usize {
                return None;
            }
            Some(v)
        } else {
            None
        };
        if r.remaining() != 0 {
            return None;
        }
        Some(Entry {
            seq,
            kind,
            value_len,
            value_hash,
            loc,
            meta,
            terms,
            inline,
        })
    }
}

/// Ledger key of user object `key`.
pub fn object_key(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(SPACE_OBJECT);
    k.extend_from_slice(key);
    k
}

/// Appends `s` escaped so that byte order of escaped strings equals byte
/// order of the originals: 0x00 becomes 0x00 0xFF; the end is 0x00 0x01.
fn push_escaped(out: &mut Vec<u8>, s: &[u8]) {
    for &b in s {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0, 1]);
}

/// Prefix of every index key of index `name` (and term, if given).
pub fn index_prefix(name: &[u8], term: Option<&[u8]>) -> Vec<u8> {
    let mut k = vec![SPACE_INDEX];
    push_escaped(&mut k, name);
    if let Some(t) = term {
        push_escaped(&mut k, t);
    }
    k
}

/// Ledger key of the posting (index `name`, `term`) -> object `key`.
pub fn index_key(name: &[u8], term: &[u8], key: &[u8]) -> Vec<u8> {
    let mut k = index_prefix(name, Some(term));
    k.extend_from_slice(key);
    k
}

/// Splits an index key (after its name prefix of `prefix_len` bytes) into
/// (term, object key).
pub fn split_index_key(k: &[u8], prefix_len: usize) -> Option<(Vec<u8>, Vec<u8>)> {
    let rest = k.get(prefix_len..)?;
    let mut term = Vec::new();
    let mut i = 0;
    while i < rest.len() {
        let b = rest[i];
        if b == 0 {
            match rest.get(i + 1)? {
                0xFF => term.push(0),
                1 => return Some((term, rest[i + 2..].to_vec())),
                _ => return None,
            }
            i += 2;
        } else {
            term.push(b);
            i += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_roundtrip() {
        let e = Entry {
            seq: 9,
            kind: EntryKind::Object,
            value_len: 3,
            value_hash: 77,
            loc: Loc {
                segment: 1,
                offset: 2,
                len: 3,
            },
            meta: b"meta".to_vec(),
            terms: vec![],
            inline: Some(b"abc".to_vec()),
        };
        let mut b = Vec::new();
        e.encode(&mut b);
        assert_eq!(Entry::decode(&b), Some(e));
        let i = Entry::index(5, true);
        let mut b = Vec::new();
        i.encode(&mut b);
        assert_eq!(Entry::decode(&b), Some(i));
        assert_eq!(Entry::decode(&b[..3]), None);
    }

    #[test]
    fn index_keys_sort_by_term_then_key() {
        let a = index_key(b"i", b"ab", b"z");
        let b = index_key(b"i", b"ab\0", b"a");
        let c = index_key(b"i", b"b", b"a");
        assert!(a < b && b < c);
        let p = index_prefix(b"i", None);
        assert_eq!(
            split_index_key(&b, p.len()),
            Some((b"ab\0".to_vec(), b"a".to_vec()))
        );
    }
}
