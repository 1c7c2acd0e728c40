//! ha-guard: the rule engine, its decisions and mutations, and the offline linter.
//!
//! Data flows one way (DESIGN.md §6): objects are decoded into k8s-openapi types and defaulted
//! ([`model`], [`defaults`]), evaluated against a [`view::View`] by the pure rules ([`rules`]),
//! turned into decisions ([`decide`]) and mutation plans ([`mutations`]). The `check` command and
//! the webhook server are thin shells around these.

pub mod arith;
pub mod build_info;
pub mod catalogue;
pub mod check;
pub mod config;
pub mod decide;
pub mod defaults;
pub mod engine;
pub mod live;
pub mod model;
pub mod mutations;
pub mod rules;
pub mod selector;
pub mod server;
pub mod view;
