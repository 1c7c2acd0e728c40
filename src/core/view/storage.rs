//! What a drain's volume filters read of the cluster's storage — PersistentVolumes, StorageClasses
//! and CSINodes, which the audit reads when it replays a drain (the webhook never does) — and what
//! a pod about to be placed needs of a node because of its claims ([`VolumeNeeds`]), as
//! kube-scheduler's VolumeRestrictions, NodeVolumeLimits, VolumeBinding and VolumeZone read them
//! (`pkg/scheduler/framework/plugins/{volumerestrictions,nodevolumelimits,volumebinding,volumezone}`).
//!
//! What they are not told: a PV's capacity and volume mode against a claim's (a static PV is taken
//! to fit the claim its class matches), VolumeAttachments not backed by a pod on the node, the
//! in-tree volumes CSI migration counts, and a StorageClass's CSIStorageCapacity.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{NodeSelector, PersistentVolume, TopologySelectorTerm};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};

use super::node_selector::node_selector_admits;
use super::projection::{NodeInfo, PvcInfo};

/// The provisioner of a StorageClass whose volumes are only ever created by hand (local PVs): a
/// claim of it binds an existing PV or none.
const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// The node labels VolumeZone reads, each with its GA name (`translateToGALabel`).
const ZONE_LABELS: [(&str, &str); 4] = [
    ("failure-domain.beta.kubernetes.io/zone", "topology.kubernetes.io/zone"),
    ("failure-domain.beta.kubernetes.io/region", "topology.kubernetes.io/region"),
    ("topology.kubernetes.io/zone", "topology.kubernetes.io/zone"),
    ("topology.kubernetes.io/region", "topology.kubernetes.io/region"),
];

/// A CSI volume a pod attaches to its node: NodeVolumeLimits counts them per driver.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Attached {
    pub driver: Arc<str>,
    pub handle: Arc<str>,
}

/// A PersistentVolume, as the volume filters read it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VolumeInfo {
    pub name: String,
    /// `spec.nodeAffinity.required`: the nodes it can be used from (a local PV's one node, a zonal
    /// disk's zone).
    pub node_affinity: Option<NodeSelector>,
    /// Its zone and region labels, each with the values it lists (`a__b`: either).
    pub zones: Vec<(String, BTreeSet<String>)>,
    pub csi: Option<Attached>,
    pub storage_class: String,
    /// Bound or reserved (`spec.claimRef`): no other claim binds it.
    pub claimed: bool,
}

impl VolumeInfo {
    pub fn of(pv: &PersistentVolume) -> Self {
        let spec = pv.spec.clone().unwrap_or_default();
        let labels = pv.metadata.labels.clone().unwrap_or_default();
        let zones = ZONE_LABELS
            .iter()
            .filter_map(|(key, _)| {
                let value = labels.get(*key)?;
                Some((key.to_string(), value.split("__").map(|z| z.trim().to_string()).collect()))
            })
            .collect();
        VolumeInfo {
            name: pv.metadata.name.clone().unwrap_or_default(),
            node_affinity: spec.node_affinity.and_then(|a| a.required),
            zones,
            csi: spec.csi.map(|c| Attached { driver: c.driver.into(), handle: c.volume_handle.into() }),
            storage_class: spec.storage_class_name.unwrap_or_default(),
            claimed: spec.claim_ref.is_some(),
        }
    }
}

/// A StorageClass, as the volume filters read it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClassInfo {
    /// Annotated as the default class: a claim naming none gets it.
    pub default: bool,
    pub provisioner: String,
    /// `volumeBindingMode: WaitForFirstConsumer`: a claim is bound (or provisioned) where its first
    /// pod is placed; otherwise at once, whatever the pod.
    pub wait_for_first_consumer: bool,
    pub allowed_topologies: Vec<TopologySelectorTerm>,
}

