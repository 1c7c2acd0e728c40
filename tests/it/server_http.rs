//! The webhook over real TLS: the in-process server on ports chosen at run time, a static view, a
//! reqwest client trusting the generated CA, AdmissionReview fixtures from `tests/fixtures/`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::server_support::{Server, VIEW, fixture, index, patch_of, rule_ids, warnings};
use ha_guard::core::config::Config;
use ha_guard::core::view::Index;
use ha_guard::core::view::{StaticSource, ViewSource};
use rstest::rstest;
use serde_json::{Value, json};

fn sorted(ids: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

/// `rule=action` entries of the `findings` audit annotation.
fn audit_findings(response: &Value) -> Vec<String> {
    let mut v: Vec<String> = response["auditAnnotations"]["findings"]
        .as_str()
        .map(|s| s.split(',').map(str::to_string).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// Asserts the shape of a response: allowed iff no deny rule; a 403 "Forbidden" status whose
/// message has one `[rule-id] ...` line per deny finding; one `[rule-id]` warning per warn finding;
/// the findings named in the audit annotations.
fn assert_decision(r: &Value, denied: &[&str], warned: &[&str]) {
    assert_eq!(r["allowed"], denied.is_empty(), "{r:#}");
    if denied.is_empty() {
        assert!(r["status"]["code"].is_null() || r["status"]["code"] == 200, "{r:#}");
        assert!(r["status"]["message"].as_str().unwrap_or("").is_empty(), "{r:#}");
    } else {
        assert_eq!(r["status"]["code"], 403, "{r:#}");
        assert_eq!(r["status"]["reason"], "Forbidden", "{r:#}");
        let message = r["status"]["message"].as_str().expect("a message");
        let lines: Vec<&str> = message.lines().collect();
        assert_eq!(rule_ids(lines.iter().copied()), sorted(denied), "one line per deny finding: {message}");
        for line in &lines {
            assert!(line.contains(" Fix: "), "says how to fix: {line}");
        }
    }
    let w = warnings(r);
    assert_eq!(rule_ids(w.iter().map(String::as_str)), sorted(warned), "warnings: {w:#?}");
    let mut expected: Vec<String> =
        denied.iter().map(|d| format!("{d}=deny")).chain(warned.iter().map(|w| format!("{w}=warn"))).collect();
    expected.sort();
    assert_eq!(audit_findings(r), expected, "{r:#}");
}

/// An answer that leaves the request alone: allowed, nothing to say, nothing to patch.
fn assert_untouched(r: &Value) {
    assert_eq!(r["allowed"], true, "{r:#}");
    assert!(r["warnings"].is_null(), "{r:#}");
    assert!(r["patch"].is_null() && r["patchType"].is_null(), "{r:#}");
    assert!(r["auditAnnotations"]["findings"].is_null(), "{r:#}");
    assert!(r["status"]["message"].as_str().unwrap_or("").is_empty(), "{r:#}");
}

#[rstest]
// spread
#[case::spread_denied("deployment-spread-no-selector.json", false, &["spread-selector-missing"], &["replicas-colocated"])]
#[case::spread_warned("deployment-spread-schedule-anyway-no-selector.json", false, &[], &["spread-selector-missing"])]
#[case::spread_allowed("deployment-spread-ok.json", false, &[], &[])]
// colocation
#[case::colocation_denied("deployment-host-network.json", false, &["host-network-colocation"], &[])]
#[case::colocation_warned("deployment-colocated.json", false, &[], &["replicas-colocated"])]
#[case::colocation_allowed("deployment-anti-affinity.json", false, &[], &[])]
// strategy
#[case::strategy_denied("deployment-csi-recreate.json", false, &["csi-controller-recreate"], &[])]
#[case::strategy_warned("deployment-recreate.json", false, &[], &["recreate-multi-replica"])]
#[case::strategy_allowed("deployment-recreate-single.json", false, &[], &[])]
// volumes
#[case::volumes_denied("deployment-rwo-multi-replica.json", false, &["rwo-volume-multi-replica"], &[])]
#[case::volumes_warned("deployment-rwo-rolling-surge.json", false, &[], &["rwo-volume-rolling-surge"])]
#[case::volumes_allowed("deployment-rwo-no-surge.json", false, &[], &[])]
// pdb
#[case::pdb_denied("pdb-blocks-eviction.json", false, &["pdb-blocks-eviction"], &[])]
#[case::pdb_warned("pdb-if-healthy-budget.json", false, &[], &["pdb-unhealthy-eviction-policy"])]
#[case::pdb_allowed("pdb-ok.json", false, &[], &[])]
// hpa (its warn rule asserts absence: a complete view, like the live one)
#[case::hpa_denied("hpa-replica-bounds.json", false, &["hpa-replica-bounds"], &[])]
#[case::hpa_warned("hpa-target-missing.json", true, &[], &["hpa-target-missing"])]
#[case::hpa_allowed("hpa-ok.json", false, &[], &[])]
// termination
#[case::termination_denied("deployment-prestop-exceeds-grace.json", false, &["prestop-exceeds-grace"], &[])]
#[case::termination_warned("deployment-grace-zero.json", false, &[], &["termination-grace-zero"])]
#[case::termination_allowed("deployment-prestop-ok.json", false, &[], &[])]
#[tokio::test]
async fn rule_families(#[case] name: &str, #[case] complete: bool, #[case] denied: &[&str], #[case] warned: &[&str]) {
    let server = Server::start_with(Arc::new(StaticSource(index(VIEW, complete))), Config::default(), |_| {}).await;
    let r = server.respond("/validate", name).await;
    assert_decision(&r, denied, warned);
    // The mutating webhook never denies and never warns.
    let m = server.respond("/mutate", name).await;
    assert_eq!(m["allowed"], true, "{m:#}");
    assert!(m["warnings"].is_null() && m["status"]["message"].as_str().unwrap_or("").is_empty(), "{m:#}");
}

/// An absence (here: no workload is the HPA's target) is said at admission only once it has
/// lasted: not on a CREATE, not on an UPDATE of an object younger than the grace (60 s), and on
/// an UPDATE of an older one (the fixture: created in 2025). The rest of an apply may be a moment
/// behind the object under review.
#[tokio::test]
async fn an_absence_is_said_at_admission_only_once_it_has_lasted() {
    let server = Server::start_with(Arc::new(StaticSource(index(VIEW, true))), Config::default(), |_| {}).await;
    let old_enough = fixture("hpa-target-missing.json");
    let r = server.review("/validate", &old_enough).await["response"].clone();
    assert_eq!(rule_ids(warnings(&r).iter().map(String::as_str)), ["hpa-target-missing"], "{r:#}");

    let mut create = old_enough.clone();
    create["request"]["operation"] = json!("CREATE");
    create["request"]["oldObject"] = Value::Null;
    create["request"]["options"] = json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"});
    let r = server.review("/validate", &create).await["response"].clone();
    assert_eq!(r["allowed"], true, "{r:#}");
    assert!(warnings(&r).is_empty(), "a CREATE never asserts an absence: {r:#}");

    // Created a few seconds ago (the apiserver's whole seconds): within the grace.
    let mut young = old_enough.clone();
    let a_moment_ago = k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(5);
    let created = a_moment_ago.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    for object in ["object", "oldObject"] {
        young["request"][object]["metadata"]["creationTimestamp"] = json!(created);
    }
    let r = server.review("/validate", &young).await["response"].clone();
    assert!(warnings(&r).is_empty(), "an UPDATE within the grace does not assert it: {r:#}");

    // The same three on a view that is not complete (a static view of some files): never.
    let partial = Server::start_with(Arc::new(StaticSource(index(VIEW, false))), Config::default(), |_| {}).await;
    let r = partial.review("/validate", &old_enough).await["response"].clone();
    assert!(warnings(&r).is_empty(), "{r:#}");
}

#[tokio::test]
async fn deny_messages_say_where_what_and_how_to_fix() {
    let server = Server::start().await;
    let r = server.respond("/validate", "deployment-spread-no-selector.json").await;
    let message = r["status"]["message"].as_str().unwrap();
    assert!(message.starts_with("[spread-selector-missing] spec.template.spec.topologySpreadConstraints"), "{message}");
    assert!(!message.contains('\n'), "one deny finding, one line: {message}");
    let w = warnings(&r);
    assert!(w[0].starts_with("[replicas-colocated] "), "{w:?}");
}

/// The JSON Patch of `/mutate` applies to the object, names the mutations in the audit
/// annotations, and a second pass over the patched object yields no patch.
#[rstest]
#[case::spread_selector_with_a_slash_in_the_label_key(
    "deployment-spread-no-selector.json",
    "",
    &["inject-spread-selector"],
    "/spec/template/spec/topologySpreadConstraints/0/labelSelector",
    json!({"matchLabels": {"app.kubernetes.io/name": "web"}})
)]
#[case::pdb_eviction_policy(
    "pdb-no-eviction-policy.json",
    "",
    &["inject-unhealthy-pod-eviction-policy"],
    "/spec/unhealthyPodEvictionPolicy",
    json!("AlwaysAllow")
)]
#[case::default_spread(
    "deployment-colocated.json",
    "mutations: {inject-default-spread: true}",
    &["inject-default-spread"],
    "/spec/template/spec/topologySpreadConstraints/0",
    json!({
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "frontend"}}
    })
)]
#[case::selector_and_match_label_keys(
    "deployment-spread-no-selector.json",
    "mutations: {inject-match-label-keys: true}",
    &["inject-match-label-keys", "inject-spread-selector"],
    "/spec/template/spec/topologySpreadConstraints/0",
    json!({
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "web"}},
        "matchLabelKeys": ["pod-template-hash"]
    })
)]
#[tokio::test]
async fn mutate_patches_apply_and_are_idempotent(
    #[case] name: &str,
    #[case] config: &str,
    #[case] mutations: &[&str],
    #[case] pointer: &str,
    #[case] expected: Value,
) {
    let config = ha_guard::core::registry::parse_config(config, "test config").unwrap();
    let server = Server::start_with(Arc::new(StaticSource(index(VIEW, false))), config, |_| {}).await;
    let mut review = fixture(name);
    let r = server.review("/mutate", &review).await["response"].clone();
    assert_eq!(r["allowed"], true, "{r:#}");
    let mut ids: Vec<&str> = r["auditAnnotations"]["mutations"].as_str().expect("mutations named").split(',').collect();
    ids.sort();
    assert_eq!(ids, mutations);
    let patch = patch_of(&r).expect("a patch");
    let object = &mut review["request"]["object"];
    let before = object.clone();
    json_patch::patch(object, &patch).unwrap_or_else(|e| panic!("the patch applies: {e}\n{patch:?}"));
    assert_eq!(object.pointer(pointer), Some(&expected), "{object:#}");
    // Only adds: every field of the original is still there with its value.
    let after = object.clone();
    assert_contains(&after, &before, "");

    // Second pass: nothing left to add.
    review["request"]["uid"] = json!("00000000-0000-4000-8000-second-pass");
    let again = server.review("/mutate", &review).await["response"].clone();
    assert_eq!(again["allowed"], true);
    let second = patch_of(&again);
    assert!(second.as_ref().is_none_or(|p| p.0.is_empty()), "idempotent, but got {second:?}");
    assert!(again["auditAnnotations"]["mutations"].is_null(), "{again:#}");
}

