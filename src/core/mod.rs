//! The functional core: pure functions of (object, view, config), no I/O, no clock, no globals
//! (a test holds these files to that). Layers, each importing only those before it:
//!
//! 1. [`model`]: objects, decoding, API defaults, pod template facts, selectors, arithmetic;
//! 2. [`cel`] (the CEL text the rules' CEL forms share, as macros), then [`catalogue`],
//!    [`config`], [`finding`]: how rules and mutations are declared, the configuration, and what
//!    rules report;
//! 3. [`view`]: what is known besides the object (trait, projections, index, overlay, sources);
//! 4. [`rules`]: one file per family, each rule a static declared once;
//! 5. [`mutations`];
//! 6. [`registry`]: every rule and mutation, and what derives from the list; then [`policies`]:
//!    the admission policies generated from their CEL forms;
//! 7. [`decide`], then [`judge`]: the one entry every shell calls;
//! 8. [`causes`]: which findings of a run are the consequences of another (presentation).

pub mod catalogue;
pub mod causes;
pub mod cel;
pub mod config;
pub mod decide;
pub mod finding;
pub mod judge;
pub mod model;
pub mod mutations;
pub mod policies;
pub mod registry;
pub mod rules;
pub mod view;

#[cfg(test)]
pub mod testing;
#[cfg(test)]
mod tests;
