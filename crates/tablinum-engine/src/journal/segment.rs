//! Journal segment files: a checksummed header followed by records.
//!
//! Owns creating, appending to, reading records from and scanning segment
//! files, and the torn-tail rule: in the newest segment a bad record with no
//! valid record anywhere after it is a torn write and is cut off; a bad
//! record followed by a valid one is corruption and an error. Knows nothing
//! of the ledger, of liveness or of which segments exist (the manifest does).

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::codec::{crc, Put, Reader};
use crate::error::{Error, Result, JOURNAL_REWIND_OP};
use crate::faults::{self, StorageFaults};
use crate::journal::record::{self, Record, HEADER_BYTES};

/// Bytes of the segment header.
pub const SEGMENT_HEADER_BYTES: u64 = 28;
const MAGIC: &[u8; 8] = b"TBLJRNL\0";
/// Newest format version of journal segments this build reads and writes:
/// version 3 marks a write segment written over a recycled file (see
/// [`SegmentWriter::recycle`]), whose bytes past its records may be zeros
/// and records left from the file's earlier use.
pub const JOURNAL_VERSION: u32 = 3;
/// Version of a segment created as a new file: the same as 3, except that
/// nothing follows its last record.
pub const JOURNAL_VERSION_NEW_FILE: u32 = 2;
/// Oldest journal version this build reads: version 1 has no padded
/// records (`record::FLAG_PADDED`) and is otherwise the same as 2.
pub const JOURNAL_VERSION_MIN: u32 = 1;
/// Bytes of a page: a recycled segment is written in whole pages, so the
/// kernel never reads a page of the old contents to change part of it.
const PAGE: u64 = 4096;

/// Why a segment was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentKind {
    /// Written by user writes, in sequence order (`.jnl`).
    Write,
    /// Written by journal compaction: relocated live records (`.gcj`).
    Compacted,
}

impl SegmentKind {
    /// File extension of this kind.
    pub fn ext(self) -> &'static str {
        match self {
            SegmentKind::Write => "jnl",
            SegmentKind::Compacted => "gcj",
        }
    }
    fn byte(self) -> u8 {
        match self {
            SegmentKind::Write => 0,
            SegmentKind::Compacted => 1,
        }
    }
}

/// Path of segment `id` of `kind` under the journal directory.
pub fn segment_path(dir: &Path, id: u64, kind: SegmentKind) -> PathBuf {
    dir.join(format!("{id:016}.{}", kind.ext()))
}

fn header_bytes(id: u64, kind: SegmentKind, version: u32) -> Vec<u8> {
    let mut h = Vec::with_capacity(SEGMENT_HEADER_BYTES as usize);
    h.extend_from_slice(MAGIC);
    h.put_u32(version);
    h.put_u8(kind.byte());
    h.extend_from_slice(&[0, 0, 0]);
    h.put_u64(id);
    let c = crc(&h);
    h.put_u32(c);
    h
}

/// Checks a segment header read from `path`; returns its format version.
pub fn check_header(buf: &[u8], path: &Path, id: u64, kind: SegmentKind) -> Result<u32> {
    let bad = |why: &str| Error::corrupt(path, 0, format!("segment header: {why}"));
    if buf.len() < SEGMENT_HEADER_BYTES as usize {
        return Err(bad("file shorter than header"));
    }
    let mut r = Reader::new(buf);
    if r.bytes(8) != Some(&MAGIC[..]) {
        return Err(bad("bad magic"));
    }
    let version = r.u32().ok_or_else(|| bad("short"))?;
    let kb = r.u8().ok_or_else(|| bad("short"))?;
    let _pad = r.bytes(3);
    let hid = r.u64().ok_or_else(|| bad("short"))?;
    let hc = r.u32().ok_or_else(|| bad("short"))?;
    if crc(&buf[..24]) != hc {
        return Err(bad("checksum mismatch"));
    }
    if !(JOURNAL_VERSION_MIN..=JOURNAL_VERSION).contains(&version) {
        return Err(Error::UnsupportedVersion {
            file: path.to_path_buf(),
            found: version,
            supported: JOURNAL_VERSION,
        });
    }
    if kb != kind.byte() || hid != id {
        return Err(bad("id or kind does not match file name"));
    }
    if version == JOURNAL_VERSION && kind != SegmentKind::Write {
        return Err(bad("a recycled segment (version 3) must be a write segment"));
    }
    Ok(version)
}

