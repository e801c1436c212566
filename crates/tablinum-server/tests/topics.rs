//! Topics on a real cluster: appends get dense offsets in order, reads from
//! any offset return exactly what was appended, consumer-group positions
//! are kept, an exactly-once writer's append lands once (a stale or
//! repeated one is refused whole), and bad input is refused with a message
//! naming it while the topic stays unchanged.

mod common;

use std::ops::ControlFlow;

use tablinum_client::topic::WriterCheck;
use tablinum_client::{Durability, Error, Mutation};

use common::TestCluster;

fn read_all(c: &TestCluster, topic: &str, p: u32, from: u64) -> Vec<(u64, Vec<u8>)> {
    let mut got = Vec::new();
    c.client
        .read_topic(topic, p, from, 0, &mut |r| {
            got.push((r.offset, r.value));
            ControlFlow::Continue(())
        })
        .unwrap();
    got
}

#[test]
fn appends_get_dense_offsets_and_read_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |_| {});
    let t = c
        .client
        .create_topic("events", 3, Durability::Sync)
        .unwrap();
    assert_eq!(t.partitions(), 3);
    c.wait_open("topic.events", 3);
    // Concurrent producers on one partition: offsets stay dense.
    let ac = c.client.as_async().clone();
    let ends: Vec<(u64, u64)> = c.rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for w in 0..4u8 {
            let ac = ac.clone();
            set.spawn(async move {
                let mut out = Vec::new();
                for b in 0..10u8 {
                    let recs = (0..25u8).map(|i| vec![w, b, i]).collect();
                    out.push(ac.append("events", 1, recs, None).await.unwrap());
                }
                out
            });
        }
        let mut all = Vec::new();
        while let Some(r) = set.join_next().await {
            all.extend(r.unwrap());
        }
        all
    });
    let mut firsts: Vec<u64> = ends.iter().map(|e| e.0).collect();
    firsts.sort_unstable();
    assert_eq!(firsts, (0..40).map(|i| i * 25).collect::<Vec<_>>());
    assert!(ends.iter().all(|(f, n)| n - f == 25));
    let got = read_all(&c, "events", 1, 0);
    assert_eq!(got.len(), 1_000);
    assert!(got.iter().enumerate().all(|(i, (o, _))| *o == i as u64));
    // Each batch is contiguous and in its producer's order.
    for (f, _) in &ends {
        let b = &got[*f as usize..*f as usize + 25];
        assert!(b
            .iter()
            .enumerate()
            .all(|(i, (_, v))| v[2] == i as u8 && v[..2] == b[0].1[..2]));
    }
    // From the middle, with a limit; other partitions are empty.
    let mut some = Vec::new();
    let next = c
        .client
        .read_topic("events", 1, 990, 5, &mut |r| {
            some.push(r.offset);
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!((some, next), ((990..995).collect::<Vec<_>>(), 995));
    assert!(read_all(&c, "events", 0, 0).is_empty());
    assert_eq!(c.client.topic_head("events", 1).unwrap().next, 1_000);
    // Group positions.
    assert_eq!(c.client.group_offset("events", "g", 1).unwrap(), None);
    c.client.commit_group("events", "g", 1, 640).unwrap();
    assert_eq!(c.client.group_offset("events", "g", 1).unwrap(), Some(640));
    let names: Vec<String> = c
        .client
        .list_topics()
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["events"]);
    c.client.drop_topic("events").unwrap();
    assert!(matches!(c.client.topic("events"), Err(Error::NotFound(_))));
}

