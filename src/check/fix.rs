//! `check --fix`: apply the planned mutations to the files.
//!
//! Only documents that change are touched; every other byte of the file is kept. The mutations
//! only add a missing key to an existing mapping, so each is written as an insertion into the
//! text, before the mapping's first key and in its style (block or flow, JSON included): the
//! document keeps its comments, quoting and layout. Each result is checked by parsing it back: it
//! must equal the patched document. When it does not (anchors, an empty mapping, an append to a
//! list), the document is re-emitted from its patched value instead (key order kept, comments
//! inside the document lost), a JSON file pretty-printed.

use std::collections::BTreeMap;

use serde_json::Value;

use super::report::Fixable;
use crate::manifest::Source;
use crate::manifest::skeleton::{self, Node};

#[derive(Debug, thiserror::Error)]
pub enum FixError {
    #[error("{file} ({}): the patch does not apply: {message}", crate::manifest::document_label(*document))]
    Patch { file: String, document: usize, message: String },
    #[error("{file}: cannot write: {message}")]
    Write { file: String, message: String },
    #[error("{file}: stdin cannot be fixed in place: add `--output -` to write the fixed manifests to stdout")]
    Stdin { file: String },
    #[error("{file} ({}): cannot serialize: {message}", crate::manifest::document_label(*document))]
    Serialize { file: String, document: usize, message: String },
}

/// Applies `fixes` and writes the changed files. Returns the files written and, with
/// `stdin_out`, stdin's text as fixed (stdin is written nowhere: the caller prints it).
pub fn apply(
    sources: &[Source],
    fixes: &[Fixable],
    stdin_out: bool,
) -> Result<(Vec<String>, Option<String>), FixError> {
    // (file, document) → operations on the document's value (List items are prefixed).
    let mut per_doc: BTreeMap<(String, usize), Vec<json_patch::PatchOperation>> = BTreeMap::new();
    for f in fixes {
        let ops = per_doc.entry((f.origin.file.clone(), f.origin.document)).or_default();
        for c in &f.changes {
            ops.push(match (f.origin.item, &c.operation) {
                (Some(i), json_patch::PatchOperation::Add(a)) => {
                    let mut path = json_patch::jsonptr::PointerBuf::from_tokens(["items".to_string(), i.to_string()]);
                    path.append(&a.path);
                    json_patch::PatchOperation::Add(json_patch::AddOperation { path, value: a.value.clone() })
                }
                (_, op) => op.clone(),
            });
        }
    }
    let mut written = Vec::new();
    let mut stdin = None;
    for source in sources {
        let docs: Vec<_> = per_doc.iter().filter(|((file, _), _)| *file == source.file).collect();
        if docs.is_empty() {
            continue;
        }
        if source.path.is_none() {
            if !stdin_out {
                return Err(FixError::Stdin { file: source.file.clone() });
            }
            stdin = Some(rewrite(source, &docs)?);
            continue;
        }
        let text = rewrite(source, &docs)?;
        let path = source.path.as_ref().expect("checked above");
        std::fs::write(path, text)
            .map_err(|e| FixError::Write { file: source.file.clone(), message: e.to_string() })?;
        written.push(source.file.clone());
    }
    Ok((written, stdin))
}

