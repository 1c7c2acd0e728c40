//! The shape of `src/`, as `src/lib.rs` states it: modules in layers, each importing only the
//! layers before it, no circle between files, and a core that does no I/O.
//!
//! The imports are read from the source text: every `use` statement (braces expanded) and every
//! `crate::…`, `super::…` and `self::…` path in the code, resolved to the deepest module file they
//! name. Test code (`#[cfg(test)]` modules, files under a `tests/` folder, `core::testing`) may
//! reach anywhere and is left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Production modules in layer order: a module may import its own unit and units of a lower
/// rank only. Units sharing a rank are independent of each other.
const LAYERS: &[(&str, u32)] = &[
    ("build_info", 1),
    ("core::model", 10),
    ("core::cel", 15),
    ("core::catalogue", 20),
    ("core::config", 21),
    ("core::finding", 21),
    ("core::view", 30),
    ("core::rules", 40),
    ("core::mutations", 50),
    ("core::registry", 60),
    ("core::policies", 65),
    ("core::decide", 70),
    ("core::judge", 80),
    ("core::causes", 85),
    ("manifest", 100),
    ("config_file", 110),
    ("live", 120),
    ("check", 120),
    ("server", 120),
    // The audit prints with check's output and reads what live reads.
    ("audit", 125),
    ("cli", 130),
];

/// What the core may not name: I/O, the clock, the environment, threads, the async runtime and
/// the cluster client.
const NOT_IN_CORE: &[&str] = &[
    "std::fs",
    "std::io",
    "std::net",
    "std::env",
    "std::process",
    "std::thread",
    "SystemTime",
    "Instant::now",
    "tokio",
    "kube::",
    "axum",
    "hyper",
];

struct Module {
    /// `core::rules::pdb`, or `` for the crate root.
    path: String,
    file: PathBuf,
    /// The production source: comments and test modules removed.
    code: String,
    /// Names of the child modules it declares.
    children: BTreeSet<String>,
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            // Test files included with #[path] (rule families' tests, the core's tests).
            if path.file_name().is_some_and(|n| n == "tests") {
                continue;
            }
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `text` without comments and without `#[cfg(test)]` items (a `mod x { ... }` or `mod x;`).
fn production(text: &str) -> String {
    let without_comments: String = text
        .lines()
        .map(|l| match l.find("//") {
            // `//` inside a string (a URL) is rare in this code base; keep lines with a quote whole.
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = String::new();
    let mut rest = without_comments.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        // Skip the attributed item: up to its `;` or its matching `}`.
        let semi = after.find(';');
        let brace = after.find('{');
        let end = match (semi, brace) {
            (Some(s), Some(b)) if s < b => s + 1,
            (_, Some(b)) => {
                let mut depth = 0;
                let mut end = after.len();
                for (i, c) in after[b..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = b + i + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (Some(s), None) => s + 1,
            (None, None) => after.len(),
        };
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

fn modules() -> Vec<Module> {
    let root = src();
    let mut all = Vec::new();
    files(&root, &mut all);
    let mut out = Vec::new();
    for file in all {
        let rel = file.strip_prefix(&root).unwrap().with_extension("");
        let mut segments: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
        if segments.last().is_some_and(|s| s == "mod" || s == "lib") {
            segments.pop();
        }
        if segments == ["main"] || segments == ["core", "testing"] {
            continue;
        }
        let code = production(&std::fs::read_to_string(&file).unwrap());
        let children = code
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                let l = l.strip_prefix("pub ").unwrap_or(l);
                l.strip_prefix("mod ").and_then(|m| m.strip_suffix(';')).map(str::to_string)
            })
            .collect();
        out.push(Module { path: segments.join("::"), file, code, children });
    }
    out
}

/// Every path a `use` statement names, braces expanded: `a::{b, c::{d, e}}` → a::b, a::c::d, a::c::e.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else { return vec![tree.to_string()] };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(|p| expand(p).into_iter().map(move |s| format!("{prefix}{s}")))
        .collect()
}

/// The module paths `module` refers to, relative paths resolved, `crate::` dropped.
fn references(module: &Module) -> Vec<String> {
    let mut paths = Vec::new();
    let code = &module.code;
    // use statements (brace groups span lines)
    let mut rest = code.as_str();
    while let Some(at) = rest.find("use ") {
        let before = rest[..at].chars().last();
        let stmt_end = rest[at..].find(';').map(|e| at + e).unwrap_or(rest.len());
        if before.is_none_or(|c| c.is_whitespace() || c == '{' || c == '}' || c == ';') {
            let stmt = rest[at + 4..stmt_end].split(" as ").next().unwrap_or("");
            paths.extend(expand(&stmt.replace(char::is_whitespace, "")));
        }
        rest = &rest[stmt_end.min(rest.len())..];
        if rest.is_empty() {
            break;
        }
        rest = &rest[1.min(rest.len())..];
    }
    // paths in code
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(start) {
            let at = from + i;
            let ok = at == 0 || !code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':');
            let end = code[at..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .map(|e| at + e)
                .unwrap_or(code.len());
            // `crate::core::{a, b}` is a use statement's group, read above.
            if ok && !code[at..end].ends_with("::") {
                paths.push(code[at..end].to_string());
            }
            from = end.max(at + start.len());
        }
    }
    // a parent using its own children by name (`child::f()`, `pub use child::X`)
    for child in &module.children {
        if code.contains(&format!("{child}::")) {
            paths.push(format!("self::{child}"));
        }
    }
    let own: Vec<&str> = if module.path.is_empty() { Vec::new() } else { module.path.split("::").collect() };
    // A mod.rs/lib.rs is its own folder; `super` of a file module is its parent folder.
    let mut resolved = Vec::new();
    for p in paths {
        let mut segs: Vec<&str> = p.split("::").filter(|s| !s.is_empty()).collect();
        let mut base: Vec<&str> = match segs.first() {
            Some(&"crate") => {
                segs.remove(0);
                Vec::new()
            }
            Some(&"self") => {
                segs.remove(0);
                own.clone()
            }
            Some(&"super") => {
                let mut b = own.clone();
                while segs.first() == Some(&"super") {
                    segs.remove(0);
                    b.pop();
                }
                b
            }
            _ => continue,
        };
        base.extend(segs);
        resolved.push(base.join("::"));
    }
    resolved
}

/// The deepest known module `path` lies in.
fn resolve<'a>(path: &str, known: &'a BTreeMap<String, usize>) -> Option<&'a String> {
    let mut p = path.to_string();
    loop {
        if let Some((k, _)) = known.get_key_value(&p) {
            return Some(k);
        }
        match p.rfind("::") {
            Some(i) => p.truncate(i),
            None => return known.get_key_value("").map(|(k, _)| k),
        }
    }
}

