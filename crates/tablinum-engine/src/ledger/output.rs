//! One output writer for everything that writes ledger tables from a merge:
//! flushes (one table) and compaction merges (tables rolled at a target
//! size).
//!
//! Owns the sequence "create a table, add sorted entries, roll at the
//! target, finish and sync each, sync the directory", and its clean-up: a
//! failed or abandoned output removes every table it created, so no
//! half-written table outlives the run. Knows nothing of manifests or the
//! store; the caller allocates file ids and installs the result.

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::ledger::entry::Entry;
use crate::ledger::sst::{sst_path, SstMeta, SstWriter};
use crate::manifest;

/// Table layout settings of an output.
#[derive(Debug, Clone, Copy)]
pub struct OutputShape {
    /// Uncompressed data block size, bytes.
    pub block_bytes: usize,
    /// Bloom filter bits per key.
    pub bloom_bits_per_key: u32,
    /// A table is finished once it reaches this size and a new one started
    /// (`u64::MAX`: never roll, one table).
    pub table_bytes_target: u64,
}

/// Writes sorted entries into one or more tables in `dir`.
pub struct TableOutput<F: FnMut() -> u64> {
    dir: PathBuf,
    shape: OutputShape,
    new_id: F,
    current: Option<SstWriter>,
    finished: Vec<SstMeta>,
}

impl<F: FnMut() -> u64> TableOutput<F> {
    /// An output in `dir`; `new_id` hands out the id of each table it starts.
    /// Nothing is created until the first entry.
    pub fn new(dir: &Path, shape: OutputShape, new_id: F) -> Self {
        TableOutput {
            dir: dir.to_path_buf(),
            shape,
            new_id,
            current: None,
            finished: Vec::new(),
        }
    }

    /// Adds an entry; keys must be strictly increasing across the output.
    /// On error the caller must [`abandon`](Self::abandon) the output.
    pub fn add(&mut self, key: &[u8], entry: &Entry) -> Result<()> {
        if self.current.is_none() {
            let id = (self.new_id)();
            self.current = Some(SstWriter::create(
                &self.dir,
                id,
                self.shape.block_bytes,
                self.shape.bloom_bits_per_key,
            )?);
        }
        if let Some(w) = self.current.as_mut() {
            w.add(key, entry)?;
            if w.size() >= self.shape.table_bytes_target {
                if let Some(w) = self.current.take() {
                    self.finished.push(w.finish()?);
                }
            }
        }
        Ok(())
    }

    /// Finishes the last table and syncs the directory: every table returned
    /// is complete and durable. Empty when no entry was added. On error
    /// every table of the output is removed.
    pub fn finish(mut self) -> Result<Vec<SstMeta>> {
        let r = (|| {
            if let Some(w) = self.current.take() {
                self.finished.push(w.finish()?);
            }
            if !self.finished.is_empty() {
                manifest::sync_dir(&self.dir)?;
            }
            Ok(())
        })();
        match r {
            Ok(()) => Ok(std::mem::take(&mut self.finished)),
            Err(e) => {
                self.abandon();
                Err(e)
            }
        }
    }

    /// Removes every table this output created.
    pub fn abandon(mut self) {
        if let Some(w) = self.current.take() {
            w.abandon();
        }
        for m in self.finished.drain(..) {
            let _ = std::fs::remove_file(sst_path(&self.dir, m.id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::entry::{EntryKind, Loc};

    fn entry(seq: u64) -> Entry {
        Entry {
            seq,
            kind: EntryKind::Object,
            value_len: 10,
            value_hash: seq,
            loc: Loc {
                segment: 1,
                offset: seq * 10,
                len: 10,
            },
            meta: Vec::new(),
            terms: Vec::new(),
            inline: None,
        }
    }

    fn tables(dir: &Path) -> usize {
        std::fs::read_dir(dir).unwrap().count()
    }

    #[test]
    fn rolls_at_the_target_and_abandon_removes_everything() {
        let dir = tempfile::tempdir().unwrap();
        let shape = OutputShape {
            block_bytes: 512,
            bloom_bits_per_key: 10,
            table_bytes_target: 4 << 10,
        };
        let mut next = 0;
        let mut out = TableOutput::new(dir.path(), shape, || {
            next += 1;
            next
        });
        for i in 0..2_000u64 {
            out.add(format!("\0key{i:06}").as_bytes(), &entry(i))
                .unwrap();
        }
        let metas = out.finish().unwrap();
        assert!(metas.len() > 3, "{} tables", metas.len());
        assert_eq!(metas.iter().map(|m| m.entries).sum::<u64>(), 2_000);
        assert!(metas.windows(2).all(|w| w[0].last_key < w[1].first_key));
        assert_eq!(tables(dir.path()), metas.len());

        let other = tempfile::tempdir().unwrap();
        let mut next = 100;
        let mut out = TableOutput::new(other.path(), shape, || {
            next += 1;
            next
        });
        for i in 0..2_000u64 {
            out.add(format!("\0key{i:06}").as_bytes(), &entry(i))
                .unwrap();
        }
        out.abandon();
        assert_eq!(tables(other.path()), 0);
    }

    #[test]
    fn nothing_added_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let shape = OutputShape {
            block_bytes: 512,
            bloom_bits_per_key: 10,
            table_bytes_target: u64::MAX,
        };
        let out = TableOutput::new(dir.path(), shape, || 1);
        assert!(out.finish().unwrap().is_empty());
        assert_eq!(tables(dir.path()), 0);
    }
}
