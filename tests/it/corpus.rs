//! The corpus regression test (DESIGN.md §7): `check` over every manifest in `../shared/corpus`,
//! real files copied unchanged from public projects (SOURCES.md there says from where).
//!
//! The corpus sits beside the repository, not in it, and is read in place: `../shared/corpus`
//! next to the repository's directory, or the directory `HA_GUARD_CORPUS` names. Every test here
//! fails, naming the folder and the variable, when that directory is missing: a plain `cargo test`
//! never passes the corpus tests by skipping them.
//!
//! Files are checked the way their project ships them: a PDB with the Deployment it protects, an
//! HPA with its target; alternatives (two versions of one Deployment, two provider variants of one
//! install) each on their own. Every finding below was reviewed by hand against the manifest and
//! DESIGN.md, and carries the reason it is right; every group without findings says why it has
//! none. When a rule changes, a difference here is either a fix (update the row and its reason)
//! or a regression (fix the rule).

use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::process::Command;

use ha_guard::check::{self, Options, Report};
use ha_guard::core::config::Config;
use ha_guard::core::finding::Decision;
use ha_guard::core::model::{Kind, ObjectRef};
use ha_guard::manifest as load;
use serde_json::Value;

const ENV: &str = "HA_GUARD_CORPUS";

/// The corpus directory: `HA_GUARD_CORPUS` if set, else `../shared/corpus` beside the repository.
/// Missing, the test fails: a skip would read as a pass.
pub(crate) fn corpus() -> PathBuf {
    let (dir, from) = match std::env::var_os(ENV) {
        Some(dir) => (PathBuf::from(dir), format!("set by {ENV}")),
        None => (
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus"),
            format!("../shared/corpus beside the repository, the default when {ENV} is unset"),
        ),
    };
    assert!(
        dir.is_dir(),
        "the corpus folder {} ({from}) is missing: put the shared corpus there, or set {ENV} to the folder \
         that holds it",
        dir.display()
    );
    dir
}

fn path_in(corpus: &Path, rel: &str) -> String {
    corpus.join(rel).to_string_lossy().into_owned()
}

/// The corpus-relative name of a path `check` reports.
fn rel(corpus: &Path, file: &str) -> String {
    let prefix = corpus.to_string_lossy();
    file.strip_prefix(prefix.as_ref()).unwrap_or(file).trim_start_matches('/').to_string()
}

fn options(complete: bool) -> Options {
    Options { complete, namespace: "default".into(), config: Config::default() }
}

/// Loads and checks `files` (corpus-relative), naming them if anything panics.
fn run(corpus: &Path, files: &[&str], complete: bool) -> Report {
    let paths: Vec<String> = files.iter().map(|f| path_in(corpus, f)).collect();
    catch_unwind(AssertUnwindSafe(|| {
        let loaded = load::load(&paths);
        check::check(&loaded, &options(complete))
    }))
    .unwrap_or_else(|_| panic!("check panicked on {files:?} (complete: {complete})"))
}

// ---------------------------------------------------------------------------------------------
// The reviewed table

/// One expected finding: rule, action, the object it is reported on, its field, and where the
/// object is (`file#document`), with the reason it is right.
struct Expect {
    rule: &'static str,
    action: Decision,
    object: &'static str,
    path: &'static str,
    at: &'static str,
    why: &'static str,
}

/// One expected mutation: the object, the mutation, the JSON Patch operation, where it goes.
struct Fix {
    object: &'static str,
    mutation: &'static str,
    op: &'static str,
    at: &'static str,
}