/// `big` has every field of `small`, with the same scalar values (patches only add).
fn assert_contains(big: &Value, small: &Value, at: &str) {
    match (big, small) {
        (Value::Object(b), Value::Object(s)) => {
            for (k, v) in s {
                let b = b.get(k).unwrap_or_else(|| panic!("{at}/{k} was removed"));
                assert_contains(b, v, &format!("{at}/{k}"));
            }
        }
        (Value::Array(b), Value::Array(s)) => {
            assert!(b.len() >= s.len(), "{at}: items removed");
            for (i, (bv, sv)) in b.iter().zip(s).enumerate() {
                assert_contains(bv, sv, &format!("{at}/{i}"));
            }
        }
        _ => assert_eq!(big, small, "{at} was rewritten"),
    }
}

/// With the mutating webhook in front, the missing selector is filled rather than denied.
#[tokio::test]
async fn mutated_object_passes_validation() {
    let server = Server::start().await;
    let mut review = fixture("deployment-spread-no-selector.json");
    let r = server.review("/mutate", &review).await["response"].clone();
    json_patch::patch(&mut review["request"]["object"], &patch_of(&r).unwrap()).unwrap();
    let v = server.review("/validate", &review).await["response"].clone();
    assert_decision(&v, &[], &[]);
}

#[rstest]
#[case::deny("deployment-spread-no-selector.json")]
#[case::warn("deployment-colocated.json")]
#[case::allow("deployment-spread-ok.json")]
#[case::mutate_pdb("pdb-no-eviction-policy.json")]
#[tokio::test]
async fn dry_run_is_answered_exactly_like_the_real_request(#[case] name: &str) {
    let server = Server::start().await;
    for path in ["/validate", "/mutate"] {
        let real = fixture(name);
        let mut dry = real.clone();
        dry["request"]["dryRun"] = json!(true);
        let (a, b) = (server.review(path, &real).await, server.review(path, &dry).await);
        assert_eq!(a, b, "{path}: dryRun changed the answer");
    }
    let metrics = server.get_probe("/metrics").await.1;
    assert!(metrics.contains(r#"dry_run="true""#) && metrics.contains(r#"dry_run="false""#), "{metrics}");
}

#[tokio::test]
async fn ratchet_on_update() {
    let server = Server::start().await;
    // The old object already broke the rule: the deny becomes a warning marked pre-existing.
    let r = server.respond("/validate", "deployment-update-preexisting.json").await;
    assert_decision(&r, &[], &["spread-selector-missing"]);
    let w = warnings(&r);
    assert!(w[0].starts_with("[spread-selector-missing] (pre-existing) "), "{w:?}");
    // A violation the old object did not have is denied.
    let r = server.respond("/validate", "deployment-update-new-violation.json").await;
    assert_decision(&r, &["spread-selector-missing"], &[]);
    // Both at once: the new one denied, the old one a warning.
    let r = server.respond("/validate", "deployment-update-preexisting-and-new.json").await;
    assert_decision(&r, &["prestop-exceeds-grace"], &["spread-selector-missing"]);
    assert!(warnings(&r)[0].contains("(pre-existing)"));
}

#[tokio::test]
async fn ratchet_off_in_config_denies_pre_existing_violations() {
    let config = ha_guard::core::registry::parse_config("ratchet: false", "test config").unwrap();
    let server = Server::start_with(Arc::new(StaticSource(index(VIEW, false))), config, |_| {}).await;
    let r = server.respond("/validate", "deployment-update-preexisting.json").await;
    assert_decision(&r, &["spread-selector-missing"], &[]);
}

#[tokio::test]
async fn exemption_annotation() {
    let server = Server::start().await;
    let r = server.respond("/validate", "deployment-exempt.json").await;
    assert_eq!(r["allowed"], true, "{r:#}");
    assert!(r["warnings"].is_null(), "{r:#}");
    assert_eq!(audit_findings(&r), ["spread-selector-missing=allowed"]);
    let exempted = r["auditAnnotations"]["exempted"].as_str().expect("exemptions are reported");
    assert!(exempted.starts_with("spread-selector-missing: exempted by Deployment shop/web: "), "{exempted}");
    assert!(exempted.contains("ticket OPS-42"), "the reason is kept: {exempted}");

    // An empty reason does not exempt, and says so.
    let r = server.respond("/validate", "deployment-exempt-empty-reason.json").await;
    assert_eq!(r["allowed"], false, "{r:#}");
    let w = warnings(&r);
    assert!(
        w.iter().any(|w| w
            .starts_with("[spread-selector-missing] the annotation ha-guard.io/allow-spread-selector-missing")
            && w.contains("empty reason")),
        "{w:#?}"
    );
}

#[tokio::test]
async fn scale_subresource_is_never_denied() {
    let server = Server::start().await;
    let r = server.respond("/validate", "scale-deployment-to-one.json").await;
    assert_decision(&r, &[], &["pdb-blocks-eviction"]);
    let w = warnings(&r);
    assert!(w[0].starts_with("[pdb-blocks-eviction] (scale writes only warn) "), "{w:?}");
    // The same violation with a deny-everything config is still only a warning on a scale write.
    let config =
        ha_guard::core::registry::parse_config("rules: {pdb-blocks-eviction: deny}\nratchet: false", "test config")
            .unwrap();
    let strict = Server::start_with(Arc::new(StaticSource(index(VIEW, false))), config, |_| {}).await;
    let r = strict.respond("/validate", "scale-deployment-to-one.json").await;
    assert_decision(&r, &[], &["pdb-blocks-eviction"]);
    // The mutating webhook has nothing to add to a Scale.
    let m = server.respond("/mutate", "scale-deployment-to-one.json").await;
    assert_untouched(&m);
    let metrics = server.get_probe("/metrics").await.1;
    assert!(metrics.contains(r#"kind="deployments/scale""#), "{metrics}");
}

#[rstest]
#[case::configmap("configmap-create.json")]
#[case::pod_with_host_network_and_zero_grace("pod-create.json")]
#[case::delete_of_a_violating_deployment("deployment-delete.json")]
#[tokio::test]
async fn unrelated_requests_are_allowed_untouched(#[case] name: &str) {
    let server = Server::start().await;
    for path in ["/validate", "/mutate"] {
        let r = server.respond(path, name).await;
        assert_untouched(&r);
    }
}

#[tokio::test]
async fn namespace_in_warn_mode_turns_deny_into_warn() {
    let server = Server::start().await;
    let r = server.respond("/validate", "deployment-namespace-warn-mode.json").await;
    assert_decision(&r, &[], &["spread-selector-missing"]);
    let w = warnings(&r);
    assert!(
        w[0].starts_with("[spread-selector-missing] (namespace in warn mode) "),
        "the warning says why it is not a denial: {w:?}"
    );
    // The same object in an enforcing namespace is denied.
    let mut review = fixture("deployment-namespace-warn-mode.json");
    review["request"]["namespace"] = json!("shop");
    review["request"]["object"]["metadata"]["namespace"] = json!("shop");
    let r = server.review("/validate", &review).await["response"].clone();
    assert_decision(&r, &["spread-selector-missing"], &[]);
}

#[tokio::test]
async fn namespace_exempt_in_config_is_skipped() {
    let config = ha_guard::core::registry::parse_config("exemptNamespaces: [shop]", "test config").unwrap();
    let server = Server::start_with(Arc::new(StaticSource(index(VIEW, false))), config, |_| {}).await;
    let r = server.respond("/validate", "deployment-spread-no-selector.json").await;
    assert_eq!(r["allowed"], true, "{r:#}");
    assert!(r["warnings"].is_null(), "{r:#}");
    assert!(r["auditAnnotations"]["skipped"].as_str().unwrap().contains("shop"), "{r:#}");
}

/// Many warnings: the response keeps within the apiserver's 4 KiB, ends with an "N more" line,
/// and the audit annotations still name every finding.
#[tokio::test]
async fn many_warnings_are_cut_to_fit() {
    let server = Server::start().await;
    let mut review = fixture("deployment-spread-schedule-anyway-no-selector.json");
    let spreads: Vec<Value> = (0..40)
        .map(|i| json!({"maxSkew": 1, "topologyKey": format!("example.com/rack-{i}"), "whenUnsatisfiable": "ScheduleAnyway"}))
        .collect();
    review["request"]["object"]["spec"]["template"]["spec"]["topologySpreadConstraints"] = json!(spreads);
    let r = server.review("/validate", &review).await["response"].clone();
    assert_eq!(r["allowed"], true);
    let w = warnings(&r);
    let total: usize = w.iter().map(|s| s.chars().count()).sum();
    assert!(total <= 4096, "{total} characters of warnings");
    let (last, kept) = w.split_last().unwrap();
    assert!(kept.iter().all(|k| k.starts_with("[spread-selector-missing] ") && k.chars().count() <= 256), "{kept:#?}");
    assert_eq!(last, &format!("[ha-guard] {} more warnings left out (see the audit annotations)", 40 - kept.len()));
    assert_eq!(audit_findings(&r).len(), 40);
}

#[tokio::test]
async fn probes_and_metrics() {
    let server = Server::start().await;
    assert_eq!(server.get_probe("/healthz").await, (200, "ok\n".into()));
    assert_eq!(server.get_probe("/readyz").await, (200, "ok\n".into()));
    server.respond("/validate", "deployment-spread-no-selector.json").await;
    server.respond("/validate", "deployment-colocated.json").await;
    server.respond("/mutate", "deployment-spread-no-selector.json").await;
    let (status, metrics) = server.get_probe("/metrics").await;
    assert_eq!(status, 200);
    for needle in [
        r#"ha_guard_admission_requests_total{webhook="validate",kind="Deployment",operation="CREATE",decision="denied",dry_run="false"} 1"#,
        r#"ha_guard_admission_requests_total{webhook="validate",kind="Deployment",operation="CREATE",decision="warned",dry_run="false"} 1"#,
        r#"ha_guard_admission_requests_total{webhook="mutate",kind="Deployment",operation="CREATE",decision="patched",dry_run="false"} 1"#,
        r#"ha_guard_findings_total{rule="spread-selector-missing",action="deny"} 1"#,
        r#"ha_guard_findings_total{rule="replicas-colocated",action="warn"} 2"#,
        "ha_guard_admission_duration_seconds_bucket{",
        "ha_guard_tls_cert_not_after_seconds ",
    ] {
        assert!(metrics.contains(needle), "missing {needle}\n{metrics}");
    }
    // The certificate's notAfter: about a year from now.
    let not_after: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("ha_guard_tls_cert_not_after_seconds "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    assert!((not_after - now - 365.0 * 86400.0).abs() < 86400.0, "{not_after}");
    server.stop().await;
}

/// The request's kind is the caller's to choose: kinds the webhooks are not registered for are
/// counted as `other`, so a caller that reaches the port cannot mint series. The counters whose
/// label sets are known are there before their first event, with the build info and the process
/// metrics.
#[tokio::test]
async fn made_up_kinds_are_counted_as_other_and_counters_start_at_zero() {
    let server = Server::start().await;
    let (_, before) = server.get_probe("/metrics").await;
    for needle in [
        r#"ha_guard_rejected_total{reason="max-connections"} 0"#,
        r#"ha_guard_config_reloads_total{result="failure"} 0"#,
        r#"ha_guard_tls_reloads_total{result="failure"} 0"#,
        r#"ha_guard_findings_total{rule="pdb-blocks-eviction",action="deny"} 0"#,
        "ha_guard_build_info{version=\"",
        "process_resident_memory_bytes ",
        "process_cpu_seconds_total ",
        "process_open_fds ",
        "process_start_time_seconds ",
    ] {
        assert!(before.contains(needle), "missing {needle}\n{before}");
    }
    for i in 0..20 {
        let mut review = fixture("deployment-spread-ok.json");
        review["request"]["kind"]["kind"] = Value::String(format!("MadeUp{i}"));
        server.review("/validate", &review).await;
    }
    let (_, metrics) = server.get_probe("/metrics").await;
    assert!(!metrics.contains("MadeUp"), "{metrics}");
    let other: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("ha_guard_admission_requests_total{") && l.contains(r#"kind="other""#))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap())
        .sum();
    assert_eq!(other, 20.0, "{metrics}");
    server.stop().await;
}

/// A view source whose first lookup panics, as a bug in the engine would.
struct PanicsOnce {
    inner: Index,
    panicked: AtomicBool,
}

impl ViewSource for PanicsOnce {
    fn snapshot(&self) -> ha_guard::core::view::Snapshot {
        if !self.panicked.swap(true, Ordering::SeqCst) {
            panic!("injected: a bug while answering");
        }
        Arc::new(self.inner.clone())
    }
    fn synced(&self) -> bool {
        true
    }
}

/// A panic while answering is a 500 with a JSON error, and the server keeps serving.
#[tokio::test]
async fn a_panic_in_a_handler_does_not_take_the_server_down() {
    let source = Arc::new(PanicsOnce { inner: index(VIEW, false), panicked: AtomicBool::new(false) });
    let server = Server::start_with(source.clone(), Config::default(), |_| {}).await;
    let (status, body) =
        server.post("/validate", serde_json::to_vec(&fixture("deployment-spread-ok.json")).unwrap()).await;
    assert!(source.panicked.load(Ordering::SeqCst));
    assert_eq!(status, 500, "{body}");
    let error: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error["error"], "internal error while answering");
    server.still_serving().await;
    assert_eq!(server.get_probe("/healthz").await.0, 200);
    server.stop().await;
}

#[tokio::test]
async fn answers_over_http2_and_http1() {
    let server = Server::start().await;
    let body = serde_json::to_vec(&fixture("deployment-spread-ok.json")).unwrap();
    for http1 in [false, true] {
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .add_root_certificate(reqwest::Certificate::from_pem(server.ca_pem.as_bytes()).unwrap());
        if http1 {
            builder = builder.http1_only();
        }
        let response = builder.build().unwrap().post(server.url("/validate")).body(body.clone()).send().await.unwrap();
        let expected = if http1 { reqwest::Version::HTTP_11 } else { reqwest::Version::HTTP_2 };
        assert_eq!(response.version(), expected);
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "application/json");
    }
}

/// The config file is re-read when its content changes; a bad one keeps the previous config.
#[tokio::test]
async fn config_reload() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, "ratchet: true\n").unwrap();
    // Each new version is written beside and renamed into place: written in place, the 100 ms
    // reloader could read it half-written (and count a failure that is not the test's).
    let replace = |text: &str| {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    };
    let config = ha_guard::config_file::load(&path).unwrap();
    let server = Server::start_with(Arc::new(StaticSource(index(VIEW, false))), config, |o| {
        o.config = Some(path.clone());
        o.reload_interval = std::time::Duration::from_millis(100);
    })
    .await;
    let name = "deployment-spread-no-selector.json";
    assert_decision(&server.respond("/validate", name).await, &["spread-selector-missing"], &["replicas-colocated"]);

    replace("rules: {spread-selector-missing: warn, replicas-colocated: off}\n");
    let start = std::time::Instant::now();
    while server.respond("/validate", name).await["allowed"] != true {
        assert!(start.elapsed() < std::time::Duration::from_secs(10), "the new config is not picked up");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_decision(&server.respond("/validate", name).await, &[], &["spread-selector-missing"]);
    let metrics = server.get_probe("/metrics").await.1;
    assert!(metrics.contains(r#"ha_guard_config_reloads_total{result="success"} 1"#), "{metrics}");

    replace("rules: {no-such-rule: deny}\n");
    let start = std::time::Instant::now();
    while !server.get_probe("/metrics").await.1.contains(r#"ha_guard_config_reloads_total{result="failure"} 1"#) {
        assert!(start.elapsed() < std::time::Duration::from_secs(10), "the bad config is not noticed");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // The previous configuration is kept.
    assert_decision(&server.respond("/validate", name).await, &[], &["spread-selector-missing"]);
    assert_eq!(server.get_probe("/readyz").await.0, 200);
    server.stop().await;
}

/// What the server's namespace reader answers in [`an_override_on_a_namespace_the_view_does_not_know`],
/// and how many times it was asked.
struct Reader {
    answer: Result<Option<std::collections::BTreeMap<String, String>>, String>,
    asked: std::sync::atomic::AtomicUsize,
}

impl ha_guard::server::namespaces::ReadNamespace for Reader {
    fn labels(
        &self,
        _name: &str,
        _within: std::time::Duration,
    ) -> Result<Option<std::collections::BTreeMap<String, String>>, String> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.answer.clone()
    }
}

/// Issue 50: an override (`tier: prod` denies `recreate-multi-replica`, which warns by default) on
/// a Deployment in `fresh`, a namespace the view does not know yet (created in the same apply):
/// the server reads it before judging, and where it cannot, judges at the strictest override.
#[tokio::test]
async fn an_override_on_a_namespace_the_view_does_not_know() {
    let policy =
        "overrides:\n  - namespaceSelector: {matchLabels: {tier: prod}}\n    rules: {recreate-multi-replica: deny}\n";
    let mut review = fixture("deployment-recreate.json");
    review["request"]["namespace"] = json!("fresh");
    review["request"]["object"]["metadata"]["namespace"] = json!("fresh");
    let labelled = |tier: &str| Ok(Some([("tier".to_string(), tier.to_string())].into()));
    let strictest = "[recreate-multi-replica] the labels of namespace fresh are not known, so an override that selects \
                     namespaces by label may apply: judged at the strictest action one gives, deny, not the cluster-wide warn";
    for (answer, denied, says_strictest) in [
        (labelled("prod"), true, false),
        (labelled("dev"), false, false),
        (Err("connection refused".to_string()), true, true),
        (Ok(None), true, true),
    ] {
        let config = ha_guard::core::registry::parse_config(policy, "policy.yaml").unwrap();
        let server = Server::start_with(Arc::new(StaticSource(index(VIEW, false))), config, |_| {}).await;
        let reader = Arc::new(Reader { answer: answer.clone(), asked: Default::default() });
        assert!(server.state.namespaces.set(reader.clone()).is_ok());
        let r = server.review("/validate", &review).await["response"].clone();
        if denied {
            assert_eq!(r["allowed"], false, "{answer:?}: {r:#}");
            let message = r["status"]["message"].as_str().unwrap_or_default();
            assert_eq!(rule_ids(message.lines()), ["recreate-multi-replica"], "{answer:?}: {r:#}");
        } else {
            assert_decision(&r, &[], &["recreate-multi-replica"]);
        }
        let w = warnings(&r);
        assert_eq!(w.iter().any(|w| w == strictest), says_strictest, "{answer:?}: {w:?}");
        assert_eq!(reader.asked.load(Ordering::SeqCst), 1, "{answer:?}: read once, before judging");
        // A namespace the view knows (shop) is not read again.
        server.respond("/validate", "deployment-recreate.json").await;
        assert_eq!(reader.asked.load(Ordering::SeqCst), 1, "{answer:?}");
        server.stop().await;
    }
    // No cluster to read it from (a static view): the strictest too.
    let config = ha_guard::core::registry::parse_config(policy, "policy.yaml").unwrap();
    let server = Server::start_with(Arc::new(StaticSource(index(VIEW, false))), config, |_| {}).await;
    let r = server.review("/validate", &review).await["response"].clone();
    assert_eq!(r["allowed"], false, "{r:#}");
    assert!(warnings(&r).iter().any(|w| w == strictest), "{r:#}");
    server.stop().await;
    // Without overrides nothing is read, and the default applies.
    let server = Server::start_with(Arc::new(StaticSource(index(VIEW, false))), Config::default(), |_| {}).await;
    let reader = Arc::new(Reader { answer: labelled("prod"), asked: Default::default() });
    assert!(server.state.namespaces.set(reader.clone()).is_ok());
    assert_decision(&server.review("/validate", &review).await["response"], &[], &["recreate-multi-replica"]);
    assert_eq!(reader.asked.load(Ordering::SeqCst), 0);
    server.stop().await;
}

/// Issue 50: reviews for namespaces that do not exist (a forged flood: the apiserver itself never
/// admits into a missing namespace) cannot make one apiserver GET each. The same namespace asked
/// for over and over is read once; distinct ones are held to the budget of GETs a second, the rest
/// answered at the strictest action without a GET, all of them on time and counted in
/// `ha_guard_namespace_reads_total{result}`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flood_of_reviews_for_missing_namespaces_is_bounded() {
    use ha_guard::server::namespaces::{READS_BURST, READS_PER_SECOND};
    let policy =
        "overrides:\n  - namespaceSelector: {matchLabels: {tier: prod}}\n    rules: {recreate-multi-replica: deny}\n";
    let config = ha_guard::core::registry::parse_config(policy, "policy.yaml").unwrap();
    let server = Arc::new(Server::start_with(Arc::new(StaticSource(index(VIEW, false))), config, |_| {}).await);
    let reader = Arc::new(Reader { answer: Ok(None), asked: Default::default() });
    assert!(server.state.namespaces.set(reader.clone()).is_ok());
    let review_in = |ns: String| {
        let mut review = fixture("deployment-recreate.json");
        review["request"]["namespace"] = json!(ns);
        review["request"]["object"]["metadata"]["namespace"] = json!(ns);
        review
    };
    let flood = |names: Vec<String>| {
        let server = server.clone();
        async move {
            let reviews = names.into_iter().map(|ns| {
                let (server, review) = (server.clone(), review_in(ns));
                tokio::spawn(async move { server.review("/validate", &review).await["response"]["allowed"].clone() })
            });
            for answer in futures::future::join_all(reviews).await {
                // Past the deadline the answer would be the failure policy's (Ignore: allowed).
                assert_eq!(answer.unwrap(), false, "judged at the strictest override, on time: denied");
            }
        }
    };
    // One namespace, 100 reviews at once: one GET.
    flood((0..100).map(|_| "ghost".to_string()).collect()).await;
    assert_eq!(reader.asked.load(Ordering::SeqCst), 1, "one GET for one namespace");
    // 150 distinct namespaces at once: the burst, then the rate; the others are not read.
    let started = std::time::Instant::now();
    flood((0..150).map(|i| format!("ghost-{i}")).collect()).await;
    let elapsed = started.elapsed().as_secs_f64();
    let gets = reader.asked.load(Ordering::SeqCst) - 1;
    let bound = READS_BURST + READS_PER_SECOND * elapsed + 1.0;
    assert!((gets as f64) <= bound, "{gets} GETs in {elapsed:.2}s: more than {READS_BURST} + {READS_PER_SECOND}/s");
    let metrics = server.get_probe("/metrics").await.1;
    let count = |result: &str| -> u64 {
        let series = format!("ha_guard_namespace_reads_total{{result=\"{result}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&series))
            .unwrap_or_else(|| panic!("no {series}in {metrics}"))
            .parse()
            .unwrap()
    };
    assert_eq!(count("not-found"), gets as u64 + 1, "{metrics}");
    assert_eq!(count("shared"), 99);
    assert_eq!(count("limited"), 150 - gets as u64, "every review without a GET is counted");
    assert!(count("limited") > 0, "150 at once is past the burst of {READS_BURST}");
    assert_eq!((count("found"), count("error")), (0, 0));
}
