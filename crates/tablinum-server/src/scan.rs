//! The server side of one flow-controlled scan stream.
//!
//! Owns the credit window (at most `window` unacknowledged batches in
//! flight; each client `ScanAck` returns credit and may change the window),
//! the ack-wait timeout, and the cursor that reads one tablet's objects or
//! index entries in batches bounded by rows and bytes. A stream whose
//! client went away stops at its next batch. Never reads ahead more than one
//! batch beyond what the window allows.

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tablinum_engine::{HeadIter, ObjectIter, Store};
use tablinum_proto::v1::Row;
use tokio::sync::Notify;

#[derive(Debug)]
struct CreditState {
    window: u32,
    in_flight: u32,
    cancelled: bool,
}

/// The window of one stream.
#[derive(Debug)]
pub struct Credit {
    st: Mutex<CreditState>,
    notify: Notify,
}

/// Why a producer stopped waiting.
#[derive(Debug, PartialEq, Eq)]
pub enum CreditError {
    /// The client cancelled or went away.
    Cancelled,
    /// No acknowledgement within the ack-wait timeout.
    AckTimeout,
}

impl Credit {
    /// A window of `window` batches.
    pub fn new(window: u32) -> Arc<Credit> {
        Arc::new(Credit {
            st: Mutex::new(CreditState {
                window: window.max(1),
                in_flight: 0,
                cancelled: false,
            }),
            notify: Notify::new(),
        })
    }

    /// Takes one batch of credit, waiting up to `timeout` for an ack.
    pub async fn acquire(&self, timeout: Duration) -> Result<(), CreditError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = self.st.lock();
                if st.cancelled {
                    return Err(CreditError::Cancelled);
                }
                if st.in_flight < st.window {
                    st.in_flight += 1;
                    return Ok(());
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let st = self.st.lock();
                if st.cancelled {
                    return Err(CreditError::Cancelled);
                }
                if st.in_flight >= st.window {
                    return Err(CreditError::AckTimeout);
                }
            }
        }
    }

    /// The client consumed `batches`; a non-zero `window` replaces the window.
    pub fn ack(&self, batches: u32, window: u32) {
        let mut st = self.st.lock();
        st.in_flight = st.in_flight.saturating_sub(batches);
        if window > 0 {
            st.window = window.min(tablinum_proto::WINDOW_BATCHES_MAX);
        }
        drop(st);
        self.notify.notify_waiters();
    }

    /// The client went away.
    pub fn cancel(&self) {
        self.st.lock().cancelled = true;
        self.notify.notify_waiters();
    }
}

/// Reads one tablet in batches.
pub enum Cursor {
    /// Keys and values.
    Objects(ObjectIter),
    /// Keys only.
    Keys(HeadIter),
    /// Index entries (term, key), paged through `index_query`.
    Index {
        /// The tablet.
        store: Arc<Store>,
        /// Index name.
        name: Vec<u8>,
        /// Next lower bound on terms.
        lo: Bound<Vec<u8>>,
        /// Exclusive end term (empty: unbounded).
        end: Vec<u8>,
        /// Last (term, key) returned, to skip on the next page.
        last: Option<(Vec<u8>, Vec<u8>)>,
        /// Fetched, not yet returned.
        buf: VecDeque<Row>,
        /// No more pages.
        done: bool,
    },
}

/// Smallest index page fetched at once, rows.
const INDEX_PAGE_ROWS_MIN: usize = 64;

impl Cursor {
    /// Next batch of at most `rows_max` rows and about `bytes_max` bytes;
    /// `(rows, exhausted)`.
    pub fn next_batch(
        &mut self,
        rows_max: usize,
        bytes_max: usize,
    ) -> tablinum_engine::Result<(Vec<Row>, bool)> {
        let mut out = Vec::new();
        let mut bytes = 0usize;
        loop {
            if out.len() >= rows_max || (bytes >= bytes_max && !out.is_empty()) {
                return Ok((out, false));
            }
            let row = match self {
                Cursor::Objects(it) => match it.next() {
                    Some(r) => {
                        let (key, value) = r?;
                        Row {
                            key,
                            value,
                            term: Vec::new(),
                        }
                    }
                    None => return Ok((out, true)),
                },
                Cursor::Keys(it) => match it.next() {
                    Some(r) => Row {
                        key: r?.0,
                        value: Vec::new(),
                        term: Vec::new(),
                    },
                    None => return Ok((out, true)),
                },
                Cursor::Index {
                    store,
                    name,
                    lo,
                    end,
                    last,
                    buf,
                    done,
                } => {
                    if buf.is_empty() && !*done {
                        let mut page = rows_max.max(INDEX_PAGE_ROWS_MIN);
                        loop {
                            let hi = if end.is_empty() {
                                Bound::Unbounded
                            } else {
                                Bound::Excluded(end.as_slice())
                            };
                            let lo_ref = match lo {
                                Bound::Included(v) => Bound::Included(v.as_slice()),
                                Bound::Excluded(v) => Bound::Excluded(v.as_slice()),
                                Bound::Unbounded => Bound::Unbounded,
                            };
                            let hits = store.index_query(name, (lo_ref, hi), true, page)?;
                            let full = hits.len() >= page;
                            for h in hits {
                                let term = h.term.unwrap_or_default();
                                if let Some((lt, lk)) = last.as_ref() {
                                    if (&term, &h.key) <= (lt, lk) {
                                        continue;
                                    }
                                }
                                buf.push_back(Row {
                                    key: h.key,
                                    value: Vec::new(),
                                    term,
                                });
                            }
                            if !buf.is_empty() || !full {
                                *done = !full;
                                break;
                            }
                            // A page of one term's keys already returned:
                            // fetch a bigger page.
                            page = page.saturating_mul(4);
                        }
                        if let Some(r) = buf.back() {
                            *lo = Bound::Included(r.term.clone());
                        }
                    }
                    match buf.pop_front() {
                        Some(r) => {
                            *last = Some((r.term.clone(), r.key.clone()));
                            r
                        }
                        None => return Ok((out, true)),
                    }
                }
            };
            bytes += row.key.len() + row.value.len() + row.term.len();
            out.push(row);
        }
    }
}
