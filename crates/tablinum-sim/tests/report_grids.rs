//! Validation of the simulation against the report, and the tablinum
//! default profile's targets. Every number here is simulated. Probe counts
//! are scaled down so the suite runs in seconds; the fleet means used for
//! the checks still average thousands of scans per row.

use tablinum_dispatch::Profiles;
use tablinum_sim::{
    report_grids, run_row, run_rows, table_spearman, table_spearman_fleet, Calibration, GridRow,
    RowResult, Selector, TestKind,
};

const SEED: u64 = 1;
/// Probe scans per row (large-table scans take ~0.25–1.3 s each, small ones
/// ~50 ms but with 721 clients).
const PROBE_SCANS: u32 = 20;
const LARGE_PROBE_SCANS: u32 = 10;
const SMALL_PROBE_SCANS: u32 = 10;

fn rows(kind: TestKind) -> Vec<GridRow> {
    report_grids()
        .into_iter()
        .filter(|r| r.test == kind)
        .collect()
}

fn row(id: &str) -> GridRow {
    report_grids().into_iter().find(|r| r.id == id).unwrap()
}

fn accumulo(kind: TestKind) -> Vec<RowResult> {
    let probe = match kind {
        TestKind::Large => LARGE_PROBE_SCANS,
        TestKind::Small => SMALL_PROBE_SCANS,
        _ => PROBE_SCANS,
    };
    run_rows(
        &rows(kind),
        &Selector::Accumulo21,
        &Calibration::default(),
        SEED,
        probe,
    )
}

fn run_on(id: &str, selector: &Selector, probe_scans: u32) -> RowResult {
    let r = row(id);
    run_row(
        &r,
        selector,
        &Calibration::default(),
        tablinum_sim::row_seed(SEED, &r),
        probe_scans,
    )
}

fn check_ordering(kind: TestKind, results: &[RowResult]) {
    let grids = report_grids();
    for r in results {
        let g = grids.iter().find(|g| g.id == r.id).unwrap();
        eprintln!(
            "{} {}: report avg {:>6.0} busy {:>5} | simulated probe avg {:>7.1} busy {:>4} | fleet avg {:>7.1} ({} scans, {:.2} busy/scan)",
            kind.as_str(),
            r.id,
            g.reported.avg_ms,
            g.reported.busy_events,
            r.avg_ms,
            r.busy_events,
            r.fleet_avg_ms,
            r.fleet_scans,
            r.fleet_busy_per_scan
        );
        assert_eq!(r.source, "simulated");
        assert!(!r.truncated, "{} hit the event cap", r.id);
        assert!(r.fleet_scans >= 500, "{}: too few fleet scans", r.id);
    }
    let fleet = table_spearman_fleet(results, &grids, kind);
    let probe = table_spearman(results, &grids, kind);
    eprintln!(
        "{}: spearman fleet(1 ms) {fleet:.3}, probe {probe:.3}",
        kind.as_str()
    );
    assert!(fleet >= 0.9, "{}: spearman {fleet}", kind.as_str());
}

#[test]
fn large_scan_table_ordering() {
    check_ordering(TestKind::Large, &accumulo(TestKind::Large));
}

#[test]
fn grep_table_ordering() {
    check_ordering(TestKind::Grep, &accumulo(TestKind::Grep));
}

#[test]
fn grep5_table_ordering() {
    check_ordering(TestKind::Grep5, &accumulo(TestKind::Grep5));
}

#[test]
fn small_scan_table_ordering() {
    check_ordering(TestKind::Small, &accumulo(TestKind::Small));
}

#[test]
fn same_seed_same_output() {
    let r = row("D813");
    let cal = Calibration::default();
    let a = run_row(&r, &Selector::TablinumDefault, &cal, 7, 10);
    let b = run_row(&r, &Selector::TablinumDefault, &cal, 7, 10);
    assert_eq!(a, b);
    let c = run_row(&r, &Selector::TablinumDefault, &cal, 8, 10);
    assert_ne!(a.avg_ms, c.avg_ms);
}

