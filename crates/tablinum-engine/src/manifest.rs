//! The manifest: the one file that says which journal segments and ledger
//! tables make up the store, and up to which sequence number the ledger
//! tables hold every write.
//!
//! Owns its byte layout (`docs/format.md`, "Manifest") and the atomic switch
//! (write `<name>.tmp`, fsync, rename over `<name>`, fsync the directory).
//! An unfenced store's manifest is `MANIFEST`; a fenced store of epoch `e`
//! writes only `MANIFEST-<e>`, so an old owner can never overwrite a newer
//! owner's manifest, and open reads the highest epoch's. A file not named
//! here is garbage at open. Never decides what goes in it: the store builds
//! the state, this module persists it.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::codec::{crc, Put, Reader};
use crate::error::{Error, Result};
use crate::journal::segment::SegmentKind;
use crate::ledger::compaction::LEVELS;
use crate::ledger::sst::SstMeta;

/// Format version of the manifest this build writes. Version 1 (no
/// per-segment delete flag) is still read: its segments count as possibly
/// holding delete records.
pub const MANIFEST_VERSION: u32 = 2;
/// Oldest manifest version this build reads.
pub const MANIFEST_VERSION_MIN: u32 = 1;
const MAGIC: &[u8; 8] = b"TBLMANIF";
/// File name of the manifest in the store directory.
pub const MANIFEST_FILE: &str = "MANIFEST";
/// Largest manifest accepted (guards allocation on hostile input).
pub const MANIFEST_BYTES_MAX: u64 = 256 << 20;

/// One journal segment as the manifest knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentMeta {
    /// Segment id.
    pub id: u64,
    /// Write or compacted.
    pub kind: SegmentKind,
    /// Smallest sequence number in it (`u64::MAX` when empty).
    pub min_seq: u64,
    /// Largest sequence number in it; `u64::MAX` while it is the active segment.
    pub max_seq: u64,
    /// Size in bytes when sealed (0 while active).
    pub size: u64,
    /// Bytes of records known to be dead (superseded or deleted).
    pub dead_bytes: u64,
    /// May hold delete records: true until the segment is sealed with none
    /// (and for every segment of a version 1 manifest). Journal compaction
    /// finds the live records of segments without deletes from the ledger
    /// alone; a delete record can outlive its ledger tombstone.
    pub deletes: bool,
}

/// Everything the manifest records.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ManifestState {
    /// Next file id to hand out (segments and tables share the space).
    pub next_file_id: u64,
    /// Every write with a sequence number <= this is in the ledger tables.
    pub persisted_seq: u64,
    /// Tables per level (L0 newest first; deeper levels in key order).
    pub levels: Vec<Vec<SstMeta>>,
    /// Journal segments in id order.
    pub segments: Vec<SegmentMeta>,
}

fn put_bytes16(b: &mut Vec<u8>, v: &[u8]) {
    b.put_u16(v.len() as u16);
    b.extend_from_slice(v);
}

