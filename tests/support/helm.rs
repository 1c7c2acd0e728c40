//! The pinned helm (tests/e2e/helm/build.sh) against a control plane, and the route from the chart's
//! Service to replicas on loopback stood in for at install time (a post-renderer).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{ControlPlane, Kubectl, helm, repo};

/// helm against `cp`, with its cache, config and data directories in the test's temporary
/// directory.
pub struct Helm {
    bin: PathBuf,
    kubeconfig: PathBuf,
    home: PathBuf,
}

impl Helm {
    pub fn new(cp: &ControlPlane) -> Helm {
        let bin = helm().unwrap_or_else(|e| panic!("{e}"));
        Helm { bin, kubeconfig: cp.kubeconfig(), home: cp.root().join("helm") }
    }

    /// `helm ARGS --kubeconfig KUBECONFIG`, from the repository root (where `charts/` is).
    pub fn run(&self, args: &[&str]) -> Kubectl {
        let out = Command::new(&self.bin)
            .args(args)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .current_dir(repo())
            .env("HELM_CACHE_HOME", self.home.join("cache"))
            .env("HELM_CONFIG_HOME", self.home.join("config"))
            .env("HELM_DATA_HOME", self.home.join("data"))
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.bin.display()));
        Kubectl {
            command: format!("helm {}", args.join(" ")),
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// The route stood in for, for helm: a post-renderer in `dir` that runs kustomize (`kubectl
/// kustomize`) over what helm rendered, making the Service `name` an `ExternalName` to localhost
/// and the first webhook of each webhook configuration `name` call `port` (a
/// [`super::balancer::Balancer`] in front of the replicas). Returns the script's path.
pub fn post_renderer(dir: &Path, name: &str, port: u16) -> PathBuf {
    std::fs::create_dir_all(dir).expect("the post-renderer's directory");
    let kustomization = format!(
        "# The route stood in for (tests/support/helm.rs): the Service to localhost, the webhooks to the balancer.\n\
         resources: [rendered.yaml]\n\
         patches:\n\
         \x20 - target: {{kind: Service, name: {name}}}\n\
         \x20   patch: |\n\
         \x20     - {{op: replace, path: /spec/type, value: ExternalName}}\n\
         \x20     - {{op: add, path: /spec/externalName, value: localhost}}\n\
         \x20 - target: {{group: admissionregistration.k8s.io, kind: ValidatingWebhookConfiguration|MutatingWebhookConfiguration, name: {name}}}\n\
         \x20   patch: |\n\
         \x20     - {{op: replace, path: /webhooks/0/clientConfig/service/port, value: {port}}}\n"
    );
    std::fs::write(dir.join("kustomization.yaml"), kustomization).expect("kustomization.yaml");
    let script = dir.join("post-render");
    std::fs::write(
        &script,
        "#!/bin/sh\n# helm --post-renderer: reads the rendered release on stdin, prints it kustomized.\nset -eu\n\
         dir=\"$(dirname \"$0\")\"\ncat >\"$dir/rendered.yaml\"\nexec kubectl kustomize \"$dir\"\n",
    )
    .expect("the post-renderer");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod the post-renderer");
    script
}
