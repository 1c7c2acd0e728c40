//! Reading manifests: files, directories (recursively, `.yaml`/`.yml`/`.json`), `-` for stdin,
//! multi-document YAML, JSON, and `List` kinds. Every document keeps where it came from.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::cores::map_on_cores;
use super::skeleton::Node;
use super::source::{Document, LoadError, LoadOptions, Loaded, Origin, Source, Template};
use super::yaml;

/// Loads every path: a directory is walked recursively in name order, leaving out what ignore
/// files leave out.
pub fn load(paths: &[String]) -> Loaded {
    load_with(paths, &LoadOptions::default())
}

/// [`load`] with options.
pub fn load_with(paths: &[String], options: &LoadOptions) -> Loaded {
    load_mapped(paths, options, &|value| value)
}

/// [`load_with`], each document's value (each item of a `List`) turned into what `map` makes of
/// it as soon as it is read, on the core that read it: the JSON trees are then not all kept at
/// once (`check` keeps the decoded objects only: a tree takes several times its text).
pub fn load_mapped<T: Send>(paths: &[String], options: &LoadOptions, map: &(impl Fn(Value) -> T + Sync)) -> Loaded<T> {
    let mut loaded = Loaded::default();
    for p in paths {
        if p == "-" {
            let mut text = String::new();
            match std::io::stdin().read_to_string(&mut text) {
                Ok(_) => add_text_mapped(&mut loaded, "-".into(), None, text, false, map),
                Err(e) => loaded.errors.push(LoadError { file: "-".into(), document: None, message: e.to_string() }),
            }
            continue;
        }
        let path = Path::new(p);
        if path.is_dir() && path.join("Chart.yaml").is_file() {
            loaded.charts.push(path.to_path_buf());
        } else if path.is_dir() {
            let mut files = Vec::new();
            walk(path, options.respect_ignore_files, &mut files, &mut loaded.charts, &mut loaded.errors);
            files.sort();
            for f in files {
                load_file(&mut loaded, &f, map);
            }
        } else {
            load_file(&mut loaded, path, map);
        }
    }
    loaded
}

/// The manifests under `dir` (`.yaml`, `.yml`, `.json`), with their errors. Symbolic links are
/// followed, a link that loops back is not (`ignore` detects it: ripgrep's walker), and a file
/// reached twice (through a link) is read once. With `respect_ignore_files`, what `.gitignore`
/// (inside a git repository), `.ignore` and git's excludes leave out is left out, as ripgrep
/// does; hidden files are read all the same (a `.deploy/` folder of manifests is common). A
/// folder holding a `Chart.yaml` is a Helm chart: it goes to `charts`, unread.
fn walk(
    dir: &Path,
    respect_ignore_files: bool,
    files: &mut Vec<PathBuf>,
    charts: &mut Vec<PathBuf>,
    errors: &mut Vec<LoadError>,
) {
    let mut seen = std::collections::HashSet::new();
    let mut walker = ignore::WalkBuilder::new(dir);
    walker.standard_filters(respect_ignore_files).hidden(false).follow_links(true);
    let found = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let into = found.clone();
    walker.filter_entry(move |entry| {
        let chart = entry.file_type().is_some_and(|t| t.is_dir()) && entry.path().join("Chart.yaml").is_file();
        if chart {
            into.lock().unwrap_or_else(|e| e.into_inner()).push(entry.path().to_path_buf());
        }
        !chart
    });
    for entry in walker.build() {
        match entry {
            Ok(entry) => {
                let path = entry.path();
                let manifest = matches!(path.extension().and_then(|e| e.to_str()), Some("yaml" | "yml" | "json"));
                if manifest && entry.file_type().is_some_and(|t| t.is_file()) {
                    let identity = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
                    if seen.insert(identity) {
                        files.push(path.to_path_buf());
                    }
                }
            }
            // A loop is a directory already being walked: nothing is lost by not entering it.
            Err(e) if is_loop(&e) => {}
            Err(e) => {
                errors.push(LoadError { file: dir.display().to_string(), document: None, message: e.to_string() })
            }
        }
    }
    let mut found = std::mem::take(&mut *found.lock().unwrap_or_else(|e| e.into_inner()));
    found.sort();
    charts.append(&mut found);
}

fn is_loop(e: &ignore::Error) -> bool {
    match e {
        ignore::Error::Loop { .. } => true,
        ignore::Error::WithPath { err, .. }
        | ignore::Error::WithDepth { err, .. }
        | ignore::Error::WithLineNumber { err, .. } => is_loop(err),
        _ => false,
    }
}

