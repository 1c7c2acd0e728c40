//! The integration tests that need no kube-apiserver, in one binary (one link instead of one per
//! file): the `check` command line, the shared corpus, the webhook over real TLS, ha-guard's own
//! install manifests, the YAML readers, fuzz regressions. The end-to-end tests against a real
//! kube-apiserver are `tests/e2e_*.rs`.

mod alerts;
mod architecture;
mod argocd;
mod chart;
mod cli;
mod cli_certs;
mod cli_check;
mod cli_ci;
mod cli_first_hour;
mod cli_version;
mod corpus;
mod fuzz_regressions;
mod manifests;
mod policies;
mod policy;
mod precommit;
mod read_fields;
mod readme;
mod rule_pages;
mod server_bad_input;
mod server_client_auth;
mod server_deadline;
mod server_http;
mod server_overload;
mod server_replicas;
mod server_sigterm;
mod server_support;
mod server_tls_rotation;
mod yaml_reader;
