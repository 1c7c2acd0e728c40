//! YAML documents into JSON values, and their skeletons (source positions) in the same pass.
//!
//! serde-saphyr decodes any YAML; on a large bundle it is most of `check`'s time, and finding
//! source positions took a second parse of the same text (`locate`). Kubernetes manifests are
//! plain YAML: block and flow collections, string keys, strings, integers, booleans and nulls.
//! For those, one walk over the parser's events (the parser serde-saphyr itself runs, with the
//! same limits) builds the value and the skeleton together, at about twice the speed.
//!
//! Everything this walk is not certain to read exactly as serde-saphyr does goes to serde-saphyr
//! instead, whole: tags, anchors and aliases, merge keys, directives, duplicate keys, non-string
//! keys, any plain scalar that could be a float or an unusual integer (`1.5`, `0x1F`, `010`,
//! `.inf`, `1_000`, `12:30`), documents near serde-saphyr's budget limits, and any parse error
//! (so that errors read as they always did). Tests and the `check` fuzz target hold the two ways
//! to the same value.

use serde_json::{Map, Number, Value};
use serde_saphyr::granit_parser::{self, Event, Parser, ScalarStyle, StructureStyle};

use super::locate::{Node, Position};

mod block;
pub use block::parse_block;

/// Deeper than this, serde-saphyr's budget (64) is near: leave it to serde-saphyr.
const MAX_DEPTH: usize = 60;
/// serde-saphyr's budget allows 250,000 nodes and 1,000,000 events per document.
const MAX_NODES: usize = 200_000;
/// serde-saphyr's budget allows 64 MiB of scalar text per document.
const MAX_DOCUMENT_BYTES: usize = 16 << 20;

/// The parser options serde-saphyr runs the parser with under its default budget (its
/// `Budget::parser_options`), so that the parser fails where it fails.
fn parser_options() -> granit_parser::Options {
    let mut options = granit_parser::Options::default();
    options.simple_key_max_lookahead = 1024;
    options.flow_nesting_limit = 255;
    options.block_nesting_limit = options.block_nesting_limit.max(65);
    options.emit_comments = true;
    options.max_buffered_comment_events = 32;
    options
}

/// A document's value, and its skeleton when the one-pass way read it (`None` when serde-saphyr
/// did: `locate` then parses it again if a finding needs a position in it). Lines of the
/// skeleton are shifted by `line_offset`.
pub fn parse(doc: &str, line_offset: usize) -> Result<(Value, Option<Node>), String> {
    if let Some((value, skeleton)) = parse_block(doc, line_offset) {
        return Ok((value, Some(skeleton)));
    }
    match parse_plain(doc, line_offset) {
        Some((value, skeleton)) => Ok((value, skeleton)),
        None => serde_saphyr::from_str::<Value>(doc).map(|v| (v, None)).map_err(|e| e.to_string()),
    }
}

/// What a plain (untagged, unquoted) scalar is, or `None` when it is not certain.
#[derive(Debug, PartialEq)]
enum Plain {
    Null,
    Bool(bool),
    Unsigned(u64),
    Signed(i64),
    String,
}

