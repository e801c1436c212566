//! File reservations: how a reader that does not own a store (a scan
//! server's read-only view) keeps the files it reads from being deleted
//! under it, and how the owner honours that.
//!
//! A reader writes `DIR/reservations/<holder>.res` (atomically: a temporary
//! file renamed into place) naming the files it will read and when the
//! reservation expires, *then* re-reads the manifest and checks every
//! reserved file is still named there (else it reserves the new set and
//! checks again). The owner deletes a file only after a manifest without
//! it is on disk, and only if no unexpired reservation names it at the
//! moment of deletion (it reads the reservations afresh each time; a file
//! still reserved is deferred and retried). So a file a reader validated
//! is never deleted before its reservation expires or is removed:
//! whichever manifest the reader's check saw still named the file, so the
//! owner's later manifest switch, and the deletion after it, come after
//! the reservation was written.
//!
//! Reservations of a reader that died expire by themselves (lease at most
//! `RESERVATION_LEASE_MS_MAX`). A reservation that cannot be read or
//! parsed protects every file of the store until `RESERVATION_LEASE_MS_MAX`
//! after its modification time: damage must never let a file be deleted
//! under a reader. This module never deletes a store file itself.

use std::collections::HashSet;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::manifest;

/// Directory of a store holding its reservations.
pub const RESERVATIONS_DIR: &str = "reservations";
/// Longest lease of one reservation, ms (10 minutes).
pub const RESERVATION_LEASE_MS_MAX: u64 = 600_000;
/// Largest reservation file, bytes.
pub const RESERVATION_BYTES_MAX: u64 = 4 << 20;
/// Longest holder name, bytes.
pub const HOLDER_BYTES_MAX: usize = 128;
/// First line of a reservation file.
const MAGIC_LINE: &str = "tablinum-reservation 1";

/// Milliseconds since the Unix epoch now.
pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Checks a holder name: 1..=128 bytes of `[A-Za-z0-9._-]`, so it is a
/// safe file name.
pub fn check_holder(holder: &str) -> Result<()> {
    let ok = !holder.is_empty()
        && holder.len() <= HOLDER_BYTES_MAX
        && holder
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        && !holder.starts_with('.');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "reservation holder",
            format!(
                "{holder:?} must be 1..={HOLDER_BYTES_MAX} bytes of [A-Za-z0-9._-], not starting with '.'"
            ),
        ))
    }
}

fn path_of(dir: &Path, holder: &str) -> PathBuf {
    dir.join(RESERVATIONS_DIR).join(format!("{holder}.res"))
}

/// Writes (or renews) `holder`'s reservation of `files` (names relative to
/// the store directory) for `lease`.
pub fn write(dir: &Path, holder: &str, files: &[String], lease: Duration) -> Result<()> {
    check_holder(holder)?;
    let lease_ms = lease.as_millis() as u64;
    if lease_ms == 0 || lease_ms > RESERVATION_LEASE_MS_MAX {
        return Err(Error::invalid(
            "reservation lease",
            format!("{lease_ms} ms is outside 1..={RESERVATION_LEASE_MS_MAX} ms"),
        ));
    }
    let mut text = format!(
        "{MAGIC_LINE}\nexpires_ms {}\n",
        now_ms().saturating_add(lease_ms)
    );
    for f in files {
        if f.is_empty() || f.contains('\n') {
            return Err(Error::invalid("reserved file", format!("bad name {f:?}")));
        }
        text.push_str("file ");
        text.push_str(f);
        text.push('\n');
    }
    if text.len() as u64 > RESERVATION_BYTES_MAX {
        return Err(Error::invalid(
            "reservation",
            format!(
                "{} files need more than RESERVATION_BYTES_MAX = {RESERVATION_BYTES_MAX} bytes",
                files.len()
            ),
        ));
    }
    let rdir = dir.join(RESERVATIONS_DIR);
    fs::create_dir_all(&rdir).map_err(|e| Error::io("create reservations directory", &rdir, e))?;
    let path = path_of(dir, holder);
    let tmp = rdir.join(format!(".{holder}.tmp"));
    let mut f = fs::File::create(&tmp).map_err(|e| Error::io("create reservation", &tmp, e))?;
    f.write_all(text.as_bytes())
        .map_err(|e| Error::io("write reservation", &tmp, e))?;
    // Readers and owners share one machine's page cache (or a shared file
    // system's coherence); a crash loses at most a reservation whose holder
    // died with it. No fsync needed for safety against the owner.
    drop(f);
    fs::rename(&tmp, &path).map_err(|e| Error::io("publish reservation", &path, e))?;
    Ok(())
}

/// Removes `holder`'s reservation (absent: nothing to do).
pub fn remove(dir: &Path, holder: &str) -> Result<()> {
    check_holder(holder)?;
    let path = path_of(dir, holder);
    match fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove reservation", &path, e)),
    }
}

/// What the reservations of a store protect now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reserved {
    /// These files (names relative to the store directory).
    Files(HashSet<String>),
    /// Every file: a reservation could not be read.
    Everything,
}

impl Reserved {
    /// True when `name` (relative to the store directory) may not be deleted.
    pub fn contains(&self, name: &str) -> bool {
        match self {
            Reserved::Files(f) => f.contains(name),
            Reserved::Everything => true,
        }
    }
}

/// A parsed reservation: expiry (Unix ms) and files. `None` for anything
/// malformed (hostile bytes are never trusted).
fn parse(text: &str) -> Option<(u64, Vec<&str>)> {
    let mut lines = text.lines();
    if lines.next()? != MAGIC_LINE {
        return None;
    }
    let expires = lines.next()?.strip_prefix("expires_ms ")?.parse().ok()?;
    let mut files = Vec::new();
    for l in lines {
        let f = l.strip_prefix("file ")?;
        if f.is_empty() {
            return None;
        }
        files.push(f);
    }
    Some((expires, files))
}

