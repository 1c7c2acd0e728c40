//! Skeletons of YAML (and JSON) documents: keys, sequence items and their source positions,
//! without the values. The block reader builds one while it reads a document; for documents it
//! leaves to serde-saphyr, [`parse`] builds one from the events of the parser serde-saphyr itself
//! uses (`granit-parser`, whose events carry source markers), when a position is needed.

use serde_saphyr::granit_parser::{Event, Parser, Span, StructureStyle};

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
    // A bracketed segment is taken whole: an index, or a key with dots in it
    // (`metadata.labels[app.kubernetes.io/name]`, as `check` writes such paths).
    let mut out = Vec::new();
    let mut name = String::new();
    let mut chars = path.chars();
    while let Some(c) = chars.next() {
        match c {
            '.' | '[' => {
                if !name.is_empty() {
                    out.push(std::mem::take(&mut name));
                }
                if c == '[' {
                    out.push(chars.by_ref().take_while(|&c| c != ']').collect());
                }
            }
            c => name.push(c),
        }
    }
    if !name.is_empty() {
        out.push(name);
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn line(text: &str, path: &str) -> usize {
        parse(text, 0).expect("parses").locate(&segments(path)).line as usize
    }

    pub(crate) const DEPLOYMENT: &str = "\
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
            segments("metadata.annotations[ha-guard.io/allow-replica-colocated]"),
            ["metadata", "annotations", "ha-guard.io/allow-replica-colocated"]
        );
        assert_eq!(
            segments("metadata.labels[app.kubernetes.io/name].x"),
            ["metadata", "labels", "app.kubernetes.io/name", "x"]
        );
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
}