/// An open segment being appended to. Writes go straight to the OS (no
/// user-space buffer) so a positional read of any acknowledged record works.
#[derive(Debug)]
pub struct SegmentWriter {
    /// Segment id.
    pub id: u64,
    /// Path of the file.
    pub path: PathBuf,
    file: File,
    /// Bytes in the file so far (header included).
    pub len: u64,
    /// Writeback is started every this many appended bytes (0: never).
    writeback_bytes: u64,
    /// Writeback has been started for every byte before this offset.
    written_back: u64,
    /// Bytes reserved on disk at creation (`with_preallocation`).
    preallocated: u64,
    /// Written over a recycled file: appends go out in whole pages, and
    /// this holds the bytes of the last, partly filled page (from its
    /// start up to `len`). `None` for a new file, appended to in place.
    page_tail: Option<Vec<u8>>,
    /// The fault seam every append and sync goes through (tests only).
    faults: Option<Arc<dyn StorageFaults>>,
}

/// Asks the kernel to start writing `len` bytes of `file` from `offset` to
/// the disk, without waiting for it (`sync_file_range` with
/// `SYNC_FILE_RANGE_WRITE`). Advisory, and no durability promise: a failure
/// changes nothing but when the pages get written, so it is ignored.
#[allow(unsafe_code)]
fn start_writeback(file: &File, offset: u64, len: u64) {
    use std::os::unix::io::AsRawFd;
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: sync_file_range only reads its integer arguments; the
    // descriptor is valid for the duration of the call because `file` is
    // borrowed.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE);
    }
}

/// Reserves the disk blocks of `file`'s first `len` bytes without changing
/// its size (`fallocate` with `FALLOC_FL_KEEP_SIZE`), so that writing them
/// later allocates nothing. Advisory: on a filesystem without it, or a full
/// disk, blocks are allocated at writeback as before; returns whether the
/// reservation was made.
#[allow(unsafe_code)]
fn preallocate(file: &File, len: u64) -> bool {
    use std::os::unix::io::AsRawFd;
    let Ok(len) = i64::try_from(len) else {
        return false;
    };
    // SAFETY: fallocate only reads its integer arguments; the descriptor is
    // valid for the duration of the call because `file` is borrowed.
    unsafe { libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, 0, len) == 0 }
}

impl SegmentWriter {
    /// Creates a new segment file with its header (not yet fsynced).
    pub fn create(dir: &Path, id: u64, kind: SegmentKind) -> Result<Self> {
        let path = segment_path(dir, id, kind);
        let mut file = OpenOptions::new()
            .create_new(true)
            .write(true)
            .read(true)
            .open(&path)
            .map_err(|e| Error::io("create segment", &path, e))?;
        file.write_all(&header_bytes(id, kind, JOURNAL_VERSION_NEW_FILE))
            .map_err(|e| Error::io("write segment header", &path, e))?;
        Ok(SegmentWriter {
            id,
            path,
            file,
            len: SEGMENT_HEADER_BYTES,
            writeback_bytes: 0,
            written_back: 0,
            preallocated: 0,
            page_tail: None,
            faults: None,
        })
    }

    /// Makes the file at `from` (a deleted segment's, whose blocks are all
    /// written) write segment `id`: it is linked under its new name (never
    /// replacing a file), unlinked from `from`, and its first page is
    /// rewritten as a version 3 header followed by zeros. Overwriting
    /// written blocks changes no file metadata, so a group commit's
    /// fdatasync writes data and a cache flush, and no filesystem journal
    /// commit (a new file's appends change its size and extents: measured
    /// on this project's machine, 0.55–0.6× the fdatasyncs per second under
    /// a random-read load). The bytes after the records stay the old file's
    /// until overwritten; a scan tells them apart by their sequence numbers
    /// (see [`scan`]'s `first_seq`). Not fsynced: the roll syncs it.
    pub fn recycle(from: &Path, dir: &Path, id: u64) -> Result<Self> {
        let kind = SegmentKind::Write;
        let path = segment_path(dir, id, kind);
        std::fs::hard_link(from, &path).map_err(|e| Error::io("link recycled segment", &path, e))?;
        let opened = OpenOptions::new().write(true).read(true).open(&path);
        let _ = std::fs::remove_file(from);
        let file = opened.map_err(|e| Error::io("open recycled segment", &path, e))?;
        let mut w = SegmentWriter {
            id,
            path,
            file,
            len: 0,
            writeback_bytes: 0,
            written_back: 0,
            preallocated: 0,
            page_tail: Some(Vec::new()),
            faults: None,
        };
        if let Err(e) = w.append(&header_bytes(id, kind, JOURNAL_VERSION)) {
            let _ = std::fs::remove_file(&w.path);
            return Err(e);
        }
        Ok(w)
    }

