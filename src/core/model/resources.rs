//! What a pod asks of a node, as kube-scheduler reads it: its resource requests
//! (`NodeResourcesFit`), its host ports (`NodePorts`), and the quantities they are written in.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Resources as the scheduler sums them: CPU in millicores, the rest in bytes (or a count).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    pub cpu_milli: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    /// Extended resources and hugepages, by name.
    pub scalar: BTreeMap<String, i64>,
}

impl Resources {
    /// Sets the resources `names` (Kubernetes names: `cpu`, `memory`, others) to their values in `o`.
    pub fn replace(&mut self, names: &[String], o: &Resources) {
        for name in names {
            match name.as_str() {
                "cpu" => self.cpu_milli = o.cpu_milli,
                "memory" => self.memory = o.memory,
                "ephemeral-storage" => self.ephemeral_storage = o.ephemeral_storage,
                other => {
                    self.scalar.insert(other.to_string(), o.scalar.get(other).copied().unwrap_or(0));
                }
            }
        }
    }

    pub fn add(&mut self, o: &Resources) {
        self.cpu_milli = self.cpu_milli.saturating_add(o.cpu_milli);
        self.memory = self.memory.saturating_add(o.memory);
        self.ephemeral_storage = self.ephemeral_storage.saturating_add(o.ephemeral_storage);
        for (k, v) in &o.scalar {
            let e = self.scalar.entry(k.clone()).or_default();
            *e = e.saturating_add(*v);
        }
    }

    pub fn max(&mut self, o: &Resources) {
        self.cpu_milli = self.cpu_milli.max(o.cpu_milli);
        self.memory = self.memory.max(o.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(o.ephemeral_storage);
        for (k, v) in &o.scalar {
            let e = self.scalar.entry(k.clone()).or_default();
            *e = (*e).max(*v);
        }
    }

    pub fn is_zero(&self) -> bool {
        self.cpu_milli == 0 && self.memory == 0 && self.ephemeral_storage == 0 && self.scalar.values().all(|v| *v == 0)
    }

    /// From a resource list (`requests`, `allocatable`, `overhead`): values that are no quantity
    /// count as 0.
    pub fn of(list: Option<&BTreeMap<String, Quantity>>) -> Resources {
        let mut r = Resources::default();
        for (name, q) in list.into_iter().flatten() {
            match name.as_str() {
                "cpu" => r.cpu_milli = quantity_milli(&q.0).unwrap_or(0),
                "memory" => r.memory = quantity(&q.0).unwrap_or(0),
                "ephemeral-storage" => r.ephemeral_storage = quantity(&q.0).unwrap_or(0),
                "pods" => {}
                other => {
                    r.scalar.insert(other.to_string(), quantity(&q.0).unwrap_or(0));
                }
            }
        }
        r
    }
}

/// A pod's request as the scheduler computes it (`k8s.io/component-helpers/resource`): the larger
/// of the containers' sum (sidecars, restartable init containers, included) and each init
/// container with the sidecars declared before it; then the pod's overhead. Of the pod as the
/// apiserver stores it: a container's request missing where its limit is set is the limit
/// (`SetDefaults_Pod`, which a Pod gets and a template does not, so a workload's replicas are
/// placed with it). A stored Pod has them already: defaulting it again changes nothing.
pub fn pod_requests(spec: &PodSpec) -> Resources {
    let requests = |c: &Container| {
        let resources = c.resources.as_ref();
        let (requests, limits) =
            (resources.and_then(|r| r.requests.as_ref()), resources.and_then(|r| r.limits.as_ref()));
        match limits {
            Some(limits) if limits.keys().any(|k| !requests.is_some_and(|r| r.contains_key(k))) => {
                let mut defaulted = requests.cloned().unwrap_or_default();
                for (k, v) in limits {
                    defaulted.entry(k.clone()).or_insert_with(|| v.clone());
                }
                Resources::of(Some(&defaulted))
            }
            _ => Resources::of(requests),
        }
    };
    let mut sum = Resources::default();
    for c in &spec.containers {
        sum.add(&requests(c));
    }
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for c in spec.init_containers.iter().flatten() {
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars.add(&requests(c));
        } else {
            let mut with = requests(c);
            with.add(&sidecars);
            init_peak.max(&with);
        }
    }
    sum.add(&sidecars);
    sum.max(&init_peak);
    if let Some(pod_level) = pod_level_requests(spec, &sum) {
        sum.replace(&pod_level.0, &pod_level.1);
    }
    sum.add(&Resources::of(spec.overhead.as_ref()));
    sum
}

