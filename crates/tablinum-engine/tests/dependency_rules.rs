//! Architecture invariant: the engine knows nothing of networking or async
//! runtimes. Reads the engine's resolved dependency graph from `cargo
//! metadata` and fails if any networking/async crate is reachable.

use std::collections::{HashMap, HashSet};
use std::process::Command;

const FORBIDDEN: &[&str] = &[
    "tonic",
    "prost",
    "hyper",
    "tokio",
    "axum",
    "mio",
    "h2",
    "tower",
    "async-std",
    "reqwest",
];

#[test]
fn engine_does_not_depend_on_networking_or_async_runtimes() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--manifest-path"])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: HashMap<&str, &str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    let nodes = meta["resolve"]["nodes"].as_array().unwrap();
    let deps: HashMap<&str, Vec<(&str, bool)>> = nodes
        .iter()
        .map(|n| {
            let d = n["deps"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| {
                    let normal = d["dep_kinds"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|k| k["kind"].is_null());
                    (d["pkg"].as_str().unwrap(), normal)
                })
                .collect();
            (n["id"].as_str().unwrap(), d)
        })
        .collect();
    let engine = names
        .iter()
        .find(|(_, n)| **n == "tablinum-engine")
        .map(|(id, _)| *id)
        .unwrap();
    // Walk normal (non-dev, non-build) dependencies from the engine.
    let mut seen = HashSet::new();
    let mut stack = vec![engine];
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        for (d, normal) in deps.get(id).into_iter().flatten() {
            if *normal {
                stack.push(d);
            }
        }
    }
    let bad: Vec<&str> = seen
        .iter()
        .map(|id| names[id])
        .filter(|n| FORBIDDEN.contains(n))
        .collect();
    assert!(bad.is_empty(), "tablinum-engine must not depend on {bad:?}");
    assert!(seen.len() > 3, "dependency walk found too little: {seen:?}");
}