impl ClassInfo {
    pub fn of(class: &StorageClass) -> Self {
        let annotations = class.metadata.annotations.as_ref();
        let default =
            ["storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class"]
                .iter()
                .any(|a| annotations.and_then(|m| m.get(*a)).is_some_and(|v| v == "true"));
        ClassInfo {
            default,
            provisioner: class.provisioner.clone(),
            wait_for_first_consumer: class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"),
            allowed_topologies: class.allowed_topologies.clone().unwrap_or_default(),
        }
    }
}

/// The cluster's storage as a drain reads it.
#[derive(Clone, Debug, Default)]
pub struct Storage {
    /// PersistentVolumes by name.
    pub volumes: HashMap<String, VolumeInfo>,
    /// StorageClasses by name.
    pub classes: HashMap<String, ClassInfo>,
    /// Per node (its CSINode): per CSI driver, how many of its volumes the node attaches at most
    /// (`spec.drivers[].allocatable.count`).
    pub limits: HashMap<String, Arc<BTreeMap<String, i64>>>,
}

impl Storage {
    pub fn insert_volume(&mut self, pv: &PersistentVolume) {
        let info = VolumeInfo::of(pv);
        self.volumes.insert(info.name.clone(), info);
    }

    pub fn insert_class(&mut self, class: &StorageClass) {
        self.classes.insert(class.metadata.name.clone().unwrap_or_default(), ClassInfo::of(class));
    }

    pub fn insert_csi_node(&mut self, node: &CSINode) {
        let limits = node
            .spec
            .drivers
            .iter()
            .filter_map(|d| Some((d.name.clone(), i64::from(d.allocatable.as_ref()?.count?))))
            .collect();
        self.limits.insert(node.metadata.name.clone().unwrap_or_default(), Arc::new(limits));
    }