    /// Sends every later append and sync through `faults` (none: straight
    /// to the file).
    pub fn with_faults(mut self, faults: Option<Arc<dyn StorageFaults>>) -> Self {
        self.faults = faults;
        self
    }

    /// Whether this segment was written over a recycled file.
    pub fn is_recycled(&self) -> bool {
        self.page_tail.is_some()
    }

    /// Starts the kernel's writeback of the appended bytes every `bytes`
    /// (0: never, the kernel's flusher decides). Unsynced appends otherwise
    /// stay dirty in the page cache for up to the flusher's expiry (30 s by
    /// default); under a memory limit (a cgroup) the reclaim that a reader's
    /// page-cache miss runs then waits for their writeback.
    pub fn with_writeback(mut self, bytes: u64) -> Self {
        self.writeback_bytes = bytes;
        self
    }

    /// Reserves the segment's first `bytes` on disk now (0: nothing), so
    /// appends never wait for block allocation: on ext4, allocation at
    /// writeback holds the inode's `i_data_sem` while it reads block bitmaps
    /// the memory limit evicted, and the next append (under the store's
    /// writer lock) waits for it behind every queued read.
    pub fn with_preallocation(mut self, bytes: u64) -> Self {
        if bytes > 0 && preallocate(&self.file, bytes) {
            self.preallocated = bytes;
        }
        self
    }

    /// Bytes reserved on disk at creation (0: none).
    #[cfg(test)]
    fn preallocated(&self) -> u64 {
        self.preallocated
    }

    /// Where writeback has been started up to (every byte before it).
    #[cfg(test)]
    fn written_back(&self) -> u64 {
        self.written_back
    }

    /// Appends encoded records; returns the offset they start at. A failed
    /// append cuts whatever part of it reached the file off again, so the
    /// next append starts at `len`; if even that fails, the error's op is
    /// `JOURNAL_REWIND_OP` and the segment must not be written again.
    pub fn append(&mut self, bytes: &[u8]) -> Result<u64> {
        let at = self.len;
        if let Some(f) = &self.faults {
            f.before_write(&self.path, bytes.len())
                .map_err(|e| Error::io("append journal", &self.path, e))?;
        }
        if let Some(tail) = self.page_tail.take() {
            return self.append_pages(tail, bytes);
        }
        if let Err(e) = self.file.write_all(bytes) {
            let rewound = self
                .file
                .set_len(at)
                .and_then(|()| self.file.seek(SeekFrom::Start(at)));
            if let Err(r) = rewound {
                return Err(Error::io(JOURNAL_REWIND_OP, &self.path, r));
            }
            return Err(Error::io("append journal", &self.path, e));
        }
        self.len += bytes.len() as u64;
        if self.writeback_bytes > 0 && self.len - self.written_back >= self.writeback_bytes {
            start_writeback(&self.file, self.written_back, self.len - self.written_back);
            self.written_back = self.len;
        }
        Ok(at)
    }

    /// `append` for a recycled file: writes from the start of the last
    /// partly filled page to the end of the page `bytes` end in, the rest
    /// of which is zeroed, so every page written is whole.
    fn append_pages(&mut self, mut tail: Vec<u8>, bytes: &[u8]) -> Result<u64> {
        let at = self.len;
        let start = at - tail.len() as u64;
        let end = at + bytes.len() as u64;
        let page_end = end.div_ceil(PAGE) * PAGE;
        let mut buf = std::mem::take(&mut tail);
        buf.extend_from_slice(bytes);
        buf.resize((page_end - start) as usize, 0);
        if let Err(e) = self.file.write_all_at(&buf, start) {
            // Bytes before `at` were rewritten with what they held; a short
            // write past it leaves a partial record a scan sees as torn, and
            // the next append overwrites it.
            buf.truncate((at - start) as usize);
            self.page_tail = Some(buf);
            return Err(Error::io("append journal", &self.path, e));
        }
        let last_page = (end / PAGE) * PAGE;
        buf.truncate((end - start) as usize);
        buf.drain(..(last_page - start) as usize);
        self.page_tail = Some(buf);
        self.len = end;
        if self.writeback_bytes > 0 && self.len - self.written_back >= self.writeback_bytes {
            start_writeback(&self.file, self.written_back, self.len - self.written_back);
            self.written_back = self.len;
        }
        Ok(at)
    }

