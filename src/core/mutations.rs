//! The mutation plan (DESIGN.md §2, Mutations): RFC 6902 operations that only add missing fields,
//! so that they are idempotent and never fight a field manager under server-side apply.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Value, json};

use crate::core::catalogue::{CelMutation, CelPatch, IgnoreDifference, Mutation, PDBS, WORKLOADS};
use crate::core::config::Config;
use crate::core::model::pod::{HOSTNAME, spread_constraints};
use crate::core::model::{Kind, Subject, Workload, selector};
use crate::core::view::{Overlay, View, bounds};
use crate::declare_mutation;

/// The pod template's spreads, in Argo CD's jq.
macro_rules! spreads {
    () => {
        ".spec.template.spec.topologySpreadConstraints"
    };
}

/// Workload kinds, for [`IgnoreDifference`]s that are the same for both.
const fn workloads(jq: &'static [&'static str]) -> [IgnoreDifference; 2] {
    [
        IgnoreDifference { group: "apps", kind: "Deployment", jq },
        IgnoreDifference { group: "apps", kind: "StatefulSet", jq },
    ]
}

/// A spread's labelSelector equal to the workload's own selector: what `inject-spread-selector`
/// fills in (a selector the manifest sets otherwise is still compared).
const SPREAD_SELECTOR: &[&str] =
    &[concat!(". as $o | ", spreads!(), "[]?.labelSelector | select(. == $o.spec.selector)")];
/// The ScheduleAnyway hostname spread of `inject-default-spread` (its selector the workload's own,
/// or already left out by the entry above), then the list if that left it empty (the manifest had
/// none).
const DEFAULT_SPREAD: &[&str] = &[
    concat!(
        ". as $o | ",
        spreads!(),
        "[]? | select(.topologyKey == \"kubernetes.io/hostname\" and .whenUnsatisfiable == \"ScheduleAnyway\" and \
         .maxSkew == 1 and (.labelSelector == null or .labelSelector == $o.spec.selector))"
    ),
    concat!(spreads!(), " | select(. == [])"),
];

declare_mutation!(
    pub INJECT_SPREAD_SELECTOR,
    "inject-spread-selector",
    on,
    "fills a spread's missing labelSelector with the workload's selector",
    ignored: &workloads(SPREAD_SELECTOR),
);
declare_mutation!(
    pub INJECT_UNHEALTHY_POD_EVICTION_POLICY,
    "inject-unhealthy-pod-eviction-policy",
    on,
    "sets unhealthyPodEvictionPolicy: AlwaysAllow on a PDB that has none",
    ignored: &[IgnoreDifference {
        group: "policy",
        kind: "PodDisruptionBudget",
        jq: &[".spec.unhealthyPodEvictionPolicy | select(. == \"AlwaysAllow\")"],
    }],
);
declare_mutation!(
    pub INJECT_DEFAULT_SPREAD,
    "inject-default-spread",
    off,
    "adds a ScheduleAnyway hostname spread when the floor > 1 and none exists",
    ignored: &workloads(DEFAULT_SPREAD),
);
declare_mutation!(
    pub INJECT_MATCH_LABEL_KEYS,
    "inject-match-label-keys",
    off,
    "adds matchLabelKeys: [pod-template-hash] to a Deployment's spreads",
    ignored: &[IgnoreDifference {
        group: "apps",
        kind: "Deployment",
        jq: &[concat!(spreads!(), "[]?.matchLabelKeys | select(. == [\"pod-template-hash\"])")],
    }],
);

/// Every mutation, in catalogue order.
pub static MUTATIONS: &[&Mutation] =
    &[&INJECT_SPREAD_SELECTOR, &INJECT_UNHEALTHY_POD_EVICTION_POLICY, &INJECT_DEFAULT_SPREAD, &INJECT_MATCH_LABEL_KEYS];

/// The labels of the selector `inject-spread-selector` gives spread `c` ([`selector_for`]) in
/// CEL: the workload's without the keys `c` lists in `matchLabelKeys`.
macro_rules! cel_labels_for {
    () => {
        "object.spec.selector.?matchLabels.orValue({}).transformMap(k, v, !(k in c.?matchLabelKeys.orValue([])), v)"
    };
}
/// Its expressions, likewise.
macro_rules! cel_expressions_for {
    () => {
        "object.spec.selector.?matchExpressions.orValue([]).filter(e, !(e.key in c.?matchLabelKeys.orValue([])))"
    };
}
/// The JSON Pointer of spread `i`'s labelSelector.
macro_rules! cel_spread_selector_path {
    () => {
        "'/spec/template/spec/topologySpreadConstraints/' + string(i) + '/labelSelector'"
    };
}

