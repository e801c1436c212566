//! Ledger table files: immutable sorted runs of (ledger key, entry).
//!
//! Owns writing a table (blocks, index, bloom, properties, footer; layout in
//! `docs/format.md`, "Ledger table") and reading one back: the index, bloom
//! and properties stay in memory, blocks go through the block cache. A table
//! is deleted only when the last holder of its `Arc` drops it after it was
//! marked obsolete. Knows nothing of levels, journals or compaction choice.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::cache::{ReadCounters, StoreCache};
use crate::codec::{crc, Put, Reader};
use crate::error::{Error, Result};
use crate::ledger::block::{Block, BlockBuilder};
use crate::ledger::bloom::{key_hash, Bloom};
use crate::ledger::entry::Entry;

/// Format version of ledger tables.
pub const SST_VERSION: u32 = 1;
const MAGIC: &[u8; 8] = b"TBLSST01";
/// Bytes of the fixed footer.
pub const FOOTER_BYTES: usize = 52;
/// Largest decoded block accepted (guards allocations on hostile input).
pub const BLOCK_RAW_BYTES_MAX: usize = 8 << 20;

/// Path of table `id` under the ledger directory.
pub fn sst_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:016}.sst"))
}

/// Summary of a finished table (also kept in the manifest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SstMeta {
    /// File id.
    pub id: u64,
    /// File size in bytes.
    pub size: u64,
    /// Number of entries.
    pub entries: u64,
    /// Smallest key.
    pub first_key: Vec<u8>,
    /// Largest key.
    pub last_key: Vec<u8>,
    /// Smallest sequence number.
    pub min_seq: u64,
    /// Largest sequence number.
    pub max_seq: u64,
}

/// Writes one table.
pub struct SstWriter {
    path: PathBuf,
    id: u64,
    out: BufWriter<File>,
    offset: u64,
    block: BlockBuilder,
    block_bytes: usize,
    bits_per_key: u32,
    index: Vec<u8>,
    index_count: u32,
    hashes: Vec<u64>,
    first_key: Option<Vec<u8>>,
    last_key: Vec<u8>,
    min_seq: u64,
    max_seq: u64,
    entries: u64,
    scratch: Vec<u8>,
}

