//! Source positions of field paths: the line (and column) of `spec.template.spec.volumes[0]` in the
//! file it came from, so that diagnostics point at the field rather than at the document. A path
//! is resolved as deep as it exists: a finding about a missing `labelSelector` points at the
//! `topologySpreadConstraints` item that lacks it.

use std::cell::OnceCell;
use std::collections::{HashMap, HashSet};

use super::skeleton::{self, Node, Position, segments};
use super::source::{Origin, Source};

/// Resolves paths to positions over the loaded sources, parsing each document at most once.
pub struct Locator<'a> {
    sources: &'a [Source],
    /// File name → index of its (first) source, so that a lookup does not scan every file.
    by_file: HashMap<&'a str, usize>,
    /// Per source, the byte offset where each line starts (built on first use), so that finding a
    /// document's first line or a line's text does not scan the file from its start each time.
    line_starts: Vec<OnceCell<Vec<usize>>>,
    cache: HashMap<(String, usize), Option<Node>>,
}

impl<'a> Locator<'a> {
    pub fn new(sources: &'a [Source]) -> Self {
        let mut by_file = HashMap::new();
        for (i, s) in sources.iter().enumerate() {
            by_file.entry(s.file.as_str()).or_insert(i);
        }
        let line_starts = sources.iter().map(|_| OnceCell::new()).collect();
        Locator { sources, by_file, line_starts, cache: HashMap::new() }
    }

    fn source(&self, file: &str) -> Option<(&'a Source, &[usize])> {
        let i = *self.by_file.get(file)?;
        let source = &self.sources[i];
        let starts = self.line_starts[i]
            .get_or_init(|| std::iter::once(0).chain(source.text.match_indices('\n').map(|(at, _)| at + 1)).collect());
        Some((source, starts))
    }

    /// The position of `path` (a field path or a JSON pointer) in the document `origin` names,
    /// inside its `List` item when it came from one. `None` when the document cannot be found or
    /// parsed; the caller keeps the document's own line.
    pub fn position(&mut self, origin: &Origin, path: &str) -> Option<Position> {
        self.resolve(origin, path).map(|(p, _)| p)
    }

    /// [`Locator::position`] and the first segment of `path` that is not in the file (`None` when
    /// the whole path is there).
    pub fn resolve(&mut self, origin: &Origin, path: &str) -> Option<(Position, Option<String>)> {
        let key = (origin.file.clone(), origin.document);
        if !self.cache.contains_key(&key) {
            let tree = self.parse_document(origin);
            self.cache.insert(key.clone(), tree);
        }
        let tree = self.cache.get(&key)?.as_ref()?;
        Some(resolve_in(tree, origin, path))
    }

    /// [`Locator::position`] applied to `origin`: the origin with its line (and column) moved to
    /// `path`, or unchanged when it cannot be located.
    pub fn locate(&mut self, origin: &Origin, path: &str) -> Origin {
        match self.position(origin, path) {
            Some(p) => Origin { line: p.line as usize, column: Some(p.column as usize), ..origin.clone() },
            None => origin.clone(),
        }
    }

