//! What the engine knows besides the object under review.
//!
//! The [`View`] trait has two implementations: the static one (an [`Index`] built from manifests,
//! used by `check`, `--cluster FILE` and the tests) and the live one built from watch caches (the
//! `live` shell fills an [`Index`] and serves it as a [`ViewSource`]). Both keep only
//! [`projection`]s (the fields the rules read). While an object is under review, an [`Overlay`]
//! shows it as it will be; [`bounds`] reads a workload's replica range off the view.

pub mod absence;
pub mod bounds;
pub mod budget;
pub mod capacity;
pub mod index;
pub mod lookup;
pub mod namespace_labels;
pub mod namespace_read;
pub mod node_selector;
pub mod nodes;
pub mod overlay;
pub mod placement;
pub mod pods;
pub mod projection;
pub mod replay;
pub mod source;
pub mod storage;

pub use absence::{Absences, AdmissionClock};
pub use bounds::{Bounds, bounds};
pub use index::Index;
pub use lookup::View;
pub use namespace_read::WithNamespace;
pub use overlay::Overlay;
pub use projection::{
    Backend, FailClosedWebhook, HpaInfo, NodeInfo, PdbInfo, PdbStatus, PodInfo, PodOwner, PodPhase, PvcInfo,
    ServiceInfo, Template, WebhookConfigInfo, WorkloadInfo,
};
pub use source::{Snapshot, StaticSource, ViewSource};
