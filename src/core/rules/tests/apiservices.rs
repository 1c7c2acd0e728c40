//! apiservice-unavailable: an aggregated API whose backend can be down, or is down now.

use rstest::rstest;

use crate::core::finding::Decision;
use crate::core::model::{Kind, ObjectRef};
use crate::core::testing::*;

const RULE: &str = "apiservice-unavailable";

/// kueue's visibility API (as in the corpus), served by Service default/visibility; `status` is
/// appended as written.
fn apiservice(status: &str) -> String {
    format!(
        "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata:\n  name: \
         v1beta1.visibility.kueue.x-k8s.io\nspec:\n  group: visibility.kueue.x-k8s.io\n  groupPriorityMinimum: 100\n  \
         insecureSkipTLSVerify: true\n  service:\n    name: visibility\n    namespace: default\n  version: v1beta1\n  \
         versionPriority: 100\n{status}"
    )
}

const UNAVAILABLE: &str = "status:\n  conditions:\n  - type: Available\n    status: \"False\"\n    reason: \
                           MissingEndpoints\n    message: endpoints for service/visibility in \"default\" have no \
                           addresses with port name \"https\"\n";

fn service() -> String {
    "apiVersion: v1\nkind: Service\nmetadata:\n  name: visibility\n  namespace: default\nspec:\n  selector:\n    app: \
     kueue\n  ports:\n  - port: 443\n    targetPort: 8082\n"
        .to_string()
}

fn kueue(replicas: i32) -> String {
    deployment("kueue", &format!("replicas: {replicas}"), "")
}

#[test]
fn one_replica_behind_an_aggregated_api_warns_with_the_service_the_workload_and_what_breaks() {
    let view = docs(&[&service(), &kueue(1)]);
    let f = findings(&apiservice(""), &view, false);
    let a = of_rule(&f, RULE);
    assert_eq!(a.len(), 1, "{f:#?}");
    let a = a[0];
    assert_eq!(a.action, Decision::Warn);
    assert_eq!(a.path, "spec.service");
    assert_eq!(a.object, ObjectRef::new(Kind::ApiService, "", "v1beta1.visibility.kueue.x-k8s.io"));
    assert_eq!(
        a.related,
        [ObjectRef::new(Kind::Service, "default", "visibility"), ObjectRef::new(Kind::Deployment, "default", "kueue")]
    );
    for part in [
        "APIService/v1beta1.visibility.kueue.x-k8s.io serves visibility.kueue.x-k8s.io/v1beta1 through Service \
         default/visibility, and the Service (selector app=kueue) selects only Deployment kueue (replicas 1): 1 \
         replica at its floor",
        "discovery reports its group as failed",
        "every namespace being deleted stays Terminating",
    ] {
        assert!(a.what.contains(part), "{part:?} not in: {}", a.what);
    }
    assert!(
        a.fix.starts_with("run at least 2 replicas of Deployment default/kueue") && a.fix.contains("maxUnavailable: 1"),
        "{}",
        a.fix
    );
}

#[rstest]
#[case::one(1, true)]
#[case::none(0, true)]
#[case::two(2, false)]
fn the_floor_behind_it_decides(#[case] replicas: i32, #[case] fires: bool) {
    let f = findings(&apiservice(""), &docs(&[&service(), &kueue(replicas)]), false);
    assert_eq!(of_rule(&f, RULE).len(), usize::from(fires), "{f:#?}");
    if replicas == 0 {
        assert!(of_rule(&f, RULE)[0].what.contains("no replica at its floor"), "{f:#?}");
    }
}

#[test]
fn an_hpa_floor_of_two_is_enough() {
    let view = docs(&[&service(), &kueue(1), &hpa("kueue", "kueue", Some(2), 4)]);
    assert!(of_rule(&findings(&apiservice(""), &view, false), RULE).is_empty());
}

#[test]
fn a_local_api_is_not_judged() {
    let local = "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata:\n  name: v1.apps\nspec:\n  group: \
                 apps\n  version: v1\n  groupPriorityMinimum: 17800\n  versionPriority: 15\n";
    assert!(findings(local, "", true).is_empty());
}

