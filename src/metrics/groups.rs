//! The families a component type owns: declared in its own folder with
//! `families!` (the `file` source's in `src/sources/file/metrics.rs`, …),
//! registered here on first use, so that adding a component with metrics
//! of its own touches nothing in `src/metrics/`.
//!
//! The daemon registers every type's group at start, in the order of the
//! lists of kinds (`Source::register_families`, `src/component/`), so
//! `/metrics` lists them in the same order on every start whatever is
//! configured; a test or bench that builds a component on a bare
//! [`Metrics`](super::Metrics) gets its group registered when the
//! component first asks for it.

use std::any::Any;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::registry::Registry;

use super::Families;

/// One registered group, and how a test samples its families.
struct Entry {
    group: Arc<dyn Any + Send + Sync>,
    #[cfg(test)]
    touch: fn(&(dyn Any + Send + Sync)),
}

/// Every group of component families registered so far, in order.
#[derive(Default)]
pub(super) struct Groups {
    entries: Mutex<Vec<Entry>>,
}

impl std::fmt::Debug for Groups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        write!(f, "Groups({n} registered)")
    }
}

impl Groups {
    /// The group `T`, created and registered in `registry` the first time.
    pub(super) fn get<T>(&self, registry: &Mutex<Registry>) -> Arc<T>
    where
        T: Families + Send + Sync + 'static,
    {
        // A panic elsewhere while the lock was held leaves the list whole
        // (entries are pushed complete), so a poisoned lock is still usable.
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(group) = entries
            .iter()
            .find_map(|e| e.group.clone().downcast::<T>().ok())
        {
            return group;
        }
        let group = Arc::new(T::unregistered());
        group.register(&mut registry.lock().unwrap_or_else(PoisonError::into_inner));
        entries.push(Entry {
            group: group.clone(),
            #[cfg(test)]
            touch: |g| {
                if let Some(g) = g.downcast_ref::<T>() {
                    g.touch_every_family();
                }
            },
        });
        group
    }

    /// A sample in every family of every group.
    #[cfg(test)]
    pub(super) fn touch_every_family(&self) {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        for e in entries.iter() {
            (e.touch)(e.group.as_ref());
        }
    }
}
