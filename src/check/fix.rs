//! `check --fix`: apply the planned mutations to the files.
//!
//! Only documents that change are rewritten; every other byte of the file is kept. A changed YAML
//! document is re-emitted from its parsed form (key order kept; its comments are not), a JSON file
//! is re-emitted pretty-printed.

use std::collections::BTreeMap;

use serde_json::Value;

use super::load::{Loaded, Source};
use super::Fixable;

#[derive(Debug, thiserror::Error)]
pub enum FixError {
    #[error("{file} (document {document}): the patch does not apply: {message}")]
    Patch { file: String, document: usize, message: String },
    #[error("{file}: cannot write: {message}")]
    Write { file: String, message: String },
    #[error("{file}: stdin cannot be fixed in place")]
    Stdin { file: String },
    #[error("{file} (document {document}): cannot serialize: {message}")]
    Serialize { file: String, document: usize, message: String },
}

/// Applies `fixes` and writes the changed files. Returns the files written.
pub fn apply(loaded: &Loaded, fixes: &[Fixable]) -> Result<Vec<String>, FixError> {
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
    for source in &loaded.sources {
        let docs: Vec<_> = per_doc.iter().filter(|((file, _), _)| *file == source.file).collect();
        if docs.is_empty() {
            continue;
        }
        if source.path.is_none() {
            return Err(FixError::Stdin { file: source.file.clone() });
        }
        let text = rewrite(source, &docs)?;
        let path = source.path.as_ref().expect("checked above");
        std::fs::write(path, text).map_err(|e| FixError::Write { file: source.file.clone(), message: e.to_string() })?;
        written.push(source.file.clone());
    }
    Ok(written)
}

fn rewrite(source: &Source, docs: &[(&(String, usize), &Vec<json_patch::PatchOperation>)]) -> Result<String, FixError> {
    let patch_err = |document: usize, e: String| FixError::Patch { file: source.file.clone(), document, message: e };
    if source.json {
        let mut value: Value = serde_json::from_str(&source.text).map_err(|e| patch_err(0, e.to_string()))?;
        for (_, ops) in docs {
            json_patch::patch(&mut value, ops).map_err(|e| patch_err(0, e.to_string()))?;
        }
        let mut text = serde_json::to_string_pretty(&value)
            .map_err(|e| FixError::Serialize { file: source.file.clone(), document: 0, message: e.to_string() })?;
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
        let body = serde_saphyr::to_string(&value)
            .map_err(|e| FixError::Serialize { file: source.file.clone(), document: index, message: e.to_string() })?;
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
