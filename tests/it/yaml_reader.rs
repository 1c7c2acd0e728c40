//! The block reader (`manifest::block`, the fast path of `manifest::yaml`) against serde-saphyr:
//! whatever it takes, it must read exactly as serde-saphyr does (same value; serde-saphyr must
//! accept it too), with the skeleton the parser's events give (`manifest::skeleton::parse`). The
//! corpus test does the same over `../shared/corpus`.

use std::path::{Path, PathBuf};

use ha_guard::manifest::skeleton::{self, Node};
use ha_guard::manifest::{block, load};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use serde_json::Value;

/// Holds a reader's reading of `doc` (`None`: not taken) to serde-saphyr's value and to the
/// skeleton `locate` builds; whether it took it.
fn holds(doc: &str, what: &str, reader: &str, read: Option<(Value, Node)>) -> bool {
    let Some((value, skeleton)) = read else { return false };
    match serde_saphyr::from_str::<Value>(doc) {
        Ok(reference) => assert_eq!(value, reference, "{what}, {reader}: {doc:?}"),
        Err(e) => panic!("{what}: taken by the {reader}, but serde-saphyr refuses it ({e}): {doc:?}"),
    }
    assert_eq!(Some(skeleton), skeleton::parse(doc, 2), "{what}: the {reader}'s skeleton of {doc:?}");
    true
}

/// Holds the block reader to serde-saphyr on `doc`; whether it took it.
fn block_agrees(doc: &str, what: &str) -> bool {
    holds(doc, what, "block reader", block::parse_block(doc, 2))
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
fn the_repositorys_manifests_read_the_same_either_way() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["examples", "manifests", "tests/fixtures", "tests/e2e"] {
        if root.join(dir).is_dir() {
            yaml_files(&root.join(dir), &mut files);
        }
    }
    let (mut block, mut total) = (0, 0);
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for span in load::split_documents(&text) {
            total += 1;
            block += usize::from(block_agrees(&text[span], &file.display().to_string()));
        }
    }
    assert!(total >= 20, "{total} documents in {} files", files.len());
    assert!(block * 10 >= total * 7, "only {block} of {total} documents were read by the block reader");
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
        "[a-zA-Z0-9 ./:_$-]{1,12}",
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

/// Values as block manifests write them: scalars, quoted text with escapes, one-line flow
/// collections, literal block scalars, and the spellings the block reader must leave alone.
fn block_value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => scalar(),
        1 => prop::sample::select(vec![
            "\"a\\\"b\"",
            "\"tab\\there\"",
            "\"nl\\n\"",
            "\"\\u0041\"",
            "\"x\\ y\"",
            "'it''s'",
            "''",
            "\"a: b\"",
            "\"# not a comment\"",
            "\"unclosed",
            "'also unclosed",
            "\"é ü\"",
            "naïve",
            "a # comment",
            "a #b",
            "a:b",
            "a: b",
            "x:",
            "[a, \"b\", 'c']",
            "[a,b]",
            "[a, ]",
            "[ ]",
            "[[a], {b: c}]",
            "{a: 1, \"b\": [x]}",
            "{a: 1, a: 2}",
            "{\"a\":1}",
            "{a}",
            "[a: b]",
            "[null, ~]",
            "[\"a\" # c]",
            "[a] # c",
            "{} # c",
            "[a] b",
            "\"q\" tail",
            "|",
            "|-",
            "|+",
            "|2",
            ">",
            ">-",
            "| # c",
            "&anchor x",
            "!tag x",
            "- x",
            "-x",
            "@x",
            "`x`",
            "%x",
        ])
        .prop_map(str::to_string),
    ]
}

/// Lines of a block scalar body or of a multi-line value, indented by the caller.
fn body() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(
        prop::sample::select(vec!["line", "  more", "", "# hash", "x: y", "- dash", "   ", "tail  "])
            .prop_map(str::to_string),
        0..4,
    )
}