/// Target (a): on the large-scan grid with 23 servers, the tablinum default
/// (at most 3 first-attempt servers) is within 1.10× of the all-23-initial
/// ideal (D808's setup) with no more busy responses per scan than Accumulo
/// 2.1's selector at D807's setup (3 initial, 10 ms).
#[test]
fn target_a_large_scans_near_ideal() {
    let ideal = run_on("D808", &Selector::Accumulo21, PROBE_SCANS);
    let d807 = run_on("D807", &Selector::Accumulo21, PROBE_SCANS);
    let ours = run_on("D807", &Selector::TablinumDefault, PROBE_SCANS);
    // For the record only: Accumulo's PROFILES_DEFAULT queues on the hot set
    // (few busy responses, ~5× the ideal time); a short run is enough to see it.
    let acc_default = run_on(
        "D807",
        &Selector::Custom {
            name: "accumulo-default".into(),
            profiles: Profiles::accumulo_default(),
        },
        3,
    );
    let ratio = ours.fleet_avg_ms / ideal.fleet_avg_ms;
    eprintln!(
        "target a: tablinum-default fleet {:.1} ms ({:.2} busy/scan), ideal D808 {:.1} ms, ratio {ratio:.3}; \
         accumulo-2.1 D807 {:.1} ms ({:.2} busy/scan); accumulo PROFILES_DEFAULT {:.1} ms ({:.2} busy/scan)",
        ours.fleet_avg_ms,
        ours.fleet_busy_per_scan,
        ideal.fleet_avg_ms,
        d807.fleet_avg_ms,
        d807.fleet_busy_per_scan,
        acc_default.fleet_avg_ms,
        acc_default.fleet_busy_per_scan,
    );
    assert!(ours.initial.unwrap() <= 3);
    assert!(ratio <= 1.10, "ratio {ratio}");
    assert!(
        ours.fleet_busy_per_scan <= d807.fleet_busy_per_scan,
        "{} > {}",
        ours.fleet_busy_per_scan,
        d807.fleet_busy_per_scan
    );
}

/// Target (b): on the small-scan grid, 5 ms then 33 ms plans with at most 3
/// first-attempt servers average no more than the all-servers-initial shape
/// (D830's setup). The small runs are storage-bound, so "no more" is
/// checked within 1 % (the runs differ by a tenth of a millisecond).
#[test]
fn target_b_small_scans_match_best_shape() {
    let five_then_33 = Selector::Custom {
        name: "tablinum-5ms-33ms".into(),
        profiles: Profiles::from_toml_str(
            &tablinum_dispatch::profile::BUILTIN_PROFILES_TOML
                .replace("busy_timeout_ms = 2 }", "busy_timeout_ms = 5 }"),
        )
        .unwrap(),
    };
    assert_eq!(
        five_then_33.profile_for(&row("D830")).unwrap().attempts[0].busy_timeout_ms,
        5
    );
    let best = run_on("D830", &Selector::Accumulo21, SMALL_PROBE_SCANS);
    for selector in [&five_then_33, &Selector::TablinumDefault] {
        for id in ["D830", "D825"] {
            let ours = run_on(id, selector, SMALL_PROBE_SCANS);
            eprintln!(
                "target b: {} on {id}'s servers: fleet {:.2} ms ({:.2} busy/scan) vs D830 shape {:.2} ms ({:.2} busy/scan)",
                selector.name(),
                ours.fleet_avg_ms,
                ours.fleet_busy_per_scan,
                best.fleet_avg_ms,
                best.fleet_busy_per_scan
            );
            assert!(ours.initial.unwrap() <= 3);
            assert!(ours.fleet_avg_ms <= best.fleet_avg_ms * 1.01);
        }
    }
}