    /// The CSI volumes that a running pod of `namespace` attaches to its node through `claims`, as
    /// NodeVolumeLimits counts an existing pod's (`filterAttachableVolumes`, `newPod` false; the
    /// claims are its `persistentVolumeClaim` volumes' and its generic ephemeral volumes'
    /// `<pod>-<volume>`): a claim not found is not counted; a bound one counts its PV's CSI volume
    /// (`getCSIDriverInfo`), and one not bound yet, or whose PV is not found, a volume of its
    /// StorageClass's provisioner (`getCSIDriverInfoFromSC`; no class or an unknown one: none).
    /// An inline volume is no claim: a CSI ephemeral volume (`volumes[].csi`) is not counted, as
    /// the plugin's `default:` branch counts only in-tree volumes migrated to CSI.
    pub fn attached<'a>(
        &'a self,
        namespace: &'a str,
        claims: impl Iterator<Item = &'a Arc<str>> + 'a,
        pvc: impl Fn(&str) -> Option<Arc<PvcInfo>> + 'a,
    ) -> impl Iterator<Item = Attached> + 'a {
        claims.filter_map(move |c| {
            let claim = pvc(c)?;
            match self.volumes.get(&claim.volume_name).filter(|_| !claim.volume_name.is_empty()) {
                Some(pv) => pv.csi.clone(),
                None => {
                    let class = self.classes.get(&claim.storage_class).filter(|_| !claim.storage_class.is_empty())?;
                    let handle = format!("{namespace}/{c}").into();
                    Some(Attached { driver: class.provisioner.as_str().into(), handle })
                }
            }
        })
    }

    /// Adds to `needs` what a claim made with the pod needs (a generic ephemeral volume's, made
    /// anew for each pod from its `volumeClaimTemplate`): of `class`, or the default class where it
    /// names none. A class that waits for the pod binds or provisions it where the pod can go
    /// ([`Unbound`]); one that binds at once binds it before the pod is placed, to a volume the
    /// replay cannot foresee, and the pod follows that volume: not judged.
    pub fn new_claim(&self, needs: &mut VolumeNeeds, namespace: &str, claim: &str, class: Option<&str>) {
        let named = class.map(|c| (c, self.classes.get(c)));
        let default = || {
            let mut defaults: Vec<(&String, &ClassInfo)> = self.classes.iter().filter(|(_, c)| c.default).collect();
            defaults.sort_by_key(|(name, _)| *name);
            defaults.first().map(|(name, c)| (name.as_str(), Some(*c)))
        };
        let Some((name, Some(class))) = named.or_else(default) else { return };
        if class.wait_for_first_consumer {
            self.bound_where_placed(needs, namespace, claim, name, class);
        }
    }

    /// Adds to `needs` an unbound `claim` of the `WaitForFirstConsumer` class `name`: bound to a
    /// free PV of the class that the node can use (a class without provisioner), or provisioned
    /// where its `allowedTopologies` admit, a new volume of its driver for NodeVolumeLimits.
    fn bound_where_placed(&self, needs: &mut VolumeNeeds, namespace: &str, claim: &str, name: &str, class: &ClassInfo) {
        if class.provisioner == NO_PROVISIONER {
            let free = self.volumes.values().filter(|pv| !pv.claimed && pv.storage_class == name);
            let candidates = free.map(|pv| pv.node_affinity.clone()).collect();
            needs.unbound.push(Unbound::Existing { claim: claim.to_string(), candidates });
        } else {
            let allowed = class.allowed_topologies.clone();
            needs.unbound.push(Unbound::Provisioned { claim: claim.to_string(), allowed });
            let handle = format!("{namespace}/{claim}").into();
            needs.attaches.push(Attached { driver: class.provisioner.as_str().into(), handle });
        }
    }

    /// What a pod of `namespace` mounting `claims` needs of a node. `pvc` finds a claim of the
    /// namespace; `used_by_another` says whether another pod on a node mounts it (one being
    /// deleted too: the scheduler counts it until it is gone).
    pub fn needs(
        &self,
        namespace: &str,
        claims: &[Arc<str>],
        pvc: impl Fn(&str) -> Option<Arc<PvcInfo>>,
        used_by_another: impl Fn(&str) -> bool,
    ) -> VolumeNeeds {
        let mut needs = VolumeNeeds::default();
        for name in claims {
            let Some(claim) = pvc(name) else {
                needs.refuse(VolumeUnfit::VolumeBinding(format!("persistentvolumeclaim \"{name}\" not found").into()));
                continue;
            };
            // VolumeRestrictions' PreFilter: a ReadWriteOncePod claim another pod mounts.
            if claim.access_modes.iter().any(|m| m == "ReadWriteOncePod") && used_by_another(name) {
                needs.refuse(VolumeUnfit::VolumeRestrictions(name.to_string()));
            }
            if !claim.volume_name.is_empty() {
                let Some(pv) = self.volumes.get(&claim.volume_name) else {
                    needs.refuse(VolumeUnfit::VolumeBinding(
                        format!("persistentvolume \"{}\" (bound to claim {name}) not found", claim.volume_name).into(),
                    ));
                    continue;
                };
                if let Some(affinity) = &pv.node_affinity {
                    let why = format!("didn't match PersistentVolume's node affinity (PersistentVolume {})", pv.name);
                    needs.bound.push((why.into(), affinity.clone()));
                }
                let name: Arc<str> = pv.name.as_str().into();
                needs.zones.extend(pv.zones.iter().map(|(k, v)| (name.clone(), k.as_str().into(), v.clone())));
                needs.attaches.extend(pv.csi.clone());
                continue;
            }
            let class = self.classes.get(&claim.storage_class).filter(|_| !claim.storage_class.is_empty());
            match class {
                Some(class) if class.wait_for_first_consumer => {
                    self.bound_where_placed(&mut needs, namespace, name, &claim.storage_class, class);
                }
                _ => needs.refuse(VolumeUnfit::VolumeBinding(
                    format!(
                        "pod has unbound immediate PersistentVolumeClaims ({name}: not bound, and its StorageClass {} \
                         does not wait for a pod)",
                        if claim.storage_class.is_empty() { "(none)" } else { &claim.storage_class }
                    )
                    .into(),
                )),
            }
        }
        needs
    }
}

/// Why a volume filter refuses a node, named after its plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VolumeUnfit {
    /// A ReadWriteOncePod claim another pod mounts.
    VolumeRestrictions(String),
    /// A CSI driver's volume limit on the node, reached.
    NodeVolumeLimits(String, i64),
    /// A claim's volume cannot be used from the node, or cannot be bound at all: why.
    VolumeBinding(Arc<str>),
    /// A volume's zone label (the PV, the label) that the node's does not match.
    VolumeZone(Arc<str>, Arc<str>),
}

