//! Order-preserving encoding of (index term, object key) into one byte
//! string, so the coordinator's merge can order index rows by comparing
//! bytes: the term with every 0x00 written as 0x00 0xFF, then 0x00 0x00,
//! then the key. Never used on the wire or on disk.

/// Encodes (term, key).
pub fn encode(term: &[u8], key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(term.len() + key.len() + 2);
    for &b in term {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(key);
    out
}

/// Decodes what [`encode`] produced; `None` for anything else.
pub fn decode(bytes: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut term = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b != 0 {
            term.push(b);
            i += 1;
            continue;
        }
        match bytes.get(i + 1)? {
            0xFF => {
                term.push(0);
                i += 2;
            }
            0 => return Some((term, bytes[i + 2..].to_vec())),
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_and_round_trip() {
        let pairs: Vec<(&[u8], &[u8])> = vec![
            (b"", b"z"),
            (b"a", b""),
            (b"a", b"b"),
            (b"a\0", b""),
            (b"a\0\0", b"a"),
            (b"a\x01", b""),
            (b"b", b"\0"),
        ];
        for w in pairs.windows(2) {
            assert!(encode(w[0].0, w[0].1) < encode(w[1].0, w[1].1), "{w:?}");
        }
        for (t, k) in pairs {
            assert_eq!(decode(&encode(t, k)), Some((t.to_vec(), k.to_vec())));
        }
        assert_eq!(decode(b"a\0\x01"), None);
        assert_eq!(decode(b"abc"), None);
    }
}
