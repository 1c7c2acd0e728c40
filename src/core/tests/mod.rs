//! Tests of the core as a whole: decisions, mutations, and properties over generated objects.

mod decisions;
mod mutations;
mod properties;
mod registry;
