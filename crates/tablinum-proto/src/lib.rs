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

pub mod codec;
pub mod error;
pub mod topic;

/// Longest table name, bytes.
pub const TABLE_NAME_BYTES_MAX: usize = 128;
/// Most tablets in one table.
pub const TABLETS_PER_TABLE_MAX: u32 = 4096;
/// Most rows in one scan batch.
pub const BATCH_ROWS_MAX: u32 = 10_000;
/// Buckets of a scan server's served-by-attempt and served-by-plan counts:
/// attempts 1, 2, 3, 4 or later; plans 0, 1, 2, 3 or later.
pub const SERVED_BUCKETS: usize = 4;

/// The served-by bucket of a read that said `attempt` and `plan`: `None`
/// when it said no attempt (0), else (attempt bucket, plan bucket).
pub fn served_buckets(attempt: u32, plan: u32) -> Option<(usize, usize)> {
    if attempt == 0 {
        return None;
    }
    let last = SERVED_BUCKETS - 1;
    let a = usize::try_from(attempt - 1).unwrap_or(usize::MAX).min(last);
    let p = usize::try_from(plan).unwrap_or(usize::MAX).min(last);
    Some((a, p))
}
/// Most unacknowledged batches of one stream: the stream crate's cap,
/// defined there once.
pub const WINDOW_BATCHES_MAX: u32 = tablinum_stream::window::WINDOW_BATCHES_MAX;
/// Most keys in one GetMany.
pub const GET_MANY_KEYS_MAX: usize = 10_000;
/// A GetMany answer stops before a value that would take its values past
/// this many bytes (the keys after it are left for the caller to ask
/// again); the first value always goes, as a lone Get's would.
pub const GET_MANY_RESPONSE_BYTES_MAX: usize = 64 << 20;
/// Largest gRPC message either side accepts, bytes: a 64 MiB value plus
/// headroom for its key, metadata and terms.
pub const GRPC_MESSAGE_BYTES_MAX: usize = 80 << 20;

/// Longest server id in a heartbeat, bytes.
pub const SERVER_ID_BYTES_MAX: usize = 128;
/// Longest address (gRPC or HTTP) in a heartbeat, bytes.
pub const ADDRESS_BYTES_MAX: usize = 256;
/// Most tablets one heartbeat reports.
pub const HEARTBEAT_TABLETS_MAX: usize = 65_536;
/// Most published files one tablet reports.
pub const TABLET_FILES_MAX: usize = 100_000;
/// Longest reason of a tablet's condition in a heartbeat, bytes (a server
/// cuts longer ones).
pub const TABLET_CONDITION_REASON_BYTES_MAX: usize = 1024;
/// Longest published file path (relative to its tablet's directory), bytes.
pub const FILE_PATH_BYTES_MAX: usize = 256;
/// Longest token name, bytes.
pub const TOKEN_NAME_BYTES_MAX: usize = 128;
/// Bytes of a submitted flow definition, at most.
pub const FLOW_DEFINITION_BYTES_MAX: usize = 256 << 10;
/// Tasks of one flow, and tasks one worker reports, at most.
pub const FLOW_TASKS_MAX: u32 = 4096;
/// Submitted flows, at most.
pub const FLOWS_MAX: usize = 1024;
/// Longest flow name, bytes.
pub const FLOW_NAME_BYTES_MAX: usize = 64;

/// Checks a flow name: 1..=64 bytes of `[A-Za-z0-9_-]` (it names topics,
/// tables and files, so no dot and no slash).
pub fn check_flow_name(name: &str) -> Result<(), String> {
    check_chars("flow name", name, 1, FLOW_NAME_BYTES_MAX, |c| {
        c.is_ascii_alphanumeric() || matches!(c, '_' | '-')
    })
}

/// Metadata key of a write's absolute deadline, ms since the Unix epoch.
pub const DEADLINE_HEADER: &str = "tablinum-deadline-unix-ms";

/// Milliseconds since the Unix epoch (the unit of [`DEADLINE_HEADER`]).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Checks a server id: 1..=128 bytes of `[A-Za-z0-9_.:-]`.
pub fn check_server_id(id: &str) -> Result<(), String> {
    check_chars("server_id", id, 1, SERVER_ID_BYTES_MAX, |c| {
        c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-')
    })
}

