//! End-to-end validation, as Scribengin built it in: a generator stamps
//! every record with (window, sequence); a validator at any sink keeps one
//! bit per expected record and reports what was expected, received, lost
//! and duplicated. A benchmark's throughput counts only when it shows zero
//! lost and zero duplicated.
//!
//! Owns the stamp ([`Stamp`], 8 bytes, carried as the record's last bytes
//! or as JSON fields `"w"` and `"s"`) and the [`Validator`]: bounded memory
//! ([`WINDOWS_MAX`] windows of at most [`WINDOW_RECORDS_MAX`] records),
//! mergeable across sink partitions, and saved to bytes (a checkpoint) and
//! loaded back with every field checked. Never reads a clock or does I/O.

use std::collections::BTreeMap;
use std::fmt;

/// Most windows one validator tracks.
pub const WINDOWS_MAX: u32 = 4_096;
/// Most records one window may expect (its bitset is this / 8 bytes at
/// most: 128 KiB).
pub const WINDOW_RECORDS_MAX: u32 = 1 << 20;
/// Bytes of an encoded stamp.
pub const STAMP_BYTES: usize = 8;

/// Why validation could not take a record or a saved state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A window or count past the named limit.
    Limit(String),
    /// Saved validator bytes that do not decode.
    Corrupt(&'static str),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Limit(m) => write!(f, "validation limit: {m}"),
            Error::Corrupt(m) => write!(f, "saved validator state is damaged: {m}"),
        }
    }
}

impl std::error::Error for Error {}

/// Which window a record belongs to and its number in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Stamp {
    /// The generator's window.
    pub window: u32,
    /// The record's number within its window, from 0.
    pub seq: u32,
}

impl Stamp {
    /// The stamp as 8 bytes (window then sequence, big-endian).
    pub fn encode(self) -> [u8; STAMP_BYTES] {
        let mut b = [0u8; STAMP_BYTES];
        b[..4].copy_from_slice(&self.window.to_be_bytes());
        b[4..].copy_from_slice(&self.seq.to_be_bytes());
        b
    }

    /// The stamp in a record's last 8 bytes (`None`: shorter record).
    pub fn from_tail(record: &[u8]) -> Option<Stamp> {
        let t = record.len().checked_sub(STAMP_BYTES)?;
        let b = &record[t..];
        Some(Stamp {
            window: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            seq: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
        })
    }
}

/// Splits a record into its JSON and its stamp tail: a record that ends
/// with a newline and [`STAMP_BYTES`] bytes carries a stamp there (the
/// generator's records); any other record is all JSON.
pub fn split_tail(record: &[u8]) -> (&[u8], Option<Stamp>) {
    match record.len().checked_sub(STAMP_BYTES + 1) {
        Some(t) if record[t] == b'\n' => (&record[..t], Stamp::from_tail(record)),
        _ => (record, None),
    }
}

/// A record's stamp: its tail (see [`split_tail`]), else its JSON fields
/// `"w"` and `"s"` (what a file or table sink keeps); `None`: unstamped.
pub fn stamp_of(record: &[u8]) -> Option<Stamp> {
    let (json, tail) = split_tail(record);
    if tail.is_some() {
        return tail;
    }
    let num = |name: &str| -> Option<u32> {
        let p = crate::field::Path::parse(name).ok()?;
        match crate::field::extract(json, &p).ok()?? {
            crate::field::Value::Num(n) => std::str::from_utf8(n).ok()?.parse().ok(),
            _ => None,
        }
    };
    Some(Stamp {
        window: num("w")?,
        seq: num("s")?,
    })
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Window {
    expected: u32,
    seen: Vec<u64>,
    received: u64,
    duplicated: u64,
    /// Stamps past `expected` (never generated: a bug or damage).
    unexpected: u64,
}

/// Totals for one window or for all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Records the generator made.
    pub expected: u64,
    /// Distinct expected records that arrived.
    pub received: u64,
    /// Expected records that never arrived.
    pub lost: u64,
    /// Arrivals of a record that had arrived already.
    pub duplicated: u64,
    /// Arrivals with a stamp the generator never made.
    pub unexpected: u64,
}

impl Counts {
    /// Zero lost, zero duplicated, nothing unexpected.
    pub fn exact(&self) -> bool {
        self.lost == 0 && self.duplicated == 0 && self.unexpected == 0
    }
}

/// Per-window bitsets of what arrived at one sink (or several, merged).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Validator {
    windows: BTreeMap<u32, Window>,
}

impl Validator {
    /// An empty validator.
    pub fn new() -> Validator {
        Validator::default()
    }

