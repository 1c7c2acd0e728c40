//! README.md and the pages of docs/ cannot drift from the binary or from each other:
//!
//! - every command they show (in indented and shell code blocks) is either run here, as written,
//!   or names the test (or CI step) that runs it and a line of that test's source that does; a
//!   command in neither list fails this test. docs/rules/ is `ha-guard explain`'s text and shows
//!   no commands to run;
//! - the README is a front door: the newcomer's path (check your files, install observe-only, read
//!   the reports, enforce) comes within its first 120 lines, its table of contents reaches every
//!   section, and "the two commands" are there;
//! - every link in README.md and docs/*.md stays in the repository and resolves (file and anchor).
//!
//! Run here: the `check`, `rules`, `explain` and `certs` commands (`cargo run [--release] --` is
//! the binary cargo built), and the `serve` + `curl` session of docs/webhook.md (on free loopback
//! ports instead of 8443/8080, in a scratch folder holding the fixtures; `deploy/`, the reader's
//! own manifests in the README, is the examples there).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_ha-guard");

/// Commands run elsewhere: (the start of the command, the file that runs it, a line of that file
/// that shows it does).
const ELSEWHERE: &[(&str, &str, &str)] = &[
    (
        "kubectl get validatingadmissionpolicies,validatingadmissionpolicybindings,mutatingadmissionpolicies,mutatingadmissionpolicybindings -l app.kubernetes.io/managed-by=ha-guard",
        "tests/e2e_admission_policies.rs",
        "/// kubectl get validatingadmissionpolicies,validatingadmissionpolicybindings,mutatingadmissionpolicies,mutatingadmissionpolicybindings",
    ),
    ("cargo test", ".ci/run", "\ncargo test\n"),
    (
        "ha-guard probe-webhook --namespace default\n",
        "tests/e2e_observe.rs",
        ".args([\"probe-webhook\", \"--namespace\", \"default\", \"--kubeconfig\"])",
    ),
    (
        "ha-guard audit --drain-each --fail-on-outcome hangs,refused,leaves-pending\n",
        "tests/e2e_drain_each.rs",
        "// ha-guard audit --drain-each --fail-on-outcome hangs,refused,leaves-pending",
    ),
    // serve as the README's first command does: default TLS paths in a folder without certs/, with and
    // without a kubeconfig.
    (
        "cargo run --release -- serve\n",
        "tests/it/cli_certs.rs",
        "fn serve_with_a_kubeconfig_and_no_certificates_makes_development_ones",
    ),
    (
        "helm template my-chart | ha-guard check -f -\n",
        "tests/it/cli_ci.rs",
        "fn helm_template_streams_name_their_templates_in_every_format",
    ),
    (
        "helm template my-chart | cargo run -- check -f - --format sarif",
        "tests/it/cli_ci.rs",
        "fn helm_template_streams_name_their_templates_in_every_format",
    ),
    // The README's observe-only install and its switch to enforce: the chart rendered with these
    // values, served on a real kube-apiserver (the helm commands themselves: tests/e2e_install.rs).
    (
        "helm install ha-guard charts/ha-guard --namespace ha-guard --create-namespace --set mode=observe\n",
        "tests/e2e_observe.rs",
        "chart_config(&[\"--set\", \"mode=observe\"])",
    ),
    (
        "helm upgrade ha-guard charts/ha-guard --namespace ha-guard --reuse-values --set mode=enforce\n",
        "tests/e2e_observe.rs",
        "chart_config(&[\"--set\", \"mode=enforce\"])",
    ),
    ("helm install ha-guard charts/ha-guard", "tests/e2e_install.rs", "\"install\""),
    ("helm upgrade ha-guard charts/ha-guard", "tests/e2e_install.rs", "\"upgrade\""),
    ("helm uninstall ha-guard", "tests/e2e_install.rs", "\"uninstall\""),
    ("kubectl apply --server-side -f manifests/ha-guard.yaml", "tests/e2e_install.rs", "manifests/ha-guard.yaml"),
    (
        "kubectl apply --server-side -f manifests/cert-manager/ha-guard.yaml",
        "tests/it/chart.rs",
        "cert-manager/ha-guard.yaml",
    ),
    ("scripts/image.sh", "tests/image/verify.sh", "scripts/image.sh"),
    (
        "kubectl -n ha-guard rollout status deployment/ha-guard",
        "tests/e2e_install.rs",
        "\"rollout\", \"status\", \"deployment/ha-guard\"",
    ),
    (
        "kubectl delete validatingwebhookconfiguration,mutatingwebhookconfiguration ha-guard",
        "tests/e2e_install.rs",
        "\"validatingwebhookconfiguration,mutatingwebhookconfiguration\", NAME",
    ),
    ("kubectl delete -f manifests/ha-guard.yaml --ignore-not-found", "tests/e2e_install.rs", "\"--ignore-not-found\""),
    ("kubectl create namespace ha-guard", "tests/e2e_install.rs", "[\"create\", \"namespace\", NS]"),
    (
        "kubectl -n ha-guard create secret tls my-tls",
        "tests/e2e_install.rs",
        "\"create\", \"secret\", \"tls\", \"my-tls\"",
    ),
    ("kubectl label ns", "tests/e2e_install.rs", "[\"label\", \"ns\""),
    // GitOps: applies, dry-runs and diffs under Flux's and Argo CD's field managers.
    (
        "kubectl apply --server-side --force-conflicts --field-manager=",
        "tests/e2e_gitops.rs",
        "\"--force-conflicts\".into(), format!(\"--field-manager={m}\")",
    ),
    (
        "kubectl diff --server-side --force-conflicts --field-manager=",
        "tests/e2e_gitops.rs",
        "let mut args: Vec<String> = vec![\"diff\".into()];",
    ),
    // Policy for platform teams: the preview of a configuration change.
    (
        "kubectl -n ha-guard get configmap ha-guard-config -o jsonpath=",
        "tests/e2e_policy.rs",
        "const README_CONFIGMAP: &str",
    ),
    (
        "ha-guard rules --argocd-ignore-differences --config ha-guard.yaml",
        "tests/it/argocd.rs",
        "fn the_argocd_block_for_a_configuration_holds_only_its_mutations",
    ),
    ("ha-guard check --config new.yaml --baseline current.yaml", "tests/it/policy.rs", "\"--baseline\""),
    ("ha-guard audit --config new.yaml --baseline current.yaml", "tests/e2e_policy.rs", "\"--baseline\""),
    // README's Day 2: every audit command of that section, read from README.md and run as written
    // against the e2e cluster.
    ("ha-guard audit", "tests/e2e_audit.rs", "fn readme_day_2("),
    ("kubectl ha-guard audit", "tests/e2e_audit.rs", "fn readme_day_2("),
    // Reading the reports of the background audit (README, docs/operations.md).
    ("kubectl get policyreports -A", "tests/e2e_background_audit.rs", "[\"get\", \"policyreports\", \"-A\"]"),
    (
        "kubectl -n shop get policyreport ha-guard -o yaml",
        "tests/e2e_background_audit.rs",
        "[\"-n\", \"shop\", \"get\", \"policyreport\", \"ha-guard\", \"-o\", \"yaml\"]",
    ),
    (
        "kubectl get clusterpolicyreport ha-guard -o yaml",
        "tests/e2e_background_audit.rs",
        "[\"get\", \"clusterpolicyreport\", \"ha-guard\", \"-o\", \"yaml\"]",
    ),
    (
        "kubectl get reports.openreports.io -A",
        "tests/e2e_background_audit.rs",
        "[\"get\", \"reports.openreports.io\", \"-A\"]",
    ),
];