/// What `complete: true` gives for a group.
enum Complete {
    /// The same findings as the partial view; the reason says why.
    Same(&'static str),
    /// These findings instead (the partial ones plus what absence rules add).
    Findings(&'static [Expect]),
}

struct Group {
    name: &'static str,
    files: &'static [&'static str],
    /// Why these files go together (or alone), and whether they are a whole namespace.
    why: &'static str,
    /// Decoded objects of the kinds the engine reads (Deployment, StatefulSet, PDB, HPA, PVC,
    /// Namespace, Node, Service, Validating/MutatingWebhookConfiguration, KEDA ScaledObject); other
    /// kinds are skipped quietly.
    objects: usize,
    /// The findings with `complete: false`; empty with a reason when there are none.
    findings: &'static [Expect],
    none_because: &'static str,
    complete: Complete,
    fixes: &'static [Fix],
    /// `(file#document, text in the message)` of what `check` says it could not check.
    unchecked: &'static [(&'static str, &'static str)],
}

const PEP: &str = "inject-unhealthy-pod-eviction-policy";
const ALWAYS_ALLOW: &str = r#"{"op":"add","path":"/spec/unhealthyPodEvictionPolicy","value":"AlwaysAllow"}"#;

const NFS_2022: &str = "csi-driver-nfs/csi-nfs-controller-2022-01.yaml";
const NFS_V4135: &str = "csi-driver-nfs/csi-nfs-controller-v4.13.5.yaml";
const NFS_NODE: &str = "csi-driver-nfs/csi-nfs-node.yaml";
const KNATIVE_DEPLOY: &str = "knative-serving/webhook.yaml";
const KNATIVE_HPA: &str = "knative-serving/webhook-hpa.yaml";
const LINKERD: &str = "linkerd2/install_ha_output.yaml";
const KUEUE_RELEASE: &str = "kueue/kueue-v0.12.2.yaml";
const CERT_MANAGER_V1: &str = "cert-manager/cert-manager-v1.11.1.yaml";
const CILIUM_KOPS: &str = "cilium-kops/privatecilium-addons-networking.cilium.io-k8s-1.16.yaml";

/// ingress-nginx's admission webhook, in the cloud variant (the kind variant reuses it).
const INGRESS_NGINX_ADMISSION_CLOUD: Expect = Expect {
    rule: "webhook-fail-closed-unavailable",
    action: Decision::Warn,
    object: "ValidatingWebhookConfiguration/ingress-nginx-admission",
    path: "webhooks[0].failurePolicy",
    at: "ingress-nginx/deploy-cloud.yaml#18",
    why: "validate.nginx.ingress.kubernetes.io is failurePolicy Fail on Ingress CREATE/UPDATE in every namespace, \
          and Service ingress-nginx-controller-admission selects only Deployment ingress-nginx-controller, \
          replicas unset (1), no PDB: while that one pod is away no Ingress can be written anywhere",
};

static GROUPS: &[Group] = &[
    Group {
        name: "csi-driver-nfs 2022-01 controller",
        files: &[NFS_2022],
        why: "the 2022 deploy/ version of the controller, an alternative to v4.13.5 (same Deployment \
              kube-system/csi-nfs-controller), so checked alone; the node DaemonSet beside it is a kind \
              the engine does not read",
        objects: 1,
        findings: &[],
        none_because: "hostNetwork: true with replicas 2 and no affinity or spread, but the nfs container \
                       declares containerPort 29652, a host port under hostNetwork: the scheduler's \
                       NodePorts filter places the two replicas on distinct nodes (proven on kube-scheduler by \
                       tests/e2e_host_ports.rs), so neither host-network-colocation nor replicas-colocated \
                       holds (until issue 41 both fired, the deny saying the scheduler keeps them apart); \
                       what the port costs, a replica Pending without a free node, is spread-unsatisfiable's \
                       where nodes are known",
        complete: Complete::Findings(&[Expect {
            rule: "pdb-missing",
            action: Decision::Warn,
            object: "Deployment kube-system/csi-nfs-controller",
            path: "spec.replicas",
            at: "csi-driver-nfs/csi-nfs-controller-2022-01.yaml#0",
            why: "kube-system is not whole here, but csi-driver-nfs ships no PDB for its controller \
                      in any file, so taken as the whole namespace a floor of 2 with no PDB is right",
        }]),
        fixes: &[],
        unchecked: &[],
    },
    Group {
        name: "csi-driver-nfs v4.13.5 controller and node",
        files: &[NFS_V4135, NFS_NODE],
        why: "the current release's controller with the node DaemonSet it ships beside; the 2022 \
              controller is the alternative",
        objects: 1,
        findings: &[],
        none_because: "replicas 1 (floor and ceiling 1): hostNetwork with one replica cannot collide, \
                       RollingUpdate maxSurge 0 never runs a second pod, no PVC; the DaemonSet (one pod \
                       per node by construction) is not a kind the rules read",
        complete: Complete::Same("floor 1: pdb-missing needs a floor above 1, and there is no PDB or HPA"),
        fixes: &[],
        unchecked: &[],
    },
    Group {
        name: "csi-driver-smb controller",
        files: &["csi-driver-smb/csi-smb-controller.yaml"],
        why: "a single Deployment",
        objects: 1,
        findings: &[],
        none_because: "replicas 1: hostNetwork cannot collide with itself; no strategy means the \
                       default RollingUpdate, so csi-controller-recreate does not apply; emptyDir only",
        complete: Complete::Same("floor 1, no PDB or HPA"),
        fixes: &[],
        unchecked: &[],
    },
    // metrics-server: manifests/base plus components/high-availability is a kustomize tree, not
    // a manifest. kustomize adds the selector and the pod labels (k8s-app: metrics-server),
    // strategic-merges the patch into the base and rewrites the PDB to policy/v1; `check` lints
    // rendered manifests and does none of that. Loaded together, the base and the patch would be
    // two partial versions of one Deployment (kube-system/metrics-server) and neither is what the
    // cluster gets, so each file is checked alone: it must load, not crash, and say what it
    // could not check.
    Group {
        name: "metrics-server kustomize base",
        files: &["metrics-server/base-deployment.yaml"],
        why: "a kustomize base on its own (see above)",
        objects: 1,
        findings: &[],
        none_because: "replicas unset (1) and maxUnavailable 0 with the default 25% surge; the missing \
                       selector is reported as not checked",
        complete: Complete::Same("floor 1, no PDB or HPA"),
        fixes: &[],
        unchecked: &[("metrics-server/base-deployment.yaml#0", "spec.selector is missing")],
    },
    Group {
        name: "metrics-server high-availability patch",
        files: &["metrics-server/high-availability-patch.yaml"],
        why: "a strategic-merge patch (replicas 2, required hostname anti-affinity on \
              k8s-app=metrics-server), not a whole object (see above)",
        objects: 1,
        findings: &[],
        none_because: "the required anti-affinity keeps the 2 replicas on distinct nodes once kustomize \
                       adds the k8s-app label to the pods; without a selector the fragment's own labels \
                       are unknown, so replicas-colocated does not fire on labels it never had",
        complete: Complete::Same(
            "a patch reported as not checked (no selector, no containers) gets no finding that asserts an \
             absence: the component's PDB comes with the rest of the kustomization (issue 16)",
        ),
        fixes: &[],
        unchecked: &[
            ("metrics-server/high-availability-patch.yaml#0", "spec.selector is missing"),
            ("metrics-server/high-availability-patch.yaml#0", "spec.template.spec.containers is missing"),
        ],
    },
    Group {
        name: "metrics-server high-availability PDB",
        files: &["metrics-server/high-availability-pdb.yaml"],
        why: "the component's PDB on its own (see above)",
        objects: 0,
        findings: &[],
        none_because: "policy/v1beta1, removed in Kubernetes 1.25 (the overlay rewrites it to policy/v1): \
                       the engine decodes policy/v1 only, so the document is not checked, and says so",
        complete: Complete::Same("nothing is decoded"),
        fixes: &[],
        unchecked: &[("metrics-server/high-availability-pdb.yaml#0", "policy/v1beta1 is no longer served")],
    },
    Group {
        name: "kueue manager",
        files: &["kueue/manager.yaml"],
        why: "a Namespace and the kustomize base Deployment created in it",
        objects: 2,
        findings: &[],
        none_because: "replicas 1, no strategy (RollingUpdate), no volumes; the missing selector is \
                       reported as not checked",
        complete: Complete::Same("the file is the whole (pre-kustomize) namespace `system`, floor 1: no PDB needed"),
        fixes: &[],
        unchecked: &[("kueue/manager.yaml#1", "spec.selector is missing")],
    },
    Group {
        name: "node-feature-discovery master",
        files: &["node-feature-discovery/master-deployment.yaml"],
        why: "a single Deployment",
        objects: 1,
        findings: &[],
        none_because: "replicas 1, no volumes, default RollingUpdate",
        complete: Complete::Same("floor 1"),
        fixes: &[],
        unchecked: &[],
    },
    Group {
        name: "coredns",
        files: &["coredns/coredns.yaml"],
        why: "one multi-document install (the sed placeholders sit inside the Corefile string)",
        objects: 2,
        findings: &[],
        none_because: "replicas unset (1), and a required hostname anti-affinity on k8s-app=kube-dns, \
                       its own pods, would keep autoscaled replicas apart anyway; no webhook calls Service \
                       kube-dns",
        complete: Complete::Same("floor 1 (kube-system is not whole here either)"),
        fixes: &[],
        unchecked: &[],
    },
    Group {
        name: "ingress-nginx cloud provider",
        files: &["ingress-nginx/deploy-cloud.yaml"],
        why: "one provider variant of the static install (the kind variant is the alternative)",
        objects: 5,
        findings: &[INGRESS_NGINX_ADMISSION_CLOUD],
        none_because: "replicas unset (1), no hostPort or hostNetwork, terminationGracePeriodSeconds 300 \
                       covers the /wait-shutdown preStop (an exec that is not a sleep)",
        complete: Complete::Same(
            "the install creates namespace ingress-nginx, so the file is the whole namespace; floor 1 needs no PDB",
        ),
        fixes: &[],
        unchecked: &[],
    },
    Group {
        name: "ingress-nginx kind provider",
        files: &["ingress-nginx/deploy-kind.yaml"],
        why: "the kind variant of the same install, checked apart from the cloud one",
        objects: 5,
        findings: &[
            Expect {
                rule: "termination-grace-zero",
                action: Decision::Warn,
                object: "Deployment ingress-nginx/ingress-nginx-controller",
                path: "spec.template.spec.terminationGracePeriodSeconds",
                at: "ingress-nginx/deploy-kind.yaml#14",
                why: "the kind variant sets terminationGracePeriodSeconds: 0, so the controller is SIGKILLed \
                      and its /wait-shutdown preStop never drains connections",
            },
            Expect {
                at: "ingress-nginx/deploy-kind.yaml#18",
                why: "the same admission webhook as the cloud variant, on the same single controller replica \
                      (a hostPort one here, so a second replica could not even share a node)",
                ..INGRESS_NGINX_ADMISSION_CLOUD
            },
        ],
        none_because: "",
        complete: Complete::Same("whole namespace ingress-nginx; floor 1 (hostPort with one replica is fine)"),
        fixes: &[],
        unchecked: &[],
    },
    Group {
        name: "external-dns deployment",
        files: &["external-dns/external-dns-deployment.yaml"],
        why: "a single Deployment",
        objects: 1,
        findings: &[],
        none_because: "strategy Recreate with replicas unset (ceiling 1): recreate-multi-replica needs a \
                       ceiling above 1, and one replica is what Recreate is for",
        complete: Complete::Same("floor 1"),
        fixes: &[],
        unchecked: &[],
    },
    Group {
        name: "external-dns e2e etcd",
        files: &["external-dns/e2e-etcd.yaml"],
        why: "a Service and its StatefulSet",
        objects: 2,
        findings: &[],
        none_because: "replicas 1; its RWO storage comes from volumeClaimTemplates (one claim per pod), \
                       which rwo-volume-multi-replica leaves out by design",
        complete: Complete::Same("floor 1"),
        fixes: &[],
        unchecked: &[],
    },
    Group {
        name: "kube-state-metrics standard",
        files: &["kube-state-metrics/standard-deployment.yaml"],
        why: "the standard example; the autosharding StatefulSet of the same name is the alternative",
        objects: 1,
        findings: &[],
        none_because: "replicas 1, default RollingUpdate, no volumes",
        complete: Complete::Same("floor 1"),
        fixes: &[],
        unchecked: &[],
    },
    Group {
        name: "kube-state-metrics autosharding",
        files: &["kube-state-metrics/autosharding-statefulset.yaml"],
        why: "the autosharding example, alternative to the standard Deployment",
        objects: 1,
        findings: &[Expect {
            rule: "replicas-colocated",
            action: Decision::Warn,
            object: "StatefulSet kube-system/kube-state-metrics",
            path: "spec.template.spec.topologySpreadConstraints",
            at: "kube-state-metrics/autosharding-statefulset.yaml#0",
            why: "2 shards and no spread or anti-affinity: a node loss takes both shards",
        }],
        none_because: "",
        complete: Complete::Findings(&[
            Expect {
                rule: "replicas-colocated",
                action: Decision::Warn,
                object: "StatefulSet kube-system/kube-state-metrics",
                path: "spec.template.spec.topologySpreadConstraints",
                at: "kube-state-metrics/autosharding-statefulset.yaml#0",
                why: "as without --complete",
            },
            Expect {
                rule: "pdb-missing",
                action: Decision::Warn,
                object: "StatefulSet kube-system/kube-state-metrics",
                path: "spec.replicas",
                at: "kube-state-metrics/autosharding-statefulset.yaml#0",
                why: "the example ships no PDB in any file; taken as the whole namespace, floor 2 with no \
                      PDB is right",
            },
        ]),
        fixes: &[],
        unchecked: &[],
    },
    Group {
        name: "aws-ebs-csi-driver controller and PDB",
        files: &["aws-ebs-csi-driver/controller.yaml", "aws-ebs-csi-driver/poddisruptionbudget-controller.yaml"],
        why: "the controller and its PDB from one kustomize base (namespace set by kustomize, so both \
              land in the default namespace here, together)",
        objects: 2,
        findings: &[],
        none_because: "replicas 2 with a preferred hostname anti-affinity on app=ebs-csi-controller (its \
                       own pods), RollingUpdate (not Recreate) despite the CSI sidecars, and the PDB \
                       maxUnavailable 1 leaves 1 of 2 to evict",
        complete: Complete::Same(
            "not a whole namespace (kube-system after kustomize), and nothing absent matters: the PDB \
             covers the controller",
        ),
        fixes: &[Fix {
            object: "PodDisruptionBudget default/ebs-csi-controller",
            mutation: PEP,
            op: ALWAYS_ALLOW,
            at: "aws-ebs-csi-driver/poddisruptionbudget-controller.yaml#0",
        }],
        unchecked: &[],
    },
    Group {
        name: "k8s-website zookeeper",
        files: &["k8s-website/zookeeper.yaml"],
        why: "one tutorial manifest: Services, the PDB and the StatefulSet",
        objects: 4,
        findings: &[Expect {
            rule: "replicas-colocated",
            action: Decision::Warn,
            object: "StatefulSet default/zk",
            path: "spec.template.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector",
            at: "k8s-website/zookeeper.yaml#3",
            why: "a real bug in the example: the required anti-affinity selects app In (zk) but the pods \
                  are labelled app.kubernetes.io/name=zk only, so it matches no pod and the 3 replicas \
                  are not kept apart; the finding points at that anti-affinity and says so",
        }],
        none_because: "",
        complete: Complete::Same(
            "the tutorial's namespace holds just this; zk-pdb (maxUnavailable 1 of 3) covers zk, so \
             nothing is missing",
        ),
        fixes: &[Fix {
            object: "PodDisruptionBudget default/zk-pdb",
            mutation: PEP,
            op: ALWAYS_ALLOW,
            at: "k8s-website/zookeeper.yaml#2",
        }],
        unchecked: &[],
    },
    Group {
        name: "k8s-website php-apache and its HPA",
        files: &["k8s-website/php-apache.yaml", "k8s-website/hpa-php-apache.yaml"],
        why: "the HPA walkthrough applies both: the HPA targets Deployment php-apache",
        objects: 3,
        findings: &[],
        none_because: "floor 1 (replicas unset, minReplicas 1) and ceiling 10, but no hostNetwork, RWO \
                       claim or Recreate for the ceiling to matter; bounds 1..10 are in order; the Deployment \
                       leaves replicas to the HPA, so no hpa-replicas-conflict",
        complete: Complete::Same(
            "the walkthrough's namespace holds just these two: the HPA's target is present and floor 1 \
             needs no PDB",
        ),
        fixes: &[],
        unchecked: &[],
    },
    Group {
        name: "k8s-website wordpress mysql",
        files: &["k8s-website/wordpress-mysql-deployment.yaml"],
        why: "the Service, PVC and Deployment of the tutorial's database",
        objects: 3,
        findings: &[],
        none_because: "the RWO claim mysql-pv-claim is mounted by one replica with strategy Recreate, which \
                       is exactly the safe shape: no second pod, no surge",
        complete: Complete::Same("floor 1"),
        fixes: &[],
        unchecked: &[],
    },
    Group {
        name: "gatekeeper",
        files: &["gatekeeper/gatekeeper.yaml"],
        why: "one install file (CRDs, RBAC, webhooks, Namespace, two Deployments, a PDB)",
        objects: 7,
        findings: &[],
        none_because: "controller-manager runs 3 with a preferred hostname anti-affinity on \
                       gatekeeper.sh/operation=webhook (its own pods) and a PDB minAvailable 1 (2 of 3 \
                       evictable); audit runs 1. Of the webhooks only check-ignore-label.gatekeeper.sh \
                       (Namespace CREATE/UPDATE) is failurePolicy Fail, and Service gatekeeper-webhook-service \
                       selects that controller-manager: 3 replicas kept apart with a PDB letting 2 go, the \
                       multi-pod fix of open-policy-agent/gatekeeper#708, so no webhook-fail-closed-unavailable",
        complete: Complete::Same(
            "the file creates gatekeeper-system and is the whole namespace: the PDB covers the \
             multi-replica controller, audit's floor is 1",
        ),
        fixes: &[Fix {
            object: "PodDisruptionBudget gatekeeper-system/gatekeeper-controller-manager",
            mutation: PEP,
            op: ALWAYS_ALLOW,
            at: "gatekeeper/gatekeeper.yaml#28",
        }],
        unchecked: &[],
    },
    Group {
        name: "linkerd HA install",
        files: &[LINKERD],
        why: "the CLI's golden HA install output, one file",
        objects: 18,
        findings: &[],
        none_because: "the acceptance case: identity, destination and proxy-injector run 3 replicas each \
                       with a required hostname anti-affinity on their own component label, and each \
                       has a PDB maxUnavailable 1 (2 of 3 must stay); the three fail-closed webhooks \
                       (sp-validator and policy-validator on destination, proxy-injector on proxy-injector) \
                       therefore have backends that survive a node",
        complete: Complete::Same(
            "the install creates namespace linkerd and is the whole namespace: each Deployment has its \
             PDB and each PDB covers its Deployment",
        ),
        fixes: &[
            Fix {
                object: "PodDisruptionBudget linkerd/linkerd-identity",
                mutation: PEP,
                op: ALWAYS_ALLOW,
                at: "linkerd2/install_ha_output.yaml#28",
            },
            Fix {
                object: "PodDisruptionBudget linkerd/linkerd-dst",
                mutation: PEP,
                op: ALWAYS_ALLOW,
                at: "linkerd2/install_ha_output.yaml#35",
            },
            Fix {
                object: "PodDisruptionBudget linkerd/linkerd-proxy-injector",
                mutation: PEP,
                op: ALWAYS_ALLOW,
                at: "linkerd2/install_ha_output.yaml#40",
            },
        ],
        unchecked: &[],
    },
    Group {
        name: "knative-serving webhook, HPA and PDB",
        files: &[KNATIVE_DEPLOY, KNATIVE_HPA],
        why: "config/core/deployments ships the webhook Deployment, its HPA and its PDB together",
        objects: 4,
        findings: &[Expect {
            rule: "pdb-blocks-eviction",
            action: Decision::Deny,
            object: "PodDisruptionBudget knative-serving/webhook-pdb",
            path: "spec.minAvailable",
            at: "knative-serving/webhook-hpa.yaml#1",
            why: "the acceptance case: the HPA floor is 1 (minReplicas 1), and minAvailable 80% needs \
                  ceil(0.8 x 1) = 1 healthy, leaving 0 evictions; reported once, on the PDB",
        }],
        none_because: "",
        complete: Complete::Same(
            "knative-serving holds more workloads than these, and nothing absent matters anyway: the PDB \
             covers the webhook and the HPA's target is present",
        ),
        fixes: &[Fix {
            object: "PodDisruptionBudget knative-serving/webhook-pdb",
            mutation: PEP,
            op: ALWAYS_ALLOW,
            at: "knative-serving/webhook-hpa.yaml#1",
        }],
        unchecked: &[],
    },
    Group {
        name: "kube-prometheus prometheus-adapter and PDB",
        files: &[
            "kube-prometheus/prometheusAdapter-deployment.yaml",
            "kube-prometheus/prometheusAdapter-podDisruptionBudget.yaml",
        ],
        why: "the adapter Deployment and the PDB generated for it",
        objects: 2,
        findings: &[Expect {
            rule: "replicas-colocated",
            action: Decision::Warn,
            object: "Deployment monitoring/prometheus-adapter",
            path: "spec.template.spec.topologySpreadConstraints",
            at: "kube-prometheus/prometheusAdapter-deployment.yaml#0",
            why: "replicas 2 and no spread or anti-affinity: both adapters (the metrics API behind every \
                  HPA) may share a node",
        }],
        none_because: "",
        complete: Complete::Same(
            "monitoring holds the rest of kube-prometheus, and the PDB (minAvailable 1 of 2, one \
             evictable) covers the adapter, so nothing absent is reported",
        ),
        fixes: &[Fix {
            object: "PodDisruptionBudget monitoring/prometheus-adapter",
            mutation: PEP,
            op: ALWAYS_ALLOW,
            at: "kube-prometheus/prometheusAdapter-podDisruptionBudget.yaml#0",
        }],
        unchecked: &[],
    },
    // The second set (SOURCES.md "Second set"): fail-closed webhooks and tolerate-everything
    // operators. What the round-2 rules of another branch (toleration-wildcard, hpa-replicas-conflict)
    // should say is still noted in `// round 2:` comments, to move into the rows when they land.
    Group {
        name: "kueue v0.12.2 release install",
        files: &[KUEUE_RELEASE],
        why: "the release's whole manifests.yaml (11 CRDs, RBAC, Services, APIService, Deployment, both \
              webhook configurations; a licence header added); the kustomize base kueue/manager.yaml is the \
              same controller before kustomize names it, so this is checked alone",
        objects: 8,
        findings: &[
            Expect {
                rule: "apiservice-unavailable",
                action: Decision::Warn,
                object: "APIService/v1beta1.visibility.kueue.x-k8s.io",
                path: "spec.service",
                at: "kueue/kueue-v0.12.2.yaml#63",
                why: "the aggregated visibility API (issue 51's motivating case) is served by Service \
                      kueue-system/kueue-visibility-server (control-plane=controller-manager), which selects only \
                      Deployment kueue-controller-manager, replicas 1: while its node drains, discovery and \
                      namespace deletion break cluster-wide",
            },
            Expect {
                rule: "webhook-fail-closed-unavailable",
                action: Decision::Warn,
                object: "MutatingWebhookConfiguration/kueue-mutating-webhook-configuration",
                path: "webhooks[0].failurePolicy",
                at: "kueue/kueue-v0.12.2.yaml#64",
                why: "the canonical positive: all 18 webhooks are failurePolicy Fail via Service \
                      kueue-system/kueue-webhook-service (control-plane=controller-manager), which selects only \
                      Deployment kueue-controller-manager, replicas 1, no PDB; mjob.kb.io (batch/v1 Jobs) has no \
                      namespaceSelector, so one replica gone blocks every Job create in the cluster \
                      (kubernetes-sigs/kueue#5244); one finding for the 18, all named",
            },
            Expect {
                rule: "webhook-fail-closed-unavailable",
                action: Decision::Warn,
                object: "ValidatingWebhookConfiguration/kueue-validating-webhook-configuration",
                path: "webhooks[0].failurePolicy",
                at: "kueue/kueue-v0.12.2.yaml#65",
                why: "the same backend for the 19 validating webhooks, all failurePolicy Fail, vjob.kb.io \
                      cluster-wide and vpod.kb.io on Pods outside kube-system and kueue-system",
            },
        ],
        none_because: "Deployment kueue-controller-manager runs replicas 1 (floor and ceiling 1) with the \
                       default RollingUpdate, grace 10 s and no preStop, emptyDir/secret/configMap volumes only; \
                       its one toleration is a keyed Equal one (GKE managed components)",
        complete: Complete::Same(
            "the file creates namespace kueue-system and is the whole of it: floor 1 needs no PDB, no HPA; the \
             webhook finding does not depend on absence",
        ),
        fixes: &[],
        unchecked: &[],
    },
    Group {
        name: "kueue openshift operator assets",
        files: &[
            "kueue-openshift-operator/deployment.yaml",
            "kueue-openshift-operator/webhook-service.yaml",
            "kueue-openshift-operator/mutatingwebhook.yaml",
            "kueue-openshift-operator/validatingwebhook.yaml",
        ],
        why: "the operator's bindata/assets/kueue-operator directory applies these four together: the \
              Deployment, the Service in front of it and the two webhook configurations calling that Service",
        objects: 4,
        findings: &[
            Expect {
                rule: "webhook-fail-closed-unavailable",
                action: Decision::Warn,
                object: "MutatingWebhookConfiguration/kueue-mutating-webhook-configuration",
                path: "webhooks[0].failurePolicy",
                at: "kueue-openshift-operator/mutatingwebhook.yaml#1",
                why: "the relation spans four files: the 21 mutating webhooks, all failurePolicy Fail (mpod.kb.io \
                      on Pods included), call Service openshift-kueue-operator/kueue-webhook-service \
                      (control-plane=controller-manager) of webhook-service.yaml, which selects only Deployment \
                      kueue-controller-manager of deployment.yaml, replicas 1, no PDB",
            },
            Expect {
                rule: "webhook-fail-closed-unavailable",
                action: Decision::Warn,
                object: "ValidatingWebhookConfiguration/kueue-validating-webhook-configuration",
                path: "webhooks[0].failurePolicy",
                at: "kueue-openshift-operator/validatingwebhook.yaml#1",
                why: "the 22 validating webhooks (vpod.kb.io included), same Service, same single replica",
            },
        ],
        none_because: "Deployment kueue-controller-manager runs replicas 1 with the default RollingUpdate, grace \
                       10 s and no preStop; the unrendered image ${IMAGE} is a plain string",
        complete: Complete::Same(
            "floor 1 needs no PDB and there is no HPA, so nothing is absent (openshift-kueue-operator also \
             holds the operator's own Deployment, from other assets); the webhook finding does not depend on \
             absence",
        ),
        fixes: &[],
        unchecked: &[],
    },
    Group {
        name: "cert-manager v1.11.1 static install",
        files: &[CERT_MANAGER_V1],
        why: "one release's static install (kubeflow vendors it unchanged); the v0.8.0-alpha.0 manifest is an \
              older alternative with the same Deployments, so each is checked alone",
        objects: 8,
        findings: &[
            Expect {
                rule: "webhook-fail-closed-unavailable",
                action: Decision::Warn,
                object: "MutatingWebhookConfiguration/cert-manager-webhook",
                path: "webhooks[0].failurePolicy",
                at: "cert-manager/cert-manager-v1.11.1.yaml#44",
                why: "webhook.cert-manager.io is failurePolicy Fail on cert-manager.io and acme.cert-manager.io \
                      resources; Service cert-manager/cert-manager-webhook selects only Deployment \
                      cert-manager-webhook (name webhook, instance cert-manager, component webhook), replicas 1, \
                      no PDB, no anti-affinity (cert-manager/cert-manager#3898)",
            },
            Expect {
                rule: "webhook-fail-closed-unavailable",
                action: Decision::Warn,
                object: "ValidatingWebhookConfiguration/cert-manager-webhook",
                path: "webhooks[0].failurePolicy",
                at: "cert-manager/cert-manager-v1.11.1.yaml#45",
                why: "the validating twin, same backend; its namespaceSelector leaves out the cert-manager \
                      namespace, which the message says",
            },
        ],
        none_because: "the controller, cainjector and webhook Deployments each run replicas 1 with the default \
                       RollingUpdate, no hostNetwork, no claims, no grace or preStop settings",
        complete: Complete::Same(
            "the file creates namespace cert-manager and is the whole of it: every floor is 1, so no PDB is \
             missing, and there is no HPA; the webhook finding does not depend on absence",
        ),
        fixes: &[],
        unchecked: &[],
    },
    Group {
        name: "cert-manager v0.8.0-alpha.0",
        files: &["cert-manager/cert-manager-v0.8.0-alpha.0.yaml"],
        why: "a 2019 manifest, the older alternative to v1.11.1, checked alone",
        objects: 2,
        findings: &[],
        none_because: "only the Namespace and Service cert-manager-webhook decode: the three Deployments are \
                       apps/v1beta1 (removed in Kubernetes 1.16) and the ValidatingWebhookConfiguration is \
                       admissionregistration/v1beta1 (removed in 1.22), so they are not checked and each says \
                       so. Out of scope for webhook-fail-closed-unavailable on purpose: that configuration (3 \
                       webhooks, failurePolicy Fail) calls Service default/kubernetes, the apiserver itself, and \
                       only APIService v1beta1.admission.certmanager.k8s.io routes the path on to Service \
                       cert-manager-webhook; a current cluster refuses the manifest, and the aggregation layer \
                       (APIService) is not followed",
        complete: Complete::Same("nothing but the Namespace and a Service is decoded, so nothing can be absent"),
        fixes: &[],
        unchecked: &[
            ("cert-manager/cert-manager-v0.8.0-alpha.0.yaml#21", "apps/v1beta1 is no longer served"),
            ("cert-manager/cert-manager-v0.8.0-alpha.0.yaml#22", "apps/v1beta1 is no longer served"),
            ("cert-manager/cert-manager-v0.8.0-alpha.0.yaml#23", "apps/v1beta1 is no longer served"),
            (
                "cert-manager/cert-manager-v0.8.0-alpha.0.yaml#24",
                "APIService v1beta1.admission.certmanager.k8s.io: apiregistration.k8s.io/v1beta1 is no longer served",
            ),
            (
                "cert-manager/cert-manager-v0.8.0-alpha.0.yaml#30",
                "ValidatingWebhookConfiguration cert-manager-webhook: admissionregistration.k8s.io/v1beta1 is no \
                 longer served",
            ),
        ],
    },
    Group {
        name: "istio 1.29 rendered install",
        files: &["istio/install.yaml"],
        why: "one rendered install (kubeflow's istio-install base): istiod and the ingress gateway with their \
              HPAs, Services, webhook configurations and the CNI DaemonSet",
        objects: 8,
        findings: &[Expect {
            rule: "webhook-fail-closed-unavailable",
            action: Decision::Warn,
            object: "MutatingWebhookConfiguration/istio-sidecar-injector",
            path: "webhooks[0].failurePolicy",
            at: "istio/install.yaml#19",
            why: "its 4 webhooks are failurePolicy Fail on Pod CREATE in injection-labelled namespaces, via \
                  Service istio-system/istiod (app=istiod, istio=pilot), which selects Deployment istiod: \
                  replicas unset and HPA minReplicas 1, so floor 1, no PDB, no anti-affinity \
                  (istio/istio#17497). Not on ValidatingWebhookConfiguration istio-validator-istio-system: \
                  failurePolicy Ignore",
        }],
        none_because: "istiod and istio-ingressgateway leave replicas unset and their HPAs run 1..5: floor 1, \
                       ceiling 5, but no hostNetwork, claim or Recreate for the ceiling to matter (the 100% \
                       surge needs an RWO claim to hurt), bounds in order; the templated kind: Deployment and \
                       PodDisruptionBudget text in the istio-sidecar-injector ConfigMap stays a string (8 \
                       objects, no more); the istio-cni-node DaemonSet is not a kind the rules read",
        complete: Complete::Same(
            "both HPA targets are in the file and both floors are 1, so nothing absent is reported \
             (istio-system itself is created elsewhere)",
        ),
        fixes: &[],
        unchecked: &[],
        // round 2: no toleration-wildcard: istiod tolerates only the key cni.istio.io/not-ready, and
        // istio-cni-node is a DaemonSet; no hpa-replicas-conflict: neither Deployment sets replicas.
    },
    Group {
        name: "calico tigera-operator",
        files: &["calico/tigera-operator.yaml"],
        why: "one install file: Namespace, RBAC and the operator Deployment",
        objects: 2,
        findings: &[Expect {
            rule: "toleration-wildcard",
            action: Decision::Warn,
            object: "Deployment tigera-operator/tigera-operator",
            path: "spec.template.spec.tolerations[1].operator",
            at: "calico/tigera-operator.yaml#6",
            why: "the keyless {effect: NoSchedule, operator: Exists} tolerates every NoSchedule taint, the cordon's \
                  node.kubernetes.io/unschedulable included, so a drained operator lands back on the cordoned node \
                  (projectcalico/calico#6136, tigera/operator#2537); tolerations[0], {effect: NoExecute, operator: \
                  Exists}, covers no NoSchedule taint and is not reported",
        }],
        none_because: "",
        complete: Complete::Same(
            "the file creates namespace tigera-operator and is the whole of it: floor 1 needs no PDB; the \
             toleration finding does not depend on the view",
        ),
        fixes: &[],
        unchecked: &[],
        // Otherwise clean: replicas 1, so hostNetwork cannot collide with itself (ceiling 1); default
        // RollingUpdate, a hostPath volume only, grace 60 s and no preStop.
    },
    Group {
        name: "cilium kops addon",
        files: &[CILIUM_KOPS],
        why: "one rendered kops addon: the agent DaemonSet, the operator Deployment and its PDB",
        objects: 2,
        findings: &[Expect {
            rule: "toleration-wildcard",
            action: Decision::Warn,
            object: "Deployment kube-system/cilium-operator",
            path: "spec.template.spec.tolerations[0].operator",
            at: "cilium-kops/privatecilium-addons-networking.cilium.io-k8s-1.16.yaml#10",
            why: "tolerations [{operator: Exists}] (no key, no effect) tolerate every taint, the cordon included, so \
                  a drained operator returns to its node (cilium/cilium#28549); the DaemonSet cilium has the same \
                  toleration and is out of scope by design (not a kind the rules read)",
        }],
        none_because: "",
        complete: Complete::Same(
            "kube-system is not whole here, and nothing absent matters: the PDB covers the operator, floor 1; the \
             toleration finding does not depend on the view",
        ),
        fixes: &[Fix {
            object: "PodDisruptionBudget kube-system/cilium-operator",
            mutation: PEP,
            op: ALWAYS_ALLOW,
            at: "cilium-kops/privatecilium-addons-networking.cilium.io-k8s-1.16.yaml#11",
        }],
        unchecked: &[],
        // Otherwise clean: cilium-operator runs replicas 1 with hostNetwork (ceiling 1, and a
        // DoNotSchedule hostname spread anyway); both its spreads select its own pods; the PDB's
        // maxUnavailable 1 over floor 1 leaves 1 eviction.
        // round 2: no spread-zone-missing: floor 1, and it has a zone spread on its own pods anyway.
    },
];

/// Files that belong together, checked apart as if each were the whole namespace: what the
/// absence rules then say, and why grouping matters.
static SPLIT: &[Group] = &[
    Group {
        name: "knative webhook HPA and PDB without the Deployment",
        files: &[KNATIVE_HPA],
        why: "the HPA/PDB file alone",
        objects: 2,
        findings: &[],
        none_because: "partial view: with no workload in view the PDB covers nothing known (no arithmetic), \
                       and absence is not asserted",
        complete: Complete::Findings(&[
            Expect {
                rule: "hpa-target-missing",
                action: Decision::Warn,
                object: "HorizontalPodAutoscaler knative-serving/webhook",
                path: "spec.scaleTargetRef",
                at: "knative-serving/webhook-hpa.yaml#0",
                why: "as the whole namespace, Deployment webhook is not there",
            },
            Expect {
                rule: "pdb-selects-nothing",
                action: Decision::Warn,
                object: "PodDisruptionBudget knative-serving/webhook-pdb",
                path: "spec.selector",
                at: "knative-serving/webhook-hpa.yaml#1",
                why: "as the whole namespace, no workload has pods labelled app=webhook",
            },
        ]),
        fixes: &[Fix {
            object: "PodDisruptionBudget knative-serving/webhook-pdb",
            mutation: PEP,
            op: ALWAYS_ALLOW,
            at: "knative-serving/webhook-hpa.yaml#1",
        }],
        unchecked: &[],
    },
    Group {
        name: "php-apache HPA without its target",
        files: &["k8s-website/hpa-php-apache.yaml"],
        why: "the HPA file alone (YAML flow style)",
        objects: 1,
        findings: &[],
        none_because: "bounds 1..10 are in order; a missing target is only asserted on a complete view",
        complete: Complete::Findings(&[Expect {
            rule: "hpa-target-missing",
            action: Decision::Warn,
            object: "HorizontalPodAutoscaler default/php-apache",
            path: "spec.scaleTargetRef",
            at: "k8s-website/hpa-php-apache.yaml#0",
            why: "as the whole namespace, Deployment php-apache is in the other file",
        }]),
        fixes: &[],
        unchecked: &[],
    },
    Group {
        name: "aws-ebs-csi-driver controller without its PDB",
        files: &["aws-ebs-csi-driver/controller.yaml"],
        why: "the controller file alone",
        objects: 1,
        findings: &[],
        none_because: "the controller itself is fine (see the group)",
        complete: Complete::Findings(&[Expect {
            rule: "pdb-missing",
            action: Decision::Warn,
            object: "Deployment default/ebs-csi-controller",
            path: "spec.replicas",
            at: "aws-ebs-csi-driver/controller.yaml#0",
            why: "as the whole namespace, 2 replicas and the PDB is in the other file",
        }]),
        fixes: &[],
        unchecked: &[],
    },
    Group {
        name: "kueue openshift webhooks and Service without the Deployment",
        files: &[
            "kueue-openshift-operator/webhook-service.yaml",
            "kueue-openshift-operator/mutatingwebhook.yaml",
            "kueue-openshift-operator/validatingwebhook.yaml",
        ],
        why: "three of the four assets: the Deployment behind the Service left out",
        objects: 3,
        findings: &[],
        none_because: "the Service selects no workload in the view, so the backend cannot be judged: a \
                       webhook whose pods the view does not hold (a DaemonSet's, a workload in another file) \
                       is not reported, whatever the view",
        complete: Complete::Same("the same: absence of a backend is not asserted either"),
        fixes: &[],
        unchecked: &[],
    },
    Group {
        name: "kueue openshift Deployment and webhooks without the Service",
        files: &[
            "kueue-openshift-operator/deployment.yaml",
            "kueue-openshift-operator/mutatingwebhook.yaml",
            "kueue-openshift-operator/validatingwebhook.yaml",
        ],
        why: "the Service between them left out",
        objects: 3,
        findings: &[],
        none_because: "the webhooks call Service kueue-webhook-service, which is not in the view, so nothing \
                       links them to the Deployment",
        complete: Complete::Same("the same"),
        fixes: &[],
        unchecked: &[],
    },
];

// ---------------------------------------------------------------------------------------------
// Comparing a report with the table

type Row = (String, Decision, String, String, String);

fn row_of(e: &Expect) -> Row {
    (e.rule.to_string(), e.action, e.object.to_string(), e.path.to_string(), e.at.to_string())
}

fn rows(corpus: &Path, report: &Report) -> Vec<Row> {
    let mut rows: Vec<Row> = report
        .findings
        .iter()
        .map(|l| {
            let f = &l.finding;
            let at = format!("{}#{}", rel(corpus, &l.origin.file), l.origin.document);
            (f.rule.to_string(), f.action, f.object.to_string(), f.path.clone(), at)
        })
        .collect();
    rows.sort();
    rows
}

fn expected_rows(expect: &[Expect]) -> Vec<Row> {
    let mut rows: Vec<Row> = expect.iter().map(row_of).collect();
    rows.sort();
    rows
}

fn fix_rows(corpus: &Path, report: &Report) -> Vec<(String, String, String, String)> {
    let mut rows: Vec<_> = report
        .fixes
        .iter()
        .flat_map(|fx| {
            let at = format!("{}#{}", rel(corpus, &fx.origin.file), fx.origin.document);
            fx.changes.iter().map(move |c| {
                let op = serde_json::to_string(&c.operation).expect("a patch operation serializes");
                (fx.object.to_string(), c.mutation.to_string(), op, at.clone())
            })
        })
        .collect();
    rows.sort();
    rows
}

/// Everything that differs between `report` and `group` (complete or not), one line each.
fn differences(corpus: &Path, group: &Group, report: &Report, complete: bool) -> Vec<String> {
    let mut out = Vec::new();
    let label = format!("{} (complete: {complete})", group.name);
    for e in &report.errors {
        out.push(format!("{label}: unexpected error: {e}"));
    }
    if report.objects != group.objects {
        out.push(format!("{label}: {} objects decoded, expected {}", report.objects, group.objects));
    }
    let expected = match (&group.complete, complete) {
        (Complete::Findings(f), true) => f,
        _ => &group.findings,
    };
    let (got, want) = (rows(corpus, report), expected_rows(expected));
    for r in got.iter().filter(|r| !want.contains(r)) {
        let message = report
            .findings
            .iter()
            .find(|l| l.finding.rule.id == r.0 && l.finding.object.to_string() == r.2)
            .map(|l| l.finding.message())
            .unwrap_or_default();
        out.push(format!("{label}: unexpected finding {r:?}: {message}"));
    }
    for r in want.iter().filter(|r| !got.contains(r)) {
        out.push(format!("{label}: missing finding {r:?}"));
    }
    if got.len() != want.len() && out.is_empty() {
        out.push(format!("{label}: findings {got:?}, expected {want:?} (duplicates?)"));
    }
    let mut want_fixes: Vec<_> = group
        .fixes
        .iter()
        .map(|f| (f.object.to_string(), f.mutation.to_string(), f.op.to_string(), f.at.to_string()))
        .collect();
    want_fixes.sort();
    let got_fixes = fix_rows(corpus, report);
    if got_fixes != want_fixes {
        out.push(format!("{label}: mutation plan {got_fixes:?}, expected {want_fixes:?}"));
    }
    let got_unchecked: BTreeSet<String> =
        report.unchecked.iter().map(|(o, m)| format!("{}#{}: {m}", rel(corpus, &o.file), o.document)).collect();
    for (at, text) in group.unchecked {
        if !got_unchecked.iter().any(|u| u.starts_with(&format!("{at}: ")) && u.contains(text)) {
            out.push(format!(
                "{label}: expected a not-checked note at {at} containing {text:?}, got {got_unchecked:?}"
            ));
        }
    }
    if got_unchecked.len() != group.unchecked.len() {
        out.push(format!("{label}: not-checked notes {got_unchecked:?}, expected {} of them", group.unchecked.len()));
    }
    if !report.notices.is_empty() {
        out.push(format!("{label}: unexpected notices {:?}", report.notices));
    }
    out
}

/// The table itself is well formed: every row has a reason, every group without findings says why.
fn check_table(groups: &[Group]) {
    for g in groups {
        assert!(!g.why.trim().is_empty(), "{}: say why these files go together", g.name);
        assert!(!g.findings.is_empty() || !g.none_because.trim().is_empty(), "{}: say why there is no finding", g.name);
        let complete_rows: &[Expect] = match &g.complete {
            Complete::Findings(f) => f,
            Complete::Same(why) => {
                assert!(!why.trim().is_empty(), "{}: say why --complete changes nothing", g.name);
                &[]
            }
        };
        for e in g.findings.iter().chain(complete_rows) {
            assert!(!e.why.trim().is_empty(), "{}: finding {} has no reason", g.name, e.rule);
            assert!(
                ha_guard::core::registry::rule(e.rule).is_some(),
                "{}: {} is not a rule of the catalogue",
                g.name,
                e.rule
            );
            assert!(
                g.files.iter().any(|f| e.at.starts_with(&format!("{f}#"))),
                "{}: {} is not in the group",
                g.name,
                e.at
            );
        }
    }
}

fn check_groups(corpus: &Path, groups: &[Group]) {
    check_table(groups);
    let mut failures = Vec::new();
    for g in groups {
        for f in g.files {
            assert!(corpus.join(f).is_file(), "{}: {f} is not in the corpus", g.name);
        }
        failures.extend(differences(corpus, g, &run(corpus, g.files, false), false));
        failures.extend(differences(corpus, g, &run(corpus, g.files, true), true));
    }
    assert!(failures.is_empty(), "the corpus findings differ from the reviewed table:\n{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// The tests

/// Every manifest file of the corpus, corpus-relative, the way `check` walks a directory.
pub(crate) fn corpus_files(corpus: &Path) -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display())) {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if matches!(path.extension().and_then(|e| e.to_str()), Some("yaml" | "yml" | "json")) {
                out.push(path);
            }
        }
    }
    let mut paths = Vec::new();
    walk(corpus, &mut paths);
    let mut files: Vec<String> = paths
        .iter()
        .map(|p| p.strip_prefix(corpus).expect("under the corpus").to_string_lossy().into_owned())
        .collect();
    files.sort();
    files
}

