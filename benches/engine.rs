//! Criterion benchmarks of the rule engine, the webhook's per-request work without HTTP and TLS
//! (see benches/README.md, "Engine").
//!
//! The view and the four requests are those of the load benchmark (`benches/load/fixtures.rs`):
//! 100 namespaces of 100 Deployments, 100 PDBs and 50 HPAs (25,000 objects) and 12 nodes; a CREATE
//! of a ~5 KB Deployment, UPDATEs of a PDB and an HPA (with `oldObject`), and an UPDATE of
//! `deployments/scale`, all in one namespace of the view.
//!
//! Groups:
//! - `engine/family/FAMILY/KIND`: one rule family (`rules::FAMILY::evaluate`) on the subject of
//!   request KIND, against the view (through the overlay the engine puts around it);
//! - `engine/evaluate/KIND`: every family (`rules::evaluate`), as the webhook calls it;
//! - `engine/request/KIND/{validate,mutate}`: the whole answer from the request bytes
//!   (`review::parse` + `review::review`: decode, evaluate, decide, plan the patch, build
//!   the response), what the handler does inside the HTTP stack;
//! - `engine/view-size/KIND/others-N`: `rules::evaluate` with the request's namespace the same and
//!   N objects in other namespaces (1,000 against 100,000): the cost must not follow N;
//! - `engine/webhooks/...`: the same three measures for a Service UPDATE (the backend of a
//!   fail-closed webhook) and a ValidatingWebhookConfiguration UPDATE, and `evaluate` of the four
//!   requests above, in a view that also holds a Service per Deployment and a webhook
//!   configuration per namespace (10,000 and 100 more); view size with 1,000 / 100,000 objects
//!   plus 400 / 40,000 Services elsewhere.
//!
//! `cargo bench --bench engine` (about 1.5 minutes); `cargo bench --bench engine -- family` for one
//! group.

#![recursion_limit = "256"]

#[path = "load/fixtures.rs"]
mod fixtures;

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use ha_guard::core::config::Config;
use ha_guard::core::model::Subject;
use ha_guard::core::rules;
use ha_guard::core::rules::context::{Ctx, Emitter};
use ha_guard::core::view::{Index, Overlay, View};
use ha_guard::server::review::{self, Webhook};

type Family = fn(&Ctx, &mut Emitter);

const FAMILIES: [(&str, Family); 9] = [
    ("spread", rules::spread::evaluate),
    ("colocation", rules::colocation::evaluate),
    ("strategy", rules::strategy::evaluate),
    ("volumes", rules::volumes::evaluate),
    ("pdb", rules::pdb::evaluate),
    ("hpa", rules::hpa::evaluate),
    ("termination", rules::termination::evaluate),
    ("webhooks", rules::webhooks::evaluate),
    ("zones", rules::zones::evaluate),
];

fn run_family(family: Family, subject: &Subject, view: &dyn View, config: &Config) -> usize {
    let overlay = Overlay::new(view, subject);
    let ctx = Ctx::new(subject, &overlay, config);
    let mut findings = Vec::new();
    family(&ctx, &mut Emitter::new(ctx.id(), &mut findings));
    findings.len()
}

fn benches(c: &mut Criterion) {
    let view: Index = fixtures::view(100);
    let config = Config::default();
    let cases = fixtures::subjects();

    let mut group = c.benchmark_group("engine/family");
    for (family_name, family) in FAMILIES {
        for case in &cases {
            group.bench_function(BenchmarkId::new(family_name, case.name), |b| {
                b.iter(|| run_family(family, black_box(&case.new), &view, &config))
            });
        }
    }
    group.finish();

    let mut group = c.benchmark_group("engine/evaluate");
    for case in &cases {
        group.bench_function(case.name, |b| b.iter(|| rules::evaluate(black_box(&case.new), &view, &config)));
    }
    group.finish();

    // As the server makes it per request: a settled view, the default grace.
    let clock = ha_guard::core::view::AdmissionClock::current(
        k8s_openapi::jiff::Timestamp::now(),
        ha_guard::core::view::absence::DEFAULT_GRACE,
    );
    let mut group = c.benchmark_group("engine/request");
    for (name, body) in fixtures::requests() {
        for (webhook, label) in [(Webhook::Validate, "validate"), (Webhook::Mutate, "mutate")] {
            group.bench_function(BenchmarkId::new(name, label), |b| {
                b.iter(|| {
                    let req = review::parse(black_box(&body)).expect("the fixture parses");
                    // The outcome borrows the request: both are dropped here, inside the measure.
                    black_box(review::review(&req, webhook, &view, &config, &clock).expect("the fixture is answered"));
                })
            });
        }
    }
    group.finish();
    drop(view);

    let mut group = c.benchmark_group("engine/view-size");
    // 4 and 400 other namespaces of 250 objects each.
    for others in [4, 400] {
        let view = fixtures::view_with_others(others);
        for case in &cases {
            group.bench_function(BenchmarkId::new(case.name, format!("others-{}", others * 250)), |b| {
                b.iter(|| rules::evaluate(black_box(&case.new), &view, &config))
            });
        }
    }
    group.finish();

    let view = fixtures::view_with_webhooks(100);
    let mut group = c.benchmark_group("engine/webhooks/evaluate");
    for case in cases.iter().chain(&fixtures::webhook_subjects()) {
        group.bench_function(case.name, |b| b.iter(|| rules::evaluate(black_box(&case.new), &view, &config)));
    }
    group.finish();
    let mut group = c.benchmark_group("engine/webhooks/family");
    for case in fixtures::webhook_subjects() {
        group.bench_function(BenchmarkId::new("webhooks", case.name), |b| {
            b.iter(|| run_family(rules::webhooks::evaluate, black_box(&case.new), &view, &config))
        });
    }
    group.finish();
    let mut group = c.benchmark_group("engine/webhooks/request");
    for (name, body) in fixtures::webhook_requests() {
        group.bench_function(BenchmarkId::new(name, "validate"), |b| {
            b.iter(|| {
                let req = review::parse(black_box(&body)).expect("the fixture parses");
                black_box(
                    review::review(&req, Webhook::Validate, &view, &config, &clock).expect("the fixture is answered"),
                );
            })
        });
    }
    group.finish();
    drop(view);
    let mut group = c.benchmark_group("engine/webhooks/view-size");
    for others in [4, 400] {
        let view = fixtures::view_with_others_and_webhooks(others);
        for case in fixtures::webhook_subjects() {
            group.bench_function(BenchmarkId::new(case.name, format!("others-{}", others * 250)), |b| {
                b.iter(|| rules::evaluate(black_box(&case.new), &view, &config))
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = engine_benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50);
    targets = benches
}
criterion_main!(engine_benches);