fn unit(path: &str) -> Option<(&'static str, u32)> {
    LAYERS
        .iter()
        .copied()
        .filter(|(u, _)| path == *u || path.starts_with(&format!("{u}::")))
        .max_by_key(|(u, _)| u.len())
}

/// File-level import graph: module → modules it imports (never itself, never its own ancestors'
/// hub files `crate` and `core`, which only declare modules).
fn graph() -> (Vec<Module>, BTreeMap<String, BTreeSet<String>>) {
    let mods = modules();
    let known: BTreeMap<String, usize> = mods.iter().enumerate().map(|(i, m)| (m.path.clone(), i)).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for m in &mods {
        let targets = edges.entry(m.path.clone()).or_default();
        for r in references(m) {
            if let Some(t) = resolve(&r, &known)
                && *t != m.path
                && !t.is_empty()
            {
                targets.insert(t.clone());
            }
        }
    }
    (mods, edges)
}

#[test]
fn the_layers_are_written_at_the_top_of_lib_rs() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let core = std::fs::read_to_string(src().join("core/mod.rs")).unwrap();
    for (unit, _) in LAYERS {
        let name = unit.rsplit("::").next().unwrap();
        let doc = if unit.starts_with("core::") { &core } else { &lib };
        assert!(
            doc.contains(&format!("[`{name}`]")) || doc.contains(&format!("`{name}`")),
            "{unit} is not named in the layer list"
        );
    }
}

#[test]
fn every_module_is_in_a_layer() {
    let (mods, _) = graph();
    for m in &mods {
        if m.path.is_empty() || m.path == "core" {
            continue;
        }
        assert!(unit(&m.path).is_some(), "{} ({}) is in no layer of LAYERS", m.path, m.file.display());
    }
}

#[test]
fn no_import_runs_back_up_a_layer() {
    let (_, edges) = graph();
    let mut wrong = Vec::new();
    for (from, targets) in &edges {
        let Some((from_unit, from_rank)) = unit(from) else { continue };
        for to in targets {
            let Some((to_unit, to_rank)) = unit(to) else {
                wrong.push(format!("{from} imports {to}, which is in no layer"));
                continue;
            };
            if to_unit != from_unit && to_rank >= from_rank {
                wrong.push(format!("{from} ({from_unit}, {from_rank}) imports {to} ({to_unit}, {to_rank})"));
            }
        }
    }
    assert!(wrong.is_empty(), "imports against the layer order:\n{}", wrong.join("\n"));
}

#[test]
fn no_circle_between_files() {
    let (_, edges) = graph();
    // Depth-first search for a back edge; report the circle.
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(node.to_string(), 1);
        stack.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            match state.get(next.as_str()) {
                Some(1) => {
                    let at = stack.iter().position(|s| s == next).unwrap();
                    let mut circle = stack[at..].to_vec();
                    circle.push(next.clone());
                    return Some(circle);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(next, edges, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(node.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in edges.keys() {
        if !state.contains_key(node.as_str())
            && let Some(circle) = visit(node, &edges, &mut state, &mut Vec::new())
        {
            panic!("a circle of imports: {}", circle.join(" → "));
        }
    }
}

#[test]
fn the_core_does_no_io() {
    let (mods, _) = graph();
    let mut found = Vec::new();
    for m in mods.iter().filter(|m| m.path == "core" || m.path.starts_with("core::")) {
        for word in NOT_IN_CORE {
            if m.code.contains(word) {
                found.push(format!("{} names {word}", m.file.display()));
            }
        }
    }
    assert!(found.is_empty(), "the core must stay pure:\n{}", found.join("\n"));
}

/// The parser above finds what it must: a deliberate back edge and a deliberate circle are seen.
#[test]
fn the_import_reader_sees_imports() {
    let m = Module {
        path: "core::rules::pdb".into(),
        file: PathBuf::from("x.rs"),
        code: production(
            "use super::context::{Ctx, Emitter};\nuse crate::core::{model::{self, Kind}, view};\n\
             fn f() { crate::core::judge::judge(); }\n#[cfg(test)]\nmod tests { use crate::cli::run; }\n",
        ),
        children: BTreeSet::new(),
    };
    let refs = references(&m);
    for want in ["core::rules::context::Ctx", "core::model::Kind", "core::view", "core::judge::judge"] {
        assert!(refs.iter().any(|r| r == want), "{want} not found in {refs:?}");
    }
    assert!(!refs.iter().any(|r| r.starts_with("cli")), "test code is left out: {refs:?}");
    assert_eq!(unit("core::rules::pdb"), Some(("core::rules", 40)));
    assert_eq!(unit("core::judge"), Some(("core::judge", 80)));
}