#[test]
fn every_file_loads_and_is_checked_without_crashing() {
    let corpus = corpus();
    let files = corpus_files(&corpus);
    assert!(files.len() >= 38, "the corpus has {} manifest files, expected at least 38: {files:?}", files.len());
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sarif-2.1.0.schema.json"))
            .unwrap(),
    )
    .unwrap();
    let sarif_schema = jsonschema::draft4::options().build(&schema).unwrap();
    let mut sarif_results = 0;
    for f in &files {
        let path = path_in(&corpus, f);
        let loaded =
            catch_unwind(|| load::load(std::slice::from_ref(&path))).unwrap_or_else(|_| panic!("loading {f} panicked"));
        assert!(loaded.errors.is_empty(), "{f} does not load: {:?}", loaded.errors);
        assert!(!loaded.documents.is_empty(), "{f}: no document loaded");
        for complete in [false, true] {
            let report = run(&corpus, &[f.as_str()], complete);
            assert!(report.errors.is_empty(), "{f} (complete: {complete}): {:?}", report.errors);
            assert_eq!(report.files, 1, "{f}");
            // The text, JSON and SARIF renderings of every report work too.
            let _ = check::output::text(&report, Default::default());
            let json = check::output::json(&report);
            assert!(json["findings"].is_array() && json["summary"].is_object(), "{f}: {json}");
            // The SARIF of every file is valid against the SARIF 2.1.0 schema.
            let sarif = check::output::sarif(&report);
            let errors: Vec<String> =
                sarif_schema.iter_errors(&sarif).map(|e| format!("{e} at {}", e.instance_path)).collect();
            assert!(errors.is_empty(), "{f} (complete: {complete}): SARIF not valid against the schema: {errors:?}");
            sarif_results += sarif["runs"][0]["results"].as_array().map_or(0, Vec::len);
        }
    }
    assert!(sarif_results >= 20, "the SARIF logs held {sarif_results} results only: were the findings left out?");
    // Every file is in exactly one reviewed group: a file added to the corpus needs a review.
    let grouped: Vec<&str> = GROUPS.iter().flat_map(|g| g.files.iter().copied()).collect();
    let unique: BTreeSet<&str> = grouped.iter().copied().collect();
    assert_eq!(grouped.len(), unique.len(), "a file is in two groups: {grouped:?}");
    let on_disk: BTreeSet<&str> = files.iter().map(String::as_str).collect();
    let unreviewed: Vec<_> = on_disk.difference(&unique).collect();
    let gone: Vec<_> = unique.difference(&on_disk).collect();
    assert!(unreviewed.is_empty(), "corpus files with no reviewed group: {unreviewed:?}");
    assert!(gone.is_empty(), "reviewed files missing from the corpus: {gone:?}");
}

