//! The examples of `docs/rules/<id>.md` (what `ha-guard explain <id>` prints) are what ha-guard
//! does: each page's `$ ha-guard check -f FILE` block is run on the page's own YAML and must read as
//! `check` prints it, word for word (the pages wrap long notes at 100 columns for terminals, so
//! whitespace is compared loosely); each "Passing:" manifest after it must draw no finding of the
//! page's rule. Pages whose example needs a cluster (the audit's and the drain's rules, admission
//! warnings) are listed with the e2e test that shows the same behaviour.
//!
//! After a deliberate change to the output, `HA_GUARD_UPDATE_RULE_PAGES=1 cargo test --test it
//! rule_pages` rewrites the blocks (wrapped as the pages wrap them); review the diff.

use std::path::Path;

use crate::cli::{Run, ha_guard};

/// Pages whose example is not `check` of the page's own YAML, and where the same behaviour runs.
const NOT_CHECK_EXAMPLES: &[(&str, &str)] = &[
    ("drain-blocked", "audit --drain on a cluster: tests/e2e_drains.rs"),
    ("drain-leaves-pending", "audit --drain on a cluster: tests/e2e_drains.rs"),
    ("drain-refused", "audit --drain on a cluster: tests/e2e_drains.rs"),
    ("drain-takes-all-replicas", "audit --drain on a cluster: tests/e2e_drains.rs"),
    ("pdb-disruptions-blocked", "the live PDB status, audit on a cluster: tests/e2e_audit.rs"),
    ("pod-on-cordoned-node", "live pods and nodes, audit on a cluster: tests/e2e_audit.rs"),
    ("replicas-share-node", "live pods and nodes, audit on a cluster: tests/e2e_audit.rs"),
    ("spread-pending", "live pods and nodes, audit on a cluster: tests/e2e_audit.rs"),
    ("pods-pending", "live pods, audit on a cluster: tests/e2e_judge.rs"),
    ("spread-unsatisfiable", "the live nodes, an admission warning: tests/e2e_webhook.rs"),
    ("spread-zone-missing", "the live nodes' zones, an admission warning: tests/e2e_webhook.rs"),
    ("inject-default-spread", "a mutation: its patch is in tests/it/cli_check.rs and the e2e mutation tests"),
    ("inject-match-label-keys", "a mutation: its patch is in tests/it/cli_check.rs and the e2e mutation tests"),
    ("inject-spread-selector", "a mutation: its patch is in tests/it/cli_check.rs and the e2e mutation tests"),
    (
        "inject-unhealthy-pod-eviction-policy",
        "a mutation: its patch is in tests/it/cli_check.rs and the e2e mutation tests",
    ),
];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One fenced block of a page's Example section, with the prose just before it.
struct Block {
    lang: String,
    text: String,
    prose_before: String,
    /// Line range of the block's body in the page (0-based, end exclusive).
    body: std::ops::Range<usize>,
}

fn example_blocks(page: &str) -> Vec<Block> {
    let lines: Vec<&str> = page.lines().collect();
    let Some(start) = lines.iter().position(|l| *l == "## Example") else { return Vec::new() };
    let end = lines[start + 1..].iter().position(|l| l.starts_with("## ")).map_or(lines.len(), |i| start + 1 + i);
    let mut blocks = Vec::new();
    let mut prose = String::new();
    let mut i = start + 1;
    while i < end {
        if let Some(lang) = lines[i].strip_prefix("```") {
            let close = (i + 1..end).find(|&j| lines[j] == "```").expect("a closed fence");
            blocks.push(Block {
                lang: lang.to_string(),
                text: lines[i + 1..close].iter().map(|l| format!("{l}\n")).collect(),
                prose_before: std::mem::take(&mut prose),
                body: i + 1..close,
            });
            i = close + 1;
        } else {
            prose.push_str(lines[i]);
            prose.push('\n');
            i += 1;
        }
    }
    blocks
}

fn words(text: &str) -> Vec<&str> {
    text.split_whitespace().collect()
}

