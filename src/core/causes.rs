//! One cause, many findings: which findings of a run are the consequences of another one.
//!
//! One PodDisruptionBudget over one replica makes `pdb-blocks-eviction` (its spec allows no
//! disruption), `pdb-disruptions-blocked` (its status says so now), `drain-blocked` (a drain hangs
//! on it) and `drain-takes-all-replicas` (the drain takes the workload's only pods); a Pending pod
//! makes `pods-pending` and, through the budget over it, `pdb-disruptions-blocked` and
//! `drain-blocked`. Reported side by side they read as four problems; they are one, fixed in one
//! place. This module picks, among the findings of one run, one *primary* finding per cause and
//! points each of the others (its *secondaries*) at it: the outputs list the secondaries under
//! their primary (text), name it (`causedBy` in JSON, a property of a PolicyReport result).
//!
//! Grouping is presentation: every finding keeps its action and is still reported and counted, so
//! an exit code or a denial never changes with it.
//!
//! Which finding is the cause: the one a user fixes first, by this order ([`CAUSE_ORDER`]):
//!
//! 1. `pdb-blocks-eviction`: a budget that allows no disruption even with every pod it expects
//!    healthy; no wait, no replacement and no Ready pod changes that, only the budget (or the
//!    replicas) does;
//! 2. `pods-pending`: pods the scheduler cannot place (its own reason is in the finding): they
//!    are the unhealthy pods a budget counts short;
//! 3. `pdb-disruptions-blocked`: the budget's status allows nothing now;
//! 4. `drain-blocked`: a drain hangs on the budget;
//! 5. `drain-takes-all-replicas`: what the drain then takes.
//!
//! A finding is a secondary of an earlier one in that order when the pair is one of [`LINKS`]
//! and the two name a common object (the budget, or a workload it covers: the finding's object,
//! the object it is about, or one it relates). A secondary's primary is the root of its chain (a
//! `drain-takes-all-replicas` under a `drain-blocked` under a `pdb-blocks-eviction` points at the
//! `pdb-blocks-eviction`).

use std::collections::HashMap;

use super::finding::Finding;
use super::model::{Kind, ObjectRef};
use super::rules::drain::{DRAIN_BLOCKED, DRAIN_TAKES_ALL_REPLICAS};
use super::rules::pdb::PDB_BLOCKS_EVICTION;
use super::rules::posture::{PDB_DISRUPTIONS_BLOCKED, PODS_PENDING};

/// The rules that can be a cause or a consequence, the cause a user fixes first, first.
pub const CAUSE_ORDER: &[&str] = &[
    PDB_BLOCKS_EVICTION.id,
    PODS_PENDING.id,
    PDB_DISRUPTIONS_BLOCKED.id,
    DRAIN_BLOCKED.id,
    DRAIN_TAKES_ALL_REPLICAS.id,
];

/// (consequence, causes it can have): the pairs that are one cause when they name a common
/// budget or workload.
pub const LINKS: &[(&str, &[&str])] = &[
    (PDB_DISRUPTIONS_BLOCKED.id, &[PDB_BLOCKS_EVICTION.id, PODS_PENDING.id]),
    (DRAIN_BLOCKED.id, &[PDB_BLOCKS_EVICTION.id, PODS_PENDING.id, PDB_DISRUPTIONS_BLOCKED.id]),
    (DRAIN_TAKES_ALL_REPLICAS.id, &[PDB_BLOCKS_EVICTION.id, PDB_DISRUPTIONS_BLOCKED.id, DRAIN_BLOCKED.id]),
];

fn rank(rule: &str) -> Option<usize> {
    CAUSE_ORDER.iter().position(|r| *r == rule)
}

/// The budgets and workloads a finding names: its object, the object it is about, the ones it
/// relates.
fn touches(f: &Finding) -> impl Iterator<Item = &ObjectRef> {
    std::iter::once(&f.object)
        .chain(std::iter::once(&f.anchor))
        .chain(f.related.iter())
        .filter(|r| matches!(r.kind, Kind::PodDisruptionBudget | Kind::Deployment | Kind::StatefulSet))
}

/// For each finding (same order), the index of its primary finding, or `None` when it is a
/// primary itself or stands alone. Linear in the findings and the objects they name.
pub fn primaries(findings: &[&Finding]) -> Vec<Option<usize>> {
    // Object → the findings that can be a cause and name it.
    let mut naming: HashMap<&ObjectRef, Vec<usize>> = HashMap::new();
    for (i, f) in findings.iter().enumerate() {
        if LINKS.iter().any(|(_, causes)| causes.contains(&f.rule.id)) {
            for r in touches(f) {
                let at = naming.entry(r).or_default();
                if !at.contains(&i) {
                    at.push(i);
                }
            }
        }
    }
    // The direct cause of each: the earliest in CAUSE_ORDER, then the first reported.
    let direct: Vec<Option<usize>> = findings
        .iter()
        .map(|f| {
            let (_, causes) = LINKS.iter().find(|(effect, _)| *effect == f.rule.id)?;
            touches(f)
                .flat_map(|r| naming.get(r).into_iter().flatten().copied())
                .filter(|&c| causes.contains(&findings[c].rule.id))
                .min_by_key(|&c| (rank(findings[c].rule.id), c))
        })
        .collect();
    // The root of each chain: ranks fall strictly along it, so it ends within CAUSE_ORDER's length.
    (0..findings.len())
        .map(|i| {
            let mut at = direct[i]?;
            for _ in 0..CAUSE_ORDER.len() {
                match direct[at] {
                    Some(next) => at = next,
                    None => break,
                }
            }
            Some(at)
        })
        .collect()
}