#[test]
fn findings_match_the_reviewed_table() {
    let corpus = corpus();
    check_groups(&corpus, GROUPS);
}

#[test]
fn split_groups_show_why_files_are_checked_together() {
    let corpus = corpus();
    check_groups(&corpus, SPLIT);
}

/// Issue 41: the 2022 controller runs 2 hostNetwork replicas with no affinity, but its
/// nfs container declares containerPort 29652 (a host port under hostNetwork), so the
/// scheduler places them on distinct nodes (tests/e2e_host_ports.rs shows it on kube-scheduler):
/// no deny, and no co-location warning, where the rule used to deny while saying the scheduler
/// keeps them apart.
#[test]
fn csi_nfs_controller_2022_declares_its_port_so_the_scheduler_keeps_replicas_apart() {
    let corpus = corpus();
    let report = run(&corpus, &[NFS_2022], false);
    assert_eq!(report.count(Decision::Deny), 0, "{:#?}", report.findings);
    for rule in ["host-network-colocation", "replicas-colocated"] {
        assert!(!report.findings.iter().any(|l| l.finding.rule == rule), "{rule}: {:#?}", report.findings);
    }
    assert_eq!(report.exit_code(ha_guard::check::FailOn::Deny), 0);
    let current = run(&corpus, &[NFS_V4135], false);
    assert_eq!(current.count(Decision::Deny), 0, "{:#?}", current.findings);
}

