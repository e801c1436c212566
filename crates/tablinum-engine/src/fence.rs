//! Epoch fencing of a store that several processes may open over time
//! (a tablet moving between servers on a shared directory), without locks.
//!
//! Owns the `fence/` directory of a store: one empty marker file per epoch
//! that claimed the store (`fence/<epoch>`, created exclusively). The owner
//! of the highest epoch is the only one whose writes count:
//!
//! - [`Fence::claim`] creates this epoch's marker, then lists the
//!   directory: a higher marker means a newer owner exists (fenced).
//! - [`Fence::check`] lists the directory again. The store calls it after
//!   appending a write (before acknowledging it) and after every manifest
//!   switch (before deleting any file the switch dropped). A newer owner
//!   creates its marker *before* it reads the manifest and the journal, so
//!   whatever an old owner did before a check that passed is seen by the
//!   new owner, and nothing after a failed check is acknowledged or
//!   deleted.
//!
//! Needs only create-exclusive and list with read-after-write consistency
//! (a local file system; the same rule maps to conditional PUT and LIST on
//! an object store). Never deletes a marker of an epoch at or above its
//! own; never blocks.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::error::{Error, Result};

/// Directory of the epoch markers, inside the store directory.
pub const FENCE_DIR: &str = "fence";
/// Largest epoch: file ids of an epoch start at `epoch << EPOCH_ID_SHIFT`
/// and must stay below the sequence-number limit (2^62).
pub const EPOCH_MAX: u64 = (1 << 29) - 1;
/// File ids of epoch `e` are `e << EPOCH_ID_SHIFT` and up, so owners of
/// different epochs never create the same file name, and ids (hence
/// journal replay order) grow with the epoch.
pub const EPOCH_ID_SHIFT: u32 = 32;

/// The (store directory, epoch) pairs this process holds open. Markers
/// fence other epochs, not a second open of the same epoch: without this,
/// two handles of one owner could append to the same segment.
/// Each entry maps to the claim that holds it, so releasing a closed
/// claim never releases a later one of the same epoch.
static OPEN: Mutex<Option<HashMap<(PathBuf, u64), u64>>> = Mutex::new(None);
/// Numbers the claims of this process.
static CLAIMS: AtomicU64 = AtomicU64::new(0);

/// The epoch marker directory of a store and this owner's epoch.
#[derive(Debug)]
pub struct Fence {
    dir: PathBuf,
    store: PathBuf,
    epoch: u64,
    fenced: AtomicBool,
    /// This claim's entry in [`OPEN`] and its number, released by
    /// [`Fence::release`] or on drop.
    held: ((PathBuf, u64), u64),
}

impl Drop for Fence {
    fn drop(&mut self) {
        self.release();
    }
}