    /// fdatasync of the file.
    pub fn sync(&self) -> Result<()> {
        faults::sync_data(self.faults.as_deref(), &self.path, &self.file)
            .map_err(|e| Error::io("fsync journal", &self.path, e))
    }

    /// A second handle on the file (for group-commit fsync outside the lock).
    pub fn try_clone_file(&self) -> Result<File> {
        self.file
            .try_clone()
            .map_err(|e| Error::io("dup journal handle", &self.path, e))
    }
}

/// Gives the kernel `advice` (a `POSIX_FADV_*`) on the whole of `file`.
/// Advisory only: a failure changes nothing but speed, so it is ignored.
#[allow(unsafe_code)]
pub(crate) fn advise(file: &File, advice: i32) {
    use std::os::unix::io::AsRawFd;
    // SAFETY: posix_fadvise only reads its integer arguments; the
    // descriptor is valid for the duration of the call because `file` is
    // borrowed.
    unsafe {
        libc::posix_fadvise(file.as_raw_fd(), 0, 0, advice);
    }
}

/// Drops the page cache's clean pages of the file at `path`
/// (`POSIX_FADV_DONTNEED`): for a segment moved into the recycling pool,
/// whose pages (journal compaction just read its live records through the
/// cache) would otherwise stay cached under a name nothing reads, taking
/// memory from values until reclaim finds them. Advisory: a file that
/// cannot be opened is left as it is.
pub fn forget_cached(path: &Path) {
    if let Ok(file) = File::open(path) {
        advise(&file, libc::POSIX_FADV_DONTNEED);
    }
}

/// Reads the bytes of one record at `offset` of length `len` through
/// `file`, with the length bounded by `RECORD_BYTES_MAX`. The caller decodes
/// (and so checks) them exactly once with [`record::decode`].
pub fn read_record(file: &File, path: &Path, offset: u64, len: u32) -> Result<Vec<u8>> {
    if (len as usize) < record::HEADER_BYTES || len as usize > record::RECORD_BYTES_MAX {
        return Err(Error::corrupt(path, offset, "record length out of range"));
    }
    pread_exact(file, path, offset, len as usize, "record extends past end of segment")
}

/// `len` bytes at `offset`; a short file is corruption (`past_end` says of
/// what), any other failure an I/O error.
fn pread_exact(
    file: &File,
    path: &Path,
    offset: u64,
    len: usize,
    past_end: &'static str,
) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, offset).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            Error::corrupt(path, offset, past_end)
        } else {
            Error::io("pread journal", path, e)
        }
    })?;
    Ok(buf)
}

/// Reads `len` bytes at `offset` of a segment: the value of a record, at
/// the place its ledger entry gives (see [`record::value_span`]). The
/// caller checks the bytes against the entry's hash.
pub fn read_span(file: &File, path: &Path, offset: u64, len: u64) -> Result<Vec<u8>> {
    if len > record::RECORD_BYTES_MAX as u64 {
        return Err(Error::corrupt(path, offset, "value length out of range"));
    }
    pread_exact(file, path, offset, len as usize, "value extends past end of segment")
}

/// Reads and checks the header of the segment at `path` (a store opening
/// checks every segment it does not scan, so a segment of a newer format
/// is refused by name before any read meets it).
pub fn read_header(path: &Path, id: u64, kind: SegmentKind) -> Result<()> {
    let file = File::open(path).map_err(|e| Error::io("open segment", path, e))?;
    let mut head = [0u8; SEGMENT_HEADER_BYTES as usize];
    let n = file
        .read_at(&mut head, 0)
        .map_err(|e| Error::io("read segment", path, e))?;
    if n < head.len() {
        return Err(Error::corrupt(path, 0, "segment shorter than its header"));
    }
    check_header(&head, path, id, kind).map(|_| ())
}