    /// The text of a 1-based line of a file, without its line break.
    pub fn source_line(&self, file: &str, line: usize) -> Option<&'a str> {
        let (source, starts) = self.source(file)?;
        let start = *starts.get(line.checked_sub(1)?)?;
        // As `str::lines` does: no line after a final line break; `\r\n` and `\n` are removed.
        if start >= source.text.len() {
            return None;
        }
        let end = starts.get(line).copied().unwrap_or(source.text.len());
        let text = &source.text[start..end];
        Some(text.strip_suffix('\n').map_or(text, |t| t.strip_suffix('\r').unwrap_or(t)))
    }

    /// Parses the documents of `origins` that are not parsed yet, on every core, so that the
    /// lookups that follow find them in the cache (`check` knows beforehand which objects it will
    /// report on, and this second parse is most of what is left of its time).
    pub fn prefetch<'o>(&mut self, origins: impl IntoIterator<Item = &'o Origin>) {
        let mut seen = HashSet::new();
        let wanted: Vec<&Origin> = origins
            .into_iter()
            .filter(|o| {
                !self.cache.contains_key(&(o.file.clone(), o.document)) && seen.insert((o.file.as_str(), o.document))
            })
            .collect();
        let keys: Vec<(String, usize)> = wanted.iter().map(|o| (o.file.clone(), o.document)).collect();
        let jobs: Vec<_> = wanted.iter().map(|o| (o.document, self.source(&o.file).map(|(s, _)| s))).collect();
        let trees = super::cores::map_on_cores(&jobs, |&(document, source)| skeleton_of(source?, document));
        for (key, tree) in keys.into_iter().zip(trees) {
            self.cache.insert(key, tree);
        }
    }

    fn parse_document(&self, origin: &Origin) -> Option<Node> {
        skeleton_of(self.source(&origin.file)?.0, origin.document)
    }
}

/// The skeleton of document `document` of `source`: from the block reader when it reads the
/// document (several times faster), else from the parser's events.
pub fn skeleton_of(source: &Source, document: usize) -> Option<Node> {
    let (span, breaks) = if source.json {
        (0..source.text.len(), 0)
    } else {
        (source.spans.get(document)?.clone(), *source.breaks.get(document)?)
    };
    let text = source.text.get(span)?;
    match super::block::parse_block(text, breaks) {
        Some((_, skeleton)) => Some(skeleton),
        None => skeleton::parse(text, breaks),
    }
}

