//! Topics through the cluster: create, append, read from an offset,
//! consumer-group positions, describe. A topic is a table with one tablet
//! per partition (layout: `tablinum_proto::topic`); appends go to the
//! tablet server, which assigns the offsets.
//!
//! Owns the client side of topics; never assigns an offset itself.

use std::ops::ControlFlow;

pub use tablinum_proto::topic::Retention;
use tablinum_proto::topic::{self, Head};
use tablinum_proto::v1;

use crate::{AsyncClient, Durability, Error, Mutation, Query, Result, Split, Table};

/// A topic and its partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topic {
    /// The topic's name (its table is `topic.` + it).
    pub name: String,
    /// Its table.
    pub table: Table,
}

impl Topic {
    /// Its number of partitions.
    pub fn partitions(&self) -> u32 {
        self.table.tablets
    }
}

/// Where an exactly-once writer stands: the append applies only if the
/// writer's stored position is `expect`, and stores `position` with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterCheck {
    /// The writer's name (a flow task).
    pub writer: String,
    /// The position it last stored (empty: none yet).
    pub expect: Vec<u8>,
    /// The position these records bring it to.
    pub position: Vec<u8>,
}

/// One record read from a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its offset.
    pub offset: u64,
    /// Its bytes.
    pub value: Vec<u8>,
}

fn checked(topic: &str) -> Result<String> {
    topic::check_topic_name(topic).map_err(Error::InvalidArgument)?;
    Ok(topic::table_name(topic))
}