/// The findings' order for showing them: each primary followed by its secondaries (in their own
/// order), the others where they were. Returns, per position, the finding's index and its
/// primary's index when it is a secondary.
pub fn grouped_order(findings: &[&Finding]) -> Vec<(usize, Option<usize>)> {
    let primary = primaries(findings);
    let mut under: HashMap<usize, Vec<usize>> = HashMap::new();
    for (i, p) in primary.iter().enumerate() {
        if let Some(p) = p {
            under.entry(*p).or_default().push(i);
        }
    }
    let mut out = Vec::with_capacity(findings.len());
    for (i, p) in primary.iter().enumerate() {
        if p.is_some() {
            continue;
        }
        out.push((i, None));
        for &s in under.get(&i).into_iter().flatten() {
            out.push((s, Some(i)));
        }
    }
    out
}

/// How a secondary names its primary: `[pdb-blocks-eviction] PodDisruptionBudget shop/web`.
pub fn cause_label(primary: &Finding) -> String {
    format!("[{}] {}", primary.rule.id, primary.object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::catalogue::Rule;
    use crate::core::finding::Decision;

    fn finding(rule: &'static Rule, object: ObjectRef, related: &[ObjectRef]) -> Finding {
        Finding {
            rule,
            action: Decision::of(rule.default),
            anchor: object.clone(),
            object,
            path: String::new(),
            what: String::new(),
            fix: String::new(),
            related: related.to_vec(),
            notes: Vec::new(),
            from_view: false,
        }
    }

    fn pdb(name: &str) -> ObjectRef {
        ObjectRef::new(Kind::PodDisruptionBudget, "shop", name)
    }
    fn dep(name: &str) -> ObjectRef {
        ObjectRef::new(Kind::Deployment, "shop", name)
    }

    #[test]
    fn one_budget_over_one_replica_is_one_cause_the_budget() {
        let f = [
            finding(&DRAIN_TAKES_ALL_REPLICAS, dep("web"), &[pdb("web")]),
            finding(&PDB_DISRUPTIONS_BLOCKED, pdb("web"), &[dep("web")]),
            finding(&DRAIN_BLOCKED, pdb("web"), &[dep("web")]),
            finding(&PDB_BLOCKS_EVICTION, pdb("web"), &[dep("web")]),
        ];
        let refs: Vec<&Finding> = f.iter().collect();
        assert_eq!(primaries(&refs), [Some(3), Some(3), Some(3), None]);
        assert_eq!(grouped_order(&refs), [(3, None), (0, Some(3)), (1, Some(3)), (2, Some(3))]);
        assert_eq!(cause_label(&f[3]), "[pdb-blocks-eviction] PodDisruptionBudget shop/web");
    }

    #[test]
    fn a_pending_pod_is_the_cause_of_its_budgets_block_unless_the_budget_never_allows_one() {
        let pending = finding(&PODS_PENDING, dep("db"), &[]);
        let blocked = finding(&PDB_DISRUPTIONS_BLOCKED, pdb("db"), &[dep("db")]);
        assert_eq!(primaries(&[&blocked, &pending]), [Some(1), None]);
        // The budget allows nothing even with every pod Ready: that is fixed first.
        let never = finding(&PDB_BLOCKS_EVICTION, pdb("db"), &[dep("db")]);
        assert_eq!(primaries(&[&blocked, &pending, &never]), [Some(2), None, None]);
    }

    #[test]
    fn findings_that_name_no_common_object_stay_apart() {
        let f = [
            finding(&PDB_BLOCKS_EVICTION, pdb("web"), &[dep("web")]),
            finding(&PDB_DISRUPTIONS_BLOCKED, pdb("api"), &[dep("api")]),
            finding(&PODS_PENDING, dep("other"), &[]),
            // Not a pair of LINKS: a pending pod does not cause a drain to take all replicas.
            finding(&DRAIN_TAKES_ALL_REPLICAS, dep("other"), &[]),
        ];
        let refs: Vec<&Finding> = f.iter().collect();
        assert_eq!(primaries(&refs), [None, None, None, None]);
        assert_eq!(grouped_order(&refs), [(0, None), (1, None), (2, None), (3, None)]);
    }

    #[test]
    fn a_drain_groups_what_it_takes_under_the_budget_it_hangs_on() {
        let f = [
            finding(&DRAIN_BLOCKED, pdb("web"), &[dep("web")]),
            finding(&DRAIN_TAKES_ALL_REPLICAS, dep("web"), &[pdb("web")]),
            finding(&DRAIN_TAKES_ALL_REPLICAS, dep("api"), &[]),
        ];
        let refs: Vec<&Finding> = f.iter().collect();
        assert_eq!(primaries(&refs), [None, Some(0), None]);
    }

    #[test]
    fn every_linked_rule_has_a_place_in_the_order_and_causes_come_earlier() {
        for (effect, causes) in LINKS {
            let e = rank(effect).unwrap_or_else(|| panic!("{effect} not in CAUSE_ORDER"));
            for c in *causes {
                assert!(rank(c).is_some_and(|c| c < e), "{c} must come before {effect}");
            }
        }
    }
}
