//! A Parquet file sink through the real binary: generated records go from
//! a topic into Parquet files; the files are read back with the `parquet`
//! crate's reader and compared record by record with the topic, and
//! validation finds every record once, across a kill between commits.

use std::collections::BTreeMap;

mod common;

use common::Cli;

const FLOW: &str = r#"
[flow]
name = "toparquet"
parallelism = 2
commit_interval_ms = 200

[[source]]
name = "logs"
kind = "topic"
topic = "plogs"

[[sink]]
name = "files"
input = "logs"
kind = "files"
dir = "pq"
format = "parquet"
"#;

#[test]
fn parquet_files_hold_every_record_once_and_read_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let (_procs, cli) = Cli::up(dir.path());
    let flow = dir.path().join("toparquet.toml");
    std::fs::write(&flow, FLOW).unwrap();
    let flow = flow.to_str().unwrap().to_string();
    cli.ok(&["topic", "create", "plogs", "--partitions", "2"]);
    cli.ok(&["topic", "produce", "plogs", "--generate", "3000"]);
    // Killed in its second commit, then run to the end.
    let mut f = cli.spawn(
        &[
            "flow",
            "run",
            &flow,
            "--root",
            "files",
            "--until-idle-ms",
            "3000",
        ],
        Some("2:0"),
    );
    assert!(!f.wait().unwrap().success());
    cli.ok(&["topic", "produce", "plogs", "--generate", "1000"]);
    cli.ok(&[
        "flow",
        "run",
        &flow,
        "--root",
        "files",
        "--until-idle-ms",
        "1000",
    ]);
    let v = cli.ok(&["flow", "validate", &flow, "--root", "files"]);
    assert!(
        v.contains("expected 8000, received 8000, lost 0, duplicated 0, unexpected 0: EXACT"),
        "{v}"
    );
    // Record by record: what the files hold is what the topic holds, minus
    // each record's stamp tail (Parquet keeps the JSON).
    let mut files: BTreeMap<(u32, u64), Vec<u8>> = BTreeMap::new();
    let pq = dir.path().join("files/pq");
    for e in std::fs::read_dir(&pq).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(!name.ends_with(".inprogress"), "{name} left behind");
        assert!(name.ends_with(".parquet"), "{name}");
        tablinum_flow::parquet_file::read(&path, &mut |p, o, r| {
            assert!(
                files.insert((p, o), r.to_vec()).is_none(),
                "({p}, {o}) twice"
            );
        })
        .unwrap();
    }
    let out = cli.ok(&["topic", "consume", "plogs", "-o", "json"]);
    let mut n = 0;
    for line in out.lines() {
        let j: serde_json::Value = serde_json::from_str(line).unwrap();
        let p = j["partition"].as_u64().unwrap() as u32;
        let o = j["offset"].as_u64().unwrap();
        let raw = match &j["value_b64"] {
            serde_json::Value::String(b) => {
                use base64::Engine as _;
                base64::engine::general_purpose::STANDARD.decode(b).unwrap()
            }
            _ => j["value"].as_str().unwrap().as_bytes().to_vec(),
        };
        let (json, _) = tablinum_flow::validate::split_tail(&raw);
        assert_eq!(
            files.get(&(p, o)).map(Vec::as_slice),
            Some(json),
            "({p}, {o})"
        );
        n += 1;
    }
    assert_eq!((n, files.len()), (8000, 8000));
}