/// serde-saphyr's reading of a plain scalar into a JSON value, in the cases that are certain:
/// its null spellings, its YAML 1.1 booleans, decimal integers without a leading zero, and text
/// that no number parser can take.
fn plain(text: &str) -> Option<Plain> {
    let is_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n');
    let bytes = text.as_bytes();
    // Longer than any null, boolean or special float spelling, and starting with a letter or
    // `/`: text (the usual key or value, checked without the comparisons below).
    if bytes.len() > 8 && (bytes[0].is_ascii_alphabetic() || bytes[0] == b'/') && !bytes.last().is_some_and(is_space) {
        return Some(Plain::String);
    }
    let t = if bytes.first().is_some_and(is_space) || bytes.last().is_some_and(is_space) {
        text.trim_matches([' ', '\t', '\r', '\n'])
    } else {
        text
    };
    if matches!(text, "" | "~" | "null" | "Null" | "NULL") {
        return Some(Plain::Null);
    }
    const TRUE: [&str; 4] = ["true", "yes", "y", "on"];
    const FALSE: [&str; 4] = ["false", "no", "n", "off"];
    if TRUE.iter().any(|w| t.eq_ignore_ascii_case(w)) {
        return Some(Plain::Bool(true));
    }
    if FALSE.iter().any(|w| t.eq_ignore_ascii_case(w)) {
        return Some(Plain::Bool(false));
    }
    if t.len() != text.len() {
        return None;
    }
    let decimal = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()) && (d == "0" || !d.starts_with('0'));
    let first = *text.as_bytes().first()?;
    let special = |t: &str| ["inf", "infinity", "nan"].iter().any(|w| t.eq_ignore_ascii_case(w));
    match first {
        b'0'..=b'9' => {
            if decimal(text) {
                return text.parse().ok().map(Plain::Unsigned);
            }
            // A character no integer or float spelling has (`500m`, `128Mi`, `10%`), or two dots
            // (`1.15.1`): text.
            let numeric = |b: u8| b.is_ascii_hexdigit() || b"xXoObB._+-:".contains(&b);
            let dots = text.bytes().filter(|&b| b == b'.').count();
            // Outside `0x...`, the only letters a number has are an exponent's `e` and the radix
            // letter after a leading `0` (`0o17`, `0b1`): a hash such as `3b1ebf...` is text.
            let hex = text.len() > 1 && matches!(text.as_bytes()[1], b'x' | b'X') && first == b'0';
            let other_letter = !hex
                && text.bytes().enumerate().any(|(i, b)| {
                    b.is_ascii_alphabetic()
                        && !matches!(b, b'e' | b'E')
                        && !(i == 1 && first == b'0' && matches!(b, b'o' | b'O' | b'b' | b'B'))
                });
            (!text.bytes().all(numeric) || dots >= 2 || other_letter).then_some(Plain::String)
        }
        b'-' if decimal(&text[1..]) && text != "-0" => text.parse().ok().map(Plain::Signed),
        // `--flag=value`, `-Xmx512m`: a sign before text that is no number's spelling.
        b'-' | b'+' => {
            let rest = &text[1..];
            let starts_as_text = rest.bytes().next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'-');
            (starts_as_text && !special(rest)).then_some(Plain::String)
        }
        b'.' | b'~' => None,
        // Letters and punctuation (`web`, `/healthz`, `$(POD)`, `^[a-z]+$`): only Rust's float
        // parser, which serde-saphyr's falls back to, takes any such spelling.
        _ => (!special(text)).then_some(Plain::String),
    }
}

/// A collection being read: its value, its skeleton, and (in a map) the key waiting for its value.
enum Open {
    Map {
        map: Map<String, Value>,
        at: Position,
        flow: bool,
        entries: Vec<(Box<str>, Position, Node)>,
        key: Option<(String, Position)>,
    },
    Seq {
        items: Vec<Value>,
        at: Position,
        nodes: Vec<Node>,
    },
}