/// Whether pod-level resources (`spec.resources`) may set `name`: CPU, memory and huge pages
/// (`IsSupportedPodLevelResource`, `k8s.io/component-helpers/resource`).
fn pod_level_resource(name: &str) -> bool {
    matches!(name, "cpu" | "memory") || name.starts_with("hugepages-")
}

/// The pod-level requests that replace the containers' sum (`PodRequests`'
/// `applyPodLevelResources`), as the apiserver stores them: an explicit request; else, where the
/// pod sets limits, the containers' sum for CPU and memory where they request any (left as it
/// is; a sum of 0 is taken as none), and the pod-level limit where they do not, or for huge pages
/// (`defaultPodRequests`). The names set, and their values parsed.
fn pod_level_requests(spec: &PodSpec, containers: &Resources) -> Option<(Vec<String>, Resources)> {
    let resources = spec.resources.as_ref()?;
    let mut effective: BTreeMap<String, Quantity> = BTreeMap::new();
    for (name, q) in resources.requests.iter().flatten().filter(|(n, _)| pod_level_resource(n)) {
        effective.insert(name.clone(), q.clone());
    }
    for (name, q) in resources.limits.iter().flatten().filter(|(n, _)| pod_level_resource(n)) {
        let from_containers = match name.as_str() {
            "cpu" => containers.cpu_milli > 0,
            "memory" => containers.memory > 0,
            _ => false,
        };
        if !from_containers {
            effective.entry(name.clone()).or_insert_with(|| q.clone());
        }
    }
    (!effective.is_empty()).then(|| (effective.keys().cloned().collect(), Resources::of(Some(&effective))))
}

/// A Kubernetes quantity (`500m`, `2`, `1Gi`, `128M`, `1e3`) in whole units, rounded up. Written
/// here because no crate of our stack parses them (k8s-openapi keeps them as strings).
pub fn quantity(s: &str) -> Option<i64> {
    quantity_scaled(s, 1)
}

/// [`quantity`] in thousandths (CPU in millicores).
pub fn quantity_milli(s: &str) -> Option<i64> {
    quantity_scaled(s, 1000)
}

fn quantity_scaled(s: &str, scale: i128) -> Option<i64> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let (num, den): (i128, i128) = match number.split_once('.') {
        Some((int, frac)) => {
            let digits = frac.len() as u32;
            let whole: i128 = if int.is_empty() || int == "+" { 0 } else { int.parse().ok()? };
            let f: i128 = if frac.is_empty() { 0 } else { frac.parse().ok()? };
            let den = 10i128.checked_pow(digits)?;
            (whole.checked_mul(den)?.checked_add(if whole < 0 { -f } else { f })?, den)
        }
        None => (number.parse().ok()?, 1),
    };
    let (mul, div): (i128, i128) = match suffix {
        "" => (1, 1),
        "m" => (1, 1000),
        "k" => (1_000, 1),
        "M" => (1_000_000, 1),
        "G" => (1_000_000_000, 1),
        "T" => (1_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        e if e.starts_with(['e', 'E']) => (10i128.checked_pow(e[1..].parse().ok()?)?, 1),
        _ => return None,
    };
    let top = num.checked_mul(mul)?.checked_mul(scale)?;
    let bottom = den.checked_mul(div)?;
    // Rounded up, as the scheduler's value of a fractional quantity is.
    let value = (top + bottom - 1).div_euclid(bottom);
    i64::try_from(value).ok()
}

/// A host port a pod asks for (`NodePorts`): protocol (TCP when unset), IP (0.0.0.0 when unset).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct HostPort {
    pub protocol: String,
    pub ip: String,
    pub port: i32,
}

/// The host ports of a pod: its containers' and sidecars' (ordinary init containers release
/// theirs); with hostNetwork every container port is one.
pub fn host_ports(spec: &PodSpec) -> Vec<HostPort> {
    let host_network = spec.host_network == Some(true);
    let sidecars = spec.init_containers.iter().flatten().filter(|c| c.restart_policy.as_deref() == Some("Always"));
    spec.containers
        .iter()
        .chain(sidecars)
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|h| *h > 0).or(host_network.then_some(p.container_port))?;
            Some(HostPort {
                protocol: p.protocol.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| "TCP".into()),
                ip: p.host_ip.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| "0.0.0.0".into()),
                port,
            })
        })
        .collect()
}

