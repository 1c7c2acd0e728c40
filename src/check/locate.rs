//! Source positions of field paths: the line (and column) of `spec.template.spec.volumes[0]` in the
//! file it came from, so that diagnostics point at the field rather than at the document.
//!
//! A document's text is parsed once more with the event parser serde-saphyr itself uses
//! (`granit-parser`, whose events carry source markers) into a skeleton that keeps only keys,
//! sequence items and their positions. A path is resolved as deep as it exists: a finding about a
//! missing `labelSelector` points at the `topologySpreadConstraints` item that lacks it.

use std::cell::OnceCell;
use std::collections::{HashMap, HashSet};

use serde_saphyr::granit_parser::{Event, Parser, Span, StructureStyle};

use super::load::{Origin, Source};

/// A position in a file: 1-based line and column (columns count characters), and the byte
/// offset in the text that was parsed. `u32`s, as a skeleton holds one per node (past 4 Gi they
/// saturate; serde-saphyr reads at most 256 MiB).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub line: u32,
    pub column: u32,
    pub offset: u32,
}

impl Position {
    pub(crate) fn of(span: &Span, line_offset: usize) -> Position {
        let narrow = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Position {
            line: narrow(span.start.line() + line_offset),
            column: narrow(span.start.col() + 1),
            offset: narrow(span.start.byte_offset().unwrap_or_default()),
        }
    }
}

/// The skeleton of a YAML (or JSON) node: where it starts and what it contains. Boxed slices and
/// strings, without spare capacity: `check` keeps one per document.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// Whether it is written in flow style (`{a: 1}`, as JSON is), and `(key, position of the
    /// key, value)` in source order. Non-scalar keys are kept as `""`.
    Map(Position, bool, Box<[(Box<str>, Position, Node)]>),
    Seq(Position, Box<[Node]>),
    /// A scalar or an alias.
    Leaf(Position),
}

impl Node {
    pub fn position(&self) -> Position {
        match self {
            Node::Map(p, ..) | Node::Seq(p, _) | Node::Leaf(p) => *p,
        }
    }

    /// The position of `segments` below this node, or of its deepest existing ancestor: a map
    /// entry is at its key, a sequence item at the item's start.
    pub fn locate<S: AsRef<str>>(&self, segments: &[S]) -> Position {
        self.resolve(segments).0
    }

    /// Like [`Node::locate`], with how many of the segments exist (all of them when the path
    /// itself is in the file).
    pub fn resolve<S: AsRef<str>>(&self, segments: &[S]) -> (Position, usize) {
        let mut node = self;
        let mut at = self.position();
        let mut found = 0;
        for segment in segments {
            let segment = segment.as_ref();
            match node {
                Node::Map(_, _, entries) => {
                    // The last occurrence wins, as it does when the document is decoded.
                    let Some((_, key_at, value)) = entries.iter().rev().find(|(k, _, _)| &**k == segment) else {
                        break;
                    };
                    at = *key_at;
                    node = value;
                }
                Node::Seq(_, items) => {
                    let Some(item) = segment.parse::<usize>().ok().and_then(|i| items.get(i)) else { break };
                    at = item.position();
                    node = item;
                }
                Node::Leaf(_) => break,
            }
            found += 1;
        }
        (at, found)
    }
}

impl Node {
    /// The node at exactly `segments`, if it is in the text.
    pub fn get<S: AsRef<str>>(&self, segments: &[S]) -> Option<&Node> {
        let mut node = self;
        for segment in segments {
            let segment = segment.as_ref();
            node = match node {
                Node::Map(_, _, entries) => &entries.iter().rev().find(|(k, _, _)| &**k == segment)?.2,
                Node::Seq(_, items) => items.get(segment.parse::<usize>().ok()?)?,
                Node::Leaf(_) => return None,
            };
        }
        Some(node)
    }
}

