//! Topics: partitioned, append-only logs kept in ordinary tables. This
//! module owns the byte layout of a topic's rows, shared by the tablet
//! server (which assigns offsets) and the client (which reads them); see
//! docs/format.md, "Topics".
//!
//! A topic `NAME` is the table `topic.NAME` with one tablet per partition:
//! partition `p` (a `u32`) owns every key that starts with `p` in 4
//! big-endian bytes, so a partition's records, its head and its writer and
//! group positions all live in one tablet and change together in one
//! atomic batch. Within partition `p`:
//!
//! | key | value |
//! |---|---|
//! | `p ‖ offset` (u64 BE) | the record |
//! | `p ‖ FF×8 ‖ 'h'` | head: next offset u64 BE ‖ first retained offset u64 BE |
//! | `p ‖ FF×8 ‖ 'w' ‖ writer` | an exactly-once writer's input position (opaque bytes) |
//! | `p ‖ FF×8 ‖ 'g' ‖ group` | a consumer group's next offset u64 BE |
//! | `p ‖ FF×8 ‖ 'r'` | retention: age ms u64 BE ‖ bytes u64 BE (0: unlimited) |
//! | `p ‖ FF×8 ‖ 't' ‖ offset` (u64 BE) | append mark: unix ms u64 BE ‖ record bytes u64 BE of the append starting at `offset` |
//!
//! Retention removes whole appends from the front of a partition
//! ([`trim_to`]): every record below the head's `start` is gone, so a
//! reader from an older offset gets the records from `start` on.
//!
//! Offsets are dense from 0 and never reused: the head is written in the
//! same batch as the records it counts. Offset `u64::MAX` is never
//! assigned, so every record key sorts before the partition's meta rows.
//!
//! Owns layout and limits only; never talks to a server.

/// The table-name prefix of topics: topic `logs` is table `topic.logs`.
pub const TABLE_PREFIX: &str = "topic.";
/// Most partitions of one topic.
pub const PARTITIONS_MAX: u32 = 1_024;
/// Most records in one append (the engine's batch limit, less the head,
/// writer and mark rows written with them).
pub const APPEND_RECORDS_MAX: usize = 99_997;
/// Longest writer or group name, bytes.
pub const NAME_BYTES_MAX: usize = 128;
/// Longest writer position, bytes.
pub const POSITION_BYTES_MAX: usize = 4_096;

const META: [u8; 8] = [0xFF; 8];

/// The table that holds topic `topic`.
pub fn table_name(topic: &str) -> String {
    format!("{TABLE_PREFIX}{topic}")
}

/// The topic a table holds, if it is one.
pub fn topic_of(table: &str) -> Option<&str> {
    table.strip_prefix(TABLE_PREFIX)
}

/// Checks a topic name: the table name it makes must be valid.
pub fn check_topic_name(topic: &str) -> Result<(), String> {
    if topic.is_empty() {
        return Err("topic name is empty".into());
    }
    crate::check_table_name(&table_name(topic)).map_err(|e| format!("topic {topic:?}: {e}"))
}

/// Split points of a topic of `partitions` partitions: one tablet each.
pub fn split_points(partitions: u32) -> Vec<Vec<u8>> {
    (1..partitions).map(|p| p.to_be_bytes().to_vec()).collect()
}

/// The key of record `offset` of partition `p`.
pub fn record_key(p: u32, offset: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(12);
    k.extend_from_slice(&p.to_be_bytes());
    k.extend_from_slice(&offset.to_be_bytes());
    k
}

/// The offset a record key names, if `key` is one of partition `p`.
pub fn record_offset(p: u32, key: &[u8]) -> Option<u64> {
    if key.len() != 12 || key[..4] != p.to_be_bytes() || key[4..] == META {
        return None;
    }
    Some(u64::from_be_bytes(key[4..12].try_into().ok()?))
}

/// Exclusive end of partition `p`'s records.
pub fn records_end(p: u32) -> Vec<u8> {
    record_key(p, u64::MAX)
}

fn meta_key(p: u32, tag: u8, name: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(13 + name.len());
    k.extend_from_slice(&p.to_be_bytes());
    k.extend_from_slice(&META);
    k.push(tag);
    k.extend_from_slice(name);
    k
}

/// The key of partition `p`'s head row.
pub fn head_key(p: u32) -> Vec<u8> {
    meta_key(p, b'h', b"")
}

/// The key of writer `writer`'s position in partition `p`.
pub fn writer_key(p: u32, writer: &[u8]) -> Vec<u8> {
    meta_key(p, b'w', writer)
}

/// The key of consumer group `group`'s position in partition `p`.
pub fn group_key(p: u32, group: &[u8]) -> Vec<u8> {
    meta_key(p, b'g', group)
}

/// Whether `key` is a consumer group position (with the retention row, the
/// only rows of a topic a plain Write may change: records, heads, marks and
/// writer positions change only through Append and retention, which keep
/// them consistent).
pub fn is_group_key(key: &[u8]) -> bool {
    key.len() > 13 && key[4..12] == META && key[12] == b'g'
}