impl Fence {
    /// Claims `store` for `epoch`: creates `fence/<epoch>` (a marker that
    /// exists already is ours from an earlier open of the same epoch) and
    /// fails with [`Error::Fenced`] when a higher epoch has claimed it, and
    /// with [`Error::Locked`] when this process holds the same epoch open
    /// already. Removes markers of lower epochs.
    pub fn claim(store: &Path, epoch: u64) -> Result<Fence> {
        if epoch == 0 || epoch > EPOCH_MAX {
            return Err(Error::invalid(
                "options.epoch",
                format!("{epoch} is outside 1..={EPOCH_MAX}"),
            ));
        }
        let dir = store.join(FENCE_DIR);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io("create fence directory", &dir, e))?;
        let key = (
            std::fs::canonicalize(store).unwrap_or_else(|_| store.to_path_buf()),
            epoch,
        );
        let claim = CLAIMS.fetch_add(1, Ordering::Relaxed);
        {
            let mut open = OPEN
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let open = open.get_or_insert_with(HashMap::new);
            if open.contains_key(&key) {
                return Err(Error::Locked(store.to_path_buf()));
            }
            open.insert(key.clone(), claim);
        }
        let held = (key, claim);
        // From here on, dropping `f` (on any error) releases the entry.
        let f = Fence {
            dir,
            store: store.to_path_buf(),
            epoch,
            fenced: AtomicBool::new(false),
            held,
        };
        let dir = &f.dir;
        let marker = dir.join(epoch.to_string());
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&marker)
        {
            Ok(m) => m
                .sync_all()
                .map_err(|e| Error::io("fsync fence marker", &marker, e))?,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io("create fence marker", &marker, e)),
        }
        crate::manifest::sync_dir(dir)?;
        f.check()?;
        for e in f.epochs()? {
            if e < epoch {
                let _ = std::fs::remove_file(f.dir.join(e.to_string()));
            }
        }
        Ok(f)
    }

    /// Lets this process open the store again under the same epoch (the
    /// store closed). Idempotent.
    pub fn release(&self) {
        let mut open = OPEN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(m) = open.as_mut() {
            if m.get(&self.held.0) == Some(&self.held.1) {
                m.remove(&self.held.0);
            }
        }
    }

    /// This owner's epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether a check has failed (the store must stop).
    pub fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::Acquire)
    }

    fn epochs(&self) -> Result<Vec<u64>> {
        let mut v = Vec::new();
        for ent in
            std::fs::read_dir(&self.dir).map_err(|e| Error::io("list fence", &self.dir, e))?
        {
            let ent = ent.map_err(|e| Error::io("list fence", &self.dir, e))?;
            if let Some(n) = ent.file_name().to_str().and_then(|s| s.parse::<u64>().ok()) {
                v.push(n);
            }
        }
        Ok(v)
    }

    /// `Err(Fenced)` once any owner of a higher epoch has claimed the
    /// store; stays fenced after that.
    pub fn check(&self) -> Result<()> {
        if !self.is_fenced() {
            match self.epochs()?.into_iter().max() {
                Some(max) if max > self.epoch => {
                    self.fenced.store(true, Ordering::Release);
                    return Err(self.error(max));
                }
                _ => return Ok(()),
            }
        }
        let found = self
            .epochs()
            .ok()
            .and_then(|v| v.into_iter().max())
            .unwrap_or(self.epoch + 1);
        Err(self.error(found))
    }

    fn error(&self, found: u64) -> Error {
        Error::Fenced {
            dir: self.store.clone(),
            epoch: self.epoch,
            found,
            outcome_unknown: false,
        }
    }

    /// The first file id this epoch hands out.
    pub fn first_file_id(&self) -> u64 {
        self.epoch << EPOCH_ID_SHIFT
    }

    /// Whether file `id` was created by an owner of a higher epoch (such
    /// files are never touched).
    pub fn is_newer(&self, id: u64) -> bool {
        id >> EPOCH_ID_SHIFT > self.epoch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_higher_epoch_fences_a_lower_one() {
        let d = tempfile::tempdir().unwrap();
        let a = Fence::claim(d.path(), 5).unwrap();
        assert!(a.check().is_ok());
        let b = Fence::claim(d.path(), 6).unwrap();
        assert!(b.check().is_ok());
        assert!(matches!(
            a.check(),
            Err(Error::Fenced {
                epoch: 5,
                found: 6,
                ..
            })
        ));
        assert!(a.is_fenced());
        drop(a);
        // A stale owner cannot claim again.
        assert!(matches!(
            Fence::claim(d.path(), 5),
            Err(Error::Fenced { found: 6, .. })
        ));
        // The same epoch is not open twice in one process; once the first
        // claim is gone it reopens, and lower markers are gone.
        assert!(matches!(Fence::claim(d.path(), 6), Err(Error::Locked(_))));
        let first_id = b.first_file_id();
        let newer = b.is_newer(7 << 32) && !b.is_newer((6 << 32) + 5);
        drop(b);
        let b2 = Fence::claim(d.path(), 6).unwrap();
        assert!(b2.check().is_ok());
        assert!(!d.path().join(FENCE_DIR).join("5").exists());
        assert!(Fence::claim(d.path(), 0).is_err());
        assert!(Fence::claim(d.path(), EPOCH_MAX + 1).is_err());
        assert_eq!(first_id, 6 << 32);
        assert!(newer);
    }
}
