//! `ha-guard probe-webhook`: does ha-guard answer the apiserver? A server-side dry run of a
//! Deployment that several rules flag, through the apiserver as `kubectl apply --dry-run=server`
//! sends it, and a look at the answer: ha-guard's warnings or its denial mean a replica answered;
//! a dry run admitted without a word from ha-guard means none did (with `failurePolicy: Ignore` the
//! apiserver then lets every write through unchecked). The chart's `helm test` runs it.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde_json::{Value, json};

use super::error::Error;
use crate::core::registry;

#[derive(Args)]
pub struct ProbeArgs {
    /// Kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else the in-cluster service
    /// account).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// The namespace of the dry run: one ha-guard judges (not exempt, not labelled
    /// ha-guard.io/mode=off). Nothing is stored there.
    #[arg(short = 'n', long, value_name = "NS", default_value = "default")]
    pub namespace: String,
}

/// The probe's name: the Deployment of the dry run and the field manager.
const PROBE: &str = "ha-guard-probe";

/// What the dry run sends: two replicas that nothing keeps apart (`replicas-colocated`) and pods
/// killed without a grace period (`termination-grace-zero`), both warnings by default. Two rules,
/// so that a configuration turning one off still draws an answer.
fn probe_deployment(namespace: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": PROBE, "namespace": namespace, "labels": {"app": PROBE}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": PROBE}},
            "template": {
                "metadata": {"labels": {"app": PROBE}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]
                }
            }
        }
    })
}

/// The apiserver's answer to the dry run, as the probe reads it.
#[derive(Debug, PartialEq)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The `Warning` headers' texts, unquoted.
    pub warnings: Vec<String>,
    /// A refusal's `Status.message`.
    pub message: Option<String>,
}

/// What the answer says of ha-guard.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// ha-guard answered: its lines (warnings, or the denial).
    Answered(Vec<String>),
    /// The apiserver called ha-guard and got no usable answer (failurePolicy Fail).
    Unreachable(String),
    /// Admitted without a word from ha-guard.
    Silent,
    /// Refused for another reason (RBAC, a namespace that does not exist, another webhook).
    Refused(String),
}

/// The name the chart gives the validating webhook (charts/ha-guard/templates/_webhooks.tpl).
const VALIDATING_WEBHOOK: &str = "validate.ha-guard.io";

/// A line of ha-guard's: `[rule-id] ...` naming a rule of the catalogue. A ValidatingAdmissionPolicy's
/// warning begins "Validation failed for ValidatingAdmissionPolicy", so the policies ha-guard
/// generates never count as the webhook's answer.
fn ha_guard_line(text: &str) -> bool {
    text.strip_prefix('[')
        .and_then(|rest| rest.split_once(']'))
        .is_some_and(|(id, _)| registry::rule(id).is_some() || id == "ha-guard")
}

pub fn verdict(answer: &Answer) -> Verdict {
    let lines: Vec<String> = answer.warnings.iter().filter(|w| ha_guard_line(w)).cloned().collect();
    let message = answer.message.clone().unwrap_or_default();
    if (200..300).contains(&answer.status) {
        return if lines.is_empty() { Verdict::Silent } else { Verdict::Answered(lines) };
    }
    let denied_by_us = format!("admission webhook \"{VALIDATING_WEBHOOK}\" denied the request");
    if let Some(rest) = message.split_once(&denied_by_us).map(|(_, rest)| rest) {
        let denial = rest.trim_start_matches(':').trim().lines().map(str::to_string);
        return Verdict::Answered(denial.chain(lines).collect());
    }
    if message.contains("failed calling webhook") && message.contains("ha-guard.io") {
        return Verdict::Unreachable(message);
    }
    Verdict::Refused(if message.is_empty() { format!("HTTP {}", answer.status) } else { message })
}

/// The text of one `Warning` header (RFC 7234: `299 - "text"`, the text quoted with `\` escapes).
fn warning_text(header: &str) -> String {
    let Some(start) = header.find('"') else { return header.to_string() };
    let quoted = &header[start + 1..];
    let mut out = String::with_capacity(quoted.len());
    let mut chars = quoted.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            '"' => break,
            c => out.push(c),
        }
    }
    out
}