impl ManifestState {
    /// Encodes the whole file.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::new();
        body.put_u64(self.next_file_id);
        body.put_u64(self.persisted_seq);
        body.put_u8(self.levels.len() as u8);
        for level in &self.levels {
            body.put_u32(level.len() as u32);
            for m in level {
                body.put_u64(m.id);
                body.put_u64(m.size);
                body.put_u64(m.entries);
                body.put_u64(m.min_seq);
                body.put_u64(m.max_seq);
                put_bytes16(&mut body, &m.first_key);
                put_bytes16(&mut body, &m.last_key);
            }
        }
        body.put_u32(self.segments.len() as u32);
        for s in &self.segments {
            body.put_u64(s.id);
            body.put_u8(match s.kind {
                SegmentKind::Write => 0,
                SegmentKind::Compacted => 1,
            });
            body.put_u64(s.min_seq);
            body.put_u64(s.max_seq);
            body.put_u64(s.size);
            body.put_u64(s.dead_bytes);
            body.put_u8(u8::from(s.deletes));
        }
        let mut out = Vec::with_capacity(body.len() + 20);
        out.extend_from_slice(MAGIC);
        out.put_u32(MANIFEST_VERSION);
        out.put_u32(body.len() as u32);
        out.extend_from_slice(&body);
        let c = crc(&out);
        out.put_u32(c);
        out
    }

    /// Decodes a manifest read from `path`.
    pub fn decode(buf: &[u8], path: &Path) -> Result<ManifestState> {
        let bad =
            |off: usize, why: &str| Error::corrupt(path, off as u64, format!("manifest: {why}"));
        if buf.len() < 20 {
            return Err(bad(0, "too short"));
        }
        let (all, c) = buf.split_at(buf.len() - 4);
        if crc(all) != u32::from_le_bytes([c[0], c[1], c[2], c[3]]) {
            return Err(bad(buf.len() - 4, "checksum mismatch"));
        }
        let mut r = Reader::new(all);
        if r.bytes(8) != Some(&MAGIC[..]) {
            return Err(bad(0, "bad magic"));
        }
        let version = r.u32().ok_or_else(|| bad(8, "short"))?;
        if !(MANIFEST_VERSION_MIN..=MANIFEST_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                file: path.to_path_buf(),
                found: version,
                supported: MANIFEST_VERSION,
            });
        }
        let len = r.u32().ok_or_else(|| bad(12, "short"))? as usize;
        if len != r.remaining() {
            return Err(bad(12, "body length mismatch"));
        }
        let short = |r: &Reader<'_>| bad(16 + r.pos(), "truncated body");
        let next_file_id = r.u64().ok_or_else(|| short(&r))?;
        let persisted_seq = r.u64().ok_or_else(|| short(&r))?;
        let nl = r.u8().ok_or_else(|| short(&r))? as usize;
        if nl > LEVELS {
            return Err(bad(16, "too many levels"));
        }
        let mut levels = Vec::with_capacity(nl);
        for _ in 0..nl {
            let n = r.u32().ok_or_else(|| short(&r))? as usize;
            let mut files = Vec::with_capacity(n.min(1 << 16));
            for _ in 0..n {
                let id = r.u64().ok_or_else(|| short(&r))?;
                let size = r.u64().ok_or_else(|| short(&r))?;
                let entries = r.u64().ok_or_else(|| short(&r))?;
                let min_seq = r.u64().ok_or_else(|| short(&r))?;
                let max_seq = r.u64().ok_or_else(|| short(&r))?;
                let fl = r.u16().ok_or_else(|| short(&r))? as usize;
                let first_key = r.bytes(fl).ok_or_else(|| short(&r))?.to_vec();
                let ll = r.u16().ok_or_else(|| short(&r))? as usize;
                let last_key = r.bytes(ll).ok_or_else(|| short(&r))?.to_vec();
                files.push(SstMeta {
                    id,
                    size,
                    entries,
                    first_key,
                    last_key,
                    min_seq,
                    max_seq,
                });
            }
            levels.push(files);
        }
        let ns = r.u32().ok_or_else(|| short(&r))? as usize;
        let mut segments = Vec::with_capacity(ns.min(1 << 16));
        for _ in 0..ns {
            let id = r.u64().ok_or_else(|| short(&r))?;
            let kind = match r.u8().ok_or_else(|| short(&r))? {
                0 => SegmentKind::Write,
                1 => SegmentKind::Compacted,
                _ => return Err(bad(16 + r.pos(), "unknown segment kind")),
            };
            let min_seq = r.u64().ok_or_else(|| short(&r))?;
            let max_seq = r.u64().ok_or_else(|| short(&r))?;
            let size = r.u64().ok_or_else(|| short(&r))?;
            let dead_bytes = r.u64().ok_or_else(|| short(&r))?;
            let deletes = if version < 2 {
                true
            } else {
                let at = 16 + r.pos();
                match r.u8().ok_or_else(|| short(&r))? {
                    0 => false,
                    1 => true,
                    _ => return Err(bad(at, "segment delete flag not 0 or 1")),
                }
            };
            segments.push(SegmentMeta {
                id,
                kind,
                min_seq,
                max_seq,
                size,
                dead_bytes,
                deletes,
            });
        }
        if r.remaining() != 0 {
            return Err(bad(16 + r.pos(), "trailing bytes"));
        }
        Ok(ManifestState {
            next_file_id,
            persisted_seq,
            levels,
            segments,
        })
    }
}

impl SegmentMeta {
    /// The lowest sequence number a record of this segment may have, for
    /// [`crate::journal::segment::scan`]: a write segment's records start
    /// at its `min_seq`, registered before its first append; `None` for a
    /// compacted segment (its records keep their own) and while unknown (0
    /// in a manifest rebuilt from the files; `u64::MAX`: sealed empty).
    pub fn first_seq(&self) -> Option<u64> {
        match (self.kind, self.min_seq) {
            (SegmentKind::Write, 0 | u64::MAX) | (SegmentKind::Compacted, _) => None,
            (SegmentKind::Write, m) => Some(m),
        }
    }

    /// Bytes of the segment that hold its records: its sealed size once
    /// sealed (an old owner may have appended after that; those bytes are
    /// never read), unbounded while it is (or was, at a crash) active.
    pub fn scan_limit(&self) -> u64 {
        if self.max_seq != u64::MAX && self.size > 0 {
            self.size
        } else {
            u64::MAX
        }
    }
}

/// The manifest file name of `epoch` (0: an unfenced store).
pub fn manifest_name(epoch: u64) -> String {
    if epoch == 0 {
        MANIFEST_FILE.to_string()
    } else {
        format!("{MANIFEST_FILE}-{epoch}")
    }
}