fn load_file<T: Send>(loaded: &mut Loaded<T>, path: &Path, map: &(impl Fn(Value) -> T + Sync)) {
    let file = path.display().to_string();
    match std::fs::read(path) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => {
                let json = path.extension().and_then(|e| e.to_str()) == Some("json");
                add_text_mapped(loaded, file, Some(path.to_path_buf()), text, json, map);
            }
            Err(_) => loaded.errors.push(LoadError { file, document: None, message: "not UTF-8 text".into() }),
        },
        // A mistyped path: said plainly, not as the OS's error.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            loaded.errors.push(LoadError { file, document: None, message: "no such file or folder".into() })
        }
        Err(e) => loaded.errors.push(LoadError { file, document: None, message: e.to_string() }),
    }
}

/// Parses one file's text. JSON is tried for `.json` files and for text starting with `{` or `[`
/// (stdin); YAML otherwise (YAML is a superset of JSON, but JSON errors read better for JSON).
pub fn add_text(loaded: &mut Loaded, file: String, path: Option<PathBuf>, text: String, json_hint: bool) {
    add_text_mapped(loaded, file, path, text, json_hint, &|value| value)
}

/// [`add_text`], each document's value turned into what `map` makes of it (see [`load_mapped`]).
pub fn add_text_mapped<T: Send>(
    loaded: &mut Loaded<T>,
    file: String,
    path: Option<PathBuf>,
    text: String,
    json_hint: bool,
    map: &(impl Fn(Value) -> T + Sync),
) {
    let looks_json = json_hint || text.trim_start().starts_with('{');
    if looks_json {
        if let Ok(value) = serde_json::from_str::<Value>(&text) {
            let origin = Origin { file: file.clone(), document: 0, item: None, line: 1, column: None, template: None };
            push_objects(loaded, origin, objects_of(value, map));
            let spans = std::iter::once(0..text.len()).collect();
            loaded.sources.push(Source { file, path, json: true, text, spans, breaks: vec![0] });
            return;
        }
        if json_hint && let Err(e) = serde_json::from_str::<Value>(&text) {
            loaded.errors.push(LoadError { file, document: Some(0), message: format!("not valid JSON: {e}") });
            return;
        }
    }
    let spans = split_documents(&text);
    // Line breaks before each document, counted incrementally (the spans are in order): counting
    // from the start of the text for each document would be quadratic in its length.
    let mut breaks_before = Vec::with_capacity(spans.len());
    let (mut counted_to, mut breaks) = (0, 0);
    for span in &spans {
        breaks += text[counted_to..span.start].matches('\n').count();
        counted_to = span.start;
        breaks_before.push(breaks);
    }
    let parsed = parse_documents(&text, &spans, &breaks_before, map);
    for ((index, span), (parsed, &breaks)) in spans.iter().enumerate().zip(parsed.into_iter().zip(&breaks_before)) {
        let doc = &text[span.clone()];
        // The line of the document's first content, past its `---` marker and comments.
        let skipped = doc.lines().take_while(|l| is_blank(l)).count();
        let line = breaks + 1 + skipped;
        let Some(parsed) = parsed else { continue };
        match parsed {
            Ok(objects) => {
                if let Some(objects) = objects {
                    let template = template_of(doc, breaks);
                    let origin =
                        Origin { file: file.clone(), document: index, item: None, line, column: None, template };
                    push_objects(loaded, origin, objects);
                }
            }
            Err(e) => {
                let shown = match template_of(doc, breaks) {
                    Some(t) => format!("{} (rendered into {file})", t.path),
                    None => file.clone(),
                };
                let rendered = e.render_with_options(serde_saphyr::render_options! {
                    line_offset: breaks as u64,
                    source_name: Some(&shown),
                });
                let hint = unrendered_template(doc, breaks).map(|line| {
                    format!(
                        "\nline {line} holds `{{{{ ... }}}}`: this looks like a Helm template that was not rendered; \
                         render it first: helm template RELEASE CHART | ha-guard check -f - (or ha-guard check --helm CHART)"
                    )
                });
                loaded.errors.push(LoadError {
                    file: file.clone(),
                    document: Some(index),
                    message: format!("not valid YAML:\n{}{}", rendered.trim_end(), hint.unwrap_or_default()),
                });
            }
        }
    }
    loaded.sources.push(Source { file, path, json: false, text, spans, breaks: breaks_before });
}