#[test]
fn an_unavailable_condition_is_said_with_the_aggregators_reason_even_with_enough_replicas() {
    let view = docs(&[&service(), &kueue(2)]);
    let f = findings(&apiservice(UNAVAILABLE), &view, false);
    let a = of_rule(&f, RULE);
    assert_eq!(a.len(), 1, "{f:#?}");
    assert_eq!(a[0].path, "status.conditions[0]");
    assert!(
        a[0].what.contains(
            "not Available now (Available False, MissingEndpoints: endpoints for service/visibility in \"default\" \
             have no addresses"
        ),
        "{}",
        a[0].what
    );
    assert!(a[0].fix.contains("kubectl delete apiservice v1beta1.visibility.kueue.x-k8s.io"), "{}", a[0].fix);
    // Down now and one replica: both said, in one finding.
    let f = findings(&apiservice(UNAVAILABLE), &docs(&[&service(), &kueue(1)]), false);
    let a = of_rule(&f, RULE);
    assert!(a.len() == 1 && a[0].what.contains("; and the Service (selector app=kueue) selects only"), "{f:#?}");
}

#[test]
fn a_missing_service_or_no_pod_is_an_absence_said_only_where_the_view_is_whole() {
    // Not in the files given to check: maybe elsewhere.
    assert!(of_rule(&findings(&apiservice(""), "", false), RULE).is_empty());
    let f = findings(&apiservice(""), "", true);
    assert!(of_rule(&f, RULE)[0].what.contains("visibility, and the Service does not exist."), "{f:#?}");
    // A Service whose pods are no workload's: only the live view, which knows the pods, can tell.
    assert!(of_rule(&findings(&apiservice(""), &service(), true), RULE).is_empty());
    let live = view_with_pods(&service(), Vec::new());
    let f = audit_findings(&apiservice(""), &live);
    let a = of_rule(&f, RULE);
    assert!(a.len() == 1 && a[0].what.contains("(selector app=kueue) selects no pod at all"), "{f:#?}");
    // A DaemonSet's pod answers: not said.
    let mut daemon = pod("kueue-abc", "kueue", "n1");
    daemon.owner = crate::core::view::PodOwner::DaemonSet;
    let live = view_with_pods(&service(), vec![daemon]);
    assert!(of_rule(&audit_findings(&apiservice(""), &live), RULE).is_empty());
}

// --- at admission: the Service's and the workload's writes (issue 51, Build 6) ----------------

fn api_id() -> ObjectRef {
    ObjectRef::new(Kind::ApiService, "", "v1beta1.visibility.kueue.x-k8s.io")
}

/// The Service written second: the APIService it serves and one replica behind it are stored.
#[rstest]
#[case::one(1, true)]
#[case::none(0, true)]
#[case::two(2, false)]
fn a_service_write_behind_an_aggregated_api_is_judged_by_the_floor_it_selects(
    #[case] replicas: i32,
    #[case] fires: bool,
) {
    let view = docs(&[&apiservice(""), &kueue(replicas)]);
    let f = findings(&service(), &view, false);
    let a = of_rule(&f, RULE);
    assert_eq!(a.len(), usize::from(fires), "{f:#?}");
    if !fires {
        return;
    }
    let a = a[0];
    assert_eq!((a.action, a.path.as_str()), (Decision::Warn, "spec.selector"));
    assert_eq!(a.object, ObjectRef::new(Kind::Service, "default", "visibility"));
    assert_eq!(a.anchor, api_id(), "the finding belongs to the APIService");
    assert_eq!(a.related, [api_id(), ObjectRef::new(Kind::Deployment, "default", "kueue")]);
    let floor = if replicas == 0 { "no replica" } else { "1 replica" };
    for part in [
        "APIService/v1beta1.visibility.kueue.x-k8s.io serves visibility.kueue.x-k8s.io/v1beta1 through Service \
         default/visibility, and the Service (selector app=kueue) selects only Deployment kueue"
            .to_string(),
        format!("(replicas {replicas}): {floor} at its floor"),
        "every namespace being deleted stays Terminating".to_string(),
    ] {
        assert!(a.what.contains(&part), "{part:?} not in: {}", a.what);
    }
    assert!(a.fix.starts_with("run at least 2 replicas of Deployment default/kueue"), "{}", a.fix);
}

