//! Point reads of many keys in one call per server, against a real
//! cluster: answers in request order, each key found, absent or failed on
//! its own; keys whose tablets the client's map placed wrongly are asked
//! again after a refresh; an answer too large for one message is finished
//! by asking again for the rest.

mod common;

use common::{raw_tserver_as, TestCluster};
use tablinum_client::{Durability, Error, KeyRead, Mutation, Split};
use tablinum_proto::v1;

fn key(i: u32) -> Vec<u8> {
    // Spread over every tablet of an even split (first byte 0..=255).
    let mut k = vec![(i.wrapping_mul(37) % 256) as u8];
    k.extend_from_slice(format!("k{i:05}").as_bytes());
    k
}

fn put_keys(c: &TestCluster, table: &str, n: u32, tag: &str) {
    let muts: Vec<Mutation> = (0..n)
        .map(|i| Mutation {
            key: key(i),
            value: format!("{tag}{i}").into_bytes(),
            ..Default::default()
        })
        .collect();
    c.client.write_routed(table, muts).unwrap();
}

#[test]
fn many_keys_come_back_in_order_each_on_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |_| {});
    c.client
        .create_table("t", Split::Even(4), Durability::Nosync)
        .unwrap();
    c.wait_open("t", 4);
    put_keys(&c, "t", 200, "v");
    // Present and absent keys interleaved, a repeat, and one key no
    // tablet can hold (empty): it fails alone.
    let mut keys: Vec<Vec<u8>> = (0..300u32).rev().map(key).collect();
    keys.push(key(7));
    keys.insert(10, Vec::new());
    // A second client, whose map is cached from here on.
    let reader = c.new_client();
    let reads = reader.get_many("t", &keys).unwrap();
    assert_eq!(reads.len(), keys.len());
    for (k, r) in keys.iter().zip(&reads) {
        if k.is_empty() {
            assert!(
                matches!(r, KeyRead::Failed(Error::InvalidArgument(_))),
                "{r:?}"
            );
            continue;
        }
        let i: u32 = std::str::from_utf8(&k[2..]).unwrap().parse().unwrap();
        if i < 200 {
            assert_eq!(r, &KeyRead::Found(format!("v{i}").into_bytes()), "key {i}");
        } else {
            assert_eq!(r, &KeyRead::Absent, "key {i}");
        }
    }

    // The table is dropped and made again, split otherwise: the client's
    // map is stale, every server refuses its keys alone (another table
    // id), and the client asks again after a refresh.
    c.client.drop_table("t").unwrap();
    c.client
        .create_table("t", Split::Even(3), Durability::Nosync)
        .unwrap();
    c.wait_open("t", 3);
    put_keys(&c, "t", 50, "w");
    let keys: Vec<Vec<u8>> = (0..60u32).map(key).collect();
    let reads = reader.get_many("t", &keys).unwrap();
    for (i, r) in reads.iter().enumerate() {
        let want = if i < 50 {
            KeyRead::Found(format!("w{i}").into_bytes())
        } else {
            KeyRead::Absent
        };
        assert_eq!(r, &want, "key {i}");
    }
}

#[test]
fn an_answer_too_large_for_one_message_is_finished_by_asking_again() {
    const BIG: usize = 30 << 20;
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |_| {});
    c.client
        .create_table("big", Split::Even(1), Durability::Nosync)
        .unwrap();
    c.wait_open("big", 1);
    for i in 0..3u8 {
        c.client.put("big", &[b'b', i], &vec![i; BIG]).unwrap();
    }
    let keys: Vec<Vec<u8>> = (0..3u8).map(|i| vec![b'b', i]).collect();
    // One server's answer stops before the third 30 MiB value.
    let addr = c.addr();
    let n = c.rt.block_on(async {
        let resp = raw_tserver_as(&addr, Some(&c.admin))
            .await
            .max_decoding_message_size(tablinum_proto::GRPC_MESSAGE_BYTES_MAX)
            .get_many(v1::GetManyRequest {
                table: "big".into(),
                table_id: 0,
                keys: keys.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        resp.results.len()
    });
    assert_eq!(n, 2, "a full answer holds the values that fit");
    // The client asks again for the rest.
    let reads = c.client.get_many("big", &keys).unwrap();
    for (i, r) in reads.iter().enumerate() {
        match r {
            KeyRead::Found(v) => assert!(v.len() == BIG && v[0] == i as u8, "key {i}"),
            other => panic!("key {i}: {other:?}"),
        }
    }
}

#[test]
fn a_get_many_says_what_is_wrong_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |_| {});
    let addr = c.addr();
    c.rt.block_on(async {
        let mut t = raw_tserver_as(&addr, Some(&c.admin)).await;
        for (keys, words) in [
            (Vec::new(), "1..=10000"),
            (vec![b"k".to_vec(); 10_001], "GET_MANY_KEYS_MAX"),
        ] {
            let e = t
                .get_many(v1::GetManyRequest {
                    table: "t".into(),
                    table_id: 0,
                    keys,
                })
                .await
                .unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
            assert!(e.message().contains(words), "{e:?}");
        }
        // A table this server does not host: every key fails alone.
        let r = t
            .get_many(v1::GetManyRequest {
                table: "nope".into(),
                table_id: 0,
                keys: vec![b"a".to_vec(), b"b".to_vec()],
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.results.len(), 2);
        for k in &r.results {
            assert_eq!(k.code, tonic::Code::FailedPrecondition as u32);
            assert_eq!(k.reason, v1::ErrorReason::NotServing as i32);
        }
    });
}