/// The key of partition `p`'s retention row.
pub fn retention_key(p: u32) -> Vec<u8> {
    meta_key(p, b'r', b"")
}

/// Whether `key` is a partition's retention row (a plain Write by an admin
/// may set it).
pub fn is_retention_key(key: &[u8]) -> bool {
    key.len() == 13 && key[4..12] == META && key[12] == b'r'
}

/// The key of the append mark at `offset` of partition `p`.
pub fn mark_key(p: u32, offset: u64) -> Vec<u8> {
    meta_key(p, b't', &offset.to_be_bytes())
}

/// The offset a mark key names, if `key` is one of partition `p`.
pub fn mark_offset(p: u32, key: &[u8]) -> Option<u64> {
    let prefix = meta_key(p, b't', b"");
    let rest = key.strip_prefix(prefix.as_slice())?;
    Some(u64::from_be_bytes(rest.try_into().ok()?))
}

/// How long and how much a partition keeps (0: no limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    /// Appends older than this are removed, ms.
    pub ms: u64,
    /// The oldest appends are removed while the rest still hold this many
    /// record bytes.
    pub bytes: u64,
}

impl Retention {
    /// Whether it removes anything ever.
    pub fn is_unlimited(self) -> bool {
        self.ms == 0 && self.bytes == 0
    }

    /// The retention row's value.
    pub fn encode(self) -> [u8; 16] {
        two(self.ms, self.bytes)
    }

    /// Reads a retention row's value; an absent row keeps everything.
    pub fn decode(v: Option<&[u8]>) -> Result<Retention, String> {
        let Some(v) = v else {
            return Ok(Retention::default());
        };
        let (ms, bytes) = untwo("topic retention", v)?;
        Ok(Retention { ms, bytes })
    }
}

/// One append as its mark records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    /// Its first record's offset.
    pub offset: u64,
    /// When it was appended, ms since the Unix epoch.
    pub unix_ms: u64,
    /// Its records' bytes.
    pub bytes: u64,
}

impl Mark {
    /// A mark row's value.
    pub fn encode_value(self) -> [u8; 16] {
        two(self.unix_ms, self.bytes)
    }

    /// Reads a mark row of partition `p`.
    pub fn decode(p: u32, key: &[u8], v: &[u8]) -> Result<Mark, String> {
        let offset = mark_offset(p, key).ok_or("a topic mark key is malformed")?;
        let (unix_ms, bytes) = untwo("topic mark", v)?;
        Ok(Mark {
            offset,
            unix_ms,
            bytes,
        })
    }
}

fn two(a: u64, b: u64) -> [u8; 16] {
    let mut o = [0u8; 16];
    o[..8].copy_from_slice(&a.to_be_bytes());
    o[8..].copy_from_slice(&b.to_be_bytes());
    o
}

fn untwo(what: &str, v: &[u8]) -> Result<(u64, u64), String> {
    let b: [u8; 16] = v
        .try_into()
        .map_err(|_| format!("{what} is {} bytes, not 16", v.len()))?;
    Ok((
        u64::from_be_bytes(b[..8].try_into().expect("8 bytes")),
        u64::from_be_bytes(b[8..].try_into().expect("8 bytes")),
    ))
}

/// The first offset partition `head` keeps under `r` at `now_ms`, given its
/// append marks (in offset order, those at or past `head.start`): whole
/// appends go from the front while the oldest is older than `r.ms` or the
/// rest still hold `r.bytes`. Records below the first mark (written before
/// marks existed) count as one append of unknown age and size, removed
/// only with what follows. Never past `head.next`, never before
/// `head.start`.
pub fn trim_to(head: Head, marks: &[Mark], r: Retention, now_ms: u64) -> u64 {
    if r.is_unlimited() {
        return head.start;
    }
    let mut total: u64 = marks.iter().map(|m| m.bytes).fold(0, u64::saturating_add);
    let mut start = head.start;
    for (i, m) in marks.iter().enumerate() {
        let old = r.ms > 0 && m.unix_ms.saturating_add(r.ms) < now_ms;
        let big = r.bytes > 0 && total.saturating_sub(m.bytes) >= r.bytes;
        if !(old || big) {
            break;
        }
        total -= m.bytes.min(total);
        start = marks.get(i + 1).map_or(head.next, |n| n.offset);
    }
    start.clamp(head.start, head.next)
}

/// A partition's head: the next offset to assign and the first retained.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Head {
    /// The offset the next record gets.
    pub next: u64,
    /// The first offset still kept (0 until retention removes records).
    pub start: u64,
}

