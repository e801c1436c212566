//! Parquet files of a file sink: one row per record with the columns
//! `partition` (u32, the source partition), `offset` (u64, the record's
//! input offset) and `record` (UTF-8, the record's JSON), written with the
//! `parquet` crate's Arrow writer (snappy-compressed) and read back with its
//! reader. A record that is not UTF-8 never reaches here (the runner sends
//! it to the dead-letter topic).
//!
//! Owns the schema and the two calls; never names, syncs or renames files
//! (the runner's commit does, as for JSON lines).

use std::path::Path;
use std::sync::Arc;

use arrow_array::{Array, RecordBatch, StringArray, UInt32Array, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("partition", DataType::UInt32, false),
        Field::new("offset", DataType::UInt64, false),
        Field::new("record", DataType::Utf8, false),
    ]))
}

/// Writes `rows` (input offset, UTF-8 JSON) of source partition `p` as one
/// Parquet file into `file`; the caller syncs it.
pub fn write(file: &std::fs::File, p: u32, rows: &[(u64, Vec<u8>)]) -> Result<(), String> {
    let mut records = Vec::with_capacity(rows.len());
    for (o, r) in rows {
        records.push(
            std::str::from_utf8(r)
                .map_err(|e| format!("record at offset {o} is not UTF-8: {e}"))?,
        );
    }
    let batch = RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(UInt32Array::from(vec![p; rows.len()])),
            Arc::new(UInt64Array::from(
                rows.iter().map(|r| r.0).collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(records)),
        ],
    )
    .map_err(|e| e.to_string())?;
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .build();
    let mut w = ArrowWriter::try_new(
        file.try_clone().map_err(|e| e.to_string())?,
        schema(),
        Some(props),
    )
    .map_err(|e| e.to_string())?;
    w.write(&batch).map_err(|e| e.to_string())?;
    w.close().map_err(|e| e.to_string())?;
    Ok(())
}

/// Reads every row of the Parquet file at `path`: (partition, offset,
/// record). A file that is not this schema's Parquet is an error naming
/// what was wrong.
pub fn read(path: &Path, out: &mut dyn FnMut(u32, u64, &[u8])) -> Result<(), String> {
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(f)
        .and_then(|b| b.build())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    for batch in reader {
        let batch = batch.map_err(|e| format!("{}: {e}", path.display()))?;
        let col = |name: &str| {
            batch
                .column_by_name(name)
                .ok_or_else(|| format!("{}: no column {name}", path.display()))
        };
        let parts = col("partition")?;
        let offsets = col("offset")?;
        let records = col("record")?;
        let (Some(parts), Some(offsets), Some(records)) = (
            parts.as_any().downcast_ref::<UInt32Array>(),
            offsets.as_any().downcast_ref::<UInt64Array>(),
            records.as_any().downcast_ref::<StringArray>(),
        ) else {
            return Err(format!("{}: columns of unexpected types", path.display()));
        };
        for i in 0..batch.num_rows() {
            out(
                parts.value(i),
                offsets.value(i),
                records.value(i).as_bytes(),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_and_damage_is_named() {
        let d = std::env::temp_dir().join(format!("tablinum-parquet-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let path = d.join("x.parquet");
        let rows: Vec<(u64, Vec<u8>)> = (0..1000u64)
            .map(|o| (o * 3, format!("{{\"w\":0,\"s\":{o}}}").into_bytes()))
            .collect();
        let f = std::fs::File::create(&path).unwrap();
        write(&f, 7, &rows).unwrap();
        drop(f);
        let mut back = Vec::new();
        read(&path, &mut |p, o, r| back.push((p, o, r.to_vec()))).unwrap();
        assert_eq!(back.len(), 1000);
        assert!(back
            .iter()
            .zip(&rows)
            .all(|(b, r)| b.0 == 7 && b.1 == r.0 && b.2 == r.1));
        std::fs::write(&path, b"PAR1 not really").unwrap();
        assert!(read(&path, &mut |_, _, _| {})
            .unwrap_err()
            .contains("x.parquet"));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