/// How a sequential scan of a segment ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanEnd {
    /// Every byte up to this offset (the file's length, or `limit`, when
    /// the scan started) was a valid record. A fenced store's old owner
    /// may have appended more since: those bytes were not scanned.
    Clean(u64),
    /// A torn tail starts at this offset (only reported when allowed).
    Torn(u64),
}

/// Sequentially scans every record in the first `limit` bytes of a segment
/// (`u64::MAX`: all of it), calling `f(offset, len, record)`.
/// With `allow_torn_tail`, a bad record with nothing valid after it ends the
/// scan as [`ScanEnd::Torn`]; otherwise any bad byte is a corruption error.
///
/// In a recycled segment (version 3) a record is also bad when its sequence
/// number is below `first_seq` (the first one the segment was opened for,
/// from the manifest) or not above the record before it: write segments
/// hold strictly increasing sequence numbers, and every record the file
/// held before was written earlier, with a lower one. With `first_seq`
/// unknown (`None`: a manifest rebuilt from the files, which knows no
/// sealed sizes either), a recycled segment's records end at its first bad
/// one that nothing of its own follows, as a torn tail does.
pub fn scan<F>(
    path: &Path,
    id: u64,
    kind: SegmentKind,
    allow_torn_tail: bool,
    limit: u64,
    first_seq: Option<u64>,
    mut f: F,
) -> Result<ScanEnd>
where
    F: FnMut(u64, u32, &Record<'_>) -> Result<()>,
{
    let file = File::open(path).map_err(|e| Error::io("open segment", path, e))?;
    // Bytes past `limit` (a sealed size) are never read: a fenced owner may
    // have appended them after a newer owner sealed the segment.
    let file_len = file
        .metadata()
        .map_err(|e| Error::io("stat segment", path, e))?
        .len()
        .min(limit);
    let mut rd = BufReader::with_capacity(1 << 20, &file);
    let mut head = [0u8; SEGMENT_HEADER_BYTES as usize];
    if file_len < SEGMENT_HEADER_BYTES {
        if allow_torn_tail {
            return Ok(ScanEnd::Torn(0));
        }
        return Err(Error::corrupt(path, 0, "segment shorter than its header"));
    }
    rd.read_exact(&mut head)
        .map_err(|e| Error::io("read segment", path, e))?;
    let recycled = check_header(&head, path, id, kind)? == JOURNAL_VERSION;
    let allow_torn_tail = allow_torn_tail || (recycled && first_seq.is_none());
    // Sequence numbers a record of a recycled segment must reach.
    let mut seq_min = first_seq.unwrap_or(0);
    let mut off = SEGMENT_HEADER_BYTES;
    let mut buf = Vec::new();
    while off < file_len {
        let min = recycled.then_some(seq_min);
        let bad = |why: &'static str, off: u64| -> Result<ScanEnd> {
            if allow_torn_tail && !valid_record_after(&file, off + 1, file_len, min)? {
                Ok(ScanEnd::Torn(off))
            } else {
                Err(Error::corrupt(path, off, why))
            }
        };
        if file_len - off < HEADER_BYTES as u64 {
            return bad("partial record header at end of segment", off);
        }
        buf.resize(HEADER_BYTES, 0);
        rd.read_exact(&mut buf)
            .map_err(|e| Error::io("read segment", path, e))?;
        let Some(total) = record::peek_len(&buf) else {
            return bad("implausible record length", off);
        };
        if off + total as u64 > file_len {
            return bad("record extends past end of segment", off);
        }
        buf.resize(total, 0);
        rd.read_exact(&mut buf[HEADER_BYTES..])
            .map_err(|e| Error::io("read segment", path, e))?;
        match record::decode(&buf) {
            Ok(rec) if recycled && rec.seq < seq_min => {
                return bad("record left from the recycled file's earlier use", off)
            }
            Ok(rec) => {
                seq_min = rec.seq.saturating_add(1);
                f(off, total as u32, &rec)?
            }
            Err(why) => return bad(why, off),
        }
        off += total as u64;
    }
    Ok(ScanEnd::Clean(off))
}

