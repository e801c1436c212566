//! The `memory` target: a `BTreeMap` under a `RwLock`.
//!
//! Owns nothing but the map. It is the baseline the harness is tested against
//! and a measure of the harness's own overhead; it must never persist anything
//! or pretend to be durable (it reports no disk bytes).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{PoisonError, RwLock};

use crate::target::{Target, TargetError};

/// An in-memory sorted map.
#[derive(Debug, Default)]
pub struct MemoryTarget {
    map: RwLock<BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl MemoryTarget {
    /// The name `--target` uses.
    pub const NAME: &'static str = "memory";

    /// An empty map.
    pub fn new() -> MemoryTarget {
        MemoryTarget::default()
    }

    /// Objects stored now.
    pub fn len(&self) -> usize {
        self.map
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// `true` when no object is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Target for MemoryTarget {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, TargetError> {
        let map = self.map.read().unwrap_or_else(PoisonError::into_inner);
        Ok(map.get(key).cloned())
    }

    fn head(&self, key: &[u8]) -> Result<Option<u64>, TargetError> {
        let map = self.map.read().unwrap_or_else(PoisonError::into_inner);
        Ok(map.get(key).map(|v| v.len() as u64))
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), TargetError> {
        let mut map = self.map.write().unwrap_or_else(PoisonError::into_inner);
        map.insert(key.to_vec(), value.to_vec());
        Ok(())
    }

    fn delete(&self, key: &[u8]) -> Result<(), TargetError> {
        let mut map = self.map.write().unwrap_or_else(PoisonError::into_inner);
        map.remove(key);
        Ok(())
    }

    fn scan(&self, start: &[u8], limit: usize) -> Result<usize, TargetError> {
        let map = self.map.read().unwrap_or_else(PoisonError::into_inner);
        let mut rows = 0;
        for (k, v) in map
            .range::<[u8], _>((Bound::Included(start), Bound::Unbounded))
            .take(limit)
        {
            // Copy out what a client would receive.
            std::hint::black_box((k.clone(), v.clone()));
            rows += 1;
        }
        Ok(rows)
    }

    fn close(&self) -> Result<(), TargetError> {
        Ok(())
    }
}
