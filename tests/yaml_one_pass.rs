//! `check`'s one-pass YAML reader (`check::yaml`) against serde-saphyr: whatever it takes, it must
//! read exactly as serde-saphyr does (same value; serde-saphyr must accept it too), with the
//! skeleton `locate` builds. The corpus test does the same over `../shared/corpus`.

use std::path::{Path, PathBuf};

use ha_guard::check::{load, locate, yaml};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use serde_json::Value;

/// Holds the one-pass reader to serde-saphyr on `doc`; whether it took it.
fn agrees(doc: &str, what: &str) -> bool {
    let Some((value, skeleton)) = yaml::parse_plain(doc, 2) else { return false };
    match serde_saphyr::from_str::<Value>(doc) {
        Ok(reference) => assert_eq!(value, reference, "{what}: {doc:?}"),
        Err(e) => panic!("{what}: taken the one-pass way, but serde-saphyr refuses it ({e}): {doc:?}"),
    }
    assert_eq!(skeleton, locate::parse(doc, 2), "{what}: the skeleton of {doc:?}");
    true
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            yaml_files(&path, out);
        } else if matches!(path.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")) {
            out.push(path);
        }
    }
}

#[test]
fn the_repositorys_manifests_read_the_same_both_ways() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["examples", "manifests", "tests/fixtures", "tests/e2e"] {
        if root.join(dir).is_dir() {
            yaml_files(&root.join(dir), &mut files);
        }
    }
    let (mut taken, mut total) = (0, 0);
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for span in load::split_documents(&text) {
            total += 1;
            taken += usize::from(agrees(&text[span], &file.display().to_string()));
        }
    }
    assert!(total >= 20, "{total} documents in {} files", files.len());
    assert!(taken * 10 >= total * 8, "only {taken} of {total} documents were read the one-pass way");
}

/// Scalars as they are written: plain spellings of every kind serde-saphyr tells apart (nulls,
/// YAML 1.1 booleans, integers of every radix, floats, signs, text), quoted ones, and noise.
fn scalar() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "",
            "~",
            "null",
            "NULL",
            "Null",
            "nul",
            "yes",
            "No",
            "on",
            "OFF",
            "y",
            "n",
            "true",
            "False",
            "TRUE",
            "0",
            "00",
            "007",
            "-0",
            "+0",
            "1",
            "-1",
            "+1",
            "0x1F",
            "0X1f",
            "0o17",
            "0b101",
            "1_000",
            "1.5",
            "-1.5",
            ".5",
            "5.",
            "1e3",
            "1E-3",
            ".inf",
            "-.Inf",
            ".NaN",
            "inf",
            "nan",
            "-nan",
            "infinity",
            "12:30",
            "1:2:3",
            "2026-12-01",
            "500m",
            "128Mi",
            "10%",
            "--v=2",
            "-Xmx1g",
            "-",
            "--",
            "$(X)",
            "/p",
            "_a",
            "a b",
            "a:b",
            "a #b",
            "'q'",
            "\"q\"",
            "'yes'",
            "\"1\"",
            "\"\"",
            "|",
            ">",
            "!x",
            "&a",
            "*a",
            "<<",
            "? a",
            "[]",
            "{}",
            "[a, 1]",
            "{a: 1}",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775808",
            "-9223372036854775809",
        ])
        .prop_map(str::to_string),
        "[-+.0-9a-fA-FxXoObB_:eE%~]{1,6}",
        "[a-zA-Z0-9 ./:_$-]{1,8}",
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec!["a", "b", "name", "yes", "1", "\"q\"", "'s'", "<<", "null", "x y", "a.b/c"])
            .prop_map(str::to_string),
        "[a-z]{1,3}",
    ]
}

/// A small document: entries `key: value`, nested maps, block and flow sequences.
fn document() -> impl Strategy<Value = String> {
    let entry =
        (key(), scalar(), 0..5usize, prop::collection::vec(scalar(), 0..3)).prop_map(
            |(k, v, shape, items)| match shape {
                0 | 1 => format!("{k}: {v}\n"),
                2 => format!("{k}:\n  inner: {v}\n  {}: x\n", items.first().map_or("other", String::as_str)),
                3 => format!("{k}:\n{}", items.iter().map(|i| format!("- {i}\n")).collect::<String>()),
                _ => format!("{k}: [{}]\n", items.join(", ")),
            },
        );
    prop::collection::vec(entry, 0..6).prop_map(|entries| entries.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn generated_documents_read_the_same_both_ways(doc in document()) {
        agrees(&doc, "generated");
    }

    #[test]
    fn a_lone_plain_scalar_reads_the_same_both_ways(s in scalar()) {
        agrees(&format!("v: {s}\n"), "scalar");
        agrees(&format!("- {s}\n"), "scalar in a sequence");
        agrees(&format!("{{v: {s}}}"), "scalar in a flow map");
    }
}

/// The generators reach both ways: the property above is not vacuous.
#[test]
fn the_generated_documents_reach_both_ways() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut taken, mut left) = (0, 0);
    for _ in 0..2000 {
        let doc = document().new_tree(&mut runner).unwrap().current();
        if agrees(&doc, "generated") { taken += 1 } else { left += 1 }
    }
    assert!(taken > 200 && left > 200, "taken {taken}, left {left}");
}
