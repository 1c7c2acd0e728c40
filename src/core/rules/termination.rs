//! Pods that cannot shut down cleanly: `termination-grace-zero`, `prestop-exceeds-grace`.

use k8s_openapi::api::core::v1::{Container, LifecycleHandler};

use super::context::{Ctx, Emitter, pod_path};
use crate::core::catalogue::{CelRule, Rule, WORKLOADS};
use crate::core::model::defaults::TERMINATION_GRACE_SECONDS;
use crate::core::model::{ObjectRef, Subject};
use crate::declare_rule;

declare_rule!(pub TERMINATION_GRACE_ZERO, "termination-grace-zero", Warn, "terminationGracePeriodSeconds: 0 kills pods without draining them");
declare_rule!(pub PRESTOP_EXCEEDS_GRACE, "prestop-exceeds-grace", Deny, "a preStop sleep lasts at least the pod's termination grace period");

pub static RULES: &[&Rule] = &[&TERMINATION_GRACE_ZERO, &PRESTOP_EXCEEDS_GRACE];

/// `termination-grace-zero` in CEL: the whole rule.
pub static TERMINATION_GRACE_ZERO_CEL: CelRule = CelRule {
    rule: &TERMINATION_GRACE_ZERO,
    resources: WORKLOADS,
    findings: "o.spec.template.spec.?terminationGracePeriodSeconds.orValue(-1) == 0 ? [{'path': \
               'spec.template.spec.terminationGracePeriodSeconds', 'action': 'warn', 'what': variables.id + ' sets \
               terminationGracePeriodSeconds: 0: its pods are deleted at once on every eviction, rollout and drain, \
               preStop hooks are skipped and the process gets 2 s after SIGTERM, so in-flight requests are cut and \
               nothing is drained.', 'fix': 'remove the field (30 s by default) or set the time the process needs to \
               shut down cleanly.'}] : []",
    partial: None,
};

/// The pod's termination grace in CEL (unset = [`TERMINATION_GRACE_SECONDS`]).
macro_rules! cel_grace {
    () => {
        "o.spec.template.spec.?terminationGracePeriodSeconds.orValue(30)"
    };
}
/// [`prestop_sleep_seconds`] of container `c` in CEL, -1 for `None`: the `sleep` action, or the
/// largest `sleep N` among the words of its exec command (split at whitespace, `;` and `&`), each
/// duration as [`parse_duration`] reads it.
macro_rules! cel_sleep {
    () => {
        concat!(
            "(!has(c.lifecycle) || !has(c.lifecycle.preStop) ? -1 : has(c.lifecycle.preStop.sleep) ? \
             c.lifecycle.preStop.sleep.seconds : !has(c.lifecycle.preStop.exec) ? -1 : \
             [c.lifecycle.preStop.exec.?command.orValue([]).join(' ').replace('\\t', ' ').replace('\\n', ' ')\
             .replace('\\r', ' ').replace('\\v', ' ').replace('\\f', ' ').replace(';', ' ').replace('&', ' ')\
             .split(' ').filter(w, w != '')].map(ws, ws.transformList(j, w, j + 1 < size(ws) && (w == 'sleep' || \
             w.endsWith('/sleep')) && ",
            cel_duration_ok!(),
            ", ",
            cel_duration!(),
            ")).map(ns, size(ns) == 0 ? -1 : ns.max())[0])"
        )
    };
}
/// Whether the word after a `sleep` (`ws[j + 1]`) is a duration [`parse_duration`] reads.
macro_rules! cel_duration_ok {
    () => {
        "ws[j + 1].matches('^[\"\\']*([0-9]+[.]?[0-9]*|[.][0-9]+)[smh]?[\"\\']*$')"
    };
}
/// That duration in whole seconds, rounded down.
macro_rules! cel_duration {
    () => {
        "int(double(ws[j + 1].find('[0-9.]+')) * (ws[j + 1].find('[smh]') == 'm' ? 60.0 : ws[j + 1].find('[smh]') == \
         'h' ? 3600.0 : 1.0))"
    };
}
/// The findings of the containers of list `$list` (`containers` or `initContainers`), in CEL.
macro_rules! cel_prestop_findings {
    ($list:literal) => {
        concat!(
            "o.spec.template.spec.?",
            $list,
            ".orValue([]).transformList(i, c, [",
            cel_sleep!(),
            "].map(s, s > 0 && s >= ",
            cel_grace!(),
            " ? [{'path': 'spec.template.spec.",
            $list,
            "[' + string(i) + '].lifecycle.preStop', 'action': 'deny', 'what': 'container ' + c.name + ' of ' + \
             variables.id + ' sleeps ' + string(s) + \" s in its preStop hook, at least the pod's termination grace \
             period of \" + string(",
            cel_grace!(),
            ") + ' s: the kubelet sends SIGTERM only once the grace period has run out and kills the container 2 s \
             later, so the process never gets the time to shut down cleanly.', 'fix': 'set \
             terminationGracePeriodSeconds above ' + string(s) + ' plus the time the process needs after SIGTERM \
             (for example ' + string(s + 30) + '), or shorten the sleep.'}] : [])[0]).flatten()"
        )
    };
}