impl VolumeUnfit {
    /// Whether taking pods off the node might lift it (DefaultPreemption): the claim's other user,
    /// the attached volumes; not where the volume is.
    pub fn preemption_might_help(&self) -> bool {
        matches!(self, VolumeUnfit::VolumeRestrictions(_) | VolumeUnfit::NodeVolumeLimits(..))
    }
}

impl std::fmt::Display for VolumeUnfit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VolumeUnfit::VolumeRestrictions(claim) => {
                write!(f, "PersistentVolumeClaim {claim} is ReadWriteOncePod and another pod mounts it")
            }
            VolumeUnfit::NodeVolumeLimits(driver, limit) => {
                write!(f, "{limit} volumes of CSI driver {driver} already attached (its CSINode's allocatable.count)")
            }
            VolumeUnfit::VolumeBinding(why) => f.write_str(why),
            VolumeUnfit::VolumeZone(pv, key) => write!(f, "PersistentVolume {pv} is in another {key}"),
        }
    }
}

/// A claim not bound yet, bound where its pod is placed (`WaitForFirstConsumer`).
#[derive(Clone, Debug, PartialEq)]
pub enum Unbound {
    /// Provisioned by its class's provisioner, on a node its `allowedTopologies` admit (none: any).
    Provisioned { claim: String, allowed: Vec<TopologySelectorTerm> },
    /// Bound to an existing PV or none (a class without provisioner): the node affinities of the
    /// PVs free for it.
    Existing { claim: String, candidates: Vec<Option<NodeSelector>> },
}

/// What a pod needs of a node because of its claims.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VolumeNeeds {
    /// Why no node takes it, whatever the node (a claim or PV missing, a claim that will not wait
    /// for the pod, a ReadWriteOncePod claim in use): the first found.
    pub unresolvable: Option<VolumeUnfit>,
    /// The bound PVs' node affinities (VolumeBinding), each with what a node it refuses is told.
    pub bound: Vec<(Arc<str>, NodeSelector)>,
    /// The bound PVs' zone labels: the PV, the label, the values (VolumeZone).
    pub zones: Vec<(Arc<str>, Arc<str>, BTreeSet<String>)>,
    pub unbound: Vec<Unbound>,
    /// The CSI volumes it attaches (NodeVolumeLimits).
    pub attaches: Vec<Attached>,
}

impl VolumeNeeds {
    fn refuse(&mut self, why: VolumeUnfit) {
        self.unresolvable.get_or_insert(why);
    }

    pub fn is_empty(&self) -> bool {
        // Asked of every node a replacement is placed against: fields, not a comparison.
        self.unresolvable.is_none()
            && self.bound.is_empty()
            && self.zones.is_empty()
            && self.unbound.is_empty()
            && self.attaches.is_empty()
    }