/// The one-pass way alone; `None` when the document is not one it reads with certainty (public
/// for the tests and the fuzz target that hold it to serde-saphyr).
pub fn parse_plain(doc: &str, line_offset: usize) -> Option<(Value, Option<Node>)> {
    let mut stack: Vec<Open> = Vec::new();
    let mut root: Option<(Value, Node)> = None;
    let mut nodes = 0usize;
    if doc.len() > MAX_DOCUMENT_BYTES {
        return None;
    }
    for event in Parser::new_from_str_with_options(doc, parser_options()) {
        let (event, span) = event.ok()?;
        let at = Position::of(&span, line_offset);
        let done = match event {
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Comment(..) => None,
            Event::DocumentStart(_, version) => {
                if version.is_some() || root.is_some() {
                    return None;
                }
                None
            }
            Event::MappingStart(style, anchor, tag) => {
                if !may_open(&stack, anchor, tag.is_some()) || root.is_some() {
                    return None;
                }
                let flow = style == StructureStyle::Flow;
                stack.push(Open::Map { map: Map::new(), at, flow, entries: Vec::new(), key: None });
                None
            }
            Event::SequenceStart(_, anchor, tag) => {
                if !may_open(&stack, anchor, tag.is_some()) || root.is_some() {
                    return None;
                }
                stack.push(Open::Seq { items: Vec::new(), at, nodes: Vec::new() });
                None
            }
            Event::MappingEnd => match stack.pop()? {
                Open::Map { map, at, flow, entries, key: None } => {
                    Some((Value::Object(map), Node::Map(at, flow, entries.into_boxed_slice())))
                }
                _ => return None,
            },
            Event::SequenceEnd => match stack.pop()? {
                Open::Seq { items, at, nodes } => Some((Value::Array(items), Node::Seq(at, nodes.into_boxed_slice()))),
                Open::Map { .. } => return None,
            },
            Event::Scalar(text, style, anchor, tag) => {
                if anchor != 0 || tag.is_some() || root.is_some() {
                    return None;
                }
                let is_plain = style == ScalarStyle::Plain;
                if expects_key(&stack) {
                    // Keys are strings: quoted, or plain text that is certainly a string.
                    if text == "<<" || (is_plain && plain(&text) != Some(Plain::String)) {
                        return None;
                    }
                    let Some(Open::Map { map, key, .. }) = stack.last_mut() else { return None };
                    if map.contains_key(text.as_ref()) {
                        return None;
                    }
                    *key = Some((text.into_owned(), at));
                    nodes += 1;
                    continue;
                }
                let value = if is_plain {
                    match plain(&text)? {
                        Plain::Null => Value::Null,
                        Plain::Bool(b) => Value::Bool(b),
                        Plain::Unsigned(n) => Value::Number(Number::from(n)),
                        Plain::Signed(n) => Value::Number(Number::from(n)),
                        Plain::String => Value::String(text.into_owned()),
                    }
                } else {
                    Value::String(text.into_owned())
                };
                Some((value, Node::Leaf(at)))
            }
            // Aliases, anchors, and any event a later parser version adds.
            _ => return None,
        };
        let Some((value, node)) = done else { continue };
        nodes += 1;
        if nodes > MAX_NODES {
            return None;
        }
        match stack.last_mut() {
            None => root = Some((value, node)),
            Some(Open::Seq { items, nodes, .. }) => {
                items.push(value);
                nodes.push(node);
            }
            Some(Open::Map { map, entries, key, .. }) => {
                let (k, key_at) = key.take()?;
                entries.push((k.as_str().into(), key_at, node));
                map.insert(k, value);
            }
        }
    }
    if !stack.is_empty() {
        return None;
    }
    Some(match root {
        Some((value, node)) => (value, Some(node)),
        None => (Value::Null, None),
    })
}

/// Whether a collection may start here and still be read the one-pass way: untagged, not
/// anchored, within the depth limit, and not a (non-string) key.
fn may_open(stack: &[Open], anchor: usize, tagged: bool) -> bool {
    anchor == 0 && !tagged && stack.len() < MAX_DEPTH && !expects_key(stack)
}