    fn window(&mut self, w: u32) -> Result<&mut Window, Error> {
        if !self.windows.contains_key(&w) && self.windows.len() as u32 >= WINDOWS_MAX {
            return Err(Error::Limit(format!(
                "window {w} would be more than WINDOWS_MAX = {WINDOWS_MAX}"
            )));
        }
        Ok(self.windows.entry(w).or_default())
    }

    /// The generator made `count` records in window `w`.
    pub fn expect(&mut self, w: u32, count: u32) -> Result<(), Error> {
        if count > WINDOW_RECORDS_MAX {
            return Err(Error::Limit(format!(
                "{count} records in window {w} exceeds WINDOW_RECORDS_MAX = {WINDOW_RECORDS_MAX}"
            )));
        }
        let win = self.window(w)?;
        win.expected = win.expected.max(count);
        let words = count.div_ceil(64) as usize;
        if win.seen.len() < words {
            win.seen.resize(words, 0);
        }
        Ok(())
    }

    /// How many records window `w` is expected to hold (0: none yet).
    pub fn expected(&self, w: u32) -> u32 {
        self.windows.get(&w).map_or(0, |win| win.expected)
    }

    /// A record stamped `s` arrived.
    pub fn observe(&mut self, s: Stamp) -> Result<(), Error> {
        let win = self.window(s.window)?;
        if s.seq >= win.expected {
            win.unexpected += 1;
            return Ok(());
        }
        let (word, bit) = ((s.seq / 64) as usize, s.seq % 64);
        if win.seen[word] & (1 << bit) != 0 {
            win.duplicated += 1;
        } else {
            win.seen[word] |= 1 << bit;
            win.received += 1;
        }
        Ok(())
    }

    /// Adds what `other` saw (another sink partition of the same flow). A
    /// record both saw counts as duplicated.
    pub fn merge(&mut self, other: &Validator) -> Result<(), Error> {
        for (&w, o) in &other.windows {
            self.expect(w, o.expected)?;
            let win = self.window(w)?;
            for (i, &bits) in o.seen.iter().enumerate() {
                let both = win.seen[i] & bits;
                win.duplicated += u64::from(both.count_ones());
                win.received += u64::from((bits & !both).count_ones());
                win.seen[i] |= bits;
            }
            win.duplicated += o.duplicated;
            win.unexpected += o.unexpected;
        }
        Ok(())
    }

    /// Counts of window `w`.
    pub fn window_counts(&self, w: u32) -> Counts {
        self.windows
            .get(&w)
            .map_or_else(Counts::default, |win| Counts {
                expected: u64::from(win.expected),
                received: win.received,
                lost: u64::from(win.expected) - win.received,
                duplicated: win.duplicated,
                unexpected: win.unexpected,
            })
    }

    /// Counts over every window.
    pub fn report(&self) -> Counts {
        self.windows.keys().fold(Counts::default(), |mut t, &w| {
            let c = self.window_counts(w);
            t.expected += c.expected;
            t.received += c.received;
            t.lost += c.lost;
            t.duplicated += c.duplicated;
            t.unexpected += c.unexpected;
            t
        })
    }

    /// The state as bytes: a checkpoint (format: `TVAL1`, window count,
    /// then per window: id, expected, received, duplicated, unexpected, the
    /// bitset words; integers little-endian).
    pub fn save(&self) -> Vec<u8> {
        let mut b = b"TVAL1".to_vec();
        b.extend_from_slice(&(self.windows.len() as u32).to_le_bytes());
        for (&w, win) in &self.windows {
            b.extend_from_slice(&w.to_le_bytes());
            b.extend_from_slice(&win.expected.to_le_bytes());
            for v in [win.received, win.duplicated, win.unexpected] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            for word in &win.seen {
                b.extend_from_slice(&word.to_le_bytes());
            }
        }
        b
    }