impl SstWriter {
    /// Creates table `id` in `dir`.
    pub fn create(dir: &Path, id: u64, block_bytes: usize, bits_per_key: u32) -> Result<Self> {
        let path = sst_path(dir, id);
        let f = OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io("create table", &path, e))?;
        Ok(SstWriter {
            path,
            id,
            out: BufWriter::with_capacity(256 << 10, f),
            offset: 0,
            block: BlockBuilder::default(),
            block_bytes,
            bits_per_key,
            index: Vec::new(),
            index_count: 0,
            hashes: Vec::new(),
            first_key: None,
            last_key: Vec::new(),
            min_seq: u64::MAX,
            max_seq: 0,
            entries: 0,
            scratch: Vec::new(),
        })
    }

    /// Bytes written so far (approximate file size).
    pub fn size(&self) -> u64 {
        self.offset + self.block.size() as u64
    }

    /// Adds an entry; keys must be strictly increasing.
    pub fn add(&mut self, key: &[u8], entry: &Entry) -> Result<()> {
        // A merge that hands out keys out of order would write a table
        // whose index and blocks lie; catch it where it is cheap.
        debug_assert!(
            self.first_key.is_none() || key > self.last_key.as_slice(),
            "table {}: keys out of order",
            self.id
        );
        self.scratch.clear();
        entry.encode(&mut self.scratch);
        self.block.add(key, &self.scratch);
        self.hashes.push(key_hash(key));
        if self.first_key.is_none() {
            self.first_key = Some(key.to_vec());
        }
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.min_seq = self.min_seq.min(entry.seq);
        self.max_seq = self.max_seq.max(entry.seq);
        self.entries += 1;
        if self.block.size() >= self.block_bytes {
            self.flush_block()?;
        }
        Ok(())
    }

    fn write(&mut self, b: &[u8]) -> Result<()> {
        self.out
            .write_all(b)
            .map_err(|e| Error::io("write table", &self.path, e))?;
        self.offset += b.len() as u64;
        Ok(())
    }

    fn flush_block(&mut self) -> Result<()> {
        if self.block.is_empty() {
            return Ok(());
        }
        let disk = self.block.finish();
        let at = self.offset;
        self.write(&disk)?;
        self.index.put_u16(self.last_key.len() as u16);
        self.index.extend_from_slice(&self.last_key.clone());
        self.index.put_u64(at);
        self.index.put_u32(disk.len() as u32);
        self.index_count += 1;
        Ok(())
    }

    /// Writes index, bloom, properties and footer, fsyncs; returns the summary.
    pub fn finish(mut self) -> Result<SstMeta> {
        self.flush_block()?;
        let mut index = Vec::new();
        index.put_u32(self.index_count);
        index.extend_from_slice(&self.index);
        let c = crc(&index);
        index.put_u32(c);
        let index_off = self.offset;
        self.write(&index)?;

        let mut bloom = Vec::new();
        Bloom::build(&self.hashes, self.bits_per_key).encode(&mut bloom);
        let c = crc(&bloom);
        bloom.put_u32(c);
        let bloom_off = self.offset;
        self.write(&bloom)?;

        let first_key = self.first_key.clone().unwrap_or_default();
        let mut props = Vec::new();
        props.put_u64(self.entries);
        props.put_u64(if self.entries == 0 { 0 } else { self.min_seq });
        props.put_u64(self.max_seq);
        props.put_u16(first_key.len() as u16);
        props.extend_from_slice(&first_key);
        props.put_u16(self.last_key.len() as u16);
        props.extend_from_slice(&self.last_key.clone());
        let c = crc(&props);
        props.put_u32(c);
        let props_off = self.offset;
        self.write(&props)?;

        let mut footer = Vec::with_capacity(FOOTER_BYTES);
        footer.put_u64(index_off);
        footer.put_u32(index.len() as u32);
        footer.put_u64(bloom_off);
        footer.put_u32(bloom.len() as u32);
        footer.put_u64(props_off);
        footer.put_u32(props.len() as u32);
        footer.put_u32(SST_VERSION);
        footer.extend_from_slice(MAGIC);
        let c = crc(&footer);
        footer.put_u32(c);
        self.write(&footer)?;
        let f = self
            .out
            .into_inner()
            .map_err(|e| Error::io("flush table", &self.path, e.into_error()))?;
        f.sync_all()
            .map_err(|e| Error::io("fsync table", &self.path, e))?;
        Ok(SstMeta {
            id: self.id,
            size: self.offset,
            entries: self.entries,
            first_key,
            last_key: self.last_key,
            min_seq: if self.entries == 0 { 0 } else { self.min_seq },
            max_seq: self.max_seq,
        })
    }

    /// Abandons a partly written table and removes its file.
    pub fn abandon(self) {
        let path = self.path.clone();
        drop(self.out);
        let _ = std::fs::remove_file(path);
    }
}

#[derive(Debug)]
struct IndexEntry {
    last_key: Vec<u8>,
    offset: u64,
    size: u32,
}

/// An open table: index, bloom and properties in memory.
#[derive(Debug)]
pub struct SstReader {
    /// Summary (from the file's own properties).
    pub meta: SstMeta,
    /// Path of the file.
    pub path: PathBuf,
    index: Vec<IndexEntry>,
    bloom: Bloom,
    caches: StoreCache,
    obsolete: Obsolete,
    /// A handle held for the reader's life (see [`SstReader::pin`]).
    pinned: std::sync::OnceLock<Arc<File>>,
}

/// Removes an obsolete table's file once no reader holds it; the owner of
/// the table decides how (at once, or later while a reservation names it).
pub type Remover = Arc<dyn Fn(&Path) + Send + Sync>;

/// Whether (and how) a table's file goes when its last reader is dropped.
#[derive(Default)]
struct Obsolete(std::sync::OnceLock<Option<Remover>>);

