//! Corruption: flips bytes in every kind of file the engine writes (journal
//! write and compacted segments, ledger tables, the manifest) and checks that
//! the damage is reported as an error naming the file — at open or by
//! `verify` — and that reads never return wrong data and never panic.

use std::path::{Path, PathBuf};

use tablinum_engine::{Durability, Error, Options, Store};

/// Byte positions tried per file.
const FLIPS_PER_FILE: usize = 24;

fn opts() -> Options {
    Options {
        durability: Durability::NoSync,
        memtable_bytes_max: 64 << 10,
        journal_segment_bytes_max: 96 << 10,
        sst_target_bytes: 64 << 10,
        journal_compaction_hours: None,
        ..Options::default()
    }
}

fn value(i: u32) -> Vec<u8> {
    let len = if i.is_multiple_of(4) { 100 } else { 2500 };
    (0..len)
        .map(|j| (i.wrapping_mul(31).wrapping_add(j as u32 * 7) % 251) as u8)
        .collect()
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

fn build(dir: &Path) {
    let s = Store::open(dir, opts()).unwrap();
    for round in 0..3u32 {
        for i in 0..150u32 {
            s.put(&key(i), &value(i + round * 1000)).unwrap();
        }
    }
    s.compact_journal().unwrap(); // leaves .gcj segments
    for i in 0..150u32 {
        s.put(&key(i + 1000), &value(i)).unwrap();
    }
    s.close().unwrap();
}

fn expected(i: u32) -> Option<Vec<u8>> {
    if i < 150 {
        Some(value(i + 2000))
    } else if (1000..1150).contains(&i) {
        Some(value(i - 1000))
    } else {
        None
    }
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.join("MANIFEST")];
    for sub in ["journal", "ledger"] {
        for e in std::fs::read_dir(dir.join(sub)).unwrap() {
            out.push(e.unwrap().path());
        }
    }
    out.sort();
    out
}

fn copy_dir(from: &Path, to: &Path) {
    for sub in ["", "journal", "ledger"] {
        std::fs::create_dir_all(to.join(sub)).unwrap();
        for e in std::fs::read_dir(from.join(sub)).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_file() {
                std::fs::copy(e.path(), to.join(sub).join(e.file_name())).unwrap();
            }
        }
    }
}

fn names_file(e: &Error, file: &Path) -> bool {
    let name = file.file_name().unwrap().to_string_lossy().to_string();
    match e {
        Error::Corruption { file: f, .. } => f.to_string_lossy().contains(&name),
        Error::UnsupportedVersion { file: f, .. } => f.to_string_lossy().contains(&name),
        _ => false,
    }
}

#[test]
fn flipped_bytes_in_every_file_are_reported_never_returned() {
    let base = tempfile::tempdir().unwrap();
    build(base.path());
    let all = files(base.path());
    let kinds: Vec<String> = all
        .iter()
        .filter_map(|p| p.extension().map(|e| e.to_string_lossy().to_string()))
        .collect();
    for k in ["jnl", "gcj", "sst"] {
        assert!(
            kinds.iter().any(|x| x == k),
            "no .{k} file to corrupt: {all:?}"
        );
    }
    let mut checked = 0;
    for file in &all {
        let rel = file.strip_prefix(base.path()).unwrap().to_path_buf();
        let len = std::fs::metadata(file).unwrap().len() as usize;
        if len == 0 {
            continue;
        }
        let mut positions: Vec<usize> = (0..FLIPS_PER_FILE)
            .map(|i| i * len / FLIPS_PER_FILE)
            .collect();
        positions.extend([0, len - 1, len / 2 + 1]);
        for pos in positions {
            let work = tempfile::tempdir().unwrap();
            copy_dir(base.path(), work.path());
            let target = work.path().join(&rel);
            let mut bytes = std::fs::read(&target).unwrap();
            bytes[pos] ^= 0x5A;
            std::fs::write(&target, &bytes).unwrap();
            let ctx = format!("{} byte {pos}", rel.display());
            let store = match Store::open(work.path(), opts()) {
                Err(e) => {
                    assert!(
                        names_file(&e, &target),
                        "{ctx}: open failed without naming the file: {e}"
                    );
                    checked += 1;
                    continue;
                }
                Ok(s) => s,
            };
            for i in (0..150u32).chain(1000..1150) {
                match store.get(&key(i)) {
                    Ok(v) => assert_eq!(v, expected(i), "{ctx}: wrong data for key {i}"),
                    Err(e) => assert!(e.is_corruption(), "{ctx}: unexpected error {e}"),
                }
            }
            let e = store
                .verify()
                .expect_err(&format!("{ctx}: verify missed the damage"));
            assert!(
                names_file(&e, &target),
                "{ctx}: verify error does not name the file: {e}"
            );
            checked += 1;
        }
    }
    assert!(checked > 50, "only {checked} corruptions checked");
}
