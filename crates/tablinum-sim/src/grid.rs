//! The report's four result tables, as data.
//!
//! Owns [`GridRow`] (one test setup plus the report's own measurements) and
//! [`report_grids`], transcribed row by row from
//! `shared/seeds/000_1f2da2c05261ba90.txt` in the report's order. It must
//! never hold simulated numbers: those live in [`crate::RowResult`].

use serde::Serialize;

use crate::workload::TestKind;

/// Which tier served the scans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ScanType {
    /// The tablet server (the report's "immediate" consistency).
    Immediate,
    /// Scan servers (the report's "eventual" consistency).
    Eventual,
}

impl ScanType {
    /// The name used in tables and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            ScanType::Immediate => "immediate",
            ScanType::Eventual => "eventual",
        }
    }
}

/// What the report measured for one row (its single-thread probe).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Reported {
    /// Busy responses the probe received.
    pub busy_events: u32,
    /// Mean scan time, ms.
    pub avg_ms: f64,
    /// Standard deviation, ms.
    pub sd_ms: f64,
    /// Fastest scan, ms.
    pub min_ms: f64,
    /// Slowest scan, ms.
    pub max_ms: f64,
}

/// One row of a report table: the setup and the report's measurement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GridRow {
    /// The table the row belongs to.
    pub test: TestKind,
    /// The report's test id, e.g. "D807".
    pub id: &'static str,
    /// Scan servers running (`None` for tablet-server rows).
    pub sservers: Option<u32>,
    /// Initial servers per tablet (`None` for tablet-server rows).
    pub initial: Option<u32>,
    /// Busy timeout, ms (`None` for tablet-server rows).
    pub busy_timeout_ms: Option<u64>,
    /// Tablet server or scan servers.
    pub scan_type: ScanType,
    /// Closed-loop client threads besides the probe.
    pub concurrent: u32,
    /// The report's numbers.
    pub reported: Reported,
}

#[allow(clippy::too_many_arguments)]
fn row(
    test: TestKind,
    id: &'static str,
    eventual: Option<(u32, u32, u64)>,
    concurrent: u32,
    busy_events: u32,
    avg_ms: f64,
    sd_ms: f64,
    min_ms: f64,
    max_ms: f64,
) -> GridRow {
    GridRow {
        test,
        id,
        sservers: eventual.map(|e| e.0),
        initial: eventual.map(|e| e.1),
        busy_timeout_ms: eventual.map(|e| e.2),
        scan_type: if eventual.is_some() {
            ScanType::Eventual
        } else {
            ScanType::Immediate
        },
        concurrent,
        reported: Reported {
            busy_events,
            avg_ms,
            sd_ms,
            min_ms,
            max_ms,
        },
    }
}

/// All rows of the report's four tables, in the report's order.
pub fn report_grids() -> Vec<GridRow> {
    use TestKind::*;
    vec![
        row(Large, "D806", None, 193, 0, 9060.0, 8142.0, 230.0, 35638.0),
        row(
            Large,
            "D803",
            Some((12, 3, 33)),
            193,
            93,
            1345.0,
            1342.0,
            32.0,
            5249.0,
        ),
        row(
            Large,
            "D804",
            Some((12, 1, 33)),
            193,
            273,
            456.0,
            514.0,
            32.0,
            3740.0,
        ),
        row(
            Large,
            "D805",
            Some((23, 1, 33)),
            193,
            283,
            338.0,
            363.0,
            38.0,
            3043.0,
        ),
        row(
            Large,
            "D807",
            Some((23, 3, 10)),
            193,
            256,
            291.0,
            263.0,
            16.0,
            1398.0,
        ),
        row(
            Large,
            "D808",
            Some((23, 23, 10)),
            193,
            0,
            228.0,
            203.0,
            2.0,
            993.0,
        ),
        row(Grep, "D816", None, 193, 0, 3203.0, 427.0, 2391.0, 72960.0),
        row(
            Grep,
            "D815",
            Some((12, 3, 33)),
            193,
            1022,
            218.0,
            168.0,
            32.0,
            983.0,
        ),
        row(
            Grep,
            "D811",
            Some((23, 3, 33)),
            193,
            954,
            160.0,
            124.0,
            36.0,
            886.0,
        ),
        row(
            Grep,
            "D812",
            Some((23, 3, 10)),
            193,
            924,
            146.0,
            133.0,
            12.0,
            926.0,
        ),
        row(
            Grep,
            "D813",
            Some((23, 23, 33)),
            193,
            21,
            138.0,
            133.0,
            2.0,
            729.0,
        ),
        row(
            Grep,
            "D814",
            Some((23, 12, 33)),
            193,
            234,
            207.0,
            185.0,
            3.0,
            1167.0,
        ),
        row(Grep5, "D821", None, 193, 0, 4670.0, 4295.0, 5.0, 21248.0),
        row(
            Grep5,
            "D817",
            Some((12, 3, 33)),
            193,
            1656,
            589.0,
            470.0,
            14.0,
            2762.0,
        ),
        row(
            Grep5,
            "D818",
            Some((23, 3, 33)),
            193,
            763,
            439.0,
            386.0,
            4.0,
            2429.0,
        ),
        row(
            Grep5,
            "D819",
            Some((23, 1, 33)),
            193,
            1509,
            391.0,
            317.0,
            20.0,
            1669.0,
        ),
        row(
            Grep5,
            "D820",
            Some((23, 23, 33)),
            193,
            48,
            348.0,
            311.0,
            5.0,
            1484.0,
        ),
        row(Small, "D824", None, 721, 0, 548.0, 37.0, 370.0, 880.0),
        row(
            Small,
            "D833",
            Some((3, 1, 33)),
            721,
            2645,
            92.0,
            39.0,
            37.0,
            790.0,
        ),
        row(
            Small,
            "D832",
            Some((6, 1, 33)),
            721,
            2052,
            60.0,
            23.0,
            38.0,
            648.0,
        ),
        row(
            Small,
            "D825",
            Some((12, 3, 33)),
            721,
            1621,
            53.0,
            22.0,
            28.0,
            687.0,
        ),
        row(
            Small,
            "D826",
            Some((12, 3, 5)),
            721,
            5919,
            53.0,
            30.0,
            14.0,
            1008.0,
        ),
        row(
            Small,
            "D830",
            Some((23, 23, 33)),
            721,
            132,
            51.0,
            19.0,
            1.0,
            598.0,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_have_all_rows() {
        let g = report_grids();
        assert_eq!(g.len(), 23);
        let count = |k| g.iter().filter(|r| r.test == k).count();
        assert_eq!(count(TestKind::Large), 6);
        assert_eq!(count(TestKind::Grep), 6);
        assert_eq!(count(TestKind::Grep5), 5);
        assert_eq!(count(TestKind::Small), 6);
        for r in &g {
            assert_eq!(
                r.scan_type == ScanType::Immediate,
                r.sservers.is_none(),
                "{}",
                r.id
            );
            if let (Some(s), Some(i)) = (r.sservers, r.initial) {
                assert!(i <= s, "{}", r.id);
            }
        }
    }
}