/// `prestop-exceeds-grace` in CEL: the whole rule (the `sleep` action and `sleep N` in an exec
/// command; a word split at a whitespace other than ASCII's is the webhook's alone).
pub static PRESTOP_EXCEEDS_GRACE_CEL: CelRule = CelRule {
    rule: &PRESTOP_EXCEEDS_GRACE,
    resources: WORKLOADS,
    findings: concat!(cel_prestop_findings!("containers"), " + ", cel_prestop_findings!("initContainers")),
    partial: None,
};

/// Seconds a preStop hook sleeps: the `sleep` action, or an exec of `sleep N` (also inside
/// `sh -c "...; sleep N"`). `None` when the hook does not plainly sleep.
pub fn prestop_sleep_seconds(handler: &LifecycleHandler) -> Option<i64> {
    if let Some(sleep) = &handler.sleep {
        return Some(sleep.seconds);
    }
    let command = handler.exec.as_ref()?.command.as_ref()?;
    let words: Vec<&str> = command
        .iter()
        .flat_map(|part| part.split(|c: char| c.is_whitespace() || c == ';' || c == '&'))
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .filter(|pair| pair[0] == "sleep" || pair[0].ends_with("/sleep"))
        .filter_map(|pair| parse_duration(pair[1]))
        .max()
}

/// `15`, `15s`, `2m` → seconds (whole seconds; `sleep` takes fractions too, which round down).
fn parse_duration(s: &str) -> Option<i64> {
    let s = s.trim_matches(|c| c == '"' || c == '\'');
    let (number, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit() && *c != '.') {
        Some((i, _)) => s.split_at(i),
        None => (s, ""),
    };
    let value: f64 = number.parse().ok()?;
    let factor = match unit {
        "" | "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return None,
    };
    Some((value * factor) as i64)
}

pub fn evaluate(ctx: &Ctx, out: &mut Emitter) {
    let Subject::Workload(w) = ctx.subject else { return };
    let Some(spec) = w.pod_spec() else { return };
    let grace = spec.termination_grace_period_seconds;
    if grace == Some(0) {
        out.emit(
            &TERMINATION_GRACE_ZERO,
            pod_path("terminationGracePeriodSeconds"),
            format!(
                "{} sets terminationGracePeriodSeconds: 0: its pods are deleted at once on every eviction, \
                 rollout and drain, preStop hooks are skipped and the process gets 2 s after SIGTERM, so \
                 in-flight requests are cut and nothing is drained.",
                w.id()
            ),
            "remove the field (30 s by default) or set the time the process needs to shut down cleanly.".to_string(),
        );
    }
    let grace = grace.unwrap_or(TERMINATION_GRACE_SECONDS);
    let containers = spec
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("containers[{i}]"), c))
        .chain(spec.init_containers.iter().flatten().enumerate().map(|(i, c)| (format!("initContainers[{i}]"), c)));
    for (at, c) in containers {
        check_container(w.id(), &at, c, grace, out);
    }
}

fn check_container(id: ObjectRef, at: &str, c: &Container, grace: i64, out: &mut Emitter) {
    let Some(pre_stop) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()) else { return };
    let Some(sleep) = prestop_sleep_seconds(pre_stop) else { return };
    if sleep > 0 && sleep >= grace {
        out.emit(
            &PRESTOP_EXCEEDS_GRACE,
            pod_path(&format!("{at}.lifecycle.preStop")),
            format!(
                "container {} of {id} sleeps {sleep} s in its preStop hook, at least the pod's termination grace \
                 period of {grace} s: the kubelet sends SIGTERM only once the grace period has run out and kills \
                 the container 2 s later, so the process never gets the time to shut down cleanly.",
                c.name
            ),
            format!(
                "set terminationGracePeriodSeconds above {sleep} plus the time the process needs after SIGTERM \
                 (for example {}), or shorten the sleep.",
                sleep + 30
            ),
        );
    }
}

#[cfg(test)]
mod sleep_forms {
    use super::*;
    use k8s_openapi::api::core::v1::{ExecAction, SleepAction};

    fn exec(cmd: &[&str]) -> LifecycleHandler {
        LifecycleHandler {
            exec: Some(ExecAction { command: Some(cmd.iter().map(|s| s.to_string()).collect()) }),
            ..Default::default()
        }
    }

    #[test]
    fn sleep_forms() {
        let sleep = LifecycleHandler { sleep: Some(SleepAction { seconds: 20 }), ..Default::default() };
        assert_eq!(prestop_sleep_seconds(&sleep), Some(20));
        assert_eq!(prestop_sleep_seconds(&exec(&["sleep", "15"])), Some(15));
        assert_eq!(prestop_sleep_seconds(&exec(&["/bin/sleep", "15s"])), Some(15));
        assert_eq!(prestop_sleep_seconds(&exec(&["/bin/sh", "-c", "sleep 40; nginx -s quit"])), Some(40));
        assert_eq!(prestop_sleep_seconds(&exec(&["sh", "-c", "sleep 1m && kill 1"])), Some(60));
        assert_eq!(prestop_sleep_seconds(&exec(&["/bin/drain.sh"])), None);
        assert_eq!(prestop_sleep_seconds(&exec(&["sleep", "infinity"])), None);
    }
}

#[cfg(test)]
#[path = "tests/termination.rs"]
mod tests;