/// A document's objects as `map` made them (`None` for a document holding `null`, or nothing).
type ParsedDocument<T> = Result<Option<Objects<T>>, serde_saphyr::Error>;

/// Parses each document of `text` (`None` for a blank one), in order, in contiguous chunks on
/// every core, and maps its objects there; `breaks_before[i]` is the number of line breaks before
/// document `i`.
fn parse_documents<T: Send>(
    text: &str,
    spans: &[std::ops::Range<usize>],
    breaks_before: &[usize],
    map: &(impl Fn(Value) -> T + Sync),
) -> Vec<Option<ParsedDocument<T>>> {
    let jobs: Vec<(&str, usize)> = spans.iter().zip(breaks_before).map(|(span, &b)| (&text[span.clone()], b)).collect();
    map_on_cores(&jobs, |&(doc, breaks)| {
        (!is_blank(doc))
            .then(|| yaml::parse(doc, breaks).map(|(value, _)| (!value.is_null()).then(|| objects_of(value, map))))
    })
}

/// Document `document` of `source` read again, and its skeleton when the block reader read it:
/// `check` reads a document twice rather than keeping every tree. `None` if it does not read.
pub fn reread(source: &Source, document: usize) -> Option<(Value, Option<Node>)> {
    if source.json {
        return serde_json::from_str(&source.text).ok().map(|value| (value, None));
    }
    let span = source.spans.get(document)?.clone();
    yaml::parse(source.text.get(span)?, *source.breaks.get(document)?).ok()
}

/// Item `item` of a `List` document's value (as [`load_mapped`] unwraps it), or the value itself.
pub fn item_of(value: &Value, item: Option<usize>) -> Option<&Value> {
    match item {
        Some(i) => value.get("items")?.get(i),
        None => Some(value),
    }
}

/// The template a rendered document names in its leading comments (`# Source: PATH`, as
/// `helm template` writes), with the line its text starts at; `breaks` line breaks precede `doc`.
fn template_of(doc: &str, breaks: usize) -> Option<Template> {
    for (i, line) in doc.lines().enumerate() {
        let t = line.trim();
        if let Some(path) = t.strip_prefix("# Source:") {
            let path = path.trim();
            return (!path.is_empty()).then(|| Template { path: path.to_string(), first_line: breaks + i + 2 });
        }
        if !is_blank(line) {
            return None;
        }
    }
    None
}

/// The first line (in the file) of `doc` that holds Go template actions, if any.
fn unrendered_template(doc: &str, breaks: usize) -> Option<usize> {
    doc.lines().position(|l| l.contains("{{") && l.contains("}}")).map(|i| breaks + i + 1)
}

fn is_blank(doc: &str) -> bool {
    doc.lines().all(|l| {
        let t = l.trim();
        t.is_empty() || t.starts_with('#') || t == "---" || t.starts_with("--- ") || t == "..." || t.starts_with('%')
    })
}

/// Splits YAML text into documents at `---` lines. In YAML a `---` at column 0 always starts a new
/// document (even inside a block scalar), so a line split is exact. The marker line belongs to the
/// document it opens (`--- # comment` or `--- {inline}` stay with their document).
pub fn split_documents(text: &str) -> Vec<std::ops::Range<usize>> {
    let mut spans = Vec::new();
    let mut start = 0;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_end_matches(['\n', '\r']);
        let is_marker = trimmed == "---" || trimmed.starts_with("--- ") || trimmed.starts_with("---\t");
        if is_marker && offset > start {
            spans.push(start..offset);
            start = offset;
        }
        offset += line.len();
    }
    if offset > start || spans.is_empty() {
        spans.push(start..offset);
    }
    spans
}

/// What `map` made of a document's objects, with the index of each in its `List`'s `items`.
type Objects<T> = Vec<(Option<usize>, T)>;

/// The objects of a document, mapped: a `List` kind's (`v1/List`, `*List` with `items`) items, else
/// the document itself.
fn objects_of<T>(mut value: Value, map: &impl Fn(Value) -> T) -> Objects<T> {
    let is_list = value.get("kind").and_then(Value::as_str).is_some_and(|k| k == "List" || k.ends_with("List"))
        && value.get("items").is_some_and(Value::is_array);
    if is_list && let Some(Value::Array(items)) = value.get_mut("items").map(Value::take) {
        return items.into_iter().enumerate().map(|(i, item)| (Some(i), map(item))).collect();
    }
    vec![(None, map(value))]
}

