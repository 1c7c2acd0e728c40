//! What a workload's pod template says about where its replicas may run and how they are
//! replaced: the facts the rules, the view's projections and the mutations all read.

use k8s_openapi::api::core::v1::{PodAffinityTerm, PodSpec, Toleration, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::object::{Kind, Strategy, Workload};
use super::selector;

/// The taint `kubectl cordon` (and `drain`) puts on a node: `node.kubernetes.io/unschedulable:NoSchedule`.
pub const CORDON_TAINT: &str = "node.kubernetes.io/unschedulable";

/// Why a toleration lets pods onto a cordoned node, and the field that makes it so, or `None`.
pub fn tolerates_cordon(t: &Toleration) -> Option<(&'static str, String)> {
    let exists = t.operator.as_deref() == Some("Exists");
    let effect = t.effect.as_deref().unwrap_or("");
    // An empty effect matches every effect; the cordon taint's is NoSchedule.
    if !(effect.is_empty() || effect == "NoSchedule") {
        return None;
    }
    match t.key.as_deref().unwrap_or("") {
        "" if exists => Some((
            "operator",
            format!(
                "{} the cordon's {CORDON_TAINT}:NoSchedule included",
                if effect.is_empty() {
                    "(operator: Exists, no key, no effect) tolerates every taint,"
                } else {
                    "(operator: Exists, no key, effect: NoSchedule) tolerates every NoSchedule taint,"
                }
            ),
        )),
        // The cordon taint has no value: `Equal` (the default operator) matches it only with none.
        CORDON_TAINT if exists || t.value.as_deref().unwrap_or("").is_empty() => {
            Some(("key", format!("(key: {CORDON_TAINT}) tolerates the cordon taint {CORDON_TAINT}:NoSchedule itself")))
        }
        _ => None,
    }
}

/// The node topology key.
pub const HOSTNAME: &str = "kubernetes.io/hostname";

/// The zone label of Node objects.
pub const ZONE: &str = "topology.kubernetes.io/zone";

/// The pod template's topology spread constraints.
pub fn spread_constraints(w: &Workload) -> &[TopologySpreadConstraint] {
    w.pod_spec().and_then(|s| s.topology_spread_constraints.as_deref()).unwrap_or_default()
}

/// The non-empty selectors of a workload's spreads as the scheduler counts pods with them
/// ([`counting_selector`]), kept in the view for the other side of `spread-selector-overlap`.
pub fn spread_selectors(w: &Workload) -> Vec<LabelSelector> {
    spread_constraints(w).iter().filter_map(|c| counting_selector(c, w)).filter(|s| !selector::is_empty(s)).collect()
}

/// The labels a workload's controller adds to each pod with a hash of its revision:
/// `matchLabelKeys` naming it counts the pods of one revision of this workload only.
const REVISION_KEYS: [&str; 2] = ["pod-template-hash", "controller-revision-hash"];

/// The selector a spread counts pods with once `matchLabelKeys` are merged in, as the apiserver
/// merges them into each pod's constraint at creation (1.34 on): each key the pod template carries
/// becomes `key In [its value]`; a key it lacks is ignored. `None` when a key is the revision hash
/// its controller adds (`pod-template-hash`, `controller-revision-hash`): the spread then counts
/// only this workload's own pods of one revision, never another workload's.
pub fn counting_selector(c: &TopologySpreadConstraint, w: &Workload) -> Option<LabelSelector> {
    let mut sel = c.label_selector.clone()?;
    let keys = c.match_label_keys.as_deref().unwrap_or_default();
    if keys.iter().any(|k| REVISION_KEYS.contains(&k.as_str())) {
        return None;
    }
    for key in keys {
        if let Some(value) = w.template_labels().get(key) {
            sel.match_expressions.get_or_insert_with(Vec::new).push(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                    key: key.clone(),
                    operator: "In".into(),
                    values: Some(vec![value.clone()]),
                },
            );
        }
    }
    Some(sel)
}

/// Whether `sel` selects the workload's own pods. A manifest without `spec.selector` (a kustomize
/// base or patch) does not carry its final labels yet: kustomize adds the same labels to the
/// selector and the pod template when it renders. Its own pods cannot be told apart then, so a
/// selector is taken to be against them rather than firing on labels the fragment never had.
fn selects_own(sel: &LabelSelector, w: &Workload) -> bool {
    w.selector.is_none() || selector::matches(sel, w.template_labels())
}

fn against_own(term: &PodAffinityTerm, w: &Workload) -> bool {
    term.label_selector.as_ref().is_some_and(|s| selects_own(s, w))
}

fn required_anti_affinity(spec: &PodSpec) -> &[PodAffinityTerm] {
    spec.affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|p| p.required_during_scheduling_ignored_during_execution.as_deref())
        .unwrap_or_default()
}

fn preferred_anti_affinity(spec: &PodSpec) -> impl Iterator<Item = &PodAffinityTerm> {
    spec.affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|p| p.preferred_during_scheduling_ignored_during_execution.as_deref())
        .unwrap_or_default()
        .iter()
        .map(|w| &w.pod_affinity_term)
}

/// A required pod anti-affinity on `kubernetes.io/hostname` against its own pods: one per node.
pub fn one_per_node_affinity(w: &Workload) -> bool {
    w.pod_spec()
        .is_some_and(|s| required_anti_affinity(s).iter().any(|t| t.topology_key == HOSTNAME && against_own(t, w)))
}

/// A hostname spread against its own pods (`hard`: only `DoNotSchedule` ones).
fn hostname_spread(w: &Workload, hard: bool) -> bool {
    spread_constraints(w).iter().any(|c| {
        c.topology_key == HOSTNAME
            && (!hard || c.when_unsatisfiable == "DoNotSchedule")
            && c.label_selector.as_ref().is_some_and(|s| selects_own(s, w))
    })
}