    /// Loads what [`Validator::save`] wrote, checking every field (the
    /// bytes may be damaged).
    pub fn load(bytes: &[u8]) -> Result<Validator, Error> {
        let mut r = bytes
            .strip_prefix(b"TVAL1")
            .ok_or(Error::Corrupt("no TVAL1 header"))?;
        let mut take = |n: usize| -> Result<&[u8], Error> {
            if r.len() < n {
                return Err(Error::Corrupt("truncated"));
            }
            let (a, rest) = r.split_at(n);
            r = rest;
            Ok(a)
        };
        let u32_of = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let u64_of = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
        let n = u32_of(take(4)?);
        if n > WINDOWS_MAX {
            return Err(Error::Corrupt("more windows than WINDOWS_MAX"));
        }
        let mut v = Validator::new();
        for _ in 0..n {
            let w = u32_of(take(4)?);
            let expected = u32_of(take(4)?);
            if expected > WINDOW_RECORDS_MAX {
                return Err(Error::Corrupt(
                    "a window expects more than WINDOW_RECORDS_MAX",
                ));
            }
            let received = u64_of(take(8)?);
            let duplicated = u64_of(take(8)?);
            let unexpected = u64_of(take(8)?);
            let words = expected.div_ceil(64) as usize;
            let mut seen = Vec::with_capacity(words);
            for _ in 0..words {
                seen.push(u64_of(take(8)?));
            }
            let ones: u64 = seen.iter().map(|x| u64::from(x.count_ones())).sum();
            let past_end =
                expected % 64 != 0 && seen.last().is_some_and(|&x| x >> (expected % 64) != 0);
            if ones != received || past_end {
                return Err(Error::Corrupt(
                    "a window's bitset does not match its counts",
                ));
            }
            if v.windows
                .insert(
                    w,
                    Window {
                        expected,
                        seen,
                        received,
                        duplicated,
                        unexpected,
                    },
                )
                .is_some()
            {
                return Err(Error::Corrupt("a window appears twice"));
            }
        }
        if !r.is_empty() {
            return Err(Error::Corrupt("bytes after the last window"));
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(window: u32, seq: u32) -> Stamp {
        Stamp { window, seq }
    }

    #[test]
    fn counts_lost_duplicated_and_unexpected_records() {
        let mut v = Validator::new();
        v.expect(0, 100).unwrap();
        v.expect(1, 3).unwrap();
        for s in 0..100 {
            if s != 42 {
                v.observe(st(0, s)).unwrap();
            }
        }
        v.observe(st(0, 7)).unwrap();
        v.observe(st(1, 0)).unwrap();
        v.observe(st(1, 9)).unwrap();
        let c = v.window_counts(0);
        assert_eq!(
            (c.expected, c.received, c.lost, c.duplicated),
            (100, 99, 1, 1)
        );
        let t = v.report();
        assert_eq!(
            (t.expected, t.received, t.lost, t.duplicated, t.unexpected),
            (103, 100, 3, 1, 1)
        );
        assert!(!t.exact());
    }

    #[test]
    fn merging_partitions_finds_records_that_arrived_at_two() {
        let (mut a, mut b) = (Validator::new(), Validator::new());
        for v in [&mut a, &mut b] {
            v.expect(5, 10).unwrap();
        }
        for s in 0..6 {
            a.observe(st(5, s)).unwrap();
        }
        for s in 5..10 {
            b.observe(st(5, s)).unwrap();
        }
        a.merge(&b).unwrap();
        let c = a.report();
        assert_eq!((c.received, c.lost, c.duplicated), (10, 0, 1));
    }

    #[test]
    fn limits_are_named_and_saved_state_round_trips_or_is_refused() {
        let mut v = Validator::new();
        assert!(v
            .expect(0, WINDOW_RECORDS_MAX + 1)
            .unwrap_err()
            .to_string()
            .contains("WINDOW_RECORDS_MAX"));
        v.expect(0, 70).unwrap();
        v.expect(9, 5).unwrap();
        for s in [0, 1, 65, 69] {
            v.observe(st(0, s)).unwrap();
        }
        v.observe(st(9, 4)).unwrap();
        v.observe(st(9, 4)).unwrap();
        let bytes = v.save();
        assert_eq!(Validator::load(&bytes).unwrap(), v);
        // Every truncation and every single-byte flip is refused or, if it
        // happens to decode, decodes to a state that is consistent.
        for cut in 0..bytes.len() {
            assert!(Validator::load(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x5a;
            if let Ok(l) = Validator::load(&b) {
                let c = l.report();
                assert!(c.received <= c.expected);
            }
        }
        let mut full = Validator::new();
        for w in 0..WINDOWS_MAX {
            full.expect(w, 1).unwrap();
        }
        assert!(full
            .expect(WINDOWS_MAX, 1)
            .unwrap_err()
            .to_string()
            .contains("WINDOWS_MAX"));
    }

    #[test]
    fn stamps_ride_at_the_end_of_a_record() {
        let mut rec = b"{\"level\":\"INFO\"}".to_vec();
        rec.extend_from_slice(&st(3, 77).encode());
        assert_eq!(Stamp::from_tail(&rec), Some(st(3, 77)));
        assert_eq!(Stamp::from_tail(b"short"), None);
    }
}
