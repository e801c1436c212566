//! Bounds-checked little-endian encoding helpers shared by every on-disk format.
//!
//! Owns the [`Reader`] that decoders use on hostile bytes: every read checks
//! the remaining length and returns `None` instead of panicking. Knows
//! nothing about files; callers turn `None` into a `Corruption` error with
//! the file and offset they know.

/// CRC-32C (Castagnoli) of `data`; the checksum used by every format.
pub fn crc(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// Appends little-endian integers and length-prefixed byte strings.
pub trait Put {
    /// Appends a `u8`.
    fn put_u8(&mut self, v: u8);
    /// Appends a little-endian `u16`.
    fn put_u16(&mut self, v: u16);
    /// Appends a little-endian `u32`.
    fn put_u32(&mut self, v: u32);
    /// Appends a little-endian `u64`.
    fn put_u64(&mut self, v: u64);
}

impl Put for Vec<u8> {
    fn put_u8(&mut self, v: u8) {
        self.push(v);
    }
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
}

/// A cursor over untrusted bytes. Every getter returns `None` when the input
/// is too short; nothing here can panic.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Starts reading at the beginning of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    /// Bytes consumed so far.
    pub fn pos(&self) -> usize {
        self.pos
    }
    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    /// Takes the next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let out = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(out)
    }
    /// Reads a `u8`.
    pub fn u8(&mut self) -> Option<u8> {
        self.bytes(1).map(|b| b[0])
    }
    /// Reads a little-endian `u16`.
    pub fn u16(&mut self) -> Option<u16> {
        self.bytes(2).map(|b| u16::from_le_bytes([b[0], b[1]]))
    }
    /// Reads a little-endian `u32`.
    pub fn u32(&mut self) -> Option<u32> {
        self.bytes(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    /// Reads a little-endian `u64`.
    pub fn u64(&mut self) -> Option<u64> {
        let b = self.bytes(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Some(u64::from_le_bytes(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_never_reads_past_end() {
        let mut v = Vec::new();
        v.put_u32(7);
        v.put_u16(9);
        let mut r = Reader::new(&v);
        assert_eq!(r.u32(), Some(7));
        assert_eq!(r.u64(), None);
        assert_eq!(r.u16(), Some(9));
        assert_eq!(r.u8(), None);
        assert_eq!(r.bytes(usize::MAX), None);
    }
}
