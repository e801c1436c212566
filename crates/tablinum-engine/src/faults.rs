//! Disk faults: which I/O errors a store may retry and which poison it, and
//! the narrow seam through which tests make a store's journal fail.
//!
//! Owns [`classify`], the one pure rule that splits an operating-system
//! error into "retry with backoff, the store resumes by itself" and "stop
//! trusting memory, recover from what is durable", and the
//! [`StorageFaults`] seam: every journal append and every journal fdatasync
//! of a writable store goes through it when [`crate::Options::faults`] is
//! set. [`FaultSwitch`] is the ready-made implementation tests (and a
//! tablet server started with fault injection allowed) drive.
//!
//! The fsyncgate rule (PostgreSQL, 2018): after a failed fsync the kernel
//! may have dropped the dirty pages and reports the error once; a later
//! fsync succeeds without writing them. So a failed journal fsync is never
//! retried: it poisons the store, and what is served afterwards comes only
//! from durable state (journal replay up to the last good sync).
//!
//! Never decides anything itself at run time beyond what a test armed: with
//! [`crate::Options::faults`] unset (the default) the seam is one branch.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

/// For process-level fault tests only (`tablinum jepsen`): set to a file's
/// path in a tablet server's environment, it sends the journal I/O of every
/// tablet the server opens through a [`FaultSwitch`] armed by that file's
/// one line (see [`FaultSwitch::apply_command`]), read every
/// [`DISK_FAULTS_POLL_MS`]. Unset (always, outside such tests): no seam.
pub const DISK_FAULTS_ENV: &str = "TABLINUM_DISK_FAULTS";
/// How often a tablet server reads its [`DISK_FAULTS_ENV`] file, ms.
pub const DISK_FAULTS_POLL_MS: u64 = 20;

/// What a failed I/O call was doing, as far as the fault rule cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoKind {
    /// fdatasync/fsync of a journal segment: the page cache state after a
    /// failure is unknown.
    JournalSync,
    /// A journal append that was cut off the segment again (the segment
    /// ends where it did before).
    JournalAppend,
    /// Cutting a failed append off the segment failed: the segment's end is
    /// unknown.
    JournalRewind,
    /// Work redone from scratch on failure: a new table, a new manifest
    /// copy, a new segment not yet named anywhere, a read.
    Redoable,
}

/// What to do about a failed I/O call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Nothing durable was touched and the condition may pass by itself:
    /// fail this call cleanly ("not applied"), retry background work with
    /// backoff, resume without a reopen.
    Retry(Condition),
    /// Memory may no longer match the disk: stop serving, cut the journal
    /// back to its last good sync, reopen from durable state.
    Poison,
}

/// Why a retryable call failed (what a server reports, and how the edge
/// answers the caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// No space or quota left (ENOSPC, EDQUOT): RESOURCE_EXHAUSTED.
    DiskFull,
    /// Too many open files, no memory, try again, interrupted.
    Busy,
    /// A generic I/O error on work that is redone from scratch.
    Io,
}

/// The fault rule: a pure function of what the call was doing and the
/// error it got. A journal fsync failure always poisons (fsyncgate), and
/// so does a failed rewind; ENOSPC, EDQUOT, EMFILE, ENFILE, ENOMEM, EAGAIN
/// and EINTR are retryable on paths that leave durable state as it was (an
/// append that was cut off again, redoable work), and so is EIO there: the
/// call failed whole. Anything else poisons.
pub fn classify(kind: IoKind, err: &io::Error) -> Fault {
    match kind {
        IoKind::JournalSync | IoKind::JournalRewind => return Fault::Poison,
        IoKind::JournalAppend | IoKind::Redoable => {}
    }
    match err.raw_os_error() {
        Some(libc::ENOSPC | libc::EDQUOT) => Fault::Retry(Condition::DiskFull),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::EAGAIN | libc::EINTR) => {
            Fault::Retry(Condition::Busy)
        }
        Some(libc::EIO) => Fault::Retry(Condition::Io),
        _ if matches!(
            err.kind(),
            io::ErrorKind::OutOfMemory | io::ErrorKind::Interrupted
        ) =>
        {
            Fault::Retry(Condition::Busy)
        }
        _ => Fault::Poison,
    }
}

/// The seam every journal append and fdatasync of a writable store goes
/// through when [`crate::Options::faults`] is set: a test's stand-in for a
/// failing, full or slow disk.
pub trait StorageFaults: Send + Sync + std::fmt::Debug {
    /// Called before `len` bytes are appended to journal file `path`; an
    /// error is returned as the append's own.
    fn before_write(&self, path: &Path, len: usize) -> io::Result<()>;
    /// Makes the data of `file` (journal file `path`) durable: the real
    /// `sync_data`, or a failure instead.
    fn sync(&self, path: &Path, file: &File) -> io::Result<()>;
}

