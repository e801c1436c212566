//! The service-time model's parameters.
//!
//! Owns [`Calibration`]: machine shapes (threads, cores), per-request,
//! per-session and per-entry CPU costs, the shared storage tier, the
//! cache-warmth penalty and network round trips. A later benchmark fills the
//! per-entry costs from scans measured on this machine (it deserialises or
//! edits a `Calibration`); [`Calibration::default`] is a hand fit to the
//! report (see its docs). It must never run a simulation or read a file.

use serde::{Deserialize, Serialize};

/// Every parameter of the simulated cluster's service times. All are
/// recorded next to simulated results so a number can be traced to its model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    /// Scan threads per scan server (the report: 16).
    pub sserver_threads: u32,
    /// Physical cores per scan server (Standard_D8ds_v5: 8 vCPUs = 4 cores
    /// with two hardware threads each).
    pub sserver_cores: f64,
    /// Extra throughput of a core's second hardware thread (0.3: a core
    /// running two tasks does 1.3× the work of one).
    pub smt_yield: f64,
    /// Tablet servers (the report: 3); tablet i is hosted by tablet server i mod this.
    pub tservers: u32,
    /// Scan threads per tablet server (Accumulo's default executor: 16).
    pub tserver_threads: u32,
    /// Physical cores per tablet server (Standard_D8s_v4: 8 vCPUs = 4 cores).
    pub tserver_cores: f64,
    /// Tablet-server CPU cost per unit of scan-server CPU cost for scan set-up
    /// and entries read (older VM generation, co-located datanode).
    pub tserver_cpu_factor: f64,
    /// Tablet-server cost per entry returned relative to a scan server.
    pub tserver_return_factor: f64,
    /// Server CPU per request (`startScan` or `continueScan`: Thrift,
    /// authorisation, file reservation, session), spent before the task is
    /// queued, so busy attempts pay it too, µs.
    pub request_cpu_us: f64,
    /// CPU to open a scan session on a server (session, file set, iterator stack), µs.
    pub scan_start_us: f64,
    /// CPU per entry read through the iterator stack, ns.
    pub entry_read_ns: f64,
    /// Extra CPU per entry read for the grep iterator, ns.
    pub grep_entry_ns: f64,
    /// CPU per entry returned (serialisation), ns.
    pub entry_returned_ns: f64,
    /// Entries returned per batch (Accumulo's scanner batch size: 1000).
    pub batch_entries: u64,
    /// Concurrent requests the shared storage tier (the 3 datanodes) serves; 0 disables it.
    pub storage_slots: u32,
    /// Storage time of a scan session's first read (seek, block fetch), µs.
    pub storage_seek_us: f64,
    /// Storage time per entry read, ns.
    pub storage_entry_ns: f64,
    /// Concurrent requests each tablet server's co-located datanode serves it.
    pub tserver_storage_slots: u32,
    /// Extra storage time of a session on a server that has not read the
    /// tablet within `cache_warm_ms` (file refs, index blocks, metadata), µs.
    pub cold_start_us: f64,
    /// How long a server stays warm for a tablet after reading it, ms.
    pub cache_warm_ms: u64,
    /// Client↔server network round trip, µs (half each way).
    pub rpc_round_trip_us: u64,
    /// Minimum simulated time before the probe starts, ms.
    pub warmup_ms: u64,
}

impl Default for Calibration {
    /// A hand fit to the report, not a measurement on any machine.
    ///
    /// * From the report: 16 scan threads, 8-vCPU VMs (modelled as 4 cores
    ///   with SMT yield 0.3), 3 tablet servers, Accumulo's 1000-entry batch.
    /// * Fitted, one set for all four tables: `entry_read_ns` 2000 and
    ///   `entry_returned_ns` 1000 from D813 (grep, all servers) and D808
    ///   (large, all servers); `scan_start_us` 480 and `request_cpu_us` 400
    ///   from D833/D832 (3 and 6 servers, CPU-bound); `storage_slots` 24 ×
    ///   `storage_seek_us` 1700 (≈ 14k session reads/s, the 3 datanodes the
    ///   report saw "tapped out") from D830/D825.
    /// * Fitted for the tablet-server rows only: `tserver_cpu_factor` 1.15 and
    ///   `tserver_return_factor` 3.5 (D806, D816); `tserver_storage_slots` 2
    ///   (D824: the report saw only the co-located datanode loaded and the
    ///   tablet server below full CPU). No physical derivation is claimed.
    /// * Guessed, with little effect on the grids: `cold_start_us` 20 ms,
    ///   `cache_warm_ms` 5 min (Accumulo's scan-ref expiry), 0.6 ms RTT.
    fn default() -> Self {
        Calibration {
            sserver_threads: 16,
            sserver_cores: 4.0,
            smt_yield: 0.3,
            tservers: 3,
            tserver_threads: 16,
            tserver_cores: 4.0,
            tserver_cpu_factor: 1.15,
            tserver_return_factor: 3.5,
            request_cpu_us: 400.0,
            scan_start_us: 480.0,
            entry_read_ns: 2_000.0,
            grep_entry_ns: 0.0,
            entry_returned_ns: 1_000.0,
            batch_entries: 1_000,
            storage_slots: 24,
            storage_seek_us: 1_700.0,
            storage_entry_ns: 0.0,
            tserver_storage_slots: 2,
            cold_start_us: 20_000.0,
            cache_warm_ms: 300_000,
            rpc_round_trip_us: 600,
            warmup_ms: 500,
        }
    }
}