impl std::fmt::Debug for Obsolete {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0.get().is_some())
    }
}

fn read_at(file: &File, path: &Path, off: u64, len: usize) -> Result<Vec<u8>> {
    let mut b = vec![0u8; len];
    file.read_exact_at(&mut b, off).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            Error::corrupt(path, off, "read past end of table")
        } else {
            Error::io("pread table", path, e)
        }
    })?;
    Ok(b)
}

fn checked_section(buf: &[u8], path: &Path, off: u64, what: &str) -> Result<Vec<u8>> {
    if buf.len() < 4 {
        return Err(Error::corrupt(path, off, format!("{what} too short")));
    }
    let (body, c) = buf.split_at(buf.len() - 4);
    if crc(body) != u32::from_le_bytes([c[0], c[1], c[2], c[3]]) {
        return Err(Error::corrupt(
            path,
            off,
            format!("{what} checksum mismatch"),
        ));
    }
    Ok(body.to_vec())
}

impl SstReader {
    /// Opens table `id`, checking footer, index, bloom and properties.
    pub fn open(dir: &Path, id: u64, caches: StoreCache) -> Result<SstReader> {
        let path = sst_path(dir, id);
        let file = caches.file(id, &path)?;
        let size = file
            .metadata()
            .map_err(|e| Error::io("stat table", &path, e))?
            .len();
        if size < FOOTER_BYTES as u64 {
            return Err(Error::corrupt(&path, 0, "table shorter than its footer"));
        }
        let foff = size - FOOTER_BYTES as u64;
        let footer = read_at(&file, &path, foff, FOOTER_BYTES)?;
        let body = checked_section(&footer, &path, foff, "footer")?;
        let mut r = Reader::new(&body);
        let bad = |why: &str| Error::corrupt(&path, foff, format!("footer: {why}"));
        let (io, il, bo, bl, po, pl) = (
            r.u64().ok_or_else(|| bad("short"))?,
            r.u32().ok_or_else(|| bad("short"))? as u64,
            r.u64().ok_or_else(|| bad("short"))?,
            r.u32().ok_or_else(|| bad("short"))? as u64,
            r.u64().ok_or_else(|| bad("short"))?,
            r.u32().ok_or_else(|| bad("short"))? as u64,
        );
        let version = r.u32().ok_or_else(|| bad("short"))?;
        if r.bytes(8) != Some(&MAGIC[..]) {
            return Err(bad("bad magic"));
        }
        if version != SST_VERSION {
            return Err(Error::UnsupportedVersion {
                file: path,
                found: version,
                supported: SST_VERSION,
            });
        }
        for (o, l) in [(io, il), (bo, bl), (po, pl)] {
            if o.checked_add(l).is_none_or(|e| e > foff) {
                return Err(bad("section out of bounds"));
            }
        }
        let index_raw =
            checked_section(&read_at(&file, &path, io, il as usize)?, &path, io, "index")?;
        let bloom_raw =
            checked_section(&read_at(&file, &path, bo, bl as usize)?, &path, bo, "bloom")?;
        let props_raw = checked_section(
            &read_at(&file, &path, po, pl as usize)?,
            &path,
            po,
            "properties",
        )?;

        let ibad = |why: &str| Error::corrupt(&path, io, format!("index: {why}"));
        let mut r = Reader::new(&index_raw);
        let n = r.u32().ok_or_else(|| ibad("short"))? as usize;
        let mut index = Vec::with_capacity(n.min(1 << 20));
        let mut expect_off = 0u64;
        for _ in 0..n {
            let kl = r.u16().ok_or_else(|| ibad("short"))? as usize;
            let last_key = r.bytes(kl).ok_or_else(|| ibad("short"))?.to_vec();
            let offset = r.u64().ok_or_else(|| ibad("short"))?;
            let size = r.u32().ok_or_else(|| ibad("short"))?;
            if offset != expect_off
                || index
                    .last()
                    .is_some_and(|p: &IndexEntry| p.last_key >= last_key)
            {
                return Err(ibad("blocks out of order"));
            }
            expect_off = offset + size as u64;
            index.push(IndexEntry {
                last_key,
                offset,
                size,
            });
        }
        if expect_off != io || r.remaining() != 0 {
            return Err(ibad("blocks do not tile the data section"));
        }
        let bloom = Bloom::decode(&bloom_raw)
            .ok_or_else(|| Error::corrupt(&path, bo, "bloom: malformed"))?;
        let pbad = |why: &str| Error::corrupt(&path, po, format!("properties: {why}"));
        let mut r = Reader::new(&props_raw);
        let entries = r.u64().ok_or_else(|| pbad("short"))?;
        let min_seq = r.u64().ok_or_else(|| pbad("short"))?;
        let max_seq = r.u64().ok_or_else(|| pbad("short"))?;
        let fl = r.u16().ok_or_else(|| pbad("short"))? as usize;
        let first_key = r.bytes(fl).ok_or_else(|| pbad("short"))?.to_vec();
        let ll = r.u16().ok_or_else(|| pbad("short"))? as usize;
        let last_key = r.bytes(ll).ok_or_else(|| pbad("short"))?.to_vec();
        if index.last().map(|e| &e.last_key) != Some(&last_key) && !index.is_empty() {
            return Err(pbad("last key disagrees with index"));
        }
        Ok(SstReader {
            pinned: std::sync::OnceLock::new(),
            meta: SstMeta {
                id,
                size,
                entries,
                first_key,
                last_key,
                min_seq,
                max_seq,
            },
            path,
            index,
            bloom,
            caches,
            obsolete: Obsolete::default(),
        })
    }