/// `inject-spread-selector` in CEL: a JSON Patch adding the selector to each spread without one
/// (the selector, then its labels and its expressions, each left out when empty; nothing when
/// both are).
pub static INJECT_SPREAD_SELECTOR_CEL: CelMutation = CelMutation {
    mutation: &INJECT_SPREAD_SELECTOR,
    resources: WORKLOADS,
    when: "has(object.spec.selector) && \
           object.spec.template.spec.?topologySpreadConstraints.orValue([]).exists(c, !has(c.labelSelector))",
    patch: CelPatch::JsonPatch(concat!(
        "object.spec.template.spec.?topologySpreadConstraints.orValue([]).transformList(i, c, !has(c.labelSelector) \
         && (size(",
        cel_labels_for!(),
        ") > 0 || size(",
        cel_expressions_for!(),
        ") > 0), [JSONPatch{op: 'add', path: ",
        cel_spread_selector_path!(),
        ", value: Object.spec.template.spec.topologySpreadConstraints.labelSelector{}}] + (size(",
        cel_labels_for!(),
        ") > 0 ? [JSONPatch{op: 'add', path: ",
        cel_spread_selector_path!(),
        " + '/matchLabels', value: ",
        cel_labels_for!(),
        "}] : []) + (size(",
        cel_expressions_for!(),
        ") > 0 ? [JSONPatch{op: 'add', path: ",
        cel_spread_selector_path!(),
        " + '/matchExpressions', value: ",
        cel_expressions_for!(),
        // Each requirement made anew: the apiserver cannot write the object's own typed
        // requirements into a patch value (LabelSelectorRequirement to JSON).
        ".map(e, Object.spec.template.spec.topologySpreadConstraints.labelSelector.matchExpressions{key: e.key, \
         operator: e.operator, ?values: e.?values})}] : [])).flatten()"
    )),
};

/// `inject-unhealthy-pod-eviction-policy` in CEL: an apply configuration setting the field.
pub static INJECT_UNHEALTHY_POD_EVICTION_POLICY_CEL: CelMutation = CelMutation {
    mutation: &INJECT_UNHEALTHY_POD_EVICTION_POLICY,
    resources: PDBS,
    when: "!has(object.spec.unhealthyPodEvictionPolicy)",
    patch: CelPatch::ApplyConfiguration("Object{spec: Object.spec{unhealthyPodEvictionPolicy: 'AlwaysAllow'}}"),
};

/// The mutations with a CEL form, in catalogue order.
pub static CEL_MUTATIONS: &[&CelMutation] = &[&INJECT_SPREAD_SELECTOR_CEL, &INJECT_UNHEALTHY_POD_EVICTION_POLICY_CEL];

/// One planned change: which mutation, at which path, and the operation.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub mutation: &'static Mutation,
    pub operation: PatchOperation,
}

impl Change {
    pub fn path(&self) -> String {
        match &self.operation {
            PatchOperation::Add(a) => a.path.to_string(),
            other => format!("{other:?}"),
        }
    }
}

/// The changes for one subject; empty when nothing is missing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub changes: Vec<Change>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    pub fn operations(&self) -> Vec<PatchOperation> {
        self.changes.iter().map(|c| c.operation.clone()).collect()
    }

    pub fn patch(&self) -> json_patch::Patch {
        json_patch::Patch(self.operations())
    }

    /// The IDs of the mutations that changed something, each once.
    pub fn applied(&self) -> Vec<&'static Mutation> {
        // Changes of different mutations interleave (selector and matchLabelKeys per spread).
        let mut ids: Vec<&'static Mutation> = Vec::new();
        for c in &self.changes {
            if !ids.contains(&c.mutation) {
                ids.push(c.mutation);
            }
        }
        ids
    }

    fn add(&mut self, mutation: &'static Mutation, tokens: &[&str], value: Value) {
        let path = PointerBuf::from_tokens(tokens.iter().copied());
        self.changes.push(Change { mutation, operation: PatchOperation::Add(AddOperation { path, value }) });
    }
}

const SPREADS: [&str; 4] = ["spec", "template", "spec", "topologySpreadConstraints"];

/// Plans the mutations for `subject`. Pure: the view supplies HPA floors.
pub fn plan(subject: &Subject, view: &dyn View, config: &Config) -> Plan {
    let mut plan = Plan::default();
    match subject {
        Subject::Workload(w) => plan_workload(w, subject, view, config, &mut plan),
        Subject::Pdb(p) => {
            let Some(spec) = &p.spec else { return plan };
            if config.mutation_on(&INJECT_UNHEALTHY_POD_EVICTION_POLICY) && spec.unhealthy_pod_eviction_policy.is_none()
            {
                plan.add(
                    &INJECT_UNHEALTHY_POD_EVICTION_POLICY,
                    &["spec", "unhealthyPodEvictionPolicy"],
                    json!("AlwaysAllow"),
                );
            }
        }
        Subject::Hpa(_)
        | Subject::Scale { .. }
        | Subject::ScaledObject(_)
        | Subject::Service(_)
        | Subject::Webhooks(_)
        | Subject::ApiService(_) => {}
    }
    plan
}