/// Parses the first document of `text`; positions are shifted by `line_offset` lines. `None` when
/// the text is not valid YAML or holds no node.
pub fn parse(text: &str, line_offset: usize) -> Option<Node> {
    enum Open {
        Map(Position, bool, Vec<(Box<str>, Position, Node)>, Option<(Box<str>, Position)>),
        Seq(Position, Vec<Node>),
    }
    let mut stack: Vec<Open> = Vec::new();
    let mut root = None;
    // Attaches a finished node to its parent (or makes it the root).
    fn attach(stack: &mut [Open], root: &mut Option<Node>, node: Node, key_text: Option<&str>) {
        match stack.last_mut() {
            None => *root = Some(node),
            Some(Open::Seq(_, items)) => items.push(node),
            Some(Open::Map(_, _, entries, pending)) => match pending.take() {
                Some((key, at)) => entries.push((key, at, node)),
                None => *pending = Some((key_text.unwrap_or_default().into(), node.position())),
            },
        }
    }
    for event in Parser::new_from_str(text) {
        let (event, span) = event.ok()?;
        let at = Position::of(&span, line_offset);
        match event {
            Event::MappingStart(style, ..) => {
                stack.push(Open::Map(at, style == StructureStyle::Flow, Vec::new(), None))
            }
            Event::SequenceStart(..) => stack.push(Open::Seq(at, Vec::new())),
            Event::MappingEnd | Event::SequenceEnd => {
                let node = match stack.pop()? {
                    Open::Map(p, flow, entries, _) => Node::Map(p, flow, entries.into_boxed_slice()),
                    Open::Seq(p, items) => Node::Seq(p, items.into_boxed_slice()),
                };
                attach(&mut stack, &mut root, node, None);
            }
            Event::Scalar(value, ..) => attach(&mut stack, &mut root, Node::Leaf(at), Some(&value)),
            Event::Alias(_) => attach(&mut stack, &mut root, Node::Leaf(at), None),
            Event::DocumentEnd if root.is_some() => break,
            _ => {}
        }
    }
    root
}

/// Splits a field path (`spec.template.spec.volumes[0].name`) or a JSON pointer
/// (`/spec/template/spec/volumes/0/name`) into segments.
pub fn segments(path: &str) -> Vec<String> {
    if let Some(pointer) = path.strip_prefix('/') {
        return pointer.split('/').map(|t| t.replace("~1", "/").replace("~0", "~")).collect();
    }
    if path.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for part in path.split('.') {
        let (name, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !name.is_empty() {
            out.push(name.to_string());
        }
        while let Some(open) = rest.strip_prefix('[') {
            let Some(close) = open.find(']') else { break };
            out.push(open[..close].to_string());
            rest = &open[close + 1..];
        }
    }
    out
}

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
        let tree = match self.prebuilt(origin) {
            Some(tree) => tree,
            None => {
                let key = (origin.file.clone(), origin.document);
                if !self.cache.contains_key(&key) {
                    let tree = self.parse_document(origin);
                    self.cache.insert(key.clone(), tree);
                }
                self.cache.get(&key)?.as_ref()?
            }
        };
        let mut path_segments = Vec::new();
        if let Some(i) = origin.item {
            path_segments.push("items".to_string());
            path_segments.push(i.to_string());
        }
        let prefix = path_segments.len();
        path_segments.extend(segments(path));
        let (at, found) = tree.resolve(&path_segments);
        let missing = path_segments.get(found.max(prefix)).cloned();
        Some((at, missing))
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
                self.prebuilt(o).is_none()
                    && !self.cache.contains_key(&(o.file.clone(), o.document))
                    && seen.insert((o.file.as_str(), o.document))
            })
            .collect();
        let keys: Vec<(String, usize)> = wanted.iter().map(|o| (o.file.clone(), o.document)).collect();
        let jobs: Vec<_> = wanted.iter().map(|o| (*o, self.source(&o.file))).collect();
        let trees = super::load::map_on_cores(&jobs, |(origin, source)| {
            source.and_then(|(source, starts)| parse_in(source, starts, origin))
        });
        for (key, tree) in keys.into_iter().zip(trees) {
            self.cache.insert(key, tree);
        }
    }

    /// The skeleton the first parse built for the document `origin` names, if it did.
    fn prebuilt(&self, origin: &Origin) -> Option<&'a Node> {
        let source = &self.sources[*self.by_file.get(origin.file.as_str())?];
        source.skeletons.get(origin.document)?.as_ref()
    }

    fn parse_document(&self, origin: &Origin) -> Option<Node> {
        let (source, starts) = self.source(&origin.file)?;
        parse_in(source, starts, origin)
    }
}

