//! ha-guard: an admission webhook and linter that keeps Kubernetes workloads highly available.
//!
//! Data flows one way: decode → judge → respond. The layers, each importing only those above it
//! in this list (a test parses every `use` and fails on an import that runs back up or closes a
//! circle):
//!
//! 0. [`build_info`]: the version and commit the binary was built from.
//! 1. [`core`]: the pure engine. Inside it, in order: `model` (objects, decoding, API defaults,
//!    selectors, arithmetic) → `catalogue`, `config`, `finding` → `view` → `rules` → `mutations`
//!    → `registry` → `policies` → `decide` → `judge`, the one entry every shell calls.
//! 2. [`manifest`]: reading YAML and JSON manifests with their source positions (`check`,
//!    `serve --cluster FILE`).
//! 3. [`config_file`]: reading the configuration file.
//! 4. The shells, which only translate in and out of [`core::judge`]: [`live`] (watches → the
//!    view), [`check`] (files → diagnostics), [`server`] (AdmissionReviews over HTTPS).
//! 5. [`audit`]: the cluster as stored → `check`'s reports (it prints with `check`'s output).
//! 6. [`cli`]: the command line, one `Args` per command; `main.rs` parses and dispatches.

pub mod audit;
pub mod build_info;
pub mod check;
pub mod cli;
pub mod config_file;
pub mod core;
pub mod live;
pub mod manifest;
pub mod server;