/// Longest grep pattern of a scan filter, bytes.
pub const FILTER_GREP_BYTES_MAX: usize = 1024;
/// Rows a filtered batch examines at most per row it may return: a rare
/// match does not turn one batch into a scan of the whole tablet.
pub const FILTER_EXAMINE_PER_ROW_MAX: usize = 64;

/// Longest scan-server group name, bytes.
pub const GROUP_BYTES_MAX: usize = 64;
/// Longest busy timeout of a scan, ms (one hour).
pub const BUSY_TIMEOUT_MS_MAX: u32 = 3_600_000;

/// Checks a scan-server group: 1..=64 bytes of `[A-Za-z0-9_.-]`.
pub fn check_group(group: &str) -> Result<(), String> {
    check_chars("group", group, 1, GROUP_BYTES_MAX, |c| {
        c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')
    })
}

/// Checks an address a server announces: `host:port`, at most 256 bytes,
/// host of `[A-Za-z0-9.-]` or a bracketed IPv6 literal, port 1..=65535.
pub fn check_address(what: &str, addr: &str) -> Result<(), String> {
    check_chars(what, addr, 3, ADDRESS_BYTES_MAX, |c| {
        c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']')
    })?;
    let bad = || format!("{what} {addr:?} is not host:port");
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    match port.parse::<u16>() {
        Ok(p) if p > 0 && !host.is_empty() => Ok(()),
        _ => Err(bad()),
    }
}

/// Checks a published file path: relative to its tablet's directory, 1..=256
/// bytes of `[A-Za-z0-9_.-/]`, no empty, `.` or `..` component.
pub fn check_file_path(path: &str) -> Result<(), String> {
    check_chars("file path", path, 1, FILE_PATH_BYTES_MAX, |c| {
        c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/')
    })?;
    if path
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err(format!(
            "file path {path:?} must be relative, without empty, . or .. components"
        ));
    }
    Ok(())
}

/// Checks a token name: 0..=128 bytes of `[A-Za-z0-9_.-@]`.
pub fn check_token_name(name: &str) -> Result<(), String> {
    check_chars("token name", name, 0, TOKEN_NAME_BYTES_MAX, |c| {
        c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '@')
    })
}

fn check_chars(
    what: &str,
    s: &str,
    min: usize,
    max: usize,
    ok: impl Fn(char) -> bool,
) -> Result<(), String> {
    if s.len() < min || s.len() > max {
        return Err(format!(
            "{what} is {} bytes; allowed are {min}..={max}",
            s.len()
        ));
    }
    if let Some(c) = s.chars().find(|c| !ok(*c)) {
        // Debug formatting escapes control characters: no forged log lines.
        return Err(format!(
            "{what} has the character {c:?}, which is not allowed"
        ));
    }
    Ok(())
}

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
    fn served_buckets_fold_late_attempts_and_plans() {
        assert_eq!(served_buckets(0, 3), None);
        assert_eq!(served_buckets(1, 0), Some((0, 0)));
        assert_eq!(served_buckets(2, 1), Some((1, 1)));
        assert_eq!(served_buckets(4, 3), Some((3, 3)));
        assert_eq!(served_buckets(u32::MAX, u32::MAX), Some((3, 3)));
    }

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

    #[test]
    fn heartbeat_fields() {
        assert!(check_server_id("ts-12-34").is_ok());
        assert!(check_server_id("").unwrap_err().contains("0 bytes"));
        assert!(check_server_id(&"a".repeat(5000))
            .unwrap_err()
            .contains("server_id is 5000 bytes"));
        assert!(check_server_id("a\nb").is_err());
        assert!(check_address("address", "127.0.0.1:7410").is_ok());
        assert!(check_address("address", "[::1]:7410").is_ok());
        let e = check_address("address", "evil\nlog line:1").unwrap_err();
        assert!(e.contains("'\\n'"), "{e}");
        assert!(check_address("address", "host:0").is_err());
        assert!(check_address("address", "hostonly").is_err());
        assert!(check_address("address", &format!("{}:1", "a".repeat(300))).is_err());
        assert!(check_file_path("ledger/000001.sst").is_ok());
        for bad in [
            "../../etc/shadow",
            "/etc/shadow",
            "a//b",
            "a/./b",
            "",
            "a\0b",
        ] {
            assert!(check_file_path(bad).is_err(), "{bad}");
        }
        assert!(check_token_name("").is_ok());
        assert!(check_token_name("ci@build-1").is_ok());
        assert!(check_token_name("a b").is_err());
    }
}