fn rewrite(source: &Source, docs: &[(&(String, usize), &Vec<json_patch::PatchOperation>)]) -> Result<String, FixError> {
    let patch_err = |document: usize, e: String| FixError::Patch { file: source.file.clone(), document, message: e };
    if source.json {
        let mut value: Value = serde_json::from_str(&source.text).map_err(|e| patch_err(0, e.to_string()))?;
        let ops: Vec<_> = docs.iter().flat_map(|(_, ops)| ops.iter().cloned()).collect();
        json_patch::patch(&mut value, &ops).map_err(|e| patch_err(0, e.to_string()))?;
        if let Some(text) =
            insert_all(&source.text, &ops, true).filter(|t| serde_json::from_str::<Value>(t).is_ok_and(|v| v == value))
        {
            return Ok(text);
        }
        let mut text = serde_json::to_string_pretty(&value).map_err(|e| FixError::Serialize {
            file: source.file.clone(),
            document: 0,
            message: e.to_string(),
        })?;
        text.push('\n');
        return Ok(text);
    }
    let mut out = String::with_capacity(source.text.len() + 256);
    for (index, span) in source.spans.iter().enumerate() {
        let original = &source.text[span.clone()];
        let Some((_, ops)) = docs.iter().find(|((_, d), _)| *d == index) else {
            out.push_str(original);
            continue;
        };
        let mut value: Value = serde_saphyr::from_str(original).map_err(|e| patch_err(index, e.to_string()))?;
        json_patch::patch(&mut value, ops).map_err(|e| patch_err(index, e.to_string()))?;
        if let Some(text) =
            insert_all(original, ops, false).filter(|t| serde_saphyr::from_str::<Value>(t).is_ok_and(|v| v == value))
        {
            out.push_str(&text);
            continue;
        }
        let body = serde_saphyr::to_string(&value).map_err(|e| FixError::Serialize {
            file: source.file.clone(),
            document: index,
            message: e.to_string(),
        })?;
        // Keep the document's own marker line and leading comments.
        for line in original.lines() {
            let t = line.trim();
            if t.starts_with("---") || t.starts_with('#') || t.is_empty() {
                out.push_str(line);
                out.push('\n');
            } else {
                break;
            }
        }
        out.push_str(&body);
        if !body.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

/// Applies every operation as a text insertion (see the module doc), or `None` when one cannot be.
fn insert_all(text: &str, ops: &[json_patch::PatchOperation], json: bool) -> Option<String> {
    let mut text = text.to_string();
    for op in ops {
        let json_patch::PatchOperation::Add(add) = op else { return None };
        text = insert(&text, &add.path.to_string(), &add.value, json)?;
    }
    Some(text)
}

/// Inserts `value` under the last token of `pointer` into the mapping the rest of it names,
/// before that mapping's first key.
fn insert(text: &str, pointer: &str, value: &Value, json: bool) -> Option<String> {
    let segments = skeleton::segments(pointer);
    let (key, parent) = segments.split_last()?;
    let tree = skeleton::parse(text, 0)?;
    let Node::Map(_, flow, entries) = tree.get(parent)? else { return None };
    if entries.iter().any(|(k, _, _)| **k == **key) {
        return None;
    }
    let (_, first, _) = entries.first()?;
    let insertion = if *flow || json {
        format!("{}: {}, ", serde_json::to_string(key).ok()?, serde_json::to_string(value).ok()?)
    } else {
        // `key: value` as block YAML, its continuation lines indented to the first key's column.
        let mut entry = serde_json::Map::new();
        entry.insert(key.clone(), value.clone());
        let rendered = serde_saphyr::to_string(&Value::Object(entry)).ok()?;
        let indent = " ".repeat(first.column as usize - 1);
        let mut block = String::new();
        for (i, line) in rendered.trim_end_matches('\n').lines().enumerate() {
            if i > 0 {
                block.push('\n');
                if !line.is_empty() {
                    block.push_str(&indent);
                }
            }
            block.push_str(line);
        }
        format!("{block}\n{indent}")
    };
    let mut out = String::with_capacity(text.len() + insertion.len());
    out.push_str(text.get(..first.offset as usize)?);
    out.push_str(&insertion);
    out.push_str(&text[first.offset as usize..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn add(text: &str, pointer: &str, value: Value) -> Option<String> {
        insert(text, pointer, &value, false)
    }

    #[test]
    fn inserts_into_a_block_mapping_in_its_style() {
        let text =
            "spec:\n  # the budget\n  maxUnavailable: 1   # one at a time\n  selector:\n    matchLabels: {app: x}\n";
        let out = add(text, "/spec/unhealthyPodEvictionPolicy", json!("AlwaysAllow")).unwrap();
        assert_eq!(
            out,
            "spec:\n  # the budget\n  unhealthyPodEvictionPolicy: AlwaysAllow\n  maxUnavailable: 1   # one at a time\n  selector:\n    matchLabels: {app: x}\n"
        );
    }

    #[test]
    fn inserts_into_a_sequence_item() {
        let text = "c:\n- maxSkew: 1\n  topologyKey: h\n- maxSkew: 2\n";
        let out = add(text, "/c/1/labelSelector", json!({"matchLabels": {"app.kubernetes.io/name": "web"}})).unwrap();
        assert_eq!(
            out,
            "c:\n- maxSkew: 1\n  topologyKey: h\n- labelSelector:\n    matchLabels:\n      app.kubernetes.io/name: web\n  maxSkew: 2\n"
        );
        let v: Value = serde_saphyr::from_str(&out).unwrap();
        assert_eq!(v["c"][1]["labelSelector"]["matchLabels"]["app.kubernetes.io/name"], "web");
    }

    #[test]
    fn inserts_into_flow_mappings_and_json() {
        let out = add("spec: {maxUnavailable: 1}\n", "/spec/unhealthyPodEvictionPolicy", json!("AlwaysAllow")).unwrap();
        assert_eq!(out, "spec: {\"unhealthyPodEvictionPolicy\": \"AlwaysAllow\", maxUnavailable: 1}\n");
        let text = "{\n  \"spec\": {\n    \"maxUnavailable\": 1\n  }\n}\n";
        let out = insert(text, "/spec/x", &json!({"a": [1]}), true).unwrap();
        assert_eq!(out, "{\n  \"spec\": {\n    \"x\": {\"a\":[1]}, \"maxUnavailable\": 1\n  }\n}\n");
        assert!(serde_json::from_str::<Value>(&out).is_ok());
    }

    #[test]
    fn declines_what_it_cannot_insert() {
        assert_eq!(add("spec: {}\n", "/spec/x", json!(1)), None, "an empty mapping has no first key");
        assert_eq!(add("spec:\n  x: 1\n", "/spec/x", json!(2)), None, "the key is there");
        assert_eq!(add("spec:\n  x: 1\n", "/status/x", json!(2)), None, "no parent");
        assert_eq!(add("c: [1]\n", "/c/-", json!(2)), None, "not a mapping");
        assert_eq!(add("a: [1\n", "/a/x", json!(2)), None, "not YAML");
    }

    fn op(pointer: &str, value: Value) -> json_patch::PatchOperation {
        json_patch::PatchOperation::Add(json_patch::AddOperation {
            path: json_patch::jsonptr::PointerBuf::parse(pointer).unwrap(),
            value,
        })
    }

    fn source(text: &str) -> Source {
        let mut loaded = crate::manifest::Loaded::default();
        crate::manifest::add_text(&mut loaded, "t.yaml".into(), None, text.into(), false);
        loaded.sources.remove(0)
    }

    #[test]
    fn rewrite_falls_back_to_re_emitting_a_document() {
        // An anchored mapping that is also aliased: inserting into the text would change both.
        let text = "a: 1\n---\n# kept\nbase: &b {x: 1}\ncopy: *b\n---\nz: 3\n";
        let src = source(text);
        let ops = vec![op("/base/y", json!(2))];
        let key = ("t.yaml".to_string(), 1);
        let out = rewrite(&src, &[(&key, &ops)]).unwrap();
        let docs: Vec<&str> = out.split("---\n").collect();
        assert_eq!(docs[0], "a: 1\n");
        assert_eq!(docs[2], "z: 3\n");
        assert!(docs[1].starts_with("# kept\n"), "{out}");
        let v: Value = serde_saphyr::from_str(docs[1]).unwrap();
        assert_eq!(v, json!({"base": {"x": 1, "y": 2}, "copy": {"x": 1}}));
        // An empty mapping has no first key to insert before.
        let src = source("spec: {}\n");
        let key = ("t.yaml".to_string(), 0);
        let out = rewrite(&src, &[(&key, &vec![op("/spec/x", json!("v"))])]).unwrap();
        assert_eq!(serde_saphyr::from_str::<Value>(&out).unwrap(), json!({"spec": {"x": "v"}}));
    }

    #[test]
    fn rewrite_inserts_several_changes_in_one_document() {
        let text = "--- # marker\nspec:\n  template:\n    spec:\n      c:\n      - a: 1 # first\n      - a: 2\n";
        let src = source(text);
        let ops = vec![
            op("/spec/template/spec/c/0/s", json!({"m": {"k": "v"}})),
            op("/spec/template/spec/c/1/s", json!({"m": {"k": "v"}})),
        ];
        let key = ("t.yaml".to_string(), 0);
        let out = rewrite(&src, &[(&key, &ops)]).unwrap();
        assert_eq!(
            out,
            "--- # marker\nspec:\n  template:\n    spec:\n      c:\n      - s:\n          m:\n            k: v\n        a: 1 # first\n      - s:\n          m:\n            k: v\n        a: 2\n"
        );
    }
}