/// True if any offset in `from..len` starts a record that passes its
/// checksum (and, with `seq_min`, has a sequence number of at least it).
fn valid_record_after(file: &File, from: u64, len: u64, seq_min: Option<u64>) -> Result<bool> {
    if from >= len {
        return Ok(false);
    }
    let mut rest = vec![0u8; (len - from) as usize];
    file.read_exact_at(&mut rest, from)
        .map_err(|e| Error::io("read segment tail", PathBuf::from("<segment>"), e))?;
    for i in 0..rest.len() {
        let tail = &rest[i..];
        if !record::plausible_header(tail) {
            continue;
        }
        if let Some(total) = record::peek_len(tail) {
            if total <= tail.len() {
                if let Ok(rec) = record::decode(&tail[..total]) {
                    if seq_min.is_none_or(|m| rec.seq >= m) {
                        return Ok(true);
                    }
                }
            }
        }
    }
    Ok(false)
}

/// Cuts a torn tail off the segment at `offset` and fsyncs it.
pub fn truncate(path: &Path, offset: u64) -> Result<()> {
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| Error::io("open segment for truncate", path, e))?;
    f.set_len(offset)
        .map_err(|e| Error::io("truncate segment", path, e))?;
    f.sync_all()
        .map_err(|e| Error::io("fsync segment", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writeback_starts_every_writeback_bytes_and_never_when_off() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SegmentWriter::create(dir.path(), 1, SegmentKind::Write)
            .unwrap()
            .with_writeback(4096);
        w.append(&[1u8; 3000]).unwrap();
        assert_eq!(w.written_back(), 0, "fewer than 4096 bytes appended");
        w.append(&[2u8; 3000]).unwrap();
        assert_eq!(w.written_back(), w.len, "started for everything so far");
        let before = w.written_back();
        w.append(&[3u8; 100]).unwrap();
        assert_eq!(w.written_back(), before);

        let mut off = SegmentWriter::create(dir.path(), 2, SegmentKind::Write).unwrap();
        off.append(&[4u8; 100_000]).unwrap();
        assert_eq!(off.written_back(), 0, "0 turns it off");
    }

    fn put_record(seq: u64, value: &[u8]) -> Vec<u8> {
        let key = format!("k{seq}");
        let p = record::RecordParts {
            kind: record::KIND_PUT,
            flags: 0,
            key: key.as_bytes(),
            meta: &[],
            terms: &[],
            stored_value: value,
            value_len: value.len() as u32,
        };
        let mut buf = Vec::new();
        record::encode(&mut buf, &p, seq);
        buf
    }

    /// Every record of a scan: (offset, seq).
    fn records(
        path: &Path,
        torn: bool,
        limit: u64,
        first_seq: Option<u64>,
    ) -> (Vec<(u64, u64)>, ScanEnd) {
        let mut got = Vec::new();
        let end = scan(path, 2, SegmentKind::Write, torn, limit, first_seq, |off, _, r| {
            got.push((off, r.seq));
            Ok(())
        })
        .unwrap();
        (got, end)
    }

    #[test]
    fn a_recycled_file_is_written_in_whole_pages_and_its_old_records_end_every_scan() {
        let dir = tempfile::tempdir().unwrap();
        // An old segment full of valid records, seqs 1..=60.
        let mut old = SegmentWriter::create(dir.path(), 1, SegmentKind::Write).unwrap();
        for seq in 1..=60 {
            old.append(&put_record(seq, &[seq as u8; 3000])).unwrap();
        }
        let old_len = old.len;
        let from = dir.path().join("1.free");
        std::fs::rename(&old.path, &from).unwrap();
        drop(old);

        let mut w = SegmentWriter::recycle(&from, dir.path(), 2).unwrap();
        assert!(w.is_recycled());
        assert!(!from.exists(), "the pool name is gone");
        assert_eq!(w.len, SEGMENT_HEADER_BYTES);
        let bytes = std::fs::read(&w.path).unwrap();
        assert_eq!(bytes.len() as u64, old_len, "size unchanged");
        assert_eq!(&bytes[8..12], &JOURNAL_VERSION.to_le_bytes());
        assert!(bytes[SEGMENT_HEADER_BYTES as usize..PAGE as usize].iter().all(|&b| b == 0));

        // Empty: the zeroed first page and the old records after it are not
        // records of this segment.
        let (got, end) = records(&w.path, true, u64::MAX, Some(100));
        assert!(got.is_empty(), "{got:?}");
        assert_eq!(end, ScanEnd::Torn(SEGMENT_HEADER_BYTES));

        let mut offs = Vec::new();
        for seq in 100..110 {
            offs.push(w.append(&put_record(seq, &[7; 1500])).unwrap());
            // The rest of the last page written is zeros.
            let b = std::fs::read(&w.path).unwrap();
            let page_end = w.len.div_ceil(PAGE) * PAGE;
            assert!(b[w.len as usize..page_end as usize].iter().all(|&x| x == 0));
        }
        let want: Vec<(u64, u64)> = offs.iter().copied().zip(100..110).collect();
        // A crash now: the records written, then zeros, then old records.
        let (got, end) = records(&w.path, true, u64::MAX, Some(100));
        assert_eq!(got, want);
        assert_eq!(end, ScanEnd::Torn(w.len));
        // A sealed (or quiet) segment scanned to its length.
        let (got, end) = records(&w.path, false, w.len, Some(100));
        assert_eq!(got, want);
        assert_eq!(end, ScanEnd::Clean(w.len));
        // Past its length, without torn tails allowed: the zeros are named.
        let e = scan(&w.path, 2, SegmentKind::Write, false, u64::MAX, Some(100), |_, _, _| {
            Ok(())
        })
        .unwrap_err();
        assert!(matches!(e, Error::Corruption { .. }), "{e}");
        // Neither its size nor its first sequence number known (a rebuilt
        // manifest): its own records, then a torn tail.
        let (got, end) = records(&w.path, false, u64::MAX, None);
        assert_eq!(got, want);
        assert_eq!(end, ScanEnd::Torn(w.len));

        // An old record where the next record would start, on a page
        // boundary, is left over too, whether or not the manifest's first
        // sequence number is known (then: not above the record before).
        let mut w = w;
        let pad = (w.len.div_ceil(PAGE) * PAGE - w.len) as usize;
        let filler = put_record(110, &vec![9; pad.saturating_sub(40).max(1)]);
        w.append(&filler).unwrap();
        let at = w.len.div_ceil(PAGE) * PAGE;
        let f = OpenOptions::new().write(true).open(&w.path).unwrap();
        f.write_all_at(&put_record(5, &[1; 100]), at).unwrap();
        for first in [Some(100), None] {
            let (got, end) = records(&w.path, true, u64::MAX, first);
            assert_eq!(got.len(), 11, "first_seq {first:?}");
            assert_eq!(end, ScanEnd::Torn(w.len));
        }
        // A version 3 header on a compacted segment is refused.
        let mut b = std::fs::read(&w.path).unwrap();
        b[12] = SegmentKind::Compacted.byte();
        let c = crc(&b[..24]);
        b[24..28].copy_from_slice(&c.to_le_bytes());
        let e = check_header(&b, &w.path, 2, SegmentKind::Compacted).unwrap_err();
        assert!(e.to_string().contains("recycled"), "{e}");
    }

    #[test]
    fn preallocation_reserves_blocks_and_keeps_the_size() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let bytes = 4 << 20;
        let mut w = SegmentWriter::create(dir.path(), 1, SegmentKind::Write)
            .unwrap()
            .with_preallocation(bytes);
        // The machines this runs on (ext4, xfs, tmpfs) all support it.
        assert_eq!(w.preallocated(), bytes);
        let md = std::fs::metadata(&w.path).unwrap();
        assert_eq!(md.len(), SEGMENT_HEADER_BYTES, "size unchanged");
        assert!(md.blocks() * 512 >= bytes, "{} blocks", md.blocks());
        let at = w.append(&[7u8; 10_000]).unwrap();
        assert_eq!(std::fs::metadata(&w.path).unwrap().len(), w.len);
        let f = File::open(&w.path).unwrap();
        let mut back = vec![0u8; 10_000];
        f.read_exact_at(&mut back, at).unwrap();
        assert!(back.iter().all(|&b| b == 7));

        let none = SegmentWriter::create(dir.path(), 2, SegmentKind::Write)
            .unwrap()
            .with_preallocation(0);
        assert_eq!(none.preallocated(), 0);
        assert!(std::fs::metadata(&none.path).unwrap().blocks() * 512 < bytes);
    }
}
