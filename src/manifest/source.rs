//! What reading manifests produces: the files' texts, their documents, and where each came from.

use std::path::PathBuf;

use serde_json::Value;

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
    /// The template a rendered document came from (`helm template` writes `# Source: PATH`
    /// before each document): findings name it rather than the stream.
    pub template: Option<Template>,
}

/// How a document is named in messages: "document N", counted from 1 as editors count lines
/// (`document` is the 0-based index `Origin::document` and the JSON's `document` hold). Every
/// message numbers documents through this.
pub fn document_label(document: usize) -> String {
    format!("document {}", document + 1)
}

/// Where a rendered document's text came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Template {
    /// The template's path as the renderer wrote it (`chart/templates/deployment.yaml`), or with
    /// the chart's folder put in front when `check --helm` rendered a local chart.
    pub path: String,
    /// The line of the stream where the rendered document's text starts (after its `# Source:`).
    pub first_line: usize,
}

impl Origin {
    /// The file a finding is reported in: the template for rendered input, else the file.
    pub fn shown_file(&self) -> &str {
        self.template.as_ref().map_or(&self.file, |t| &t.path)
    }

    /// The line shown with [`Origin::shown_file`]: within the rendered document for a template.
    pub fn shown_line(&self) -> usize {
        match &self.template {
            Some(t) => (self.line + 1).saturating_sub(t.first_line).max(1),
            None => self.line,
        }
    }
}

/// One parsed document: its JSON value, or what a caller of
/// [`load_mapped`](super::load::load_mapped) made of it.
#[derive(Clone, Debug)]
pub struct Document<T = Value> {
    pub origin: Origin,
    pub value: T,
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
    /// Per document of `spans`, the line breaks before it in `text`. Source positions are found
    /// by parsing a document again (`locate`, `check`): keeping every document's skeleton from
    /// the first parse would take twice the text.
    pub breaks: Vec<usize>,
}

/// Input that cannot be used: names the file and, where known, the document.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{file}{}: {message}", document.map(|d| format!(" ({})", document_label(d))).unwrap_or_default())]
pub struct LoadError {
    pub file: String,
    pub document: Option<usize>,
    pub message: String,
}

/// How paths are read.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Leave out what `.gitignore`, `.ignore` and git's excludes leave out when walking a folder
    /// (as ripgrep does); files named on the command line are always read.
    pub respect_ignore_files: bool,
    /// For `# Source: CHART/...` comments of a local chart: the chart's folder, put in front of
    /// the paths in place of its name.
    pub chart_dir: Option<(String, String)>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions { respect_ignore_files: true, chart_dir: None }
    }
}

#[derive(Debug)]
pub struct Loaded<T = Value> {
    pub sources: Vec<Source>,
    pub documents: Vec<Document<T>>,
    pub errors: Vec<LoadError>,
    /// Helm chart folders (holding a `Chart.yaml`) met among the paths: not read as manifests
    /// (their templates are not YAML until rendered); `check` renders them or says how to.
    pub charts: Vec<PathBuf>,
}

impl<T> Default for Loaded<T> {
    fn default() -> Self {
        Loaded { sources: Vec::new(), documents: Vec::new(), errors: Vec::new(), charts: Vec::new() }
    }
}