/// The files `dir`'s unexpired reservations protect at `now_ms`.
pub fn reserved(dir: &Path, now_ms: u64) -> Result<Reserved> {
    let rdir = dir.join(RESERVATIONS_DIR);
    let rd = match fs::read_dir(&rdir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Reserved::Files(HashSet::new()))
        }
        Err(e) => return Err(Error::io("list reservations", &rdir, e)),
    };
    let mut out = HashSet::new();
    for ent in rd {
        let ent = ent.map_err(|e| Error::io("list reservations", &rdir, e))?;
        let path = ent.path();
        if path.extension().is_none_or(|x| x != "res") {
            continue;
        }
        let damaged_until = || {
            let mtime = fs::metadata(&path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(u64::MAX, |d| d.as_millis() as u64);
            mtime.saturating_add(RESERVATION_LEASE_MS_MAX)
        };
        let text = match fs::metadata(&path) {
            Ok(m) if m.len() <= RESERVATION_BYTES_MAX => fs::read(&path).ok(),
            Ok(_) => None,
            // Removed by its holder since the listing.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(_) => None,
        };
        match text
            .as_deref()
            .map(String::from_utf8_lossy)
            .as_deref()
            .and_then(parse)
        {
            Some((expires, files)) => {
                if expires > now_ms {
                    out.extend(files.into_iter().map(str::to_string));
                }
            }
            None => {
                if damaged_until() > now_ms {
                    return Ok(Reserved::Everything);
                }
            }
        }
    }
    Ok(Reserved::Files(out))
}

/// Whether a reader still reserves any file of the store in `dir` now (an
/// unexpired reservation naming a file, or a damaged one; a reservations
/// directory that cannot be listed counts as reserved). For whoever removes
/// a whole store (a dropped table): it must wait while this is true.
pub fn any_reserved(dir: &Path) -> bool {
    match reserved(dir, now_ms()) {
        Ok(Reserved::Files(f)) => !f.is_empty(),
        Ok(Reserved::Everything) | Err(_) => true,
    }
}

/// Removes expired and damaged-and-expired reservation files of `dir`
/// (their holders died), returning how many.
pub fn sweep(dir: &Path, now_ms: u64) -> Result<usize> {
    let rdir = dir.join(RESERVATIONS_DIR);
    let Ok(rd) = fs::read_dir(&rdir) else {
        return Ok(0);
    };
    let mut n = 0;
    for ent in rd.flatten() {
        let path = ent.path();
        if path.extension().is_none_or(|x| x != "res") {
            continue;
        }
        let expired = match fs::read(&path) {
            Ok(b) => match parse(&String::from_utf8_lossy(&b)) {
                Some((expires, _)) => expires <= now_ms,
                None => fs::metadata(&path)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                    .is_some_and(|d| {
                        (d.as_millis() as u64).saturating_add(RESERVATION_LEASE_MS_MAX) <= now_ms
                    }),
            },
            Err(_) => false,
        };
        if expired && fs::remove_file(&path).is_ok() {
            n += 1;
        }
    }
    if n > 0 {
        let _ = manifest::sync_dir(&rdir);
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_expiry_and_hostile_files() {
        let d = tempfile::tempdir().unwrap();
        let files = vec!["ledger/1.sst".to_string(), "journal/2.jnl".to_string()];
        write(d.path(), "ss-1", &files, Duration::from_secs(60)).unwrap();
        let now = now_ms();
        let r = reserved(d.path(), now).unwrap();
        assert!(r.contains("ledger/1.sst") && r.contains("journal/2.jnl"));
        assert!(!r.contains("ledger/3.sst"));
        // Expired: protects nothing, and is swept.
        let later = now + 61_000;
        assert_eq!(
            reserved(d.path(), later).unwrap(),
            Reserved::Files(HashSet::new())
        );
        assert_eq!(sweep(d.path(), now).unwrap(), 0);
        assert_eq!(sweep(d.path(), later).unwrap(), 1);
        // Damage protects everything until the longest lease has passed.
        let rdir = d.path().join(RESERVATIONS_DIR);
        for bad in [
            &b"garbage"[..],
            b"tablinum-reservation 1\nexpires_ms x\n",
            b"\xff\xfe",
        ] {
            fs::write(rdir.join("bad.res"), bad).unwrap();
            assert_eq!(reserved(d.path(), now).unwrap(), Reserved::Everything);
            assert_eq!(
                reserved(d.path(), now + RESERVATION_LEASE_MS_MAX + 60_000).unwrap(),
                Reserved::Files(HashSet::new())
            );
        }
        remove(d.path(), "bad").unwrap();
        remove(d.path(), "never-written").unwrap();
    }

    #[test]
    fn bad_holders_leases_and_names_are_refused() {
        let d = tempfile::tempdir().unwrap();
        for h in ["", "../x", "a/b", ".hidden", &"x".repeat(129)] {
            assert!(
                write(d.path(), h, &[], Duration::from_secs(1)).is_err(),
                "{h:?}"
            );
        }
        assert!(write(d.path(), "ok", &[], Duration::ZERO).is_err());
        assert!(write(d.path(), "ok", &[], Duration::from_secs(3600)).is_err());
        assert!(write(
            d.path(),
            "ok",
            &["a\nfile b".into()],
            Duration::from_secs(1)
        )
        .is_err());
    }
}