    /// The first volume filter that refuses `node`, in the scheduler's order (VolumeRestrictions,
    /// NodeVolumeLimits, VolumeBinding, VolumeZone); `limits` are the node's CSINode counts and
    /// `on_node` the volumes its pods attach, each once.
    pub fn refuses(
        &self,
        node: &NodeInfo,
        limits: &BTreeMap<String, i64>,
        on_node: &[Attached],
    ) -> Option<VolumeUnfit> {
        if let Some(why) = &self.unresolvable {
            return Some(why.clone());
        }
        if !limits.is_empty() {
            // Counted without collecting: asked of every node, and a pod attaches few volumes.
            let attaches = &self.attaches;
            for (i, a) in attaches.iter().enumerate() {
                if attaches[..i].iter().any(|b| b.driver == a.driver) {
                    continue; // its driver counted already
                }
                let Some(limit) = limits.get(&*a.driver) else { continue };
                let there = on_node.iter().filter(|o| o.driver == a.driver).count() as i64;
                // Where even every volume of the driver it attaches would be new, it fits: the
                // usual case, which need not look for them among the node's.
                let most = attaches.iter().filter(|m| m.driver == a.driver).count() as i64;
                if there + most <= *limit {
                    continue;
                }
                let adding = attaches
                    .iter()
                    .enumerate()
                    .filter(|(j, m)| m.driver == a.driver && !attaches[..*j].contains(m) && !on_node.contains(m))
                    .count() as i64;
                if adding > 0 && there + adding > *limit {
                    return Some(VolumeUnfit::NodeVolumeLimits(a.driver.to_string(), *limit));
                }
            }
        }
        if let Some((why, _)) = self.bound.iter().find(|(_, affinity)| !node_selector_admits(affinity, node)) {
            return Some(VolumeUnfit::VolumeBinding(why.clone()));
        }
        for unbound in &self.unbound {
            let (claim, fits) = match unbound {
                Unbound::Provisioned { claim, allowed } => (claim, topology_admits(allowed, node)),
                Unbound::Existing { claim, candidates } => {
                    (claim, candidates.iter().any(|a| a.as_ref().is_none_or(|a| node_selector_admits(a, node))))
                }
            };
            if !fits {
                return Some(VolumeUnfit::VolumeBinding(
                    format!("no persistent volume to bind or provision for claim {claim} here").into(),
                ));
            }
        }
        // A node without any zone or region label is not judged; one with is refused by the
        // first PV label it lacks or whose values miss its own. Read in that order: a node in the
        // PV's zone costs one lookup.
        let refused = self.zones.iter().find(|(_, key, values)| {
            let value = node.labels.get(&**key).or_else(|| {
                let ga = ZONE_LABELS.iter().find(|(k, _)| **k == **key).map_or(&**key, |(_, ga)| ga);
                node.labels.get(ga)
            });
            match value {
                Some(v) => !values.contains(v),
                None => ZONE_LABELS.iter().any(|(label, _)| node.labels.contains_key(*label)),
            }
        });
        if let Some((pv, key, _)) = refused {
            return Some(VolumeUnfit::VolumeZone(pv.clone(), key.clone()));
        }
        None
    }
}