/// Adds a document's objects, each with its origin.
fn push_objects<T>(loaded: &mut Loaded<T>, origin: Origin, objects: Objects<T>) {
    for (item, value) in objects {
        loaded.documents.push(Document { origin: Origin { item, ..origin.clone() }, value });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Loaded {
        let mut l = Loaded::default();
        add_text(&mut l, "t.yaml".into(), None, text.into(), false);
        l
    }

    #[test]
    fn splits_documents_and_keeps_lines() {
        let l = parse("a: 1\n---\nb: 2\n--- # third\nc: 3\n");
        assert_eq!(l.documents.len(), 3);
        assert_eq!(l.documents[1].origin.document, 1);
        assert_eq!(l.documents[1].origin.line, 3);
        assert_eq!(l.documents[2].origin.line, 5);
        assert_eq!(l.documents[2].value["c"], 3);
    }

    #[test]
    fn leading_marker_and_empty_documents() {
        let l = parse("---\na: 1\n---\n---\n# only a comment\n---\nb: 2\n");
        assert_eq!(l.documents.len(), 2);
        assert_eq!(l.documents[1].origin.document, 3);
        assert!(l.errors.is_empty());
    }

    #[test]
    fn bad_yaml_names_file_and_document() {
        let l = parse("a: 1\n---\nb: [1, 2\n---\nc: 3\n");
        assert_eq!(l.documents.len(), 2, "the good documents are kept");
        assert_eq!(l.errors.len(), 1);
        let e = l.errors[0].to_string();
        assert!(e.starts_with("t.yaml (document 2): not valid YAML"), "{e}: the second document, counted from 1");
    }

    #[test]
    fn many_documents_keep_their_order_index_and_line_when_parsed_on_several_threads() {
        // Enough documents for several threads (DOCUMENTS_PER_THREAD each), one invalid, one blank.
        let n = super::super::cores::DOCUMENTS_PER_THREAD * 5 + 3;
        let mut text = String::new();
        for i in 0..n {
            match i {
                200 => text.push_str("---\nkind: [unclosed\n"),
                201 => text.push_str("---\n# only a comment\n"),
                _ => text.push_str(&format!("---\nkind: Thing\nmetadata:\n  name: t{i}\n")),
            }
        }
        let loaded = parse(&text);
        assert_eq!(loaded.documents.len(), n - 2);
        for (d, i) in loaded.documents.iter().zip((0..n).filter(|i| *i != 200 && *i != 201)) {
            assert_eq!(d.origin.document, i);
            assert_eq!(d.value["metadata"]["name"], format!("t{i}"));
            // Documents 0..200 take 4 lines each, 200 takes 2, 201 takes 2.
            let first_line = if i < 200 { 4 * i } else { 4 * i - 4 } + 2;
            assert_eq!(d.origin.line, first_line, "document {i}");
        }
        assert_eq!(loaded.errors.len(), 1, "{:?}", loaded.errors);
        assert_eq!(loaded.errors[0].document, Some(200));
        assert!(loaded.errors[0].message.contains("t.yaml:802:"), "the line in the file: {}", loaded.errors[0].message);
    }

    #[test]
    fn lists_are_unwrapped() {
        let l = parse("apiVersion: v1\nkind: List\nitems:\n- kind: A\n- kind: B\n");
        assert_eq!(l.documents.len(), 2);
        assert_eq!(l.documents[1].origin.item, Some(1));
        assert_eq!(l.documents[1].value["kind"], "B");
    }

    #[test]
    fn json_text_is_json() {
        let mut l = Loaded::default();
        add_text(&mut l, "-".into(), None, "{\"kind\": \"A\"}".into(), false);
        assert_eq!(l.documents.len(), 1);
        assert!(l.sources[0].json);
        let mut l = Loaded::default();
        add_text(&mut l, "x.json".into(), None, "{\"kind\": ".into(), true);
        assert!(l.errors[0].to_string().contains("x.json (document 1): not valid JSON"), "{:?}", l.errors);
    }

    #[test]
    fn block_scalars_and_anchors() {
        let l = parse("a: |\n  line\n  --- not a marker\nb: &x 1\nc: *x\n");
        assert_eq!(l.documents.len(), 1, "{:?}", l.errors);
        assert_eq!(l.documents[0].value["c"], 1);
    }
}