    /// Marks the file for deletion once no one holds this reader.
    pub fn mark_obsolete(&self) {
        let _ = self.obsolete.0.set(None);
    }

    /// Marks the file obsolete; once no one holds this reader, `remover`
    /// is called with its path instead of deleting it directly.
    pub fn mark_obsolete_with(&self, remover: Remover) {
        let _ = self.obsolete.0.set(Some(remover));
    }

    /// Number of data blocks.
    pub fn block_count(&self) -> usize {
        self.index.len()
    }

    /// The file's read handle: the pinned one, else the shared cache's.
    fn handle(&self) -> Result<Arc<File>> {
        match self.pinned.get() {
            Some(f) => Ok(f.clone()),
            None => self.caches.file(self.meta.id, &self.path),
        }
    }

    /// Holds a read handle for as long as this reader lives, so its reads
    /// no longer need the file's name: a reader whose file may be deleted
    /// while it still reads (a view whose reservation is let lapse).
    pub fn pin(&self) -> Result<()> {
        if self.pinned.get().is_none() {
            let _ = self.pinned.set(self.caches.file(self.meta.id, &self.path)?);
        }
        Ok(())
    }

    /// Loads block `i` (through the cache).
    pub fn block(&self, i: usize) -> Result<Arc<Block>> {
        let ie = &self.index[i];
        if let Some(b) = self.caches.block(self.meta.id, ie.offset) {
            return Ok(b);
        }
        let file = self.handle()?;
        let disk = read_at(&file, &self.path, ie.offset, ie.size as usize)?;
        ReadCounters::add(&self.caches.reads().block_read_bytes, disk.len() as u64);
        let b = Arc::new(
            Block::decode(&disk, BLOCK_RAW_BYTES_MAX)
                .map_err(|why| Error::corrupt(&self.path, ie.offset, why))?,
        );
        self.caches.put_block(self.meta.id, ie.offset, b.clone());
        Ok(b)
    }

    fn decode_entry(&self, block: usize, raw: &[u8]) -> Result<Entry> {
        Entry::decode(raw).ok_or_else(|| {
            Error::corrupt(
                &self.path,
                self.index[block].offset,
                "malformed ledger entry",
            )
        })
    }