/// A Service no APIService names, or selecting nothing of the view: silent.
#[test]
fn a_service_no_aggregated_api_names_is_not_judged() {
    assert!(of_rule(&findings(&service(), &kueue(1), false), RULE).is_empty());
    let other = service().replace("name: visibility", "name: other");
    assert!(of_rule(&findings(&other, &docs(&[&apiservice(""), &kueue(1)]), false), RULE).is_empty());
    // Named, but nothing of the view behind it: at admission "no pod" is not known.
    assert!(of_rule(&findings(&service(), &apiservice(""), true), RULE).is_empty());
}

/// The workload written second (or scaled): its replicas are the floor behind the APIService.
#[rstest]
#[case::one(1, true)]
#[case::none(0, true)]
#[case::two(2, false)]
fn a_workload_write_behind_an_aggregated_api_is_judged_by_its_floor(#[case] replicas: i32, #[case] fires: bool) {
    let view = docs(&[&apiservice(""), &service()]);
    let f = findings(&kueue(replicas), &view, false);
    let a = of_rule(&f, RULE);
    assert_eq!(a.len(), usize::from(fires), "{f:#?}");
    if fires {
        let a = a[0];
        assert_eq!((a.path.as_str(), &a.anchor), ("spec.replicas", &api_id()), "{a:#?}");
        assert_eq!(a.related, [api_id(), ObjectRef::new(Kind::Service, "default", "visibility")]);
        assert!(a.what.contains(&format!("selects only Deployment kueue (replicas {replicas})")), "{}", a.what);
    }
}

#[test]
fn a_workload_the_service_does_not_select_or_of_another_namespace_is_not_judged() {
    let view = docs(&[&apiservice(""), &service()]);
    let other = deployment("other", "replicas: 1", "");
    assert!(of_rule(&findings(&other, &view, false), RULE).is_empty());
    let elsewhere = kueue(1).replace("namespace: default", "namespace: elsewhere");
    let elsewhere = if elsewhere.contains("namespace: elsewhere") {
        elsewhere
    } else {
        elsewhere.replace("metadata:\n", "metadata:\n  namespace: elsewhere\n")
    };
    assert!(of_rule(&findings(&elsewhere, &view, false), RULE).is_empty(), "{elsewhere}");
}

/// An HPA's write sets the floor: a minimum of 1 over two replicas fires on the HPA, at its
/// minimum; 2 does not.
#[rstest]
#[case::min_one(1, true)]
#[case::min_two(2, false)]
fn an_autoscalers_write_is_judged_by_its_minimum(#[case] min: i32, #[case] fires: bool) {
    let view = docs(&[&apiservice(""), &service(), &kueue(2)]);
    let f = findings(&hpa("kueue", "kueue", Some(min), 4), &view, false);
    let a = of_rule(&f, RULE);
    assert_eq!(a.len(), usize::from(fires), "{f:#?}");
    if fires {
        assert_eq!((a[0].path.as_str(), &a[0].anchor), ("spec.minReplicas", &api_id()), "{:#?}", a[0]);
    }
}

/// Where the APIService is judged in the same run (`check` of the three files), its Service's and
/// workload's copies are the same finding: the run reports it once, on the APIService (see
/// `check`'s anchors); here, each side finds it with the same anchor and message.
#[test]
fn every_side_finds_one_finding_anchored_at_the_apiservice() {
    let all = [apiservice(""), service(), kueue(1)];
    let mut messages = Vec::new();
    for (i, subject) in all.iter().enumerate() {
        let others: Vec<&str> = all.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, s)| s.as_str()).collect();
        let f = findings(subject, &docs(&others), false);
        let a = of_rule(&f, RULE);
        assert_eq!(a.len(), 1, "{subject}: {f:#?}");
        assert!(a[0].anchor == api_id() || a[0].object == api_id(), "{:#?}", a[0]);
        messages.push(a[0].what.clone());
    }
    assert!(messages.windows(2).all(|w| w[0] == w[1]), "one message from every side: {messages:#?}");
}