#[test]
fn an_exactly_once_writer_lands_once() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |_| {});
    c.client.create_topic("out", 1, Durability::Sync).unwrap();
    c.wait_open("topic.out", 1);
    let check = |expect: &[u8], pos: &[u8]| {
        Some(WriterCheck {
            writer: "flow/sink/src:0".into(),
            expect: expect.to_vec(),
            position: pos.to_vec(),
        })
    };
    let a = c
        .client
        .append(
            "out",
            0,
            vec![b"a".to_vec(), b"b".to_vec()],
            check(b"", b"p2"),
        )
        .unwrap();
    assert_eq!(a, (0, 2));
    // The same append again (its answer was lost, say): refused whole.
    let e = c
        .client
        .append(
            "out",
            0,
            vec![b"a".to_vec(), b"b".to_vec()],
            check(b"", b"p2"),
        )
        .unwrap_err();
    assert!(
        matches!(&e, Error::Conflict(m) if m.contains("writer position moved") && m.contains("nothing was applied")),
        "{e}"
    );
    // A zombie with an older view: refused whole too.
    let e = c
        .client
        .append("out", 0, vec![b"z".to_vec()], check(b"p1", b"p3"))
        .unwrap_err();
    assert!(matches!(e, Error::Conflict(_)), "{e}");
    assert_eq!(read_all(&c, "out", 0, 0).len(), 2);
    // Moving the position alone (no records).
    assert_eq!(
        c.client
            .append("out", 0, vec![], check(b"p2", b"p3"))
            .unwrap(),
        (2, 2)
    );
    assert_eq!(
        c.client
            .writer_position("out", 0, "flow/sink/src:0")
            .unwrap(),
        b"p3"
    );
    // Others append freely between the writer's appends.
    c.client
        .append("out", 0, vec![b"x".to_vec()], None)
        .unwrap();
    assert_eq!(
        c.client
            .append("out", 0, vec![b"c".to_vec()], check(b"p3", b"p4"))
            .unwrap(),
        (3, 4)
    );
    let vals: Vec<Vec<u8>> = read_all(&c, "out", 0, 0).into_iter().map(|r| r.1).collect();
    assert_eq!(
        vals,
        [b"a".to_vec(), b"b".to_vec(), b"x".to_vec(), b"c".to_vec()]
    );
}

#[test]
fn bad_topic_input_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |_| {});
    c.client.create_topic("t", 2, Durability::Nosync).unwrap();
    c.wait_open("topic.t", 2);
    c.client
        .append("t", 0, vec![b"one".to_vec()], None)
        .unwrap();
    let bad = |e: Error, want: &str| {
        assert!(
            matches!(&e, Error::InvalidArgument(m) if m.contains(want)),
            "wanted {want:?}: {e}"
        );
    };
    // Records, heads and writer rows change only through Append.
    let e = c
        .client
        .write(
            "topic.t",
            vec![Mutation {
                key: tablinum_proto::topic::record_key(0, 0),
                value: b"forged".to_vec(),
                ..Default::default()
            }],
        )
        .unwrap_err();
    bad(e, "is a topic");
    bad(
        c.client.append("t", 0, vec![], None).unwrap_err(),
        "at least one record",
    );
    let e = c
        .client
        .create_topic("t2", 0, Durability::Sync)
        .unwrap_err();
    bad(e, "1..=1024 partitions");
    let e = c
        .client
        .create_topic("bad name", 1, Durability::Sync)
        .unwrap_err();
    bad(e, "' '");
    let e = c
        .client
        .append(
            "t",
            0,
            vec![b"x".to_vec()],
            Some(WriterCheck {
                writer: "a b".into(),
                expect: vec![],
                position: vec![1],
            }),
        )
        .unwrap_err();
    bad(e, "writer");
    // A plain table is not a topic.
    c.client
        .create_table("plain", tablinum_client::Split::Even(1), Durability::Nosync)
        .unwrap();
    c.wait_open("plain", 1);
    let mut raw = c.rt.block_on(common::raw_tserver(&c.addr()));
    let e =
        c.rt.block_on(raw.append(tablinum_proto::v1::AppendRequest {
            table: "plain".into(),
            records: vec![b"x".to_vec().into()],
            ..Default::default()
        }))
        .unwrap_err();
    assert!(e.message().contains("needs a topic's table"), "{e:?}");
    // Nothing changed.
    let got = read_all(&c, "t", 0, 0);
    assert_eq!(got, vec![(0, b"one".to_vec())]);
    assert_eq!(c.client.topic_head("t", 0).unwrap().next, 1);
}

#[test]
fn outsiders_and_read_tokens_cannot_append() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |_| {});
    c.client
        .create_topic("guarded", 1, Durability::Sync)
        .unwrap();
    c.wait_open("topic.guarded", 1);
    let (_, reader) = c
        .client
        .create_token(tablinum_client::Role::Read, "reader")
        .unwrap();
    let req = tablinum_proto::v1::AppendRequest {
        table: "topic.guarded".into(),
        records: vec![b"forged".to_vec().into()],
        ..Default::default()
    };
    for (who, cred, code) in [
        ("no credentials", None, tonic::Code::Unauthenticated),
        ("a read token", Some(&reader), tonic::Code::PermissionDenied),
    ] {
        let mut raw = c.rt.block_on(common::raw_tserver_as(&c.addr(), cred));
        let e = c.rt.block_on(raw.append(req.clone())).unwrap_err();
        assert_eq!(e.code(), code, "{who}: {e:?}");
    }
    assert!(read_all(&c, "guarded", 0, 0).is_empty());
    assert_eq!(c.client.topic_head("guarded", 0).unwrap().next, 0);
}