/// The position of `path` below the document (or `List` item) `origin` names, whose skeleton is
/// `tree`, and the first segment of `path` that is not in it.
pub fn resolve_in(tree: &Node, origin: &Origin, path: &str) -> (Position, Option<String>) {
    let mut path_segments = Vec::new();
    if let Some(i) = origin.item {
        path_segments.push("items".to_string());
        path_segments.push(i.to_string());
    }
    let prefix = path_segments.len();
    path_segments.extend(segments(path));
    let (at, found) = tree.resolve(&path_segments);
    let missing = path_segments.get(found.max(prefix)).cloned();
    (at, missing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::load::add_text;
    use crate::manifest::source::Loaded;

    #[test]
    fn resolve_says_which_segment_is_missing() {
        let l = loaded("d.yaml", crate::manifest::skeleton::tests::DEPLOYMENT);
        let mut locator = Locator::new(&l.sources);
        let origin = &l.documents[0].origin;
        let (at, missing) =
            locator.resolve(origin, "spec.template.spec.topologySpreadConstraints[0].labelSelector").unwrap();
        assert_eq!((at.line, missing.as_deref()), (18, Some("labelSelector")));
        assert_eq!(locator.resolve(origin, "spec.replicas").unwrap().1, None);
        assert_eq!(locator.resolve(origin, "spec.strategy.type").unwrap().1.as_deref(), Some("strategy"));
    }

    fn loaded(file: &str, text: &str) -> Loaded {
        let mut l = Loaded::default();
        add_text(&mut l, file.into(), None, text.into(), file.ends_with(".json"));
        assert!(l.errors.is_empty(), "{:?}", l.errors);
        l
    }

    #[test]
    fn documents_after_markers_keep_file_lines() {
        let text =
            "# leading comment\na: 1\n---\n# second\nkind: X\nspec:\n  replicas: 2\n--- # third\nspec: {replicas: 3}\n";
        let l = loaded("m.yaml", text);
        let mut locator = Locator::new(&l.sources);
        let second = &l.documents[1].origin;
        assert_eq!(second.document, 1);
        assert_eq!(locator.position(second, "spec.replicas").map(|p| p.line), Some(7));
        assert_eq!(locator.position(second, "spec.minReadySeconds").map(|p| p.line), Some(6));
        let third = &l.documents[2].origin;
        assert_eq!(locator.position(third, "spec.replicas").map(|p| (p.line, p.column)), Some((9, 8)));
        let moved = locator.locate(third, "spec.replicas");
        assert_eq!((moved.line, moved.column, moved.document), (9, Some(8), 2));
    }

    #[test]
    fn list_items_are_located_inside_the_list() {
        let text = "apiVersion: v1\nkind: List\nitems:\n- kind: A\n  spec:\n    x: 1\n- kind: B\n  spec:\n    x: 2\n";
        let l = loaded("list.yaml", text);
        let mut locator = Locator::new(&l.sources);
        let b = &l.documents[1].origin;
        assert_eq!(b.item, Some(1));
        assert_eq!(locator.position(b, "spec.x").map(|p| p.line), Some(9));
        assert_eq!(locator.position(b, "spec.y").map(|p| p.line), Some(8));
        assert_eq!(locator.position(b, "").map(|p| p.line), Some(7));
    }

    #[test]
    fn json_files_are_located() {
        let l = loaded("d.json", "{\n  \"kind\": \"A\",\n  \"spec\": {\n    \"x\": 1\n  }\n}\n");
        let mut locator = Locator::new(&l.sources);
        assert_eq!(locator.position(&l.documents[0].origin, "/spec/x").map(|p| p.line), Some(4));
    }

    #[test]
    fn source_lines() {
        let l = loaded("a.yaml", "a: 1\nb:\n  c: 2\n");
        let locator = Locator::new(&l.sources);
        assert_eq!(locator.source_line("a.yaml", 3), Some("  c: 2"));
        assert_eq!(locator.source_line("a.yaml", 0), None);
        assert_eq!(locator.source_line("a.yaml", 9), None);
        assert_eq!(locator.source_line("b.yaml", 1), None);
    }

    #[test]
    fn unknown_files_are_not_located() {
        let l = loaded("a.yaml", "a: 1\n");
        let mut locator = Locator::new(&l.sources);
        let other = Origin { file: "b.yaml".into(), ..l.documents[0].origin.clone() };
        assert_eq!(locator.position(&other, "a"), None);
        assert_eq!(locator.locate(&other, "a"), other);
    }

    #[test]
    fn prefetching_on_several_threads_finds_what_parsing_one_by_one_finds() {
        // Enough documents for several threads, each with its field on a different line.
        let mut text = String::new();
        for i in 0..300 {
            text.push_str(&format!(
                "---\nkind: Thing\nmetadata:\n  name: t{i}\n{}spec:\n  x: {i}\n",
                "# pad\n".repeat(i % 5)
            ));
        }
        let l = loaded("many.yaml", &text);
        assert_eq!(l.documents.len(), 300);
        let mut one_by_one = Locator::new(&l.sources);
        let expected: Vec<_> = l.documents.iter().map(|d| one_by_one.position(&d.origin, "spec.x")).collect();
        let mut prefetched = Locator::new(&l.sources);
        prefetched.prefetch(l.documents.iter().map(|d| &d.origin));
        assert_eq!(prefetched.cache.len(), 300);
        let found: Vec<_> = l.documents.iter().map(|d| prefetched.position(&d.origin, "spec.x")).collect();
        assert_eq!(found, expected);
        assert!(found.iter().all(Option::is_some));
    }

    /// The block reader's skeleton and the parser's place every node alike: either may locate.
    #[test]
    fn skeletons_of_the_block_reader_and_of_the_parser_agree() {
        let text = format!("a: 1\n---\n{}", crate::manifest::skeleton::tests::DEPLOYMENT);
        let l = loaded("d.yaml", &text);
        let source = &l.sources[0];
        let span = source.spans[1].clone();
        assert_eq!(skeleton_of(source, 1), skeleton::parse(&source.text[span], source.breaks[1]));
        assert!(skeleton_of(source, 1).is_some());
    }
}