/// Commands that cannot run on this machine, and why (each also appears in the closing notes).
const NOT_RUN: &[(&str, &str)] = &[
    ("docker build", "no container daemon here; scripts/image.sh builds the same image without one"),
    ("--build-arg GIT_COMMIT", "the second line of the docker build command above"),
    ("docker load", "no container daemon here; tests/image/verify.sh reads the archive with umoci and skopeo"),
    ("podman load", "no podman here; tests/image/verify.sh reads the archive with umoci and skopeo"),
    ("kind load image-archive", "no kind cluster here; tests/image/verify.sh reads the archive with umoci and skopeo"),
    (
        "skopeo copy --all oci-archive:",
        "no registry here; tests/image/verify.sh copies each platform out of the archive with skopeo",
    ),
];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every page of docs/ (not docs/rules/: `ha-guard explain`'s pages), by path from
/// the repository's root, with their text.
fn documents() -> Vec<(String, String)> {
    let mut paths = vec!["README.md".to_string()];
    let mut pages: Vec<String> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("docs/ entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    pages.sort();
    paths.extend(pages);
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(repo().join(&p)).unwrap_or_else(|e| panic!("{p}: {e}"));
            (p, text)
        })
        .collect()
}

/// The commands a page shows: lines of indented code blocks (only the `$ ` lines where a
/// block has them) and of ```sh / ```console blocks, `\`-continued lines joined.
fn commands(readme: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut block: Vec<&str> = Vec::new();
    let mut fence: Option<String> = None;
    let flush = |block: &mut Vec<&str>, out: &mut Vec<String>| {
        let dollar = block.iter().any(|l| l.trim_start().starts_with("$ "));
        let mut joined = String::new();
        for line in block.drain(..) {
            let t = line.trim();
            let t = if dollar {
                match t.strip_prefix("$ ") {
                    Some(c) => c,
                    None => continue,
                }
            } else {
                t
            };
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            joined.push_str(t.trim_end_matches('\\').trim_end());
            if t.ends_with('\\') {
                joined.push(' ');
            } else {
                out.push(std::mem::take(&mut joined));
            }
        }
    };
    for line in readme.lines() {
        if let Some(info) = line.strip_prefix("```") {
            flush(&mut block, &mut out);
            fence = if fence.is_some() { None } else { Some(info.trim().to_string()) };
            continue;
        }
        match &fence {
            Some(lang) if matches!(lang.as_str(), "sh" | "bash" | "console" | "shell") => block.push(line),
            Some(_) => {}
            None if line.starts_with("    ") => block.push(line),
            None => flush(&mut block, &mut out),
        }
    }
    flush(&mut block, &mut out);
    out
}