/// Journal fdatasync through the seam when there is one.
pub(crate) fn sync_data(
    faults: Option<&dyn StorageFaults>,
    path: &Path,
    file: &File,
) -> io::Result<()> {
    match faults {
        Some(f) => f.sync(path, file),
        None => file.sync_data(),
    }
}

/// A [`StorageFaults`] armed by flipping switches, from any thread.
///
/// - `fail_syncs(n)`: the next `n` journal syncs fail with EIO
///   ([`FaultSwitch::FOREVER`]: until `heal`). With `lose_unsynced`, a
///   failing sync also cuts the file back to its size at its last good
///   sync, as a device that dropped the written-back pages would (append
///   -only files; a recycled segment is not cut).
/// - `disk_full(true)`: appends fail with ENOSPC before writing anything.
/// - `delay_ms(d)`: every append and sync first sleeps `d` ms (a slow disk).
#[derive(Debug, Default)]
pub struct FaultSwitch {
    fail_syncs: AtomicU32,
    lose_unsynced: AtomicBool,
    disk_full: AtomicBool,
    delay_ms: AtomicU64,
    /// Syncs that failed because of this switch.
    failed_syncs: AtomicU64,
    /// Appends refused with ENOSPC.
    refused_writes: AtomicU64,
    /// Each journal file's size at its last good sync.
    synced_len: Mutex<HashMap<PathBuf, u64>>,
}

impl FaultSwitch {
    /// `fail_syncs` count meaning "until healed".
    pub const FOREVER: u32 = u32::MAX;

    /// A switch with nothing armed.
    pub fn new() -> FaultSwitch {
        FaultSwitch::default()
    }

    /// The next `n` journal syncs fail with EIO; with `lose_unsynced` they
    /// also drop what was appended since the file's last good sync.
    pub fn fail_syncs(&self, n: u32, lose_unsynced: bool) {
        self.lose_unsynced.store(lose_unsynced, Ordering::SeqCst);
        self.fail_syncs.store(n, Ordering::SeqCst);
    }

    /// Appends fail with ENOSPC while `on`.
    pub fn disk_full(&self, on: bool) {
        self.disk_full.store(on, Ordering::SeqCst);
    }

    /// Every append and sync first sleeps `ms` milliseconds (0: none).
    pub fn delay_ms(&self, ms: u64) {
        self.delay_ms.store(ms, Ordering::SeqCst);
    }

    /// Disarms everything.
    pub fn heal(&self) {
        self.fail_syncs.store(0, Ordering::SeqCst);
        self.disk_full.store(false, Ordering::SeqCst);
        self.delay_ms.store(0, Ordering::SeqCst);
    }

    /// Arms the switch from one line of text, as a fault-control file
    /// holds it (a process-level test writes the file, a server polls it):
    /// `heal`, `fsync-fail` (every sync until healed), `fsync-fail-once`,
    /// either with ` lose` (drop the unsynced bytes too), `disk-full`, or
    /// `slow MS`. An empty line heals. Anything else is refused by name.
    pub fn apply_command(&self, line: &str) -> Result<(), String> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let lose = |rest: &[&str]| match rest {
            [] => Ok(false),
            ["lose"] => Ok(true),
            _ => Err(format!(
                "fault command {line:?}: expected nothing or `lose` after the verb"
            )),
        };
        match words.as_slice() {
            [] | ["heal"] => self.heal(),
            ["fsync-fail", rest @ ..] => {
                self.heal();
                self.fail_syncs(FaultSwitch::FOREVER, lose(rest)?);
            }
            ["fsync-fail-once", rest @ ..] => {
                self.heal();
                self.fail_syncs(1, lose(rest)?);
            }
            ["disk-full"] => {
                self.heal();
                self.disk_full(true);
            }
            ["slow", ms] => {
                let ms: u64 = ms
                    .parse()
                    .map_err(|_| format!("fault command {line:?}: `slow` takes milliseconds"))?;
                self.heal();
                self.delay_ms(ms);
            }
            _ => {
                return Err(format!(
                    "fault command {line:?}: expected heal, fsync-fail [lose], \
                     fsync-fail-once [lose], disk-full or slow MS"
                ))
            }
        }
        Ok(())
    }

    /// Syncs failed by this switch so far.
    pub fn failed_syncs(&self) -> u64 {
        self.failed_syncs.load(Ordering::SeqCst)
    }

    /// Appends refused with ENOSPC so far.
    pub fn refused_writes(&self) -> u64 {
        self.refused_writes.load(Ordering::SeqCst)
    }

    fn delay(&self) {
        let ms = self.delay_ms.load(Ordering::SeqCst);
        if ms > 0 {
            std::thread::sleep(Duration::from_millis(ms));
        }
    }

    /// Takes one armed sync failure, if any.
    fn take_sync_failure(&self) -> bool {
        self.fail_syncs
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| match n {
                0 => None,
                FaultSwitch::FOREVER => Some(n),
                n => Some(n - 1),
            })
            .is_ok()
    }
}