/// Whether `node` is among a StorageClass's `allowedTopologies` (`MatchTopologySelectorTerms`):
/// none admits every node; a term with no expressions admits none.
fn topology_admits(terms: &[TopologySelectorTerm], node: &NodeInfo) -> bool {
    terms.is_empty()
        || terms.iter().any(|t| {
            let expressions = t.match_label_expressions.as_deref().unwrap_or_default();
            !expressions.is_empty()
                && expressions.iter().all(|e| node.labels.get(&e.key).is_some_and(|v| e.values.contains(v)))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::{Kind, ObjectRef};
    use serde_json::json;

    fn node(name: &str, zone: &str) -> NodeInfo {
        let mut labels: BTreeMap<String, String> = [("kubernetes.io/hostname".into(), name.into())].into();
        if !zone.is_empty() {
            labels.insert("topology.kubernetes.io/zone".into(), zone.into());
        }
        NodeInfo { name: name.into(), labels, ..Default::default() }
    }

    fn pv(value: serde_json::Value) -> PersistentVolume {
        serde_json::from_value(value).expect("a PersistentVolume")
    }

    fn claim(name: &str, volume: &str, class: &str, modes: &[&str]) -> Arc<PvcInfo> {
        Arc::new(PvcInfo {
            id: ObjectRef::new(Kind::PersistentVolumeClaim, "db", name),
            access_modes: modes.iter().map(|m| m.to_string()).collect(),
            exemptions: Default::default(),
            volume_name: volume.into(),
            storage_class: class.into(),
        })
    }

    /// A local PV on n1, a zonal disk in zone a (either of a or b for `both`), a CSI volume, classes.
    fn storage() -> Storage {
        let mut s = Storage::default();
        s.insert_volume(&pv(json!({"metadata": {"name": "local-n1"}, "spec": {"claimRef": {"name": "data-0"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}}}})));
        s.insert_volume(&pv(json!({"metadata": {"name": "disk-a", "labels": {"topology.kubernetes.io/zone": "a"}},
            "spec": {"claimRef": {"name": "data-1"}, "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-a"}}})));
        s.insert_volume(&pv(
            json!({"metadata": {"name": "disk-ab", "labels": {"failure-domain.beta.kubernetes.io/zone": "a__b"}},
            "spec": {"claimRef": {"name": "data-2"}}}),
        ));
        s.insert_volume(&pv(json!({"metadata": {"name": "free-n2"}, "spec": {"storageClassName": "local",
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n2"]}]}]}}}})));
        let class = |v| serde_json::from_value::<StorageClass>(v).expect("a StorageClass");
        s.insert_class(&class(json!({"metadata": {"name": "local"}, "provisioner": NO_PROVISIONER,
            "volumeBindingMode": "WaitForFirstConsumer"})));
        s.insert_class(&class(json!({"metadata": {"name": "zonal"}, "provisioner": "ebs.csi.aws.com",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [{"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": ["b"]}]}]})));
        s.insert_class(&class(json!({"metadata": {"name": "immediate"}, "provisioner": "ebs.csi.aws.com"})));
        s
    }

    fn claims() -> Vec<Arc<PvcInfo>> {
        vec![
            claim("data-0", "local-n1", "local", &["ReadWriteOnce"]),
            claim("data-1", "disk-a", "", &["ReadWriteOnce"]),
            claim("data-2", "disk-ab", "", &["ReadWriteOnce"]),
            claim("new-local", "", "local", &["ReadWriteOnce"]),
            claim("new-zonal", "", "zonal", &["ReadWriteOnce"]),
            claim("new-immediate", "", "immediate", &["ReadWriteOnce"]),
            claim("no-class", "", "", &["ReadWriteOnce"]),
            claim("solo", "disk-a", "", &["ReadWriteOncePod"]),
            claim("lost", "gone", "", &["ReadWriteOnce"]),
        ]
    }

    fn needs(names: &[&str], used: &[&str]) -> VolumeNeeds {
        let claims = claims();
        let names: Vec<Arc<str>> = names.iter().map(|n| Arc::from(*n)).collect();
        let find = |n: &str| claims.iter().find(|c| c.id.name == n).cloned();
        storage().needs("db", &names, find, |c| used.contains(&c))
    }

    fn refused(needs: &VolumeNeeds, node: &NodeInfo) -> Option<String> {
        needs.refuses(node, &BTreeMap::new(), &[]).map(|u| u.to_string())
    }

    /// VolumeBinding's `CheckNodeAffinity`: a bound PV's node affinity decides.
    #[test]
    fn a_bound_local_volume_keeps_its_pod_on_its_node() {
        let n = needs(&["data-0"], &[]);
        assert_eq!(refused(&n, &node("n1", "a")), None);
        assert_eq!(
            refused(&n, &node("n2", "a")).as_deref(),
            Some("didn't match PersistentVolume's node affinity (PersistentVolume local-n1)")
        );
    }

    /// VolumeZone: the PV's zone labels (GA or beta, `a__b` for either) against the node's; a node
    /// without any zone or region label is not judged.
    #[test]
    fn a_zonal_volume_keeps_its_pod_in_its_zones() {
        let a = needs(&["data-1"], &[]);
        assert_eq!(refused(&a, &node("n1", "a")), None);
        assert_eq!(
            refused(&a, &node("n2", "b")).as_deref(),
            Some("PersistentVolume disk-a is in another topology.kubernetes.io/zone")
        );
        assert_eq!(refused(&a, &node("n3", "")), None, "a node without zone labels");
        let ab = needs(&["data-2"], &[]);
        for (zone, ok) in [("a", true), ("b", true), ("c", false)] {
            assert_eq!(refused(&ab, &node("n", zone)).is_none(), ok, "zone {zone}");
        }
    }

    /// A claim not bound yet: a class that waits for the pod binds a free PV that the node can use
    /// (no provisioner) or provisions where its allowedTopologies say; any other is never bound
    /// for the pod (Immediate, or no class).
    #[test]
    fn an_unbound_claim_goes_where_it_can_be_bound_or_provisioned() {
        let local = needs(&["new-local"], &[]);
        assert_eq!(refused(&local, &node("n2", "")), None, "free-n2 can bind it");
        assert!(
            refused(&local, &node("n1", ""))
                .unwrap()
                .contains("no persistent volume to bind or provision for claim new-local")
        );
        let zonal = needs(&["new-zonal"], &[]);
        assert_eq!(refused(&zonal, &node("n1", "b")), None);
        assert!(refused(&zonal, &node("n1", "a")).is_some());
        for name in ["new-immediate", "no-class"] {
            let n = needs(&[name], &[]);
            let why = refused(&n, &node("n1", "a")).expect("refused everywhere");
            assert!(why.starts_with("pod has unbound immediate PersistentVolumeClaims"), "{why}");
            assert!(why.contains(name), "{why}");
        }
        let lost = needs(&["lost", "missing"], &[]);
        assert_eq!(
            refused(&lost, &node("n1", "a")).as_deref(),
            Some("persistentvolume \"gone\" (bound to claim lost) not found"),
            "the first reason"
        );
        let missing = needs(&["missing"], &[]);
        assert_eq!(refused(&missing, &node("n1", "a")).as_deref(), Some("persistentvolumeclaim \"missing\" not found"));
    }

    /// VolumeRestrictions: a ReadWriteOncePod claim another pod mounts refuses every node; a
    /// ReadWriteOnce one does not (the scheduler leaves that to the attach).
    #[test]
    fn a_read_write_once_pod_claim_in_use_refuses_every_node() {
        let used = needs(&["solo"], &["solo"]);
        let why = refused(&used, &node("n1", "a")).expect("refused");
        assert_eq!(why, "PersistentVolumeClaim solo is ReadWriteOncePod and another pod mounts it");
        assert_eq!(refused(&needs(&["solo"], &[]), &node("n1", "a")), None);
        assert_eq!(refused(&needs(&["data-1"], &["data-1"]), &node("n1", "a")), None, "ReadWriteOnce");
    }

    /// NodeVolumeLimits: the node's attached volumes of the driver plus the new ones against its
    /// CSINode's count; a volume already attached there is not new.
    #[test]
    fn a_node_at_its_csi_volume_limit_refuses_a_new_volume() {
        let n = needs(&["data-1"], &[]);
        let mut s = Storage::default();
        s.insert_csi_node(
            &serde_json::from_value(json!({"metadata": {"name": "n1"},
            "spec": {"drivers": [{"name": "ebs.csi.aws.com", "nodeID": "i-1", "allocatable": {"count": 2}}]}}))
            .unwrap(),
        );
        let limits = s.limits["n1"].clone();
        let other = |h: &str| Attached { driver: "ebs.csi.aws.com".into(), handle: h.into() };
        let one = [other("vol-x")];
        let two = [other("vol-x"), other("vol-y")];
        let same = [other("vol-x"), other("vol-a")];
        let n1 = node("n1", "a");
        assert_eq!(n.refuses(&n1, &limits, &one), None, "1 + 1 of 2");
        assert_eq!(
            n.refuses(&n1, &limits, &two).map(|u| u.to_string()).as_deref(),
            Some("2 volumes of CSI driver ebs.csi.aws.com already attached (its CSINode's allocatable.count)")
        );
        assert_eq!(n.refuses(&n1, &limits, &same), None, "vol-a is attached there already");
        let other_driver: Vec<Attached> = (0..3)
            .map(|i| Attached { driver: "pd.csi.storage.gke.io".into(), handle: format!("x{i}").into() })
            .collect();
        assert_eq!(n.refuses(&n1, &limits, &other_driver), None, "another driver's volumes");
    }

    /// A generic ephemeral volume's claim is made with the pod: where its class waits for the pod
    /// (a free PV of it, or its allowedTopologies), the default class where it names none; a class
    /// that binds at once is not judged.
    #[test]
    fn a_claim_made_with_the_pod_goes_where_its_class_can_bind_it() {
        let mut s = storage();
        let new = |s: &Storage, class: Option<&str>| {
            let mut needs = VolumeNeeds::default();
            s.new_claim(&mut needs, "db", "web-1-data", class);
            needs
        };
        let local = new(&s, Some("local"));
        assert_eq!(refused(&local, &node("n2", "")), None, "free-n2");
        let why = refused(&local, &node("n1", "")).expect("no free PV of n1");
        assert_eq!(why, "no persistent volume to bind or provision for claim web-1-data here");
        let zonal = new(&s, Some("zonal"));
        assert!(refused(&zonal, &node("n1", "a")).is_some() && refused(&zonal, &node("n1", "b")).is_none());
        assert_eq!(zonal.attaches.len(), 1, "a new volume of ebs.csi.aws.com for NodeVolumeLimits");
        assert!(new(&s, Some("immediate")).is_empty(), "bound before the pod: not judged");
        assert!(new(&s, None).is_empty(), "no default class");
        let default = serde_json::from_value::<StorageClass>(json!({"metadata": {"name": "zonal",
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}}, "provisioner": "ebs.csi.aws.com",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [{"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": ["b"]}]}]}))
        .unwrap();
        s.insert_class(&default);
        assert_eq!(new(&s, None), zonal, "the default class");
    }

    #[test]
    fn a_pod_without_claims_needs_nothing() {
        assert!(needs(&[], &[]).is_empty());
        assert!(!needs(&["data-1"], &[]).is_empty());
    }

    /// NodeVolumeLimits as it was counted before the shortcut for a node with room (issue 48):
    /// every volume of the driver the pod attaches looked for among the node's.
    fn limits_counting_every_volume(
        attaches: &[Attached],
        limits: &BTreeMap<String, i64>,
        on_node: &[Attached],
    ) -> Option<VolumeUnfit> {
        for (i, a) in attaches.iter().enumerate() {
            if attaches[..i].iter().any(|b| b.driver == a.driver) {
                continue;
            }
            let Some(limit) = limits.get(&*a.driver) else { continue };
            let adding = attaches
                .iter()
                .enumerate()
                .filter(|(j, m)| m.driver == a.driver && !attaches[..*j].contains(m) && !on_node.contains(m))
                .count() as i64;
            let there = on_node.iter().filter(|o| o.driver == a.driver).count() as i64;
            if adding > 0 && there + adding > *limit {
                return Some(VolumeUnfit::NodeVolumeLimits(a.driver.to_string(), *limit));
            }
        }
        None
    }

    /// Every mix of up to three volumes of two drivers attached, some already on the node (or
    /// twice in the pod), against every limit up to one past what the node holds: the same
    /// refusals as counting them all, and both answers reached.
    #[test]
    fn volume_limits_answer_as_counting_every_volume() {
        let volume = |k: usize| Attached { driver: ["d0", "d1"][k % 2].into(), handle: format!("h{}", k / 2).into() };
        let node = node("n", "");
        let (mut refused, mut fit) = (0, 0);
        for pod in 0..(1 << 9) {
            // Three volumes, each one of 4 (two a driver) or none.
            let attaches: Vec<Attached> =
                (0..3).map(|i| (pod >> (3 * i)) & 7).filter(|v| (1..=4).contains(v)).map(|v| volume(v - 1)).collect();
            for held in 0..(1 << 5) {
                let on_node: Vec<Attached> = (0..5).filter(|k| held & (1 << k) != 0).map(volume).collect();
                for limit in 0..=4 {
                    let limits: BTreeMap<String, i64> = [("d0".to_string(), limit), ("d1".to_string(), 2)].into();
                    let needs = VolumeNeeds { attaches: attaches.clone(), ..Default::default() };
                    let now = needs.refuses(&node, &limits, &on_node);
                    assert_eq!(
                        now,
                        limits_counting_every_volume(&attaches, &limits, &on_node),
                        "{attaches:?} {on_node:?} {limit}"
                    );
                    if now.is_some() { refused += 1 } else { fit += 1 }
                }
            }
        }
        assert!(refused > 1000 && fit > 1000, "{refused} refused, {fit} fit");
    }
}