/// The skeleton of the document `origin` names in `source` (whose lines start at `starts`).
fn parse_in(source: &Source, starts: &[usize], origin: &Origin) -> Option<Node> {
    let span = if source.json { 0..source.text.len() } else { source.spans.get(origin.document)?.clone() };
    let text = source.text.get(span.clone())?;
    // Line breaks before the span: the lines starting at or before it, less the first.
    let offset = starts.partition_point(|&s| s <= span.start) - 1;
    parse(text, offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::load::{Loaded, add_text};

    fn line(text: &str, path: &str) -> usize {
        parse(text, 0).expect("parses").locate(&segments(path)).line as usize
    }

    const DEPLOYMENT: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web, tier: front}
spec:
  replicas: 3
  # a comment between keys
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: DoNotSchedule
      - maxSkew: 1   # trailing comment
        topologyKey: topology.kubernetes.io/zone
        whenUnsatisfiable: DoNotSchedule
        labelSelector:
          matchLabels: {app: web}
      containers:
      - name: app
        image: web:1
        lifecycle:
          preStop:
            exec:
              command: [sleep, '40']
";

    #[test]
    fn segments_of_paths_and_pointers() {
        assert_eq!(
            segments("spec.template.spec.volumes[0].name"),
            ["spec", "template", "spec", "volumes", "0", "name"]
        );
        assert_eq!(segments("a[1][2].b"), ["a", "1", "2", "b"]);
        assert_eq!(
            segments("/metadata/labels/app.kubernetes.io~1name"),
            ["metadata", "labels", "app.kubernetes.io/name"]
        );
        assert_eq!(segments("/a~0b/0"), ["a~b", "0"]);
        assert!(segments("").is_empty());
    }

    #[test]
    fn nested_maps_and_sequences() {
        assert_eq!(line(DEPLOYMENT, "spec.replicas"), 7);
        assert_eq!(line(DEPLOYMENT, "spec.selector.matchLabels.app"), 11, "past a comment line");
        assert_eq!(line(DEPLOYMENT, "spec.template.spec.topologySpreadConstraints[0]"), 18);
        assert_eq!(line(DEPLOYMENT, "spec.template.spec.topologySpreadConstraints[1].whenUnsatisfiable"), 23);
        assert_eq!(line(DEPLOYMENT, "spec.template.spec.topologySpreadConstraints[1].labelSelector"), 24);
        assert_eq!(line(DEPLOYMENT, "spec.template.spec.containers[0].lifecycle.preStop"), 30);
        assert_eq!(line(DEPLOYMENT, ""), 1);
    }

    #[test]
    fn missing_fields_point_at_the_deepest_existing_ancestor() {
        // No labelSelector in the first constraint: its item.
        assert_eq!(line(DEPLOYMENT, "spec.template.spec.topologySpreadConstraints[0].labelSelector"), 18);
        assert_eq!(line(DEPLOYMENT, "spec.template.spec.topologySpreadConstraints[7].labelSelector"), 17);
        assert_eq!(line(DEPLOYMENT, "spec.strategy.rollingUpdate.maxSurge"), 6);
        assert_eq!(line(DEPLOYMENT, "spec.replicas.deeper"), 7, "below a scalar");
        assert_eq!(line(DEPLOYMENT, "status"), 1, "nothing at all: the document");
    }

    #[test]
    fn resolve_says_how_deep_the_path_exists() {
        let tree = parse(DEPLOYMENT, 0).unwrap();
        assert_eq!(tree.resolve(&segments("spec.replicas")).1, 2);
        assert_eq!(tree.resolve(&segments("spec.template.spec.topologySpreadConstraints[0].labelSelector")).1, 5);
        let l = loaded("d.yaml", DEPLOYMENT);
        let mut locator = Locator::new(&l.sources);
        let origin = &l.documents[0].origin;
        let (at, missing) =
            locator.resolve(origin, "spec.template.spec.topologySpreadConstraints[0].labelSelector").unwrap();
        assert_eq!((at.line, missing.as_deref()), (18, Some("labelSelector")));
        assert_eq!(locator.resolve(origin, "spec.replicas").unwrap().1, None);
        assert_eq!(locator.resolve(origin, "spec.strategy.type").unwrap().1.as_deref(), Some("strategy"));
    }

    #[test]
    fn flow_style_keys_and_items() {
        assert_eq!(line(DEPLOYMENT, "metadata.labels.tier"), 5);
        assert_eq!(parse(DEPLOYMENT, 0).unwrap().locate(&segments("metadata.labels.tier")).column, 22);
        assert_eq!(
            line(DEPLOYMENT, "spec.template.spec.topologySpreadConstraints[1].labelSelector.matchLabels.app"),
            25
        );
        assert_eq!(line(DEPLOYMENT, "spec.template.spec.containers[0].lifecycle.preStop.exec.command[1]"), 32);
        let flow = "{kind: PodDisruptionBudget,\n spec: {minAvailable: 1,\n   selector: {matchLabels: {app: web}}}}\n";
        assert_eq!(line(flow, "spec.minAvailable"), 2);
        assert_eq!(line(flow, "spec.selector.matchLabels"), 3);
        assert_eq!(line(flow, "spec.unhealthyPodEvictionPolicy"), 2);
    }

    #[test]
    fn json_documents() {
        let json = "{\n  \"kind\": \"Deployment\",\n  \"spec\": {\n    \"replicas\": 2,\n    \"template\": {\"spec\": {\"volumes\": [\n      {\"name\": \"data\"}\n    ]}}\n  }\n}\n";
        assert_eq!(line(json, "spec.replicas"), 4);
        assert_eq!(line(json, "spec.template.spec.volumes[0].name"), 6);
    }

    #[test]
    fn columns_are_one_based() {
        let p = parse(DEPLOYMENT, 0).unwrap().locate(&segments("spec.replicas"));
        assert_eq!((p.line, p.column), (7, 3));
        assert_eq!(&DEPLOYMENT[p.offset as usize..p.offset as usize + 9], "replicas:", "byte offsets point at the key");
        let text = "# é\nmetadata: {name: \"ñ\", labels: {app: web}}\n";
        let p = parse(text, 0).unwrap().locate(&segments("metadata.labels"));
        assert_eq!(
            &text[p.offset as usize..p.offset as usize + 7],
            "labels:",
            "byte offsets past multi-byte characters"
        );
    }

    #[test]
    fn block_scalars_anchors_and_aliases() {
        let text = "a: |\n  x\n  y\nb: &anchor\n  c: 1\nd: *anchor\ne:\n  f: 2\n";
        assert_eq!(line(text, "b.c"), 5);
        assert_eq!(line(text, "d"), 6);
        assert_eq!(line(text, "d.c"), 6, "an alias is a leaf: its own line");
        assert_eq!(line(text, "e.f"), 8);
    }

    #[test]
    fn styles_and_exact_nodes() {
        let tree = parse(DEPLOYMENT, 0).unwrap();
        assert!(matches!(tree.get(&segments("metadata.labels")), Some(Node::Map(_, true, _))));
        assert!(matches!(tree.get(&segments("spec.selector")), Some(Node::Map(_, false, _))));
        assert!(matches!(tree.get(&segments("spec.template.spec.containers")), Some(Node::Seq(..))));
        assert!(tree.get(&segments("spec.template.spec.topologySpreadConstraints[0].labelSelector")).is_none());
        assert!(tree.get(&segments("spec.replicas.x")).is_none());
    }

    #[test]
    fn invalid_yaml_gives_none() {
        assert!(parse("a: [1, 2\n", 0).is_none());
        assert!(parse("", 0).is_none());
        assert!(parse("# only a comment\n", 0).is_none());
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
        // Without the skeletons of the first parse, so that the locator parses again.
        let mut bare = l.sources.clone();
        bare.iter_mut().for_each(|s| s.skeletons.clear());
        let mut one_by_one = Locator::new(&bare);
        let expected: Vec<_> = l.documents.iter().map(|d| one_by_one.position(&d.origin, "spec.x")).collect();
        let mut prefetched = Locator::new(&bare);
        prefetched.prefetch(l.documents.iter().map(|d| &d.origin));
        assert_eq!(prefetched.cache.len(), 300);
        let found: Vec<_> = l.documents.iter().map(|d| prefetched.position(&d.origin, "spec.x")).collect();
        assert_eq!(found, expected);
        assert!(found.iter().all(Option::is_some));
        // The skeletons the first parse built (on several threads) point at the same places, and
        // nothing is parsed again.
        assert!(l.sources[0].skeletons.iter().all(Option::is_some));
        let mut prebuilt = Locator::new(&l.sources);
        prebuilt.prefetch(l.documents.iter().map(|d| &d.origin));
        let found: Vec<_> = l.documents.iter().map(|d| prebuilt.position(&d.origin, "spec.x")).collect();
        assert_eq!(found, expected);
        assert!(prebuilt.cache.is_empty(), "parsed again");
    }
}