impl StorageFaults for FaultSwitch {
    fn before_write(&self, _path: &Path, _len: usize) -> io::Result<()> {
        self.delay();
        if self.disk_full.load(Ordering::SeqCst) {
            self.refused_writes.fetch_add(1, Ordering::SeqCst);
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        Ok(())
    }

    fn sync(&self, path: &Path, file: &File) -> io::Result<()> {
        self.delay();
        if self.take_sync_failure() {
            self.failed_syncs.fetch_add(1, Ordering::SeqCst);
            if self.lose_unsynced.load(Ordering::SeqCst) {
                if let Some(&len) = self.synced_len.lock().get(path) {
                    if file.metadata().map(|m| m.len() > len).unwrap_or(false) {
                        let _ = file.set_len(len);
                    }
                }
            }
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        file.sync_data()?;
        let len = file.metadata()?.len();
        self.synced_len.lock().insert(path.to_path_buf(), len);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(code: i32) -> io::Error {
        io::Error::from_raw_os_error(code)
    }

    #[test]
    fn a_failed_journal_sync_always_poisons() {
        for code in [libc::EIO, libc::ENOSPC, libc::EAGAIN, libc::EROFS] {
            assert_eq!(classify(IoKind::JournalSync, &os(code)), Fault::Poison);
            assert_eq!(classify(IoKind::JournalRewind, &os(code)), Fault::Poison);
        }
    }

    #[test]
    fn a_full_disk_is_retryable_where_nothing_durable_was_touched() {
        for kind in [IoKind::JournalAppend, IoKind::Redoable] {
            assert_eq!(
                classify(kind, &os(libc::ENOSPC)),
                Fault::Retry(Condition::DiskFull)
            );
            assert_eq!(
                classify(kind, &os(libc::EDQUOT)),
                Fault::Retry(Condition::DiskFull)
            );
            for code in [libc::EMFILE, libc::ENFILE, libc::ENOMEM, libc::EAGAIN] {
                assert_eq!(classify(kind, &os(code)), Fault::Retry(Condition::Busy));
            }
        }
    }

    #[test]
    fn eio_is_retryable_only_where_the_call_failed_whole() {
        for kind in [IoKind::JournalAppend, IoKind::Redoable] {
            assert_eq!(classify(kind, &os(libc::EIO)), Fault::Retry(Condition::Io));
            assert_eq!(classify(kind, &os(libc::EROFS)), Fault::Poison);
        }
    }

    #[test]
    fn commands_arm_and_heal_the_switch_and_bad_ones_are_refused_by_name() {
        let s = FaultSwitch::new();
        s.apply_command("disk-full").unwrap();
        assert!(s.before_write(Path::new("j"), 1).is_err());
        s.apply_command("slow 5").unwrap();
        assert!(
            s.before_write(Path::new("j"), 1).is_ok(),
            "slow heals disk-full"
        );
        assert_eq!(s.delay_ms.load(Ordering::SeqCst), 5);
        s.apply_command("fsync-fail lose").unwrap();
        assert_eq!(s.fail_syncs.load(Ordering::SeqCst), FaultSwitch::FOREVER);
        assert!(s.lose_unsynced.load(Ordering::SeqCst));
        s.apply_command("fsync-fail-once").unwrap();
        assert_eq!(s.fail_syncs.load(Ordering::SeqCst), 1);
        assert!(!s.lose_unsynced.load(Ordering::SeqCst));
        s.apply_command("").unwrap();
        assert_eq!(s.fail_syncs.load(Ordering::SeqCst), 0);
        for bad in [
            "explode",
            "slow",
            "slow fast",
            "fsync-fail maybe",
            "disk-full now",
        ] {
            let e = s.apply_command(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn the_switch_fails_the_armed_number_of_syncs_and_can_lose_unsynced_bytes() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let mut f = File::options()
            .create(true)
            .append(true)
            .read(true)
            .open(&path)
            .unwrap();
        let s = FaultSwitch::new();
        f.write_all(b"durable").unwrap();
        s.sync(&path, &f).unwrap();
        f.write_all(b"-lost").unwrap();
        s.fail_syncs(1, true);
        assert_eq!(
            s.sync(&path, &f).unwrap_err().raw_os_error(),
            Some(libc::EIO)
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"durable");
        assert_eq!(s.failed_syncs(), 1);
        // Armed once: the next sync goes through.
        s.sync(&path, &f).unwrap();
        s.disk_full(true);
        assert_eq!(
            s.before_write(&path, 1).unwrap_err().raw_os_error(),
            Some(libc::ENOSPC)
        );
        s.heal();
        s.before_write(&path, 1).unwrap();
        assert_eq!(s.refused_writes(), 1);
    }
}