    /// Point lookup; `hash` is `bloom::key_hash(key)`.
    pub fn get(&self, key: &[u8], hash: u64) -> Result<Option<Entry>> {
        if key < self.meta.first_key.as_slice() || key > self.meta.last_key.as_slice() {
            return Ok(None);
        }
        let reads = self.caches.reads();
        ReadCounters::add(&reads.table_probes, 1);
        if !self.bloom.may_contain(hash) {
            ReadCounters::add(&reads.bloom_negatives, 1);
            return Ok(None);
        }
        let bi = self.index.partition_point(|e| e.last_key.as_slice() < key);
        let found = match self.index.get(bi) {
            Some(_) => {
                let b = self.block(bi)?;
                match b.entry(b.seek(key)) {
                    Some((k, v)) if k == key => Some(self.decode_entry(bi, v)?),
                    _ => None,
                }
            }
            None => None,
        };
        if found.is_none() {
            ReadCounters::add(&reads.bloom_false_positives, 1);
        }
        Ok(found)
    }

    /// Index of the first block that may hold keys >= `key`.
    pub fn seek_block(&self, key: &[u8]) -> usize {
        self.index.partition_point(|e| e.last_key.as_slice() < key)
    }

    /// Reads every block and decodes every entry (for `verify`).
    pub fn verify(&self) -> Result<u64> {
        let file = self.handle()?;
        let mut n = 0;
        for (bi, ie) in self.index.iter().enumerate() {
            let disk = read_at(&file, &self.path, ie.offset, ie.size as usize)?;
            let b = Block::decode(&disk, BLOCK_RAW_BYTES_MAX)
                .map_err(|why| Error::corrupt(&self.path, ie.offset, why))?;
            for i in 0..b.len() {
                let (_, v) = b
                    .entry(i)
                    .ok_or_else(|| Error::corrupt(&self.path, ie.offset, "entry out of bounds"))?;
                self.decode_entry(bi, v)?;
                n += 1;
            }
        }
        if n != self.meta.entries {
            return Err(Error::corrupt(
                &self.path,
                0,
                "entry count disagrees with properties",
            ));
        }
        Ok(n)
    }
}

impl Drop for SstReader {
    fn drop(&mut self) {
        if let Some(remover) = self.obsolete.0.get() {
            self.caches.forget_file(self.meta.id);
            match remover {
                Some(r) => r(&self.path),
                None => {
                    let _ = std::fs::remove_file(&self.path);
                }
            }
        }
    }
}

/// Forward iterator over one table from a start key.
pub struct SstIter {
    sst: Arc<SstReader>,
    block_idx: usize,
    block: Option<Arc<Block>>,
    pos: usize,
}

impl SstIter {
    /// Positions at the first entry with key >= `start` (or the first entry).
    pub fn new(sst: Arc<SstReader>, start: Option<&[u8]>) -> Result<SstIter> {
        let block_idx = start.map_or(0, |k| sst.seek_block(k));
        let mut it = SstIter {
            sst,
            block_idx,
            block: None,
            pos: 0,
        };
        if it.block_idx < it.sst.block_count() {
            let b = it.sst.block(it.block_idx)?;
            it.pos = start.map_or(0, |k| b.seek(k));
            it.block = Some(b);
            it.skip_exhausted()?;
        }
        Ok(it)
    }

    fn skip_exhausted(&mut self) -> Result<()> {
        while let Some(b) = &self.block {
            if self.pos < b.len() {
                return Ok(());
            }
            self.block_idx += 1;
            self.pos = 0;
            self.block = if self.block_idx < self.sst.block_count() {
                Some(self.sst.block(self.block_idx)?)
            } else {
                None
            };
        }
        Ok(())
    }

    /// The next (key, entry), or `None` at the end.
    pub fn next_entry(&mut self) -> Result<Option<(Vec<u8>, Entry)>> {
        let Some(b) = &self.block else {
            return Ok(None);
        };
        let (k, v) = b
            .entry(self.pos)
            .ok_or_else(|| Error::corrupt(&self.sst.path, 0, "entry out of bounds"))?;
        let out = (k.to_vec(), self.sst.decode_entry(self.block_idx, v)?);
        self.pos += 1;
        self.skip_exhausted()?;
        Ok(Some(out))
    }
}