/// Something keeps replicas apart: a hostname spread or any pod anti-affinity (required or
/// preferred, any topology: distinct zones are distinct nodes too) against its own pods, or a
/// declared host port (the scheduler's NodePorts filter places two pods wanting the same host port
/// on distinct nodes).
pub fn kept_apart(w: &Workload) -> bool {
    hostname_spread(w, false)
        || w.pod_spec().is_some_and(|s| {
            required_anti_affinity(s).iter().chain(preferred_anti_affinity(s)).any(|t| against_own(t, w))
        })
        || !declared_host_ports(w).is_empty()
}

/// Why a workload's replicas are not kept apart when it looks as if they might be: the nearest
/// thing it has, so that the message names it (and the finding points at it).
#[derive(Clone, Debug, PartialEq)]
pub enum NotApart {
    /// Neither a hostname spread nor any pod anti-affinity.
    Nothing,
    /// `topologySpreadConstraints[i]` on the hostname has no labelSelector: it counts no pods.
    SpreadWithoutSelector(usize),
    /// `topologySpreadConstraints[i]` on the hostname selects other pods than the workload's.
    SpreadOtherPods(usize),
    /// A pod anti-affinity term whose labelSelector misses the workload's own pods (`required`:
    /// `requiredDuringScheduling...`, else `preferred...`; its index in that list).
    AntiAffinityOtherPods { required: bool, index: usize },
}

impl NotApart {
    /// The field the finding points at (under `spec.template.spec`).
    pub fn field(&self) -> String {
        match self {
            NotApart::Nothing => "topologySpreadConstraints".into(),
            NotApart::SpreadWithoutSelector(i) | NotApart::SpreadOtherPods(i) => {
                format!("topologySpreadConstraints[{i}]")
            }
            NotApart::AntiAffinityOtherPods { required: true, index } => {
                format!(
                    "affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[{index}].labelSelector"
                )
            }
            NotApart::AntiAffinityOtherPods { required: false, index } => format!(
                "affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[{index}].podAffinityTerm.labelSelector"
            ),
        }
    }
}

/// For a workload whose replicas are not [`kept_apart`]: what it has instead.
pub fn not_apart(w: &Workload) -> NotApart {
    for (i, c) in spread_constraints(w).iter().enumerate() {
        if c.topology_key == HOSTNAME {
            return match &c.label_selector {
                None => NotApart::SpreadWithoutSelector(i),
                Some(_) => NotApart::SpreadOtherPods(i),
            };
        }
    }
    if let Some(spec) = w.pod_spec() {
        if let Some(index) = required_anti_affinity(spec).iter().position(|t| !against_own(t, w)) {
            return NotApart::AntiAffinityOtherPods { required: true, index };
        }
        if let Some(index) = preferred_anti_affinity(spec).position(|t| !against_own(t, w)) {
            return NotApart::AntiAffinityOtherPods { required: false, index };
        }
    }
    NotApart::Nothing
}

/// The host ports a pod template declares (`hostPort`, or with `hostNetwork: true` every
/// `containerPort`, which the API makes the host port; of its containers and sidecars, as the
/// scheduler's NodePorts filter counts them, [`super::resources::host_ports`]): the scheduler will
/// not place two such pods on one node, so a replica without a free node stays Pending rather than
/// failing to bind.
pub fn declared_host_ports(w: &Workload) -> Vec<i32> {
    let Some(spec) = w.pod_spec() else { return Vec::new() };
    let mut ports: Vec<i32> = super::resources::host_ports(spec).into_iter().map(|p| p.port).collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// `hostNetwork: true` with nothing the scheduler keeps apart on: no hard one-per-node rule and
/// no declared port (with `hostNetwork` every `containerPort` is a host port, and one declared in
/// any container keeps two replicas off one node: the NodePorts filter).
pub fn host_network_unprotected(w: &Workload) -> bool {
    w.pod_spec().is_some_and(|s| s.host_network == Some(true))
        && !one_per_node_affinity(w)
        && !hostname_spread(w, true)
        && declared_host_ports(w).is_empty()
}

/// `registry.k8s.io/sig-storage/csi-provisioner:v5.0.1@sha256:…` → `csi-provisioner`.
pub fn image_name(image: &str) -> &str {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    last.split(':').next().unwrap_or(last)
}

/// For a Recreate Deployment, the names and image names of its containers (what the CSI
/// controller detection reads); `None` otherwise.
pub fn recreate_containers(w: &Workload) -> Option<Vec<String>> {
    if w.kind != Kind::Deployment || w.strategy != Strategy::Recreate {
        return None;
    }
    let spec = w.pod_spec()?;
    let mut names = Vec::new();
    for c in spec.containers.iter().chain(spec.init_containers.iter().flatten()) {
        names.push(c.name.clone());
        if let Some(image) = &c.image {
            names.push(image_name(image).to_string());
        }
    }
    Some(names)
}

#[cfg(test)]
mod tests {
    use super::image_name;

    #[test]
    fn image_names() {
        assert_eq!(image_name("registry.k8s.io/sig-storage/csi-provisioner:v5.0.1"), "csi-provisioner");
        assert_eq!(image_name("csi-attacher"), "csi-attacher");
        assert_eq!(image_name("localhost:5000/csi-resizer@sha256:abc"), "csi-resizer");
        assert_eq!(image_name("gcr.io/x/csi-snapshotter:v1@sha256:abc"), "csi-snapshotter");
    }
}