impl AsyncClient {
    /// Creates topic `name` of `partitions` partitions (1..=1024); appends
    /// are acknowledged after `durability`.
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        durability: Durability,
    ) -> Result<Topic> {
        let table = checked(name)?;
        if partitions == 0 || partitions > topic::PARTITIONS_MAX {
            return Err(Error::InvalidArgument(format!(
                "a topic has 1..={} partitions, not {partitions}",
                topic::PARTITIONS_MAX
            )));
        }
        let split = if partitions == 1 {
            Split::Even(1)
        } else {
            Split::Points(topic::split_points(partitions))
        };
        let table = self.create_table(&table, split, durability).await?;
        Ok(Topic {
            name: name.to_string(),
            table,
        })
    }

    /// Drops topic `name` and every record in it.
    pub async fn drop_topic(&self, name: &str) -> Result<()> {
        self.drop_table(&checked(name)?).await
    }

    /// Every topic, by name.
    pub async fn list_topics(&self) -> Result<Vec<Topic>> {
        let mut v: Vec<Topic> = self
            .list_tables()
            .await?
            .into_iter()
            .filter_map(|t| {
                topic::topic_of(&t.name).map(|n| Topic {
                    name: n.to_string(),
                    table: t.clone(),
                })
            })
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(v)
    }

    /// Topic `name`, or `NotFound`.
    pub async fn topic(&self, name: &str) -> Result<Topic> {
        let table = checked(name)?;
        let loc = self.locations(&table, false).await?;
        Ok(Topic {
            name: name.to_string(),
            table: loc.table.clone(),
        })
    }

    /// Appends `records` to partition `p` of `topic`; returns the first
    /// record's offset and the next offset. Without a `writer` a failure
    /// that does not prove the append unapplied is `OutcomeUnknown`; with
    /// one, the append is retried (the check makes a second copy land as
    /// `Conflict`, never twice).
    pub async fn append(
        &self,
        topic: &str,
        p: u32,
        records: Vec<Vec<u8>>,
        writer: Option<WriterCheck>,
    ) -> Result<(u64, u64)> {
        let table = checked(topic)?;
        let exactly_once = writer.is_some();
        let w = writer.unwrap_or(WriterCheck {
            writer: String::new(),
            expect: Vec::new(),
            position: Vec::new(),
        });
        let req = v1::AppendRequest {
            table: table.clone(),
            table_id: 0,
            partition: p,
            records: records.into_iter().map(bytes::Bytes::from).collect(),
            writer: w.writer,
            writer_expect: w.expect,
            writer_position: w.position,
        };
        let deadline_ms = tablinum_proto::unix_ms().saturating_add(
            u64::try_from(self.inner.cfg.retry_deadline.as_millis()).unwrap_or(u64::MAX),
        );
        self.with_tablet(
            &table,
            &topic::record_key(p, 0),
            exactly_once,
            |mut c, table_id| {
                let mut r = tonic::Request::new(v1::AppendRequest {
                    table_id,
                    ..req.clone()
                });
                if let Ok(v) = deadline_ms.to_string().parse() {
                    r.metadata_mut().insert(tablinum_proto::DEADLINE_HEADER, v);
                }
                async move {
                    let a = c.append(r).await?.into_inner();
                    Ok((a.first_offset, a.next_offset))
                }
            },
        )
        .await
    }

    /// Partition `p`'s head: the next offset and the first retained.
    pub async fn topic_head(&self, topic: &str, p: u32) -> Result<Head> {
        let table = checked(topic)?;
        let v = self.get(&table, &topic::head_key(p)).await?;
        Head::decode(v.as_deref()).map_err(Error::Server)
    }

    /// The position writer `writer` last stored in partition `p` (empty:
    /// none).
    pub async fn writer_position(&self, topic: &str, p: u32, writer: &str) -> Result<Vec<u8>> {
        let table = checked(topic)?;
        tablinum_proto::topic::check_name("writer", writer).map_err(Error::InvalidArgument)?;
        Ok(self
            .get(&table, &topic::writer_key(p, writer.as_bytes()))
            .await?
            .unwrap_or_default())
    }

    /// Reads partition `p` from offset `from`, at most `max` records (0:
    /// to the end as it is now), handing each to `out` in offset order
    /// until it answers `Break`. Returns the offset after the last record
    /// handed out (`from` if none). A failure after some records were
    /// handed out resumes after them.
    pub async fn read_topic(
        &self,
        topic: &str,
        p: u32,
        from: u64,
        max: u64,
        out: &mut (dyn FnMut(Record) -> ControlFlow<()> + Send),
    ) -> Result<u64> {
        let table = checked(topic)?;
        let mut next = from;
        let mut left = max;
        loop {
            let before = next;
            let mut bad: Option<Vec<u8>> = None;
            let mut stopped = false;
            let mut q = Query::new(&table);
            q.start = topic::record_key(p, next);
            q.end = topic::records_end(p);
            q.limit = left;
            let r = self
                .query_until(&q, &mut |row| {
                    let Some(offset) = topic::record_offset(p, &row.key) else {
                        bad = Some(row.key);
                        return ControlFlow::Break(());
                    };
                    next = offset + 1;
                    let f = out(Record {
                        offset,
                        value: row.value,
                    });
                    stopped = f.is_break();
                    f
                })
                .await;
            if let Some(k) = bad {
                return Err(Error::Server(format!(
                    "topic {topic} partition {p} holds a row that is not a record: key {k:02x?}"
                )));
            }
            match r {
                Ok(_) => return Ok(next),
                // Records were handed out before the stream broke: go on
                // after them (the query itself retries only before any).
                Err(Error::Unavailable(_) | Error::Timeout(_))
                    if next > before && !stopped && (max == 0 || left > next - before) =>
                {
                    if max != 0 {
                        left -= next - before;
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Stores consumer group `group`'s next offset in partition `p`.
    pub async fn commit_group(&self, topic: &str, group: &str, p: u32, next: u64) -> Result<()> {
        let table = checked(topic)?;
        tablinum_proto::topic::check_name("group", group).map_err(Error::InvalidArgument)?;
        self.write(
            &table,
            vec![Mutation {
                key: topic::group_key(p, group.as_bytes()),
                value: next.to_be_bytes().to_vec(),
                ..Default::default()
            }],
        )
        .await?;
        Ok(())
    }

    /// Consumer group `group`'s next offset in partition `p` (none: it
    /// never committed there).
    pub async fn group_offset(&self, topic: &str, group: &str, p: u32) -> Result<Option<u64>> {
        let table = checked(topic)?;
        tablinum_proto::topic::check_name("group", group).map_err(Error::InvalidArgument)?;
        match self
            .get(&table, &topic::group_key(p, group.as_bytes()))
            .await?
        {
            Some(v) => Ok(Some(topic::decode_offset(&v).map_err(Error::Server)?)),
            None => Ok(None),
        }
    }
}

impl AsyncClient {
    /// Sets topic `name`'s retention in every partition (admin only): the
    /// tablet servers remove whole appends from the front once they are
    /// older than `r.ms` or the rest still hold `r.bytes`.
    pub async fn set_retention(&self, name: &str, r: Retention) -> Result<()> {
        let t = self.topic(name).await?;
        let table = checked(name)?;
        for p in 0..t.partitions() {
            self.put(&table, &topic::retention_key(p), &r.encode())
                .await?;
        }
        Ok(())
    }

    /// Topic `name`'s retention (as partition 0 holds it).
    pub async fn retention(&self, name: &str) -> Result<Retention> {
        let table = checked(name)?;
        let v = self.get(&table, &topic::retention_key(0)).await?;
        Retention::decode(v.as_deref()).map_err(Error::Server)
    }
}

impl crate::Client {
    /// See [`AsyncClient::create_topic`].
    pub fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        durability: Durability,
    ) -> Result<Topic> {
        self.rt
            .block_on(self.inner.create_topic(name, partitions, durability))
    }

    /// See [`AsyncClient::set_retention`].
    pub fn set_retention(&self, name: &str, r: Retention) -> Result<()> {
        self.rt.block_on(self.inner.set_retention(name, r))
    }

    /// See [`AsyncClient::retention`].
    pub fn retention(&self, name: &str) -> Result<Retention> {
        self.rt.block_on(self.inner.retention(name))
    }

    /// See [`AsyncClient::drop_topic`].
    pub fn drop_topic(&self, name: &str) -> Result<()> {
        self.rt.block_on(self.inner.drop_topic(name))
    }

    /// See [`AsyncClient::list_topics`].
    pub fn list_topics(&self) -> Result<Vec<Topic>> {
        self.rt.block_on(self.inner.list_topics())
    }

    /// See [`AsyncClient::topic`].
    pub fn topic(&self, name: &str) -> Result<Topic> {
        self.rt.block_on(self.inner.topic(name))
    }

    /// See [`AsyncClient::append`].
    pub fn append(
        &self,
        topic: &str,
        p: u32,
        records: Vec<Vec<u8>>,
        writer: Option<WriterCheck>,
    ) -> Result<(u64, u64)> {
        self.rt
            .block_on(self.inner.append(topic, p, records, writer))
    }

    /// See [`AsyncClient::topic_head`].
    pub fn topic_head(&self, topic: &str, p: u32) -> Result<Head> {
        self.rt.block_on(self.inner.topic_head(topic, p))
    }

    /// See [`AsyncClient::writer_position`].
    pub fn writer_position(&self, topic: &str, p: u32, writer: &str) -> Result<Vec<u8>> {
        self.rt
            .block_on(self.inner.writer_position(topic, p, writer))
    }

    /// See [`AsyncClient::read_topic`].
    pub fn read_topic(
        &self,
        topic: &str,
        p: u32,
        from: u64,
        max: u64,
        out: &mut (dyn FnMut(Record) -> ControlFlow<()> + Send),
    ) -> Result<u64> {
        self.rt
            .block_on(self.inner.read_topic(topic, p, from, max, out))
    }

    /// See [`AsyncClient::commit_group`].
    pub fn commit_group(&self, topic: &str, group: &str, p: u32, next: u64) -> Result<()> {
        self.rt
            .block_on(self.inner.commit_group(topic, group, p, next))
    }

    /// See [`AsyncClient::group_offset`].
    pub fn group_offset(&self, topic: &str, group: &str, p: u32) -> Result<Option<u64>> {
        self.rt.block_on(self.inner.group_offset(topic, group, p))
    }
}