/// Two host ports that cannot share a node: same protocol and port, and the same IP or either
/// one the wildcard 0.0.0.0.
pub fn ports_conflict(a: &HostPort, b: &HostPort) -> bool {
    a.protocol == b.protocol && a.port == b.port && (a.ip == b.ip || a.ip == "0.0.0.0" || b.ip == "0.0.0.0")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> PodSpec {
        serde_saphyr::from_str(yaml).expect("a pod spec")
    }

    #[test]
    fn quantities_as_kubernetes_writes_them() {
        assert_eq!(quantity_milli("500m"), Some(500));
        assert_eq!(quantity_milli("2"), Some(2000));
        assert_eq!(quantity_milli("0.25"), Some(250));
        assert_eq!(quantity("1Gi"), Some(1 << 30));
        assert_eq!(quantity("128M"), Some(128_000_000));
        assert_eq!(quantity("1e3"), Some(1000));
        assert_eq!(quantity("1.5Ki"), Some(1536));
        assert_eq!(quantity("100m"), Some(1), "a fraction of a byte rounds up");
        assert_eq!(quantity("lots"), None);
    }

    /// `SetDefaults_Pod`: a request missing where the limit is set is the limit, per resource,
    /// for containers and init containers; a request set is kept.
    #[test]
    fn a_limit_without_its_request_is_the_request_as_a_pod_is_stored() {
        let s = spec(
            "containers:\n- {name: a, image: x, resources: {limits: {cpu: '2', memory: 1Gi}, requests: {cpu: 500m}}}\n\
             - {name: b, image: x, resources: {limits: {cpu: 250m}}}\n\
             initContainers:\n- {name: i, image: x, resources: {limits: {cpu: '4'}}}",
        );
        let r = pod_requests(&s);
        assert_eq!(r.cpu_milli, 4000, "the init container's limit, defaulted, is the largest");
        assert_eq!(r.memory, 1 << 30, "a's memory limit is its request");
        let s = spec("containers:\n- {name: a, image: x, resources: {limits: {cpu: '2'}, requests: {cpu: 500m}}}");
        assert_eq!(pod_requests(&s).cpu_milli, 500, "a request set is kept");
        let s = spec("containers:\n- {name: a, image: x}");
        assert!(pod_requests(&s).is_zero());
    }

    #[test]
    fn requests_sum_containers_and_sidecars_against_the_largest_init_container() {
        let s = spec(
            "containers:\n- {name: a, image: x, resources: {requests: {cpu: 100m, memory: 64Mi}}}\n- {name: b, image: x, \
             resources: {requests: {cpu: 200m}}}\ninitContainers:\n- {name: side, image: x, restartPolicy: Always, \
             resources: {requests: {cpu: 50m}}}\n- {name: migrate, image: x, resources: {requests: {cpu: '1'}}}\n",
        );
        let r = pod_requests(&s);
        assert_eq!((r.cpu_milli, r.memory), (1050, 64 << 20), "max(100+200+50, 1000+50) millicores");
    }

    /// `PodRequests` with pod-level resources (`k8s.io/component-helpers/resource`; the
    /// PodLevelResources gate is on from 1.34): the pod's requests for CPU, memory and huge pages
    /// replace the containers' sum; where it sets only limits, `defaultPodRequests` takes the
    /// containers' sum where they request the resource and the pod-level limit where they do not;
    /// another resource (ephemeral storage) stays the containers'; the overhead is added on top.
    #[test]
    fn pod_level_resources_replace_the_containers_sum_as_the_scheduler_reads_them() {
        let containers =
            "containers:\n- {name: a, image: x, resources: {requests: {cpu: 100m, ephemeral-storage: 1Gi}}}\n";
        let with = |resources: &str| {
            pod_requests(&spec(&format!("{containers}resources: {resources}\noverhead: {{cpu: 10m}}")))
        };
        let r = with("{requests: {cpu: '2', memory: 1Gi}}");
        assert_eq!((r.cpu_milli, r.memory, r.ephemeral_storage), (2010, 1 << 30, 1 << 30), "pod-level, then overhead");
        // Limits only: CPU the containers request stays theirs; memory they do not comes from the limit.
        let r = with("{limits: {cpu: '4', memory: 2Gi}}");
        assert_eq!((r.cpu_milli, r.memory), (110, 2 << 30));
        // A resource pod-level resources cannot set is ignored there.
        let r = with("{requests: {ephemeral-storage: 5Gi}}");
        assert_eq!((r.cpu_milli, r.ephemeral_storage), (110, 1 << 30));
        // Huge pages: the pod-level limit, whatever the containers ask.
        let r = with("{limits: {hugepages-2Mi: 4Mi, memory: 1Gi}}");
        assert_eq!((r.scalar.get("hugepages-2Mi").copied(), r.memory), (Some(4 << 20), 1 << 30));
        // None set: the containers' sum.
        assert_eq!(with("{}").cpu_milli, 110);
    }
}
