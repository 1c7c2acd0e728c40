//! What reading manifests produces: the files' texts, their documents, and where each came from.

use std::path::PathBuf;

use serde_json::Value;

use super::skeleton::Node;

/// Where a document came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Origin {
    /// The path as given (or `-` for stdin).
    pub file: String,
    /// Index of the document in the file, from 0.
    pub document: usize,
    /// Index inside a `List` document's `items`, if it came from one.
    pub item: Option<usize>,
    /// 1-based line: where the document starts, or (for a finding located by
    /// [`super::locate`](crate::manifest::locate)) the line of its field.
    pub line: usize,
    /// 1-based column of the field, when located.
    pub column: Option<usize>,
}

/// One parsed document.
#[derive(Clone, Debug)]
pub struct Document {
    pub origin: Origin,
    pub value: Value,
}

/// A file's text and how it splits into documents, kept for `--fix`.
#[derive(Clone, Debug)]
pub struct Source {
    pub file: String,
    pub path: Option<PathBuf>,
    pub json: bool,
    pub text: String,
    /// Byte ranges of each document in `text` (YAML); the whole text for JSON.
    pub spans: Vec<std::ops::Range<usize>>,
    /// Per document of `spans`, its skeleton when the first parse built it (the block reader);
    /// `locate` parses the others again when it needs them. Empty for JSON.
    pub skeletons: Vec<Option<Node>>,
}

/// Input that cannot be used: names the file and, where known, the document.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{file}{}: {message}", document.map(|d| format!(" (document {d})")).unwrap_or_default())]
pub struct LoadError {
    pub file: String,
    pub document: Option<usize>,
    pub message: String,
}

#[derive(Debug, Default)]
pub struct Loaded {
    pub sources: Vec<Source>,
    pub documents: Vec<Document>,
    pub errors: Vec<LoadError>,
}