/// The epochs of the manifests in `dir` (0 for `MANIFEST`), ascending.
pub fn epochs(dir: &Path) -> Result<Vec<u64>> {
    let mut v = Vec::new();
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(v),
        Err(e) => return Err(Error::io("list store directory", dir, e)),
    };
    for ent in rd {
        let ent = ent.map_err(|e| Error::io("list store directory", dir, e))?;
        let name = ent.file_name();
        let Some(name) = name.to_str() else { continue };
        if name == MANIFEST_FILE {
            v.push(0);
        } else if let Some(n) = name
            .strip_prefix(MANIFEST_FILE)
            .and_then(|r| r.strip_prefix('-'))
            .and_then(|r| r.parse::<u64>().ok())
        {
            v.push(n);
        }
    }
    v.sort_unstable();
    Ok(v)
}

/// Reads the manifest of the highest epoch at or below `max_epoch` in
/// `dir`, with that epoch; `Ok(None)` when there is none.
pub fn load_latest(dir: &Path, max_epoch: u64) -> Result<Option<(ManifestState, u64)>> {
    let Some(e) = epochs(dir)?.into_iter().rev().find(|e| *e <= max_epoch) else {
        return Ok(None);
    };
    Ok(load_file(&dir.join(manifest_name(e)))?.map(|s| (s, e)))
}

fn load_file(path: &Path) -> Result<Option<ManifestState>> {
    let path = path.to_path_buf();
    let meta = match fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("stat manifest", &path, e)),
    };
    if meta.len() > MANIFEST_BYTES_MAX {
        return Err(Error::corrupt(
            &path,
            0,
            "manifest larger than MANIFEST_BYTES_MAX",
        ));
    }
    let buf = fs::read(&path).map_err(|e| Error::io("read manifest", &path, e))?;
    ManifestState::decode(&buf, &path).map(Some)
}

/// fsyncs a directory so renames and creations in it are durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("fsync directory", dir, e))
}

/// Atomically replaces the manifest of `epoch` (see [`manifest_name`]).
pub fn save_epoch(dir: &Path, state: &ManifestState, epoch: u64) -> Result<()> {
    let name = manifest_name(epoch);
    let tmp: PathBuf = dir.join(format!("{name}.tmp"));
    let path = dir.join(name);
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&tmp)
        .map_err(|e| Error::io("create manifest", &tmp, e))?;
    f.write_all(&state.encode())
        .map_err(|e| Error::io("write manifest", &tmp, e))?;
    f.sync_all()
        .map_err(|e| Error::io("fsync manifest", &tmp, e))?;
    fs::rename(&tmp, &path).map_err(|e| Error::io("rename manifest", &path, e))?;
    sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_flips_detected() {
        let s = ManifestState {
            next_file_id: 7,
            persisted_seq: 99,
            levels: vec![vec![SstMeta {
                id: 3,
                size: 10,
                entries: 2,
                first_key: b"a".to_vec(),
                last_key: b"b".to_vec(),
                min_seq: 1,
                max_seq: 2,
            }]],
            segments: vec![SegmentMeta {
                id: 1,
                kind: SegmentKind::Write,
                min_seq: 1,
                max_seq: u64::MAX,
                size: 0,
                dead_bytes: 5,
                deletes: false,
            }],
        };
        let b = s.encode();
        let p = Path::new("MANIFEST");
        assert_eq!(ManifestState::decode(&b, p).unwrap(), s);
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 4;
            assert!(ManifestState::decode(&c, p).is_err());
        }
    }

    /// A version 1 manifest (no delete flag) still opens, its segments
    /// counted as possibly holding delete records; a version past this
    /// build's is refused by name.
    #[test]
    fn version_1_reads_with_deletes_assumed_and_newer_is_refused() {
        let mut s = ManifestState {
            next_file_id: 4,
            persisted_seq: 9,
            levels: vec![Vec::new(); 2],
            segments: vec![SegmentMeta {
                id: 2,
                kind: SegmentKind::Compacted,
                min_seq: 1,
                max_seq: 9,
                size: 4096,
                dead_bytes: 100,
                deletes: false,
            }],
        };
        // Version 1: the version field says 1 and each segment lacks its
        // last byte.
        let v2 = s.encode();
        let body_len = v2.len() - 20 - 1;
        let mut v1 = Vec::new();
        v1.extend_from_slice(MAGIC);
        v1.put_u32(1);
        v1.put_u32(body_len as u32);
        v1.extend_from_slice(&v2[16..16 + body_len]);
        let c = crc(&v1);
        v1.put_u32(c);
        let p = Path::new("MANIFEST");
        s.segments[0].deletes = true;
        assert_eq!(ManifestState::decode(&v1, p).unwrap(), s);
        let mut v3 = v2.clone();
        v3[8..12].copy_from_slice(&3u32.to_le_bytes());
        let n = v3.len() - 4;
        let c = crc(&v3[..n]);
        v3[n..].copy_from_slice(&c.to_le_bytes());
        assert!(matches!(
            ManifestState::decode(&v3, p),
            Err(Error::UnsupportedVersion { found: 3, .. })
        ));
    }
}