/// The command's words, for the simple commands run here (no pipes, no quoting beyond '...').
fn words(command: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in command.chars() {
        match c {
            '\'' => quoted = !quoted,
            ' ' if !quoted => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The arguments after the binary, for `cargo run [--release] -- ...` and `ha-guard ...`.
fn binary_args(command: &str) -> Option<Vec<String>> {
    let rest = command
        .strip_prefix("cargo run --release -- ")
        .or_else(|| command.strip_prefix("cargo run -- "))
        .or_else(|| command.strip_prefix("ha-guard "))?;
    Some(words(rest))
}

fn scratch() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for sub in ["examples", "tests", "docs", "charts"] {
        std::os::unix::fs::symlink(repo().join(sub), dir.path().join(sub)).unwrap();
    }
    // The README's `ha-guard check deploy/`: the folder of the reader's own manifests.
    std::os::unix::fs::symlink(repo().join("examples"), dir.path().join("deploy")).unwrap();
    dir
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Runs one `ha-guard` command of the docs in a scratch folder holding the examples and
/// fixtures: it must be usable (exit 0 or 1, never 2) and say something.
fn run_binary(command: &str, args: &[String]) {
    let dir = scratch();
    let out = Command::new(BIN).args(args).current_dir(dir.path()).stdin(Stdio::null()).output().unwrap();
    let code = out.status.code().unwrap_or(-1);
    let all = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(code == 0 || code == 1, "the docs' `{command}` exits {code}:\n{all}");
    let written = args.iter().position(|a| a == "--output").map(|i| dir.path().join(&args[i + 1]));
    let said = !all.trim().is_empty() || written.as_ref().is_some_and(|p| p.metadata().is_ok_and(|m| m.len() > 0));
    assert!(said, "the docs' `{command}` printed nothing");
}

/// docs/webhook.md's session: serve the fixtures' view, then each `curl` as written (but on the
/// port serve listens on), in a scratch folder (certs/ is made there, not in the repository).
fn run_webhook_session(serve: &str, curls: &[String]) {
    let dir = scratch();
    let (webhook, probe) = (free_port(), free_port());
    let mut args = binary_args(serve).unwrap();
    args.extend([
        "--listen".into(),
        format!("127.0.0.1:{webhook}"),
        "--probe-listen".into(),
        format!("127.0.0.1:{probe}"),
    ]);
    args.extend(["--cluster".into(), "none".into()].into_iter().filter(|_| !serve.contains("--cluster")));
    let log = dir.path().join("serve.log");
    let mut child = Command::new(BIN)
        .args(&args)
        .current_dir(dir.path())
        .env_remove("KUBECONFIG")
        .env("HOME", dir.path())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(dir.path().join("serve.err")).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Command::new("curl")
        .args(["-sf", &format!("http://127.0.0.1:{probe}/readyz")])
        .output()
        .is_ok_and(|o| !o.status.success())
    {
        assert!(
            Instant::now() < deadline,
            "serve did not become ready: {}",
            std::fs::read_to_string(dir.path().join("serve.err")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for curl in curls {
        let command = curl.replace("localhost:8443", &format!("localhost:{webhook}"));
        let out = Command::new("sh").args(["-c", &command]).current_dir(dir.path()).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "docs/webhook.md's `{curl}` failed: {}{}",
            stdout,
            String::from_utf8_lossy(&out.stderr)
        );
        if curl.contains("/validate") {
            assert!(stdout.contains("\"allowed\":false") && stdout.contains("[spread-selector-missing]"), "{stdout}");
        } else {
            assert!(stdout.contains("\"op\":\"add\"") && stdout.contains("labelSelector"), "{stdout}");
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn every_command_the_docs_show_is_run() {
    let mut all = Vec::new();
    for (path, text) in documents() {
        all.extend(commands(&text).into_iter().map(|c| (path.clone(), c)));
    }
    assert!(all.len() >= 15, "the documents' commands were found: {all:#?}");
    let mut curls = Vec::new();
    let mut serve_with_view = None;
    let mut unaccounted = Vec::new();
    for (path, command) in &all {
        if NOT_RUN.iter().any(|(start, _)| command.starts_with(start)) {
            continue;
        }
        if let Some((_, file, marker)) =
            ELSEWHERE.iter().find(|(start, _, _)| (command.clone() + "\n").starts_with(start))
        {
            let source = std::fs::read_to_string(repo().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
            assert!(
                source.contains(marker),
                "{path}'s `{command}` is said to be run by {file}, which has no {marker:?}"
            );
            continue;
        }
        if command.starts_with("curl ") {
            curls.push(command.clone());
            continue;
        }
        match binary_args(command) {
            Some(args) if args.first().is_some_and(|a| a == "serve") => {
                assert!(serve_with_view.is_none(), "one serve session: {path}'s {command}");
                serve_with_view = Some(command.clone());
            }
            Some(args) if !command.contains(['|', '>', '&', '$']) => run_binary(command, &args),
            _ => unaccounted.push(format!("{path}: {command}")),
        }
    }
    assert!(
        unaccounted.is_empty(),
        "commands no test runs (run them here, or list the test in ELSEWHERE):\n{}",
        unaccounted.join("\n")
    );
    let serve = serve_with_view.expect("the docs show serve with the fixtures' view");
    assert!(curls.len() >= 2, "{curls:?}");
    run_webhook_session(&serve, &curls);
}

/// The reader above finds what it must: commands of each block kind, no output lines, no YAML.
#[test]
fn the_command_reader_reads_blocks_as_the_readme_writes_them() {
    let md = "text\n\n    cargo run -- check a\n    cargo run -- check b\n\n```yaml\nkey: value\n```\n\n    $ curl x\n    {\"output\": 1}\n\n```sh\ndocker build \\\n  --x y .\n```\n";
    assert_eq!(commands(md), ["cargo run -- check a", "cargo run -- check b", "curl x", "docker build --x y ."]);
    assert_eq!(
        binary_args("cargo run --release -- check -f 'a b'"),
        Some(vec!["check".into(), "-f".into(), "a b".into()])
    );
    let _ = PathBuf::new();
}

// --- the front door -----------------------------------------------------------------------------

/// The README's first lines a newcomer reads before anything else.
const FRONT_DOOR_LINES: usize = 120;

/// A step of the newcomer's path: what it does, and whether a command is it.
type Step = (&'static str, fn(&str) -> bool);

/// The newcomer's path comes first: checking their own files, installing observe-only, reading the
/// reports, enforcing namespace by namespace, each as a command of its own, in that order, within
/// the README's first 120 lines.
#[test]
fn the_newcomers_path_fits_in_the_first_120_lines() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let front: String = readme.lines().take(FRONT_DOOR_LINES).map(|l| format!("{l}\n")).collect();
    let shown = commands(&front);
    let steps: [Step; 5] = [
        ("check your own files", |c| c.starts_with("ha-guard check ") && !c.contains(" -f -")),
        ("install observe-only", |c| c.starts_with("helm install ha-guard ") && c.contains("--set mode=observe")),
        ("read the reports", |c| c.starts_with("kubectl get policyreports")),
        ("switch to enforce", |c| c.starts_with("helm upgrade ha-guard ") && c.contains("--set mode=enforce")),
        ("enforce namespace by namespace", |c| c.starts_with("kubectl label ns ") && c.ends_with("ha-guard.io/mode-")),
    ];
    let mut from = 0;
    for (step, is) in steps {
        let at = shown[from..].iter().position(|c| is(c)).unwrap_or_else(|| {
            panic!("the README's first {FRONT_DOOR_LINES} lines show no command to {step} after {:?}", &shown[..from])
        });
        from += at + 1;
    }
}

/// The README's sample of `ha-guard check` is what it prints: each line of the ```text block after
/// the command (but `...`, where findings are left out) is a line of its output.
#[test]
fn the_readmes_check_sample_is_what_check_prints() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let command = "    ha-guard check deploy/\n";
    let after = &readme[readme.find(command).expect("the README shows `ha-guard check deploy/`") + command.len()..];
    let block = &after[after.find("```text\n").expect("a sample after it") + 8..];
    let sample = &block[..block.find("```").expect("the sample's end")];
    let dir = scratch();
    let out = Command::new(BIN).args(["check", "deploy/"]).current_dir(dir.path()).output().unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = printed.lines().collect();
    for line in sample.lines().filter(|l| *l != "...") {
        assert!(lines.contains(&line), "the README's sample line {line:?} is not printed:\n{printed}");
    }
    assert!(sample.lines().count() >= 5, "{sample}");
}

/// The README's "two commands": on a fresh machine one runs the webhook, one runs every test.
#[test]
fn the_readme_shows_the_two_commands() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let section = section(&readme, "The two commands").expect("the README has a \"## The two commands\" section");
    assert_eq!(commands(section), ["cargo run --release -- serve", "cargo test"]);
}

/// The text of the `## ` section titled `title`, up to the next `## ` heading.
fn section<'a>(text: &'a str, title: &str) -> Option<&'a str> {
    let start = text.find(&format!("\n## {title}\n"))? + 1;
    let body = &text[start..];
    let end = body[3..].find("\n## ").map_or(body.len(), |i| i + 3);
    Some(&body[..end])
}

/// The README's table of contents comes before its first section, links only to the README's own
/// headings, and reaches every `## ` section.
#[test]
fn the_readmes_contents_reach_every_section() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let contents = section(&readme, "Contents").expect("the README has a \"## Contents\" section");
    let first_section = readme.find("\n## ").unwrap();
    assert_eq!(readme[first_section + 1..].find("## Contents"), Some(0), "Contents is the README's first section");
    let anchors = anchors(&readme);
    let linked: Vec<String> = links(contents).into_iter().map(|l| l.target).collect();
    assert!(linked.len() >= 8, "{linked:?}");
    for target in &linked {
        let anchor = target.strip_prefix('#').unwrap_or_else(|| panic!("Contents links within the README: {target}"));
        assert!(anchors.contains(&anchor.to_string()), "Contents' #{anchor} is no heading of the README: {anchors:?}");
    }
    for heading in readme.lines().filter_map(|l| l.strip_prefix("## ")).filter(|h| *h != "Contents") {
        let anchor = format!("#{}", slug(heading));
        assert!(linked.contains(&anchor), "the README's section \"{heading}\" is missing from Contents ({anchor})");
    }
}

// --- links --------------------------------------------------------------------------------------

/// Every link of README.md and docs/*.md stays in the repository (no web address, no path that
/// climbs out of it) and resolves: the file or folder exists, and an anchor names a heading of
/// the page it points to. Addresses in prose, which GitHub would turn into links, count as links.
#[test]
fn every_link_stays_in_the_repository_and_resolves() {
    let root = repo().canonicalize().unwrap();
    let mut broken = Vec::new();
    for (path, text) in documents() {
        let prose = prose(&text);
        // Addresses in prose (a link's target or an autolink is the link check's below).
        for scheme in ["http://", "https://", "www."] {
            for (i, _) in prose.match_indices(scheme) {
                let before = &prose[..i];
                if ["](", "]: ", "<", "://"].iter().any(|b| before.ends_with(b)) {
                    continue;
                }
                let end = prose[i..].find(|c: char| c.is_whitespace() || c == ')').map_or(prose.len(), |e| i + e);
                broken.push(format!("{path}: {} in the text leaves the repository", &prose[i..end]));
            }
        }
        for link in links(&text) {
            if let Err(why) = resolve(&root, &path, &text, &link.target) {
                broken.push(format!("{path}: [{}]({}): {why}", link.text, link.target));
            }
        }
    }
    assert!(broken.is_empty(), "links that leave the repository or lead nowhere:\n{}", broken.join("\n"));
}

/// Where `target`, linked from the page `from` (its text `text`), leads, or why it leads nowhere.
fn resolve(root: &Path, from: &str, text: &str, target: &str) -> Result<(), String> {
    if target.contains("://") || target.starts_with("mailto:") || target.starts_with("//") {
        return Err("leaves the repository: write the facts here instead".into());
    }
    if target.starts_with('/') {
        return Err("an absolute path: link relative to the page".into());
    }
    let (file, anchor) = target.split_once('#').map_or((target, None), |(f, a)| (f, Some(a)));
    let page = if file.is_empty() {
        text.to_string()
    } else {
        let dir = Path::new(from).parent().unwrap_or(Path::new(""));
        let resolved = root
            .join(dir)
            .join(file)
            .canonicalize()
            .map_err(|_| format!("{} does not exist", dir.join(file).display()))?;
        if !resolved.starts_with(root) {
            return Err("outside the repository".into());
        }
        match anchor {
            Some(_) if resolved.extension().is_some_and(|e| e == "md") => std::fs::read_to_string(&resolved).unwrap(),
            Some(_) => return Err("an anchor into a file that is not Markdown".into()),
            None => return Ok(()),
        }
    };
    match anchor {
        Some(a) if !anchors(&page).contains(&a.to_string()) => Err(format!("no heading has the anchor #{a}")),
        _ => Ok(()),
    }
}

/// GitHub's anchor of a heading: lower case, Markdown's backticks and punctuation dropped, spaces
/// made hyphens (`## Day 2: the cluster (`audit`)` is `#day-2-the-cluster-audit`).
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's headings (outside code), a repeated one numbered as GitHub does.
fn anchors(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in prose_lines(text) {
        let Some(heading) = line.strip_prefix('#').map(|h| h.trim_start_matches('#')) else { continue };
        if !heading.starts_with(' ') {
            continue;
        }
        let base = slug(heading);
        let n = out
            .iter()
            .filter(|a| **a == base || a.strip_prefix(&format!("{base}-")).is_some_and(|r| r.parse::<u32>().is_ok()))
            .count();
        out.push(if n == 0 { base } else { format!("{base}-{n}") });
    }
    out
}

/// The lines of a page that are not code: fenced blocks and indented blocks blanked out.
fn prose_lines(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") || line.starts_with("~~~") {
            fenced = !fenced;
            out.push("");
        } else if fenced || line.starts_with("    ") {
            out.push("");
        } else {
            out.push(line);
        }
    }
    out
}

/// A page's prose with its code left out: blocks (above) and `code spans`, also across lines.
fn prose(text: &str) -> String {
    let joined = prose_lines(text).join("\n");
    let mut out = String::with_capacity(joined.len());
    let mut in_code = false;
    for c in joined.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

struct Link {
    text: String,
    target: String,
}

/// A page's Markdown links outside code: `[text](target)` and `![alt](target)` (a title after
/// the target dropped), `[text]: target` definitions and `<scheme://...>` autolinks.
fn links(text: &str) -> Vec<Link> {
    let prose = prose(text);
    let mut out = Vec::new();
    for line in prose.lines() {
        if let Some(rest) = line.trim_start().strip_prefix('[')
            && let Some((label, target)) = rest.split_once("]: ")
        {
            out.push(Link { text: label.into(), target: target.trim().into() });
        }
    }
    let mut rest = prose.as_str();
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let Some(close) = after.find(']') else { break };
        let label = &after[..close];
        let tail = &after[close + 1..];
        if let Some(inner) = tail.strip_prefix('(')
            && let Some(end) = inner.find(')')
        {
            let target = inner[..end].split_whitespace().next().unwrap_or_default();
            out.push(Link { text: label.replace('\n', " "), target: target.into() });
            rest = &inner[end + 1..];
        } else {
            rest = after;
        }
    }
    let mut rest = prose.as_str();
    while let Some(open) = rest.find('<') {
        let after = &rest[open + 1..];
        let end = after.find('>').unwrap_or(after.len());
        // An autolink holds no whitespace: `p < 0.05 ... >` is prose.
        if after[..end].contains("://") && !after[..end].contains(char::is_whitespace) {
            out.push(Link { text: String::new(), target: after[..end].into() });
        }
        rest = &after[end.min(after.len())..];
    }
    out
}

/// The readers of headings and links read them as GitHub renders them.
#[test]
fn the_link_reader_reads_links_as_github_renders_them() {
    assert_eq!(slug("Day 2: the cluster as it is (`ha-guard audit`)"), "day-2-the-cluster-as-it-is-ha-guard-audit");
    assert_eq!(slug("How a finding's action is decided"), "how-a-findings-action-is-decided");
    assert_eq!(slug("GitOps: Argo CD, Flux and Helm"), "gitops-argo-cd-flux-and-helm");
    assert_eq!(anchors("# A\n\n## B\n\n```sh\n# not a heading\n```\n## B\n#nope\n"), ["a", "b", "b-1"]);
    let md = "See [the chart](charts/x.md#values) and ![logo](img.png \"title\").\n\
              `[not](a-link)` and\n\n    [indented](code)\n\n[ref]: https://example.com\n<https://example.com/x>, p < 0.05 (a://b >)\n";
    let found: Vec<(String, String)> = links(md).into_iter().map(|l| (l.text, l.target)).collect();
    assert_eq!(
        found,
        [
            ("ref".to_string(), "https://example.com".to_string()),
            ("the chart".into(), "charts/x.md#values".into()),
            ("logo".into(), "img.png".into()),
            (String::new(), "https://example.com/x".into()),
        ]
    );
    let root = repo().canonicalize().unwrap();
    assert!(resolve(&root, "docs/x.md", "", "../README.md#the-two-commands").is_ok());
    assert!(resolve(&root, "docs/x.md", "", "../README.md#no-such-heading").is_err());
    assert!(resolve(&root, "README.md", "", "../shared/DESIGN.md").is_err());
    assert!(resolve(&root, "README.md", "", "https://example.com").is_err());
    assert!(resolve(&root, "README.md", "## Here\n", "#here").is_ok());
}