async fn dry_run(client: &kube::Client, namespace: &str) -> Result<Answer, Error> {
    let path = format!("/apis/apps/v1/namespaces/{namespace}/deployments?dryRun=All&fieldManager={PROBE}");
    let body = serde_json::to_vec(&probe_deployment(namespace)).map_err(|e| Error(e.to_string()))?;
    let request = http::Request::post(&path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(kube::client::Body::from(body))
        .map_err(|e| Error(format!("cannot make the request: {e}")))?;
    let response = client.send(request).await.map_err(|e| Error(format!("the apiserver did not answer: {e}")))?;
    let status = response.status().as_u16();
    let warnings = response
        .headers()
        .get_all(http::header::WARNING)
        .iter()
        .map(|h| warning_text(&String::from_utf8_lossy(h.as_bytes())))
        .collect();
    let bytes = response.into_body().collect_bytes().await.map_err(|e| Error(format!("reading the answer: {e}")))?;
    let message = (!(200..300).contains(&status))
        .then(|| serde_json::from_slice::<Value>(&bytes).ok())
        .flatten()
        .and_then(|v| v["message"].as_str().map(str::to_string));
    Ok(Answer { status, warnings, message })
}

pub fn run(args: ProbeArgs) -> Result<ExitCode, Error> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error(format!("cannot start the runtime: {e}")))?;
    let ns = &args.namespace;
    let answer = runtime.block_on(async {
        let client = super::audit::client_for(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
        dry_run(&client, ns).await
    })?;
    let what = format!("the dry run of Deployment {ns}/{PROBE}");
    match verdict(&answer) {
        Verdict::Answered(lines) => {
            println!("ha-guard answered {what}:");
            for line in lines {
                println!("  {line}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Verdict::Silent => {
            eprintln!(
                "ha-guard did not answer: the apiserver admitted {what} without a word from ha-guard. With \
                 failurePolicy Ignore this is what happens when no ha-guard replica answers (check that its pods are \
                 ready and its Service has endpoints); it is also what an exempt namespace gives (exemptNamespaces, \
                 the label ha-guard.io/mode=off: choose another with --namespace) and a configuration that turns off \
                 both rules the probe fires (replicas-colocated, termination-grace-zero)."
            );
            Ok(ExitCode::FAILURE)
        }
        Verdict::Unreachable(message) => {
            eprintln!("the apiserver could not call ha-guard, and refused {what} (failurePolicy Fail): {message}");
            Ok(ExitCode::FAILURE)
        }
        Verdict::Refused(message) => Err(Error(format!("the apiserver refused {what}, not ha-guard: {message}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, warnings: &[&str], message: Option<&str>) -> Answer {
        Answer {
            status,
            warnings: warnings.iter().map(|w| w.to_string()).collect(),
            message: message.map(str::to_string),
        }
    }

    #[test]
    fn warnings_of_ha_guard_are_an_answer() {
        let a = answer(201, &["[replicas-colocated] spec.template.spec: 2 replicas", "other webhook says hi"], None);
        assert_eq!(verdict(&a), Verdict::Answered(vec!["[replicas-colocated] spec.template.spec: 2 replicas".into()]));
    }

    #[test]
    fn an_admission_without_ha_guards_words_is_silence() {
        assert_eq!(verdict(&answer(201, &[], None)), Verdict::Silent);
        // Another webhook's warning, a generated policy's, or a bracket naming no rule are not ha-guard's.
        let others = [
            "Validation failed for ValidatingAdmissionPolicy 'ha-guard-termination-grace-zero' with binding 'x': [termination-grace-zero] ...",
            "[not-a-rule] spec: x",
            "spec.template: deprecated",
        ];
        assert_eq!(verdict(&answer(201, &others, None)), Verdict::Silent);
    }

    #[test]
    fn a_denial_by_the_webhook_is_an_answer_and_a_failed_call_is_not() {
        let denied =
            "admission webhook \"validate.ha-guard.io\" denied the request: [recreate-multi-replica] spec.strategy: x";
        assert_eq!(
            verdict(&answer(403, &[], Some(denied))),
            Verdict::Answered(vec!["[recreate-multi-replica] spec.strategy: x".into()])
        );
        let failed = "Internal error occurred: failed calling webhook \"validate.ha-guard.io\": failed to call webhook: \
                      Post \"https://ha-guard.ha-guard.svc:443/validate\": no endpoints available";
        assert_eq!(verdict(&answer(500, &[], Some(failed))), Verdict::Unreachable(failed.into()));
        let rbac = "deployments.apps is forbidden: User \"x\" cannot create resource";
        assert_eq!(verdict(&answer(403, &[], Some(rbac))), Verdict::Refused(rbac.into()));
        assert_eq!(verdict(&answer(404, &[], None)), Verdict::Refused("HTTP 404".into()));
    }

    #[test]
    fn warning_headers_are_unquoted() {
        assert_eq!(warning_text(r#"299 - "[a] say \"hi\" \\ ok""#), r#"[a] say "hi" \ ok"#);
        assert_eq!(warning_text("no quotes"), "no quotes");
    }

    /// The dry run draws both rules' warnings from the default configuration, with no view: what a
    /// replica answers the moment it is up.
    #[test]
    fn the_probe_fires_two_rules_that_warn_by_default() {
        use crate::core::config::Config;
        use crate::core::finding::Decision;
        use crate::core::testing;
        let yaml = serde_saphyr::to_string(&probe_deployment("shop")).expect("yaml");
        let decided = testing::decided(&yaml, "", false, &Config::default());
        let mut fired = testing::actions(&decided);
        fired.sort();
        assert_eq!(
            fired,
            [("replicas-colocated", Decision::Warn), ("termination-grace-zero", Decision::Warn)],
            "{decided:?}"
        );
    }
}