impl Head {
    /// The head row's value.
    pub fn encode(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.next.to_be_bytes());
        b[8..].copy_from_slice(&self.start.to_be_bytes());
        b
    }

    /// Reads a head row's value; an absent row is the empty head.
    pub fn decode(v: Option<&[u8]>) -> Result<Head, String> {
        let Some(v) = v else {
            return Ok(Head::default());
        };
        let b: [u8; 16] = v
            .try_into()
            .map_err(|_| format!("topic head is {} bytes, not 16", v.len()))?;
        let h = Head {
            next: u64::from_be_bytes(b[..8].try_into().expect("8 bytes")),
            start: u64::from_be_bytes(b[8..].try_into().expect("8 bytes")),
        };
        if h.start > h.next {
            return Err(format!(
                "topic head says the first retained offset {} is past the next {}",
                h.start, h.next
            ));
        }
        Ok(h)
    }
}

/// Checks a writer or group name: 1..=128 bytes of `[A-Za-z0-9_.:/-]`.
pub fn check_name(what: &str, name: &str) -> Result<(), String> {
    crate::check_chars(what, name, 1, NAME_BYTES_MAX, |c| {
        c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | ':' | '/')
    })
}

/// A consumer group position's value.
pub fn decode_offset(v: &[u8]) -> Result<u64, String> {
    let b: [u8; 8] = v
        .try_into()
        .map_err(|_| format!("a stored offset is {} bytes, not 8", v.len()))?;
    Ok(u64::from_be_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_removes_whole_appends_from_the_front() {
        let head = Head { next: 30, start: 0 };
        let m = |offset, unix_ms, bytes| Mark {
            offset,
            unix_ms,
            bytes,
        };
        let marks = [m(0, 1_000, 100), m(10, 2_000, 100), m(20, 3_000, 100)];
        let keep = |ms, bytes, now| trim_to(head, &marks, Retention { ms, bytes }, now);
        assert_eq!(keep(0, 0, 99_999), 0, "unlimited");
        assert_eq!(keep(1_500, 0, 3_000), 10, "the first append is 2 s old");
        assert_eq!(keep(500, 0, 10_000), 30, "everything expired");
        assert_eq!(keep(0, 200, 0), 10, "the last two appends hold 200 bytes");
        assert_eq!(
            keep(0, 150, 0),
            10,
            "the last one alone would hold less than 150"
        );
        assert_eq!(keep(0, 100, 0), 20);
        assert_eq!(keep(0, 1_000, 0), 0, "under the limit");
        // Marks round-trip; bad rows are named.
        let k = mark_key(3, 77);
        assert_eq!(mark_offset(3, &k), Some(77));
        assert_eq!(mark_offset(2, &k), None);
        let v = m(77, 5, 6).encode_value();
        assert_eq!(Mark::decode(3, &k, &v).unwrap(), m(77, 5, 6));
        assert!(Mark::decode(3, &k, &v[..3]).unwrap_err().contains("not 16"));
        let r = Retention { ms: 1, bytes: 2 };
        assert_eq!(Retention::decode(Some(&r.encode())).unwrap(), r);
        assert_eq!(Retention::decode(None).unwrap(), Retention::default());
        assert!(is_retention_key(&retention_key(9)) && !is_group_key(&retention_key(9)));
        assert!(!is_retention_key(&mark_key(9, 0)));
    }

    #[test]
    fn records_sort_before_meta_rows_and_partitions_stay_apart() {
        let r = record_key(3, u64::MAX - 1);
        assert!(r < head_key(3));
        assert!(head_key(3) < writer_key(3, b"a"));
        assert!(records_end(3) <= head_key(3));
        assert!(head_key(3) < record_key(4, 0));
        assert_eq!(record_offset(3, &record_key(3, 42)), Some(42));
        assert_eq!(record_offset(4, &record_key(3, 42)), None);
        assert_eq!(record_offset(3, &head_key(3)), None);
        assert_eq!(record_offset(3, &records_end(3)), None);
        assert_eq!(split_points(3), vec![vec![0, 0, 0, 1], vec![0, 0, 0, 2]]);
        assert!(split_points(1).is_empty());
        assert!(is_group_key(&group_key(2, b"g1")));
        assert!(!is_group_key(&head_key(2)));
        assert!(!is_group_key(&writer_key(2, b"g1")));
        assert!(!is_group_key(&record_key(2, 7)));
    }

    #[test]
    fn heads_round_trip_and_bad_ones_are_named() {
        let h = Head { next: 9, start: 2 };
        assert_eq!(Head::decode(Some(&h.encode())).unwrap(), h);
        assert_eq!(Head::decode(None).unwrap(), Head::default());
        assert!(Head::decode(Some(b"short"))
            .unwrap_err()
            .contains("5 bytes"));
        let bad = Head { next: 1, start: 2 }.encode();
        assert!(Head::decode(Some(&bad)).unwrap_err().contains("past"));
        assert!(decode_offset(b"123").unwrap_err().contains("3 bytes"));
    }

    #[test]
    fn names() {
        assert!(check_topic_name("logs.info-1").is_ok());
        assert!(check_topic_name("").is_err());
        assert!(check_topic_name("a b").unwrap_err().contains("' '"));
        assert!(check_name("writer", "flow/by-level:3").is_ok());
        assert!(check_name("group", "").is_err());
        assert_eq!(topic_of("topic.logs"), Some("logs"));
        assert_eq!(topic_of("logs"), None);
    }
}
