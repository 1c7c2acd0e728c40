//! What changed since the background audit last looked, and where: the namespaces to re-judge.
//!
//! Every watched object has a fingerprint of what the rules read of it (its projection, plus the
//! spec and the metadata of the objects the rules judge whole); an event whose fingerprint is the
//! one already known is noise (an HPA's status every 15 s, a Deployment's rollout counters, a
//! node's heartbeat) and starts no work. A changed one marks its namespace, or the cluster-scoped
//! report, dirty. Fingerprints are 64-bit hashes keyed by a hash of (kind, namespace, name): a
//! few dozen bytes an object rather than a copy of it.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

/// Where a change has to be judged again.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dirty {
    /// Namespaces whose objects must be re-read and re-judged.
    pub namespaces: BTreeSet<String>,
    /// The cluster-scoped report (webhook configurations) must be re-judged.
    pub cluster: bool,
}

impl Dirty {
    pub fn is_empty(&self) -> bool {
        self.namespaces.is_empty() && !self.cluster
    }
}

/// A watched kind's slot (the live view's kinds, then pods).
pub type Slot = usize;

#[derive(Clone, Copy)]
struct Known {
    fingerprint: u64,
    /// The listing it was last seen in (a relist forgets what it did not list again).
    epoch: u32,
    /// Index into `namespaces` (where a forgotten object was).
    namespace: u32,
}

#[derive(Default)]
struct State {
    known: HashMap<u64, (Slot, Known)>,
    /// Namespace names, each once (an object keeps an index into this).
    namespaces: Vec<String>,
    namespace_ids: HashMap<String, u32>,
    /// Per slot: the current listing's epoch, and whether a first listing has completed.
    epochs: HashMap<Slot, u32>,
    synced: BTreeSet<Slot>,
    dirty: Dirty,
    /// Per slot: events that changed something, and events that did not.
    counts: HashMap<Slot, (u64, u64)>,
}

impl State {
    fn namespace_id(&mut self, namespace: &str) -> u32 {
        if let Some(id) = self.namespace_ids.get(namespace) {
            return *id;
        }
        let id = self.namespaces.len() as u32;
        self.namespaces.push(namespace.to_string());
        self.namespace_ids.insert(namespace.to_string(), id);
        id
    }

    fn mark(&mut self, namespace: &str) {
        if namespace.is_empty() {
            self.dirty.cluster = true;
        } else {
            self.dirty.namespaces.insert(namespace.to_string());
        }
    }

    fn count(&mut self, slot: Slot, changed: bool) {
        let c = self.counts.entry(slot).or_default();
        if changed {
            c.0 += 1;
        } else {
            c.1 += 1;
        }
    }
}

/// The change log the background audit reads ([`crate::live::LiveSource::for_audit`] writes it).
#[derive(Default)]
pub struct ChangeLog {
    state: Mutex<State>,
    changed: tokio::sync::Notify,
}

fn key(slot: Slot, namespace: &str, name: &str) -> u64 {
    let mut h = DefaultHasher::new();
    (slot, namespace, name).hash(&mut h);
    h.finish()
}

