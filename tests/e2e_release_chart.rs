//! End-to-end: the chart as a release publishes it (issue 40, acceptance 2). `helm package
//! charts/ha-guard`, the command scripts/release.sh runs, makes `ha-guard-VERSION.tgz`; this test
//! shows that package carrying what Artifact Hub reads (`helm show chart`: the version and
//! appVersion equal to Cargo.toml's, the images with both platforms, the licence, the links), then
//! installs it as docs/releases.md says, `helm install ha-guard ./ha-guard-VERSION.tgz`, into the
//! real kube-apiserver of the e2e suite (tests/e2e/README.md), and holds the release to the chart
//! folder's rendering: the same objects, the image tagged with the version. It ends with `helm
//! uninstall`, whose pre-delete hooks (the webhook configurations) leave nothing behind.
//!
//! What the installed objects then do, replicas and webhooks and upgrades, is tests/e2e_install.rs,
//! which installs the chart folder these objects equal.

#[path = "support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;
use support::*;

const VERSION: &str = env!("CARGO_PKG_VERSION");
const RELEASE: &str = "ha-guard";
const NS: &str = "ha-guard";

/// The pinned helm (tests/e2e/helm/build.sh), run in `dir` against the control plane, with its
/// cache, config and data directories in the test's temporary directory.
fn helm(cp: &ControlPlane, dir: &Path, args: &[&str]) -> Kubectl {
    let bin = support::helm().unwrap_or_else(|e| panic!("{e}"));
    let home = cp.root().join("helm");
    let out = Command::new(&bin)
        .args(args)
        .arg("--kubeconfig")
        .arg(cp.kubeconfig())
        .current_dir(dir)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    Kubectl {
        command: format!("helm {}", args.join(" ")),
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Objects by kind/namespace/name.
fn by_name(docs: Vec<Value>) -> BTreeMap<String, Value> {
    docs.into_iter()
        .map(|d| {
            let key = format!(
                "{}/{}/{}",
                d["kind"].as_str().unwrap_or(""),
                d["metadata"]["namespace"].as_str().unwrap_or(""),
                d["metadata"]["name"].as_str().unwrap_or("")
            );
            (key, d)
        })
        .collect()
}

/// An annotation of Chart.yaml whose value is itself YAML (Artifact Hub's lists).
fn yaml_annotation(chart: &Value, key: &str) -> Value {
    let text = chart["annotations"][key].as_str().unwrap_or_else(|| panic!("helm show chart has no {key}: {chart}"));
    serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("{key} is not YAML ({e}): {text}"))
}

#[test]
fn the_packaged_chart_carries_its_annotations_and_installs_with_helm() {
    let cp = ControlPlane::start().unwrap_or_else(|e| panic!("control plane: {e}"));
    let dist: PathBuf = cp.root().join("dist");
    std::fs::create_dir_all(&dist).unwrap();
    let chart_dir = repo().join("charts/ha-guard");
    let chart_dir = chart_dir.to_str().expect("a UTF-8 path");

    // As scripts/release.sh packages it.
    helm(&cp, &dist, &["package", chart_dir, "--destination", "."]).success();
    let package = format!("ha-guard-{VERSION}.tgz");
    assert!(dist.join(&package).is_file(), "helm package wrote {package}");

    let chart: Value = serde_saphyr::from_str(&helm(&cp, &dist, &["show", "chart", &package]).success().stdout)
        .expect("helm show chart prints YAML");
    assert_eq!(chart["name"], "ha-guard");
    assert_eq!(chart["version"], VERSION, "the chart's version is Cargo.toml's");
    assert_eq!(chart["appVersion"], VERSION, "appVersion is Cargo.toml's");
    assert_eq!(chart["annotations"]["artifacthub.io/license"], "Apache-2.0");
    let images = yaml_annotation(&chart, "artifacthub.io/images");
    let values: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(repo().join("charts/ha-guard/values.yaml")).unwrap())
            .expect("values.yaml is YAML");
    let image = format!("{}:{VERSION}", values["image"]["repository"].as_str().expect("image.repository"));
    assert_eq!(images[0]["image"], image.as_str(), "artifacthub.io/images names the image the chart deploys: {images}");
    assert_eq!(images[0]["platforms"], serde_json::json!(["linux/amd64", "linux/arm64"]), "{images}");
    let links = yaml_annotation(&chart, "artifacthub.io/links");
    let names: Vec<&str> =
        links.as_array().expect("a list of links").iter().filter_map(|l| l["name"].as_str()).collect();
    for want in ["source", "changelog", "releases and how to verify them"] {
        assert!(names.contains(&want), "artifacthub.io/links has {want:?}: {links}");
    }
    for link in links.as_array().unwrap() {
        assert!(link["url"].as_str().is_some_and(|u| u.starts_with("https://")), "{link}");
    }

    // As docs/releases.md says, from the folder holding the package.
    helm(&cp, &dist, &["install", RELEASE, &format!("./{package}"), "--namespace", NS, "--create-namespace"])
        .success()
        .shows(&["STATUS: deployed"]);
    let list: Value =
        serde_json::from_str(&helm(&cp, &dist, &["list", "--namespace", NS, "--output", "json"]).success().stdout)
            .expect("helm list -o json");
    assert_eq!(list[0]["chart"], format!("ha-guard-{VERSION}").as_str(), "{list}");
    assert_eq!(list[0]["app_version"], VERSION, "{list}");

    // The package installs the chart folder's objects, unchanged.
    let installed =
        by_name(yaml_docs(&helm(&cp, &dist, &["get", "manifest", RELEASE, "--namespace", NS]).success().stdout));
    let folder = by_name(yaml_docs(
        &helm(&cp, &dist, &["template", RELEASE, chart_dir, "--namespace", NS, "--no-hooks"]).success().stdout,
    ));
    assert_eq!(installed.keys().collect::<Vec<_>>(), folder.keys().collect::<Vec<_>>());
    for (key, want) in &folder {
        assert_eq!(&installed[key], want, "{key}: the packaged chart installs what the folder renders");
    }
    let deployment = cp.kubectl(&["-n", NS, "get", "deployment", "ha-guard", "-o", "json"]).success().json();
    assert_eq!(deployment["spec"]["template"]["spec"]["containers"][0]["image"], image.as_str());
    for kind in ["validatingwebhookconfiguration", "mutatingwebhookconfiguration"] {
        cp.kubectl(&["get", kind, "ha-guard"]).success();
    }

    helm(&cp, &dist, &["uninstall", RELEASE, "--namespace", NS]).success();
    for kind in ["validatingwebhookconfiguration", "mutatingwebhookconfiguration"] {
        cp.kubectl(&["get", kind, "ha-guard"]).failure().shows(&["NotFound"]);
    }
    eprintln!("[e2e_release_chart] helm install ./{package}: deployed and uninstalled; {} objects", folder.len());
}