/// A block-style document, as kubectl, Helm and kustomize write them: nested maps, indented and
/// indentless sequences, sequences of maps, comments, blank lines, and the odd things around
/// them (multi-line scalars, empty items, uneven indentation, duplicate keys).
fn block_document() -> impl Strategy<Value = String> {
    let leaf = (key(), block_value(), body(), 0..12usize, 1..4usize).prop_map(|(k, v, body, shape, step)| {
        let pad = " ".repeat(step);
        let lines = |indent: &str| body.iter().map(|l| format!("{indent}{l}\n")).collect::<String>();
        match shape {
            0..=3 => format!("{k}: {v}\n"),
            4 => format!("{k}: {v}\n{}", lines(&pad)),
            5 => format!("{k}:\n{pad}inner: {v}\n{pad}{k}2: x  # trailing\n"),
            6 => format!("{k}:\n- {v}\n-\n- name: {v}\n  other: {v}\n"),
            7 => format!("{k}:\n{pad}- {v}\n{pad}- - n\n{pad}-   spaced: {v}\n{pad}    more: 1\n"),
            8 => format!("{k}: |\n{}", lines(&format!("{pad}  "))),
            9 => format!("{k}: |-\n{pad}first\n{}", lines(&format!("{pad} "))),
            10 => format!("# comment\n\n{k}: {v}\n   # indented comment\n"),
            _ => format!("{k}:\n{pad}- {v}\n{}{pad}- x\n", lines(&pad)),
        }
    });
    (prop::collection::vec(leaf, 1..6), 0..4usize, any::<bool>()).prop_map(|(entries, wrap, marker)| {
        let body = entries.concat();
        let doc = match wrap {
            // As a map inside a map, and as the first map of a sequence.
            1 => format!("outer:\n{}", body.lines().map(|l| format!("  {l}\n")).collect::<String>()),
            2 => format!("- {}", body.lines().collect::<Vec<_>>().join("\n  ") + "\n"),
            _ => body,
        };
        if marker { format!("--- # doc\n{doc}") } else { doc }
    })
}

proptest! {
    // About one in seven generated documents is one the block reader takes.
    #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

    #[test]
    fn generated_block_documents_read_the_same_either_way(doc in block_document()) {
        block_agrees(&doc, "generated block");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn generated_documents_read_the_same_either_way(doc in document()) {
        block_agrees(&doc, "generated");
    }

    #[test]
    fn a_lone_plain_scalar_reads_the_same_either_way(s in scalar()) {
        for (doc, what) in [
            (format!("v: {s}\n"), "scalar"),
            (format!("- {s}\n"), "scalar in a sequence"),
            (format!("{{v: {s}}}"), "scalar in a flow map"),
            (format!("v: [{s}]\n"), "scalar in a flow sequence"),
            (format!("v: {{k: {s}}}\n"), "scalar in a flow map value"),
            (format!("{s}: v\n"), "scalar as a key"),
        ] {
            block_agrees(&doc, what);
        }
    }
}

/// Of 2,000 documents from `generator`, how many `reader` took and how many it left.
fn reach<S: Strategy<Value = String>>(generator: S, reader: fn(&str, &str) -> bool) -> (usize, usize) {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let taken = (0..2000).filter(|_| reader(&generator.new_tree(&mut runner).unwrap().current(), "generated")).count();
    (taken, 2000 - taken)
}

/// The block generator reaches both the block reader and the ways after it: the property above
/// is not vacuous.
#[test]
fn the_generated_block_documents_reach_every_way() {
    let (taken, left) = reach(block_document(), block_agrees);
    assert!(taken > 200 && left > 200, "taken {taken}, left {left}");
}

/// The general generator reaches both the block reader and serde-saphyr: the property above is
/// not vacuous.
#[test]
fn the_generated_documents_reach_both_ways() {
    let (taken, left) = reach(document(), block_agrees);
    assert!(taken > 200 && left > 200, "taken {taken}, left {left}");
}