/// Whether the next node read is a key of the innermost map.
fn expects_key(stack: &[Open]) -> bool {
    matches!(stack.last(), Some(Open::Map { key: None, .. }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-pass way takes `doc` and reads it as serde-saphyr does, with the skeleton `locate`
    /// builds.
    fn same(doc: &str) {
        let (value, skeleton) = parse_plain(doc, 3).unwrap_or_else(|| panic!("not taken the one-pass way: {doc:?}"));
        let reference: Value = serde_saphyr::from_str(doc).unwrap();
        assert_eq!(value, reference, "{doc:?}");
        assert_eq!(skeleton, super::super::locate::parse(doc, 3), "{doc:?}");
    }

    /// The one-pass way leaves `doc` to serde-saphyr.
    fn left(doc: &str) {
        assert!(parse_plain(doc, 0).is_none(), "taken the one-pass way: {doc:?}");
    }

    #[test]
    fn plain_scalars_that_are_certain() {
        for (text, want) in [
            ("", Plain::Null),
            ("~", Plain::Null),
            ("Null", Plain::Null),
            ("yes", Plain::Bool(true)),
            ("OFF", Plain::Bool(false)),
            ("N", Plain::Bool(false)),
            ("0", Plain::Unsigned(0)),
            ("8080", Plain::Unsigned(8080)),
            ("18446744073709551615", Plain::Unsigned(u64::MAX)),
            ("-1", Plain::Signed(-1)),
            ("web", Plain::String),
            ("500m", Plain::String),
            ("128Mi", Plain::String),
            ("10%", Plain::String),
            ("nullable", Plain::String),
            ("nginx:1.27", Plain::String),
            ("/healthz", Plain::String),
            ("$(POD_NAME)", Plain::String),
            ("--v=2", Plain::String),
            ("-Xmx512m", Plain::String),
            ("1.15.1", Plain::String),
            ("^[a-z]*$", Plain::String),
            // Longer than any null, boolean or special spelling.
            ("kubernetes.io/hostname", Plain::String),
            ("/etc/config/app.yaml", Plain::String),
            ("infinityx", Plain::String),
            ("nullnullnull", Plain::String),
            // Hashes that start with a digit: letters no number spelling has.
            ("3b1ebf7df0232d1675896f67b66373db", Plain::String),
            ("1f", Plain::String),
            ("12ab", Plain::String),
        ] {
            assert_eq!(plain(text), Some(want), "{text:?}");
        }
        for text in [
            "1.5",
            "0x1F",
            "0o17",
            "0b1",
            "010",
            "-0",
            "1e3",
            "1_000",
            "12:30",
            "+1",
            ".inf",
            "-.inf",
            "inf",
            "NaN",
            "Infinity",
            "-inf",
            "+Infinity",
            "-nan",
            "Infinity",
            "INFINITY",
            "longer text ",
            " padded text",
            "-.5",
            "+5",
            "18446744073709551616",
            "-9223372036854775809",
            "2026-12-01",
            "~x",
            "0x1f",
            "1e5",
            "0b101",
            "0o17",
            "1E-3",
            "0b12",
        ] {
            assert_eq!(plain(text), None, "{text:?}");
        }
    }

    #[test]
    fn reads_manifests_as_serde_saphyr_does() {
        same(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  labels: {app: web, \"q\": 'x'}\nspec:\n  replicas: 3\n  paused: false\n  minReadySeconds: -1\n  selector:\n    matchLabels:\n      app: web\n  template:\n    spec:\n      containers:\n      - name: a\n        image: \"nginx:1.27\"\n        args: [--a, \"b\", 'c', 500m]\n        command:\n        - |\n          echo hi\n          exit 0\n        - >\n          folded\n          text\n        env:\n        - {name: A, value: \"1.5\"}\n        - name: B\n          value:\n        resources: {limits: {cpu: 500m, memory: 128Mi}}\n",
        );
        same("# only a comment\n");
        same("--- # marker\na: 1\n...\n");
        same("{\"json\": [1, -2, true, null, \"s\"], \"n\": {}}");
        same("a: yes\nb: On\nc: ~\nd:\ne: 'yes'\nf: \"null\"\n");
        same("key with spaces: v\n\"quoted key\": v\n'single': v\n");
        same("multi: line\n  plain text\nnext: x\n");
        same("- a\n- - b\n  - c\n- {}\n- []\n");
    }

    #[test]
    fn leaves_to_serde_saphyr_what_is_not_certain() {
        left("a: !!str 1\n");
        left("a: &x 1\nb: *x\n");
        left("base: &b {x: 1}\nd:\n  <<: *b\n");
        left("a: 1\na: 2\n");
        left("a: 1.5\n");
        left("a: 0x1F\n");
        left("1: one\n");
        left("true: t\n");
        left("? [a]\n: b\n");
        left("%YAML 1.2\n---\na: 1\n");
        left("a: [unclosed\n");
        left(&format!("{}x{}", "[".repeat(61), "]".repeat(61)));
        // More comments in a row than serde-saphyr's parser buffers: it refuses the document.
        let comments = format!("a: 1\n{}b: 2\n", "# c\n".repeat(40));
        if serde_saphyr::from_str::<Value>(&comments).is_err() {
            left(&comments);
        } else {
            same(&comments);
        }
    }

    /// Through [`parse`], whatever the way: the same value as serde-saphyr, and its error.
    #[test]
    fn parse_gives_serde_saphyrs_value_or_error() {
        for doc in ["a: 1.5\n", "a: &x 1\nb: *x\n", "a: web\n"] {
            let (value, _) = parse(doc, 0).unwrap();
            assert_eq!(value, serde_saphyr::from_str::<Value>(doc).unwrap());
        }
        let e = parse("a: 1\na: 2\n", 0).unwrap_err();
        assert_eq!(e, serde_saphyr::from_str::<Value>("a: 1\na: 2\n").unwrap_err().to_string());
    }
}