#[test]
fn knative_webhook_pdb_blocks_eviction_at_the_hpa_floor() {
    let corpus = corpus();
    let report = run(&corpus, &[KNATIVE_DEPLOY, KNATIVE_HPA], false);
    let blocks: Vec<_> = report.findings.iter().filter(|l| l.finding.rule == "pdb-blocks-eviction").collect();
    assert_eq!(blocks.len(), 1, "reported once, on the PDB: {blocks:#?}");
    let f = &blocks[0].finding;
    assert_eq!(f.action, Decision::Deny);
    assert_eq!(f.object, ObjectRef::new(Kind::PodDisruptionBudget, "knative-serving", "webhook-pdb"));
    assert_eq!(f.path, "spec.minAvailable");
    let message = f.message();
    for part in [
        "minAvailable 80%",
        "HPA webhook min 1 max 5",
        "floor 1",
        "requires 1 healthy and allows 0 disruptions",
        "maxUnavailable: 1",
    ] {
        assert!(message.contains(part), "{part:?} not in {message}");
    }
    let related: BTreeSet<_> = f.related.iter().cloned().collect();
    assert_eq!(
        related,
        BTreeSet::from([
            ObjectRef::new(Kind::Deployment, "knative-serving", "webhook"),
            ObjectRef::new(Kind::HorizontalPodAutoscaler, "knative-serving", "webhook"),
        ])
    );
    assert_eq!(report.exit_code(ha_guard::check::FailOn::Deny), 1);
    // The mutation the webhook would apply to the PDB: it only adds the missing policy.
    let fix = report.fixes.iter().find(|fx| fx.object == f.object).expect("a plan for the PDB");
    assert_eq!(fix.changes.len(), 1);
    assert_eq!(fix.changes[0].mutation, PEP);
    assert_eq!(fix.changes[0].path(), "/spec/unhealthyPodEvictionPolicy");
    assert_eq!(serde_json::to_string(&fix.changes[0].operation).unwrap(), ALWAYS_ALLOW);
}

