//! The bottom layer: Kubernetes objects as the rules read them. Typed objects and references
//! ([`object`]), decoding manifests into them ([`decode`]) with the apiserver's defaults
//! ([`defaults`]), the fields of a workload's spec the rules read ([`read`], what the webhook
//! decodes), what is kept of `managedFields` ([`managed`]: who owns `spec.replicas` by
//! server-side apply), what a pod template says about placement and shutdown ([`pod`]), label
//! selectors ([`selector`]), the disruption arithmetic ([`arith`]) and what a pod asks of a node
//! ([`resources`]), lists in messages kept short ([`words`]); the kinds k8s-openapi has no
//! type for, or a type that decodes more than is read ([`keda`], [`webhook`], [`live_pod`], [`apiservice`]). Nothing here knows of views,
//! rules or I/O.

pub mod apiservice;
pub mod arith;
pub mod decode;
pub mod defaults;
pub mod keda;
pub mod limits;
pub mod live_pod;
pub mod managed;
pub mod object;
pub mod pod;
pub mod read;
pub mod resources;
pub mod selector;
pub mod webhook;
pub mod words;

pub use decode::{DecodeError, decode, type_of};
pub use object::{
    EXEMPT_PREFIX, Exemptions, Kind, LAST_APPLIED, MODE_LABEL, Object, ObjectRef, ReplicasSource, Strategy, Subject,
    Workload, exemptions_of, name_of, ns_of,
};