/// Output as a page shows it: a note (`   = ...`, its indent following the line numbers' width)
/// longer than 100 columns continues on lines indented under its text.
fn wrap(output: &str) -> String {
    let mut out = String::new();
    for line in output.lines() {
        let indent = line.len() - line.trim_start_matches(' ').len();
        if line.chars().count() <= 100 || !line[indent..].starts_with("= ") {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let continuation = " ".repeat(indent + 2);
        let mut current = line[..indent].to_string();
        for word in line.split(' ').filter(|w| !w.is_empty()) {
            if current.trim().is_empty() || current.chars().count() + 1 + word.chars().count() <= 100 {
                if !current.trim().is_empty() {
                    current.push(' ');
                }
                current.push_str(word);
            } else {
                out.push_str(&current);
                out.push('\n');
                current = format!("{continuation}{word}");
            }
        }
        out.push_str(&current);
        out.push('\n');
    }
    out
}

fn check(dir: &Path, args: &[&str]) -> Run {
    ha_guard(args).dir(dir).env("NO_COLOR", "1").run()
}

/// The YAML blocks as one manifest, the way a reader would save them to one file.
fn manifest(blocks: &[&Block]) -> String {
    blocks.iter().map(|b| b.text.as_str()).collect::<Vec<_>>().join("---\n")
}

#[test]
fn every_rule_pages_check_example_is_what_check_prints() {
    let update = std::env::var_os("HA_GUARD_UPDATE_RULE_PAGES").is_some();
    let mut pages: Vec<_> = std::fs::read_dir(repo().join("docs/rules"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md") && !p.ends_with("README.md"))
        .collect();
    pages.sort();
    let mut failures = Vec::new();
    let mut ran = 0;
    let mut passing = 0;
    for path in &pages {
        let id = path.file_stem().unwrap().to_string_lossy().into_owned();
        let page = std::fs::read_to_string(path).unwrap();
        let blocks = example_blocks(&page);
        let runs: Vec<usize> = (0..blocks.len())
            .filter(|&i| blocks[i].lang == "text" && blocks[i].text.starts_with("$ ha-guard check"))
            .collect();
        let listed = NOT_CHECK_EXAMPLES.iter().any(|(p, _)| *p == id);
        assert!(
            runs.is_empty() == listed,
            "docs/rules/{id}.md: {} (every page either shows `$ ha-guard check -f FILE` of its own YAML, or is \
             listed in NOT_CHECK_EXAMPLES with where its behaviour is tested)",
            if listed { "is listed but has a check example" } else { "has no check example" }
        );
        let mut new_lines: Vec<String> = page.lines().map(str::to_string).collect();
        let mut replaced = Vec::new();
        let mut previous = 0;
        for &t in &runs {
            let dir = tempfile::tempdir().unwrap();
            let command = blocks[t].text.lines().next().unwrap().trim_start_matches("$ ");
            let args: Vec<&str> = command.split_whitespace().skip(1).collect();
            let file = args.iter().position(|a| *a == "-f").map(|i| args[i + 1]).expect("check -f FILE");
            let inputs: Vec<&Block> = blocks[previous..t].iter().filter(|b| b.lang == "yaml").collect();
            assert!(!inputs.is_empty(), "docs/rules/{id}.md: no YAML before `{command}`");
            std::fs::write(dir.path().join(file), manifest(&inputs)).unwrap();
            let r = check(dir.path(), &args);
            assert!(r.code == 0 || r.code == 1, "docs/rules/{id}.md: `{command}` exit {}: {}", r.code, r.stderr);
            assert!(
                r.stdout.contains(&format!("[{id}]:")),
                "docs/rules/{id}.md: `{command}` does not report {id}:\n{}",
                r.stdout
            );
            let shown = blocks[t].text.split_once('\n').map_or("", |(_, rest)| rest);
            if words(shown) != words(&r.stdout) {
                if update {
                    replaced.push((blocks[t].body.clone(), format!("$ {command}\n{}", wrap(&r.stdout))));
                } else {
                    failures.push(format!(
                        "docs/rules/{id}.md: `{command}` prints\n{}\nbut the page shows\n{shown}",
                        r.stdout
                    ));
                }
            }
            ran += 1;
            // "Passing:" manifests after this block (whole objects, not the fragments some pages
            // show): no finding of the page's rule.
            let next = runs.iter().find(|&&n| n > t).copied().unwrap_or(blocks.len());
            let whole = |b: &&Block| b.lang == "yaml" && b.text.lines().any(|l| l.starts_with("kind:"));
            for b in blocks[t + 1..next].iter().filter(whole).filter(|b| b.prose_before.contains("Passing")) {
                passing += 1;
                std::fs::write(dir.path().join(file), &b.text).unwrap();
                let r = check(dir.path(), &["check", "-f", file, "--fail-on", "never"]);
                assert_eq!(r.code, 0, "docs/rules/{id}.md: the passing example: {}", r.stderr);
                assert!(
                    !r.stdout.contains(&format!("[{id}]:")),
                    "docs/rules/{id}.md: the passing example draws {id}:\n{}",
                    r.stdout
                );
            }
            previous = t + 1;
        }
        if !replaced.is_empty() {
            for (range, text) in replaced.into_iter().rev() {
                new_lines.splice(range, text.lines().map(str::to_string));
            }
            std::fs::write(path, new_lines.join("\n") + "\n").unwrap();
            eprintln!("rewrote docs/rules/{id}.md");
        }
    }
    assert!(ran >= 20, "only {ran} check examples found: is the page layout still `## Example` with ```text blocks?");
    assert!(passing >= 15, "only {passing} passing examples found: are they still after \"Passing:\"?");
    assert!(
        failures.is_empty(),
        "{} examples differ from what check prints (HA_GUARD_UPDATE_RULE_PAGES=1 rewrites them):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn wrap_continues_a_long_note_under_its_text() {
    let long = format!("   = {}", ["word"; 30].join(" "));
    let wrapped = wrap(&format!("deny[x]: y\n{long}\n"));
    let lines: Vec<&str> = wrapped.lines().collect();
    assert_eq!(lines[0], "deny[x]: y");
    assert!(lines[1].starts_with("   = word") && lines[1].len() <= 100, "{}", lines[1]);
    assert!(lines[2].starts_with("     word"), "{}", lines[2]);
    assert_eq!(words(&wrapped), words(&format!("deny[x]: y\n{long}\n")));
    // One-digit line numbers make a narrower gutter: the continuation follows it.
    let narrow = wrap(&format!("{}\n", &long[1..]));
    assert!(narrow.lines().nth(1).unwrap().starts_with("    word"), "{narrow}");
    // Short notes and other lines stay as they are.
    assert_eq!(wrap("   = short\n  --> a.yaml:1:1\n"), "   = short\n  --> a.yaml:1:1\n");
}
