//! What a rule family gets ([`Ctx`]: the subject, the view with the subject overlaid, the
//! configuration) and how it reports ([`Emitter`]), plus the helpers several families share.

use std::sync::Arc;

use crate::core::catalogue::Rule;
use crate::core::config::Config;
use crate::core::finding::{Decision, Finding, NotJudged};
use crate::core::model::{Kind, ObjectRef, Subject};
use crate::core::view::capacity::{Capacity, remembered_capacity};
use crate::core::view::nodes::NodeTable;
use crate::core::view::placement::Incoming;
use crate::core::view::{Absences, Bounds, NodeInfo, Overlay, View, WorkloadInfo, bounds};

/// What the rules get: the subject, the view with the subject overlaid, the configuration.
pub struct Ctx<'a> {
    pub subject: &'a Subject,
    pub view: &'a Overlay<'a>,
    pub config: &'a Config,
    /// Whether this review may assert absences ([`Absences`]): an admission withholds them
    /// until they have lasted.
    pub absences: Absences,
    /// [`scaled_workload`], found once: five families ask for it.
    scaled: std::cell::OnceCell<Option<Scaled>>,
    /// The view's nodes, asked once: two families read them all.
    nodes: std::cell::OnceCell<Arc<NodeTable>>,
    /// What the nodes hold of the subject's pod template, asked once: two families read it.
    capacity: std::cell::OnceCell<Arc<Capacity>>,
}

impl<'a> Ctx<'a> {
    pub fn new(subject: &'a Subject, view: &'a Overlay<'a>, config: &'a Config) -> Self {
        Ctx {
            subject,
            view,
            config,
            absences: Absences::Judged,
            scaled: std::cell::OnceCell::new(),
            nodes: std::cell::OnceCell::new(),
            capacity: std::cell::OnceCell::new(),
        }
    }

    /// The same context with absences judged as `absences` says.
    pub fn with_absences(self, absences: Absences) -> Self {
        Ctx { absences, ..self }
    }

    /// An absence in the view is a fact here: the view is complete (the live cluster, `check
    /// --complete`) and the review does not withhold absences (an admission of a CREATE, or of an
    /// UPDATE within the grace). The rules that assert one ask this.
    pub fn absence_is_fact(&self) -> bool {
        !self.absences.withheld() && self.view.is_complete()
    }

    /// The view's nodes ([`View::node_table`]), asked once per review.
    pub fn nodes(&self) -> &[Arc<NodeInfo>] {
        self.node_table().nodes()
    }

    /// The view's nodes with their topology columns ([`View::node_table`]), asked once per review.
    pub fn node_table(&self) -> &Arc<NodeTable> {
        self.nodes.get_or_init(|| self.view.node_table())
    }

    /// What the nodes hold of the subject's pod template (a workload's; `None` for other
    /// subjects), counted once per review ([`remembered_capacity`]: once per node snapshot, but
    /// each ask hashes the template).
    pub fn capacity(&self) -> Option<&Capacity> {
        let Subject::Workload(workload) = self.subject else { return None };
        let spec = workload.pod_spec()?;
        Some(self.capacity.get_or_init(|| {
            let pod = Incoming { namespace: &self.id().namespace, labels: workload.template_labels(), spec };
            remembered_capacity(pod, self.node_table())
        }))
    }

    /// The subject's id, made once by the overlay: [`Subject::id`] copies the namespace and name.
    pub fn id(&self) -> &'a ObjectRef {
        self.view.subject_id()
    }
}

/// Builds findings for one subject; rules call [`Emitter::emit`], or [`Emitter::not_judged`] when
/// the object is beyond what a rule judges.
pub struct Emitter<'a> {
    subject: &'a ObjectRef,
    out: &'a mut Vec<Finding>,
    not_judged: Vec<NotJudged>,
}

impl<'a> Emitter<'a> {
    /// An emitter of findings about `subject` into `out` (what `rules::evaluate` makes for the
    /// families; public so that one family can be run, and measured, alone).
    pub fn new(subject: &'a ObjectRef, out: &'a mut Vec<Finding>) -> Self {
        Emitter { subject, out, not_judged: Vec::new() }
    }

