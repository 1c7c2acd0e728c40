//! The rules, one file per family. Each family exports its catalogue entries (`RULES`) and an
//! `evaluate` that runs them on the subject in context.

use crate::catalogue::Rule;
use crate::engine::{Ctx, Emitter};

pub mod colocation;
pub mod hpa;
pub mod pdb;
pub mod spread;
pub mod strategy;
pub mod termination;
pub mod volumes;

/// The families in catalogue order (DESIGN.md §2).
pub static FAMILIES: &[&[Rule]] =
    &[spread::RULES, colocation::RULES, strategy::RULES, volumes::RULES, pdb::RULES, hpa::RULES, termination::RULES];

pub fn evaluate(ctx: &Ctx, out: &mut Emitter) {
    spread::evaluate(ctx, out);
    colocation::evaluate(ctx, out);
    strategy::evaluate(ctx, out);
    volumes::evaluate(ctx, out);
    pdb::evaluate(ctx, out);
    hpa::evaluate(ctx, out);
    termination::evaluate(ctx, out);
}

/// `spec.template.spec.<rest>`: the path of a pod template field in a workload.
pub(crate) fn pod_path(rest: &str) -> String {
    format!("spec.template.spec.{rest}")
}

use std::sync::Arc;

use crate::arith::{self, Bounds};
use crate::model::Subject;
use crate::view::{View, WorkloadInfo};

/// A workload whose replica range the subject sets: the workload itself, the target of an HPA,
/// or the target of a scale write with its new count.
pub(crate) struct Scaled {
    pub workload: Arc<WorkloadInfo>,
    pub bounds: Bounds,
    /// Where the subject sets the floor and the ceiling.
    pub floor_path: &'static str,
    pub ceiling_path: &'static str,
    /// The finding belongs to the workload; from an HPA it is found on the HPA's write too.
    pub anchored_elsewhere: bool,
}

pub(crate) fn scaled_workload(ctx: &Ctx) -> Option<Scaled> {
    let (workload, floor_path, ceiling_path, anchored_elsewhere) = match ctx.subject {
        Subject::Workload(_) | Subject::Scale { .. } => {
            (ctx.view.subject_workload()?.clone(), "spec.replicas", "spec.replicas", false)
        }
        Subject::Hpa(_) => {
            let hpa = ctx.view.hpa(&ctx.subject.id().namespace, &ctx.subject.id().name)?;
            let target = hpa.target.as_ref()?;
            let w = ctx.view.workload(target.kind, &target.namespace, &target.name)?;
            (w, "spec.minReplicas", "spec.maxReplicas", true)
        }
        Subject::Pdb(_) => return None,
    };
    let bounds = arith::bounds(&workload, ctx.view);
    Some(Scaled { workload, bounds, floor_path, ceiling_path, anchored_elsewhere })
}

impl Scaled {
    /// The workload and its HPAs: what a finding about its scale names.
    pub fn related(&self, subject: &crate::model::ObjectRef) -> Vec<crate::model::ObjectRef> {
        std::iter::once(self.workload.id.clone())
            .chain(self.bounds.hpas.iter().map(|h| h.id.clone()))
            .filter(|r| r != subject)
            .collect()
    }

    pub fn anchor(&self) -> Option<crate::model::ObjectRef> {
        self.anchored_elsewhere.then(|| self.workload.id.clone())
    }
}