/// A hash of `value` (the fingerprints' hash function).
pub fn fingerprint(value: &impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

/// A hasher written to: an object's JSON or Debug text is streamed into it, never held (hundreds
/// of status events a second on a large cluster each make one).
struct HashWriter(DefaultHasher);

impl std::io::Write for HashWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.write(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl std::fmt::Write for HashWriter {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.write(s.as_bytes());
        Ok(())
    }
}

/// The fingerprint of `value`'s JSON.
pub fn of_json(value: &impl serde::Serialize) -> u64 {
    let mut w = HashWriter(DefaultHasher::new());
    let _ = serde_json::to_writer(&mut w, value);
    w.0.finish()
}

/// The fingerprint of `value`'s Debug text (the projections: every field, maps in key order).
pub fn of_debug(value: &impl std::fmt::Debug) -> u64 {
    use std::fmt::Write;
    let mut w = HashWriter(DefaultHasher::new());
    let _ = write!(w, "{value:?}");
    w.0.finish()
}

impl ChangeLog {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An object of `slot` was listed or changed, with this fingerprint of what the rules read of
    /// it. Returns whether that changed anything (a first listing changes nothing: the audit's
    /// first full read judges it all).
    pub fn applied(&self, slot: Slot, namespace: &str, name: &str, fingerprint: u64) -> bool {
        let mut s = self.lock();
        let epoch = s.epochs.get(&slot).copied().unwrap_or(0);
        let first_listing = !s.synced.contains(&slot);
        let ns = s.namespace_id(namespace);
        let entry = Known { fingerprint, epoch, namespace: ns };
        let before = s.known.insert(key(slot, namespace, name), (slot, entry));
        let changed = !first_listing && before.is_none_or(|(_, b)| b.fingerprint != fingerprint);
        if changed {
            s.mark(namespace);
        }
        if !first_listing {
            s.count(slot, changed);
        }
        drop(s);
        if changed {
            self.changed.notify_one();
        }
        changed
    }

    /// An object of `slot` was deleted.
    pub fn deleted(&self, slot: Slot, namespace: &str, name: &str) {
        let mut s = self.lock();
        let known = s.known.remove(&key(slot, namespace, name)).is_some();
        if known {
            s.mark(namespace);
            s.count(slot, true);
        }
        drop(s);
        if known {
            self.changed.notify_one();
        }
    }

    /// A (re)listing of `slot` begins: what it does not list again is gone at its end.
    pub fn listing_begins(&self, slot: Slot) {
        let mut s = self.lock();
        *s.epochs.entry(slot).or_insert(0) += 1;
    }

    /// A listing of `slot` is complete: objects it did not list were deleted meanwhile.
    pub fn listing_done(&self, slot: Slot) {
        let mut s = self.lock();
        let epoch = s.epochs.get(&slot).copied().unwrap_or(0);
        let gone: Vec<(u64, u32)> = s
            .known
            .iter()
            .filter(|(_, (sl, k))| *sl == slot && k.epoch != epoch)
            .map(|(key, (_, k))| (*key, k.namespace))
            .collect();
        let any = !gone.is_empty() && s.synced.contains(&slot);
        for (key, ns) in gone {
            s.known.remove(&key);
            if s.synced.contains(&slot) {
                let namespace = s.namespaces[ns as usize].clone();
                s.mark(&namespace);
            }
        }
        s.synced.insert(slot);
        drop(s);
        if any {
            self.changed.notify_one();
        }
    }

    /// Marks namespaces (`""`: the cluster-scoped report) dirty for a reason the caller knows (a
    /// node's change reaches the namespaces with pods on it).
    pub fn mark<'a>(&self, namespaces: impl IntoIterator<Item = &'a str>) {
        let mut s = self.lock();
        let mut any = false;
        for ns in namespaces {
            s.mark(ns);
            any = true;
        }
        drop(s);
        if any {
            self.changed.notify_one();
        }
    }

    /// What is dirty now, leaving nothing dirty.
    pub fn take(&self) -> Dirty {
        std::mem::take(&mut self.lock().dirty)
    }

    /// Resolves when something changed since the last [`ChangeLog::take`] (one stored permit).
    pub async fn changed(&self) {
        self.changed.notified().await
    }

    /// Per slot: (events that changed what the rules read, events that did not).
    pub fn counts(&self) -> Vec<(Slot, u64, u64)> {
        let s = self.lock();
        let mut counts: Vec<_> = s.counts.iter().map(|(slot, (c, i))| (*slot, *c, *i)).collect();
        counts.sort();
        counts
    }

    /// Objects with a fingerprint (for tests and the memory estimate).
    pub fn len(&self) -> usize {
        self.lock().known.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_fingerprints_tell_values_apart_and_repeat() {
        let a = serde_json::json!({"spec": {"replicas": 2}});
        let b = serde_json::json!({"spec": {"replicas": 3}});
        assert_eq!(of_json(&a), of_json(&a.clone()));
        assert_ne!(of_json(&a), of_json(&b));
        assert_eq!(of_debug(&("x", 1)), of_debug(&("x", 1)));
        assert_ne!(of_debug(&("x", 1)), of_debug(&("x", 2)));
    }

    fn listed(log: &ChangeLog, slot: Slot, objects: &[(&str, &str, u64)]) {
        log.listing_begins(slot);
        for (ns, name, fp) in objects {
            log.applied(slot, ns, name, *fp);
        }
        log.listing_done(slot);
    }

    #[test]
    fn the_first_listing_changes_nothing_and_noise_changes_nothing() {
        let log = ChangeLog::new();
        listed(&log, 0, &[("shop", "web", 1), ("bank", "api", 2)]);
        assert!(log.take().is_empty(), "the first full read judges what was listed");
        assert!(!log.applied(0, "shop", "web", 1), "same fingerprint: status-only noise");
        assert!(log.take().is_empty());
        assert_eq!(log.counts(), [(0, 0, 1)]);
    }

    #[test]
    fn a_change_marks_its_namespace_and_a_cluster_scoped_one_the_cluster() {
        let log = ChangeLog::new();
        listed(&log, 0, &[("shop", "web", 1)]);
        listed(&log, 8, &[("", "hooks", 5)]);
        assert!(log.applied(0, "shop", "web", 2));
        assert!(log.applied(0, "bank", "new", 3), "a new object is a change");
        assert!(log.applied(8, "", "hooks", 6));
        let dirty = log.take();
        assert_eq!(dirty.namespaces.iter().map(String::as_str).collect::<Vec<_>>(), ["bank", "shop"]);
        assert!(dirty.cluster);
        assert!(log.take().is_empty(), "taken");
        log.deleted(0, "shop", "web");
        log.deleted(0, "shop", "never-seen");
        assert_eq!(log.take().namespaces.len(), 1);
        log.deleted(0, "shop", "web");
        assert!(log.take().is_empty(), "deleting what is gone changes nothing");
    }

    #[test]
    fn a_relist_forgets_what_it_did_not_list_again_and_sees_what_changed() {
        let log = ChangeLog::new();
        listed(&log, 0, &[("a", "x", 1), ("b", "y", 2), ("c", "z", 3)]);
        listed(&log, 0, &[("a", "x", 1), ("b", "y", 9)]);
        let dirty = log.take();
        assert_eq!(dirty.namespaces.iter().map(String::as_str).collect::<Vec<_>>(), ["b", "c"], "{dirty:?}");
        assert_eq!(log.len(), 2);
        // Other kinds' objects are not forgotten by this kind's relist.
        listed(&log, 1, &[("d", "p", 1)]);
        listed(&log, 0, &[("a", "x", 1), ("b", "y", 9)]);
        assert!(log.take().is_empty());
        assert_eq!(log.len(), 3);
    }

    #[tokio::test]
    async fn a_change_wakes_the_audit_and_noise_does_not() {
        let log = std::sync::Arc::new(ChangeLog::new());
        listed(&log, 0, &[("a", "x", 1)]);
        log.applied(0, "a", "x", 1);
        let woke = tokio::time::timeout(std::time::Duration::from_millis(50), log.changed()).await;
        assert!(woke.is_err(), "noise stores no permit");
        log.applied(0, "a", "x", 2);
        tokio::time::timeout(std::time::Duration::from_secs(1), log.changed()).await.expect("woken");
    }
}
