//! tablinum's public gRPC API: the types and services generated from
//! `proto/tablinum.proto` (the documented API) and the limits every server
//! enforces on it.
//!
//! Owns the wire contract only; never opens files or sockets.

#![allow(missing_docs)] // generated code; the .proto documents every field.

/// Generated messages and services of package `tablinum.v1`.
pub mod v1 {
    #![allow(clippy::all, clippy::pedantic)]
    tonic::include_proto!("tablinum.v1");
}

/// Longest table name, bytes.
pub const TABLE_NAME_BYTES_MAX: usize = 128;
/// Most tablets in one table.
pub const TABLETS_PER_TABLE_MAX: u32 = 4096;
/// Most rows in one scan batch.
pub const BATCH_ROWS_MAX: u32 = 10_000;
/// Most unacknowledged batches of one stream (the stream crate's cap).
pub const WINDOW_BATCHES_MAX: u32 = 1024;
/// Largest gRPC message either side accepts, bytes: a 64 MiB value plus
/// headroom for its key, metadata and terms.
pub const GRPC_MESSAGE_BYTES_MAX: usize = 80 << 20;

/// Checks a table name: 1..=128 bytes of `[A-Za-z0-9_.-]`. The error names
/// the problem.
pub fn check_table_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("table name is empty".into());
    }
    if name.len() > TABLE_NAME_BYTES_MAX {
        return Err(format!(
            "table name is {} bytes, the limit is {TABLE_NAME_BYTES_MAX}",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(format!(
            "table name {name:?} has {c:?}; allowed are A-Z a-z 0-9 _ . -"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names() {
        assert!(check_table_name("orders_2026.v1-a").is_ok());
        assert!(check_table_name("").unwrap_err().contains("empty"));
        assert!(check_table_name(&"a".repeat(129))
            .unwrap_err()
            .contains("129 bytes"));
        assert!(check_table_name("a/b").unwrap_err().contains("'/'"));
        assert!(check_table_name("..").is_ok());
    }
}