#[test]
fn linkerd_ha_install_has_no_deny_finding() {
    let corpus = corpus();
    for complete in [false, true] {
        let report = run(&corpus, &[LINKERD], complete);
        assert_eq!(report.count(Decision::Deny), 0, "complete: {complete}: {:#?}", report.findings);
        assert_eq!(report.exit_code(ha_guard::check::FailOn::Deny), 0);
        assert!(report.findings.is_empty(), "complete: {complete}: {:#?}", report.findings);
    }
}

#[test]
fn the_binary_checks_the_whole_corpus_as_json() {
    let corpus = corpus();
    let output = Command::new(env!("CARGO_BIN_EXE_ha-guard"))
        .args(["check", "-f"])
        .arg(&corpus)
        .args(["--format", "json"])
        .output()
        .expect("ha-guard runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let code = output.status.code();
    assert!(matches!(code, Some(0..=2)), "exit {code:?} (killed by a signal?), stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let json: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&output.stdout)));
    let findings = json["findings"].as_array().expect("findings is a list");
    let count = |action: &str| findings.iter().filter(|f| f["action"] == action).count() as u64;
    for action in ["deny", "warn", "allowed"] {
        assert_eq!(json["summary"][action].as_u64(), Some(count(action)), "summary.{action}: {}", json["summary"]);
    }
    for f in findings {
        for field in ["rule", "action", "kind", "namespace", "name", "path", "message"] {
            assert!(f[field].is_string(), "{field} missing in {f}");
        }
        assert!(f["related"].is_array(), "related missing in {f}");
    }
    // Every file loads, so the exit code says whether anything is denied: the acceptance denial
    // is among the findings, and the csi-driver-nfs controller, whose declared port 29652 the
    // scheduler keeps apart, is no longer denied (issue 41).
    assert_eq!(code, Some(if count("deny") > 0 { 1 } else { 0 }), "stderr: {stderr}");
    let denied = |rule: &str, name: &str| {
        findings.iter().any(|f| f["action"] == "deny" && f["rule"] == rule && f["name"] == name)
    };
    assert!(
        !findings.iter().any(|f| f["rule"] == "host-network-colocation" && f["name"] == "csi-nfs-controller"),
        "{}",
        serde_json::to_string_pretty(findings).unwrap()
    );
    assert!(denied("pdb-blocks-eviction", "webhook-pdb"), "{}", serde_json::to_string_pretty(findings).unwrap());
}

/// Every YAML document of the corpus that the block reader (`check`'s fast path) takes reads as
/// serde-saphyr reads it, with the skeleton the parser's events give; and most are taken (real
/// manifests are plain).
#[test]
fn the_block_reader_agrees_with_serde_saphyr_on_every_document() {
    let corpus = corpus();
    let (mut block, mut total) = (0, 0);
    for f in corpus_files(&corpus).iter().filter(|f| !f.ends_with(".json")) {
        let text = std::fs::read_to_string(path_in(&corpus, f)).expect("reads");
        for (i, span) in load::split_documents(&text).into_iter().enumerate() {
            let doc = &text[span];
            let Ok(reference) = serde_saphyr::from_str::<Value>(doc) else { continue };
            total += 1;
            if let Some((value, skeleton)) = ha_guard::manifest::block::parse_block(doc, 7) {
                block += 1;
                assert_eq!(value, reference, "{f} document {i}: the block reader");
                assert_eq!(
                    Some(skeleton),
                    ha_guard::manifest::skeleton::parse(doc, 7),
                    "{f} document {i}: the block reader's skeleton"
                );
            }
        }
    }
    assert!(total >= 100, "{total} documents");
    // The block reader leaves some to serde-saphyr (folded and multi-line scalars, anchors).
    assert!(block * 10 >= total * 6, "only {block} of {total} corpus documents were read by the block reader");
    eprintln!("{total} corpus documents: {block} read by the block reader");
}