    /// Says that `rule` was not judged on the subject, and why.
    pub fn not_judged(&mut self, rule: &'static Rule, why: impl Into<String>) {
        self.not_judged.push(NotJudged { rule, why: why.into() });
    }

    /// The rules not judged so far.
    pub fn take_not_judged(&mut self) -> Vec<NotJudged> {
        std::mem::take(&mut self.not_judged)
    }

    /// Reports `rule` at `path` with its default action; the returned finding takes the case's
    /// action, related objects and anchor ([`Finding::acting`], [`Finding::related`],
    /// [`Finding::anchored_at`]).
    pub fn emit(
        &mut self,
        rule: &'static Rule,
        path: impl Into<String>,
        what: impl Into<String>,
        fix: impl Into<String>,
    ) -> &mut Finding {
        self.out.push(Finding {
            rule,
            action: Decision::of(rule.default),
            object: self.subject.clone(),
            path: path.into(),
            what: what.into(),
            fix: fix.into(),
            related: Vec::new(),
            anchor: self.subject.clone(),
            notes: Vec::new(),
            from_view: false,
        });
        self.out.last_mut().expect("just pushed")
    }
}

/// `spec.template.spec.<rest>`: the path of a pod template field in a workload.
pub fn pod_path(rest: &str) -> String {
    format!("spec.template.spec.{rest}")
}

/// A workload whose replica range the subject sets: the workload itself, the target of an
/// autoscaler (HPA or KEDA ScaledObject), or the target of a scale write with its new count.
pub struct Scaled {
    pub workload: Arc<WorkloadInfo>,
    pub bounds: Bounds,
    /// Where the subject sets the floor and the ceiling.
    pub floor_path: &'static str,
    pub ceiling_path: &'static str,
    /// The finding belongs to the workload; from an autoscaler it is found on its write too.
    pub anchored_elsewhere: bool,
}

pub fn scaled_workload<'c>(ctx: &'c Ctx) -> Option<&'c Scaled> {
    ctx.scaled.get_or_init(|| find_scaled_workload(ctx)).as_ref()
}

fn find_scaled_workload(ctx: &Ctx) -> Option<Scaled> {
    let (workload, floor_path, ceiling_path, anchored_elsewhere) = match ctx.subject {
        Subject::Workload(_) | Subject::Scale { .. } => {
            (ctx.view.subject_workload()?.clone(), "spec.replicas", "spec.replicas", false)
        }
        Subject::Hpa(_) | Subject::ScaledObject(_) => {
            let id = ctx.id();
            let autoscaler = ctx.view.autoscaler(id.kind, &id.namespace, &id.name)?;
            let target = autoscaler.target.as_ref()?;
            let w = ctx.view.workload(target.kind, &target.namespace, &target.name)?;
            match id.kind {
                Kind::ScaledObject => (w, "spec.minReplicaCount", "spec.maxReplicaCount", true),
                _ => (w, "spec.minReplicas", "spec.maxReplicas", true),
            }
        }
        Subject::Pdb(_) | Subject::Service(_) | Subject::Webhooks(_) | Subject::ApiService(_) => return None,
    };
    let bounds = bounds(&workload, ctx.view);
    Some(Scaled { workload, bounds, floor_path, ceiling_path, anchored_elsewhere })
}

impl Scaled {
    /// The workload and its autoscalers: what a finding about its scale names.
    pub fn related(&self, subject: &ObjectRef) -> Vec<ObjectRef> {
        std::iter::once(self.workload.id.clone())
            .chain(self.bounds.hpas.iter().map(|h| h.id.clone()))
            .filter(|r| r != subject)
            .collect()
    }

    /// Whether the bounds come from more than the workload's own write (an autoscaler's, or a
    /// write to another object): what the CEL forms of the replica-bound rules cannot read.
    pub fn from_view(&self) -> bool {
        self.anchored_elsewhere || !self.bounds.hpas.is_empty()
    }

    pub fn anchor(&self) -> Option<ObjectRef> {
        self.anchored_elsewhere.then(|| self.workload.id.clone())
    }
}
