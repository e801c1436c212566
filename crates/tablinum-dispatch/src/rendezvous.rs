//! Rendezvous (highest-random-weight) hashing of tablets to scan servers.
//!
//! Owns the stable 64-bit hash (FNV-1a 64 over length-prefixed fields, then
//! the SplitMix64 finaliser) and the per-plan salted ranking of servers for a
//! tablet. The hash is part of the cluster's behaviour: every client must rank
//! servers identically, across versions and platforms, so it must never use
//! `std`'s `DefaultHasher` (randomly keyed and unspecified) or anything
//! platform dependent. Changing it moves every tablet's cache affinity.
//!
//! Adding or removing one of n servers changes a tablet's top server only if
//! the new server outranks it (or the removed one was it): about 1/n of
//! tablets. The relative order of the other servers never changes, because a
//! server's score depends only on (tablet, salt, server).

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// SplitMix64's finaliser (Stafford's variant 13): a bijection with full avalanche.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// Stable, platform-independent 64-bit hash of `bytes`.
pub fn hash64(bytes: &[u8]) -> u64 {
    mix64(fnv1a(FNV_OFFSET, bytes))
}

/// Hash of a (salt, tablet) pair; fields are length-prefixed so they cannot alias.
pub fn tablet_key(tablet: &[u8], salt: &str) -> u64 {
    let mut h = fnv1a(FNV_OFFSET, &(salt.len() as u64).to_le_bytes());
    h = fnv1a(h, salt.as_bytes());
    h = fnv1a(h, &(tablet.len() as u64).to_le_bytes());
    h = fnv1a(h, tablet);
    mix64(h)
}

/// Hash of a server's identity (its address).
pub fn server_key(server: &str) -> u64 {
    mix64(hash64(server.as_bytes()) ^ 0x9e37_79b9_7f4a_7c15)
}

/// Rendezvous score of a server (by [`server_key`]) for a tablet (by [`tablet_key`]).
pub fn score(tablet_key: u64, server_key: u64) -> u64 {
    mix64(tablet_key ^ server_key)
}

/// Indices of `server_keys` ordered best first for the tablet (ties broken by index).
pub fn rank_keys(tablet_key: u64, server_keys: &[u64]) -> Vec<usize> {
    let mut scored: Vec<(u64, usize)> = server_keys
        .iter()
        .enumerate()
        .map(|(i, &k)| (score(tablet_key, k), i))
        .collect();
    scored.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().map(|(_, i)| i).collect()
}

/// Indices of `servers` ordered best first for `tablet` under `salt`.
pub fn rank<S: AsRef<str>>(tablet: &[u8], salt: &str, servers: &[S]) -> Vec<usize> {
    let keys: Vec<u64> = servers.iter().map(|s| server_key(s.as_ref())).collect();
    rank_keys(tablet_key(tablet, salt), &keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn servers(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("sserver-{i:03}:9996")).collect()
    }

    fn tablets(n: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| format!("2;row{i:06}").into_bytes())
            .collect()
    }

    #[test]
    fn hash_is_stable_across_builds() {
        // Frozen values: a change here moves every tablet's cache affinity.
        // Published test vectors: FNV-1a 64 of "a"; SplitMix64's first output for seed 0.
        assert_eq!(fnv1a(FNV_OFFSET, b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(mix64(0x9e37_79b9_7f4a_7c15), 0xe220_a839_7b1d_cdaf);
        assert_eq!(hash64(b""), mix64(FNV_OFFSET));
        assert_eq!(hash64(b"tablinum"), hash64(b"tablinum"));
        assert_ne!(hash64(b"a"), hash64(b"b"));
        assert_ne!(tablet_key(b"ab", "c"), tablet_key(b"b", "ca"));
        let frozen = [
            hash64(b"tablinum"),
            tablet_key(b"t1", "one"),
            server_key("s:1"),
        ];
        assert_eq!(
            frozen,
            [
                0x3507_ef2a_92bb_83e5,
                0xaf44_036c_02ba_f0d9,
                0x20bf_30e3_e07e_0a3c
            ],
            "{frozen:#x?}"
        );
    }

    #[test]
    fn top_choice_is_roughly_uniform() {
        let s = servers(23);
        let t = tablets(23_000);
        let mut counts = vec![0u32; s.len()];
        for tablet in &t {
            counts[rank(tablet, "", &s)[0]] += 1;
        }
        let expected = t.len() as f64 / s.len() as f64;
        for (i, &c) in counts.iter().enumerate() {
            let dev = (f64::from(c) - expected).abs() / expected;
            assert!(dev < 0.10, "server {i} got {c}, expected {expected}");
        }
    }

    #[test]
    fn salts_give_independent_rankings() {
        let s = servers(23);
        let t = tablets(2_000);
        let same = t
            .iter()
            .filter(|tab| rank(tab, "one", &s)[0] == rank(tab, "two", &s)[0])
            .count();
        // Independent choices agree about 1/23 of the time.
        assert!(same < 2_000 / 23 * 2, "{same}");
    }

    #[test]
    fn adding_a_server_moves_about_one_nth_and_keeps_relative_order() {
        for n in [3usize, 12, 23, 50] {
            let before = servers(n);
            let mut after = before.clone();
            after.push("sserver-new:9996".into());
            let t = tablets(10_000);
            let mut moved = 0usize;
            for tablet in &t {
                let rb = rank(tablet, "salt", &before);
                let ra = rank(tablet, "salt", &after);
                if before[rb[0]] != after[ra[0]] {
                    moved += 1;
                    assert_eq!(ra[0], n, "only the new server can take the top");
                }
                let without_new: Vec<usize> = ra.into_iter().filter(|&i| i != n).collect();
                assert_eq!(without_new, rb, "relative order of old servers changed");
            }
            let frac = moved as f64 / t.len() as f64;
            let ideal = 1.0 / (n + 1) as f64;
            assert!(
                (frac - ideal).abs() < ideal * 0.25 + 0.005,
                "n={n}: moved {frac}, ideal {ideal}"
            );
        }
    }

    #[test]
    fn removing_a_server_moves_only_its_tablets() {
        let n = 23;
        let before = servers(n);
        let removed = 7;
        let after: Vec<String> = before
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != removed)
            .map(|(_, s)| s.clone())
            .collect();
        let t = tablets(10_000);
        let mut moved = 0usize;
        for tablet in &t {
            let rb = rank(tablet, "", &before);
            let ra = rank(tablet, "", &after);
            let names_b: Vec<&String> = rb
                .iter()
                .filter(|&&i| i != removed)
                .map(|&i| &before[i])
                .collect();
            let names_a: Vec<&String> = ra.iter().map(|&i| &after[i]).collect();
            assert_eq!(names_a, names_b);
            if rb[0] == removed {
                moved += 1;
            } else {
                assert_eq!(before[rb[0]], after[ra[0]]);
            }
        }
        let frac = moved as f64 / t.len() as f64;
        assert!((frac - 1.0 / n as f64).abs() < 0.02, "{frac}");
    }

    #[test]
    fn top_three_sets_are_spread() {
        // Each server should be in the top 3 of about 3/n of the tablets.
        let s = servers(12);
        let t = tablets(12_000);
        let mut counts = vec![0u32; s.len()];
        for tablet in &t {
            for &i in &rank(tablet, "one", &s)[..3] {
                counts[i] += 1;
            }
        }
        for &c in &counts {
            assert!((2_700..3_300).contains(&c), "{counts:?}");
        }
    }
}