/// The workload's selector without the keys a constraint lists in `matchLabelKeys` (the API
/// refuses a key in both). `None` if nothing would be left: an empty selector counts every pod.
fn selector_for(own: &LabelSelector, match_label_keys: &[String]) -> Option<LabelSelector> {
    let mut s = own.clone();
    if let Some(labels) = s.match_labels.as_mut() {
        labels.retain(|k, _| !match_label_keys.contains(k));
        if labels.is_empty() {
            s.match_labels = None;
        }
    }
    if let Some(exprs) = s.match_expressions.as_mut() {
        exprs.retain(|e| !match_label_keys.contains(&e.key));
        if exprs.is_empty() {
            s.match_expressions = None;
        }
    }
    (!selector::is_empty(&s)).then_some(s)
}

const POD_TEMPLATE_HASH: &str = "pod-template-hash";

/// Whether `s` has a requirement on label `key`.
fn mentions(s: &LabelSelector, key: &str) -> bool {
    s.match_labels.as_ref().is_some_and(|l| l.contains_key(key))
        || s.match_expressions.iter().flatten().any(|e| e.key == key)
}

fn plan_workload(w: &Workload, subject: &Subject, view: &dyn View, config: &Config, plan: &mut Plan) {
    // Without a selector (a kustomize base) there is nothing safe to inject.
    let Some(own) = w.selector.as_ref().filter(|s| !selector::is_empty(s)) else { return };
    let existing = spread_constraints(w);
    let match_keys = config.mutation_on(&INJECT_MATCH_LABEL_KEYS) && w.kind == Kind::Deployment;
    for (i, c) in existing.iter().enumerate() {
        let index = i.to_string();
        let keys = c.match_label_keys.clone().unwrap_or_default();
        let mut effective = c.label_selector.clone();
        if effective.is_none()
            && config.mutation_on(&INJECT_SPREAD_SELECTOR)
            && let Some(sel) = selector_for(own, &keys)
        {
            let value = serde_json::to_value(&sel).unwrap_or(Value::Null);
            plan.add(&INJECT_SPREAD_SELECTOR, &[&SPREADS[..], &[index.as_str(), "labelSelector"]].concat(), value);
            effective = Some(sel);
        }
        // matchLabelKeys needs a labelSelector; only added where the user set none, and not when
        // the selector already names the key (the API refuses a key in both).
        let names_hash = effective.as_ref().is_some_and(|s| mentions(s, POD_TEMPLATE_HASH));
        if match_keys && effective.is_some() && !names_hash && c.match_label_keys.is_none() {
            plan.add(
                &INJECT_MATCH_LABEL_KEYS,
                &[&SPREADS[..], &[index.as_str(), "matchLabelKeys"]].concat(),
                json!([POD_TEMPLATE_HASH]),
            );
        }
    }
    // The new spread goes into the pod template's spec: a manifest without one (a kustomize patch,
    // a fragment, `spec: null`) has no place for it, and a patch adding under a missing parent
    // does not apply.
    let has_pod_spec = w.pod_spec().is_some() && !w.missing.iter().any(|m| m.starts_with("spec.template"));
    if config.mutation_on(&INJECT_DEFAULT_SPREAD)
        && has_pod_spec
        && !existing.iter().any(|c| c.topology_key == HOSTNAME)
    {
        let overlay = Overlay::new(view, subject);
        let floor = overlay.subject_workload().map(|info| bounds(info, &overlay).floor).unwrap_or(w.replicas);
        if floor > 1 {
            let mut spread = json!({
                "maxSkew": 1,
                "topologyKey": HOSTNAME,
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": serde_json::to_value(own).unwrap_or(Value::Null),
            });
            if match_keys && !mentions(own, POD_TEMPLATE_HASH) {
                spread["matchLabelKeys"] = json!([POD_TEMPLATE_HASH]);
            }
            let has_list = w.pod_spec().is_some_and(|s| s.topology_spread_constraints.is_some());
            if has_list {
                plan.add(&INJECT_DEFAULT_SPREAD, &[&SPREADS[..], &["-"]].concat(), spread);
            } else {
                plan.add(&INJECT_DEFAULT_SPREAD, &SPREADS, json!([spread]));
            }
        }
    }
}
