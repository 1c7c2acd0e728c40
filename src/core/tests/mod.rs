//! Tests of the core as a whole: decisions, KEDA autoscalers across the families, mutations, and
//! properties over generated objects.

mod absences;
mod decisions;
mod handover;
mod keda;
mod mutations;
mod policies;
mod policy;
mod properties;
mod registry;
