//! Block-style manifests read straight from the text, line by line.
//!
//! What `kubectl`, Helm and kustomize write is a narrow part of YAML: block maps and sequences by
//! indentation, `key: value` lines, plain and single-line quoted scalars, one-line flow
//! collections and literal block scalars. This reader takes exactly that part, builds the value
//! and the skeleton together, and gives up on anything else (tabs, anchors, tags, multi-line plain
//! or quoted scalars, folded scalars, complex keys, flow collections over several lines, long
//! runs of comments, ...): serde-saphyr then decides. It reads
//! what it takes as serde-saphyr does (same value) and places every node where serde-saphyr's
//! parser does (same skeleton); tests and the `check` fuzz target hold it to both.

use serde_json::{Map, Number, Value};

use super::skeleton::{Node, Position};

/// Deeper than this, serde-saphyr's budget (64) is near: leave it to serde-saphyr.
const MAX_DEPTH: usize = 60;
/// serde-saphyr's budget allows 250,000 nodes and 1,000,000 events per document.
const MAX_NODES: usize = 200_000;
/// serde-saphyr's budget allows 64 MiB of scalar text per document.
const MAX_DOCUMENT_BYTES: usize = 16 << 20;

/// Implicit keys are limited to 1,024 characters (the parser's look-ahead); flow collections
/// could be keys too. Longer ones are left to the parser.
const MAX_KEY_BYTES: usize = 1000;
/// serde-saphyr's parser buffers at most 32 comments while it looks ahead for a key: long runs of
/// comment lines are left to it, so that it refuses what it refuses.
const MAX_COMMENT_RUN: usize = 16;

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

/// Why the reader gave up: the document is not one it reads with certainty.
struct Bail;

type Read<T> = Result<T, Bail>;

/// A line holding content (not blank, not only a comment).
#[derive(Clone, Copy)]
struct Line {
    /// Byte offsets: the line's start, its first non-space character, and its end (the `\n`).
    start: usize,
    content: usize,
    end: usize,
    /// 1-based line number in the document.
    number: usize,
}

impl Line {
    fn indent(&self) -> usize {
        self.content - self.start
    }
}

struct Reader<'a> {
    text: &'a str,
    line_offset: usize,
    /// Start of the first line not consumed yet, and its number.
    pos: usize,
    number: usize,
    nodes: usize,
    /// Columns count characters: bytes, when the text is ASCII.
    ascii: bool,
    /// The last line `peek` found, while `pos` has not moved (a line that ends several nested
    /// blocks is peeked once per block).
    peeked: Option<Line>,
}

/// The value and skeleton of a block-style document, or `None` when it is not one this reader
/// takes with certainty (lines of the skeleton are shifted by `line_offset`).
pub fn parse_block(doc: &str, line_offset: usize) -> Option<(Value, Node)> {
    // Tabs, carriage returns, control characters and byte-order marks change how lines read (or
    // are errors); a document without a final line break ends its last scalar differently.
    if doc.len() > MAX_DOCUMENT_BYTES || !doc.ends_with('\n') || !printable(doc) {
        return None;
    }
    let mut reader =
        Reader { text: doc, line_offset, pos: 0, number: 1, nodes: 0, ascii: doc.is_ascii(), peeked: None };
    reader.document().ok()
}

impl<'a> Reader<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn position(&self, line: &Line, at: usize) -> Position {
        let prefix = &self.text[line.start..at];
        let column = if self.ascii { prefix.len() } else { prefix.chars().count() };
        let narrow = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Position { line: narrow(line.number + self.line_offset), column: narrow(column + 1), offset: narrow(at) }
    }

    fn count_node(&mut self) -> Read<()> {
        self.nodes += 1;
        if self.nodes > MAX_NODES { Err(Bail) } else { Ok(()) }
    }

    fn line_end(&self, from: usize) -> usize {
        self.text[from..].find('\n').map_or(self.text.len(), |i| from + i)
    }

    /// The next line with content, skipping blank and comment lines (not consumed).
    fn peek(&mut self) -> Read<Option<Line>> {
        if let Some(line) = self.peeked
            && line.start == self.pos
        {
            return Ok(Some(line));
        }
        let bytes = self.bytes();
        let mut comments = 0;
        while self.pos < bytes.len() {
            let end = self.line_end(self.pos);
            let content = self.pos + bytes[self.pos..end].iter().take_while(|&&b| b == b' ').count();
            if content < end && bytes[content] != b'#' {
                let line = Line { start: self.pos, content, end, number: self.number };
                self.peeked = Some(line);
                return Ok(Some(line));
            }
            if content < end {
                comments += 1;
                if comments > MAX_COMMENT_RUN {
                    return Err(Bail);
                }
            }
            self.pos = end + 1;
            self.number += 1;
        }
        Ok(None)
    }

    /// Moves past `line`.
    fn consume(&mut self, line: &Line) {
        self.pos = line.end + 1;
        self.number = line.number + 1;
    }

    fn document(&mut self) -> Read<(Value, Node)> {
        // The `---` marker that opens the document, alone or with a comment.
        if let Some(rest) = self.text.strip_prefix("---") {
            let end = self.line_end(3);
            let after = rest[..end - 3].trim_start_matches(' ');
            if !(after.is_empty() || (after.starts_with('#') && rest.starts_with(' '))) {
                return Err(Bail);
            }
            self.pos = end + 1;
            self.number = 2;
        }
        let line = self.peek()?.ok_or(Bail)?;
        let root = self.block_node(line, 0)?;
        match self.peek()? {
            None => Ok(root),
            Some(_) => Err(Bail),
        }
    }

    /// A block map or sequence starting at `line`'s content.
    fn block_node(&mut self, line: Line, depth: usize) -> Read<(Value, Node)> {
        if depth >= MAX_DEPTH {
            return Err(Bail);
        }
        if self.is_entry(&line, line.indent()) {
            self.sequence(line, false, depth)
        } else {
            self.mapping(line, line.content, depth)
        }
    }

    /// Whether `line` is a sequence entry (`- ...` or a lone `-`) at `indent`.
    fn is_entry(&self, line: &Line, indent: usize) -> bool {
        let bytes = self.bytes();
        line.indent() == indent
            && bytes[line.content] == b'-'
            && (line.content + 1 == line.end || bytes[line.content + 1] == b' ')
    }

    /// A block sequence whose first entry is `line`. `indentless` when it is a map value written
    /// at the map's own indentation (`key:` then `- item` below `key`).
    fn sequence(&mut self, first: Line, indentless: bool, depth: usize) -> Read<(Value, Node)> {
        let indent = first.indent();
        let mut items = Vec::new();
        let mut nodes = Vec::new();
        let mut at = self.position(&first, first.content);
        let mut line = first;
        loop {
            let bytes = self.bytes();
            let item = line.content + 1 + bytes[line.content + 1..line.end].iter().take_while(|&&b| b == b' ').count();
            if indentless && items.is_empty() {
                // The parser places an indentless sequence at its first item's first token.
                if item == line.end {
                    return Err(Bail);
                }
                at = self.position(&line, item);
            }
            let (value, node) = if item == line.end {
                // `-` alone: the item is below, or null (placed at the end of the line).
                self.consume(&line);
                match self.peek()? {
                    Some(next) if next.indent() > indent => self.block_node(next, depth + 1)?,
                    _ => (Value::Null, Node::Leaf(self.position(&line, line.end))),
                }
            } else if bytes[item] == b'#' || (bytes[item] == b'-' && (item + 1 == line.end || bytes[item + 1] == b' '))
            {
                return Err(Bail);
            } else if self.key_end(&line, item)?.is_some() {
                // `- key: value`: a map whose entries are indented to its first key.
                if depth + 1 >= MAX_DEPTH {
                    return Err(Bail);
                }
                self.mapping(line, item, depth + 1)?
            } else {
                self.inline_value(line, item, indent, depth + 1)?
            };
            self.count_node()?;
            items.push(value);
            nodes.push(node);
            match self.peek()? {
                Some(next) if self.is_entry(&next, indent) => line = next,
                Some(next) if next.indent() < indent || (indentless && next.indent() == indent) => break,
                None => break,
                Some(_) => return Err(Bail),
            }
        }
        Ok((Value::Array(items), Node::Seq(at, nodes.into_boxed_slice())))
    }

    /// A block map whose first key starts at byte `key_at` of `first` (its column is the map's
    /// indentation: a map inside a sequence entry starts after the `- `).
    fn mapping(&mut self, first: Line, key_at: usize, depth: usize) -> Read<(Value, Node)> {
        let indent = key_at - first.start;
        let at = self.position(&first, key_at);
        let mut map = Map::new();
        let mut entries = Vec::new();
        let (mut line, mut key_at) = (first, key_at);
        loop {
            let (key, colon) = self.key(&line, key_at)?;
            let key_position = self.position(&line, key_at);
            self.count_node()?;
            let bytes = self.bytes();
            let value_at = colon + 1 + bytes[colon + 1..line.end].iter().take_while(|&&b| b == b' ').count();
            let (value, node) = if value_at == line.end || bytes[value_at] == b'#' {
                // `key:` (maybe with a comment): the value is below, or null (placed at the colon).
                self.consume(&line);
                match self.peek()? {
                    Some(next) if next.indent() > indent => self.block_node(next, depth + 1)?,
                    Some(next) if self.is_entry(&next, indent) => {
                        if depth + 1 >= MAX_DEPTH {
                            return Err(Bail);
                        }
                        self.sequence(next, true, depth + 1)?
                    }
                    _ => (Value::Null, Node::Leaf(self.position(&line, colon))),
                }
            } else {
                self.inline_value(line, value_at, indent, depth + 1)?
            };
            self.count_node()?;
            entries.push((Box::<str>::from(key.as_str()), key_position, node));
            if map.insert(key, value).is_some() {
                // A duplicate key: serde-saphyr refuses it.
                return Err(Bail);
            }
            match self.peek()? {
                Some(next) if next.indent() == indent && !self.is_entry(&next, indent) => {
                    (line, key_at) = (next, next.content);
                }
                Some(next) if next.indent() < indent => break,
                None => break,
                // Deeper than the map after a whole entry (a multi-line scalar, or an error), or
                // a `- ` entry at the map's own indentation (an error): the parser decides.
                Some(_) => return Err(Bail),
            }
        }
        Ok((Value::Object(map), Node::Map(at, false, entries.into_boxed_slice())))
    }

    /// Where the `:` of a key starting at `at` is, if the text there is `key: ...` (or `key:` at
    /// the end of the line).
    fn key_end(&self, line: &Line, at: usize) -> Read<Option<usize>> {
        let bytes = self.bytes();
        match bytes[at] {
            // A flow collection is never a key here (complex keys are left to the parser).
            b'[' | b'{' => Ok(None),
            quote @ (b'"' | b'\'') => {
                let (_, close) = self.quoted(line, at, quote)?;
                let colon = close + 1;
                Ok((colon < line.end && bytes[colon] == b':' && (colon + 1 == line.end || bytes[colon + 1] == b' '))
                    .then_some(colon))
            }
            _ => Ok(match plain_end(&self.bytes()[at..line.end]) {
                PlainEnd::Key(colon) => Some(at + colon),
                PlainEnd::Text(_) => None,
            }),
        }
    }

    /// The key of the map entry at `at`, and where its `:` is.
    fn key(&self, line: &Line, at: usize) -> Read<(String, usize)> {
        let colon = self.key_end(line, at)?.ok_or(Bail)?;
        if colon - at > MAX_KEY_BYTES {
            return Err(Bail);
        }
        let bytes = self.bytes();
        let key = match bytes[at] {
            quote @ (b'"' | b'\'') => {
                let key = self.quoted(line, at, quote)?.0;
                if key == "<<" {
                    return Err(Bail);
                }
                key
            }
            first => {
                let text = &self.text[at..colon];
                // Keys are strings: plain text that is certainly a string, not an indicator.
                if is_indicator(first) || text.ends_with(' ') || text == "<<" || plain(text) != Some(Plain::String) {
                    return Err(Bail);
                }
                text.to_string()
            }
        };
        Ok((key, colon))
    }

    /// A value that starts on the line at `at`: a scalar, a one-line flow collection or a literal
    /// block scalar. `parent` is the indentation of the map or sequence holding it.
    fn inline_value(&mut self, line: Line, at: usize, parent: usize, depth: usize) -> Read<(Value, Node)> {
        let bytes = self.bytes();
        let position = self.position(&line, at);
        let (value, node, end) = match bytes[at] {
            quote @ (b'"' | b'\'') => {
                let (text, close) = self.quoted(&line, at, quote)?;
                (Value::String(text), Node::Leaf(position), close + 1)
            }
            b'[' | b'{' => {
                let (value, node, end) = self.flow(&line, at, depth)?;
                if end - at > MAX_KEY_BYTES {
                    return Err(Bail);
                }
                (value, node, end)
            }
            b'|' => return self.literal(line, at, parent),
            first if is_indicator(first) || (first == b'-' && at + 1 < line.end && bytes[at + 1] == b' ') => {
                return Err(Bail);
            }
            _ => {
                // A `: ` (or a final `:`) before any comment would make it a key.
                let end = match plain_end(&bytes[at..line.end]) {
                    PlainEnd::Key(_) => return Err(Bail),
                    PlainEnd::Text(end) => end,
                };
                let text = self.text[at..at + end].trim_end_matches(' ');
                let value = match plain(text).ok_or(Bail)? {
                    Plain::Null => Value::Null,
                    Plain::Bool(b) => Value::Bool(b),
                    Plain::Unsigned(n) => Value::Number(Number::from(n)),
                    Plain::Signed(n) => Value::Number(Number::from(n)),
                    Plain::String => Value::String(text.to_string()),
                };
                self.consume(&line);
                return Ok((value, Node::Leaf(position)));
            }
        };
        // After a quoted scalar or a flow collection: only spaces and a comment.
        let rest = &self.text[end..line.end];
        let trimmed = rest.trim_start_matches(' ');
        if !(trimmed.is_empty() || (trimmed.starts_with('#') && trimmed.len() < rest.len())) {
            return Err(Bail);
        }
        self.consume(&line);
        Ok((value, node))
    }

    /// A quoted scalar on one line, from its opening quote at `at`: its text and where its closing
    /// quote is.
    fn quoted(&self, line: &Line, at: usize, quote: u8) -> Read<(String, usize)> {
        let bytes = self.bytes();
        let mut text = String::new();
        let mut run = at + 1;
        let mut i = at + 1;
        while i < line.end {
            match bytes[i] {
                b'\'' if quote == b'\'' => {
                    text.push_str(&self.text[run..i]);
                    if i + 1 < line.end && bytes[i + 1] == b'\'' {
                        text.push('\'');
                        i += 2;
                        run = i;
                        continue;
                    }
                    return Ok((text, i));
                }
                b'"' if quote == b'"' => {
                    text.push_str(&self.text[run..i]);
                    return Ok((text, i));
                }
                b'\\' if quote == b'"' => {
                    text.push_str(&self.text[run..i]);
                    let escaped = match bytes.get(i + 1) {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'n') => '\n',
                        Some(b't') => '\t',
                        Some(b'r') => '\r',
                        _ => return Err(Bail),
                    };
                    text.push(escaped);
                    i += 2;
                    run = i;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
        // No closing quote on this line: a multi-line scalar (or an error).
        Err(Bail)
    }

    /// A flow collection that opens and closes on this line, from its bracket at `at`: its value,
    /// skeleton, and the byte after its closing bracket.
    fn flow(&mut self, line: &Line, at: usize, depth: usize) -> Read<(Value, Node, usize)> {
        if depth >= MAX_DEPTH {
            return Err(Bail);
        }
        let bytes = self.bytes();
        let is_map = bytes[at] == b'{';
        let close = if is_map { b'}' } else { b']' };
        let position = self.position(line, at);
        let skip = |mut i: usize| {
            while i < line.end && bytes[i] == b' ' {
                i += 1;
            }
            i
        };
        let mut i = skip(at + 1);
        let mut items = Vec::new();
        let mut nodes = Vec::new();
        let mut map = Map::new();
        let mut entries = Vec::new();
        if i < line.end && bytes[i] == close {
            i += 1;
        } else {
            loop {
                let key = if is_map {
                    let key_position = self.position(line, i);
                    let (key, end) = match bytes.get(i) {
                        Some(&quote @ (b'"' | b'\'')) => {
                            let (text, q) = self.quoted(line, i, quote)?;
                            (text, q + 1)
                        }
                        _ => {
                            let end = self.flow_plain_end(line, i)?;
                            let text = self.text[i..end].trim_end_matches(' ');
                            if plain(text) != Some(Plain::String) || text == "<<" {
                                return Err(Bail);
                            }
                            (text.to_string(), end)
                        }
                    };
                    // `key: value`, with a space after the colon.
                    if !(end + 1 < line.end && bytes[end] == b':' && bytes[end + 1] == b' ') {
                        return Err(Bail);
                    }
                    self.count_node()?;
                    i = skip(end + 1);
                    Some((key, key_position))
                } else {
                    None
                };
                let item_position = self.position(line, i);
                let (value, node, end) = match bytes.get(i) {
                    Some(&quote @ (b'"' | b'\'')) => {
                        let (text, q) = self.quoted(line, i, quote)?;
                        (Value::String(text), Node::Leaf(item_position), q + 1)
                    }
                    Some(b'[' | b'{') => self.flow(line, i, depth + 1)?,
                    _ => {
                        let end = self.flow_plain_end(line, i)?;
                        let text = self.text[i..end].trim_end_matches(' ');
                        let value = match plain(text).ok_or(Bail)? {
                            Plain::Null => return Err(Bail),
                            Plain::Bool(b) => Value::Bool(b),
                            Plain::Unsigned(n) => Value::Number(Number::from(n)),
                            Plain::Signed(n) => Value::Number(Number::from(n)),
                            Plain::String => Value::String(text.to_string()),
                        };
                        (value, Node::Leaf(item_position), end)
                    }
                };
                self.count_node()?;
                match key {
                    Some((key, key_position)) => {
                        entries.push((Box::<str>::from(key.as_str()), key_position, node));
                        if map.insert(key, value).is_some() {
                            return Err(Bail);
                        }
                    }
                    None => {
                        items.push(value);
                        nodes.push(node);
                    }
                }
                i = skip(end);
                match bytes.get(i) {
                    Some(b',') if i < line.end => {
                        i = skip(i + 1);
                        // A trailing comma, or the line ends: not for this reader.
                        if i >= line.end || bytes[i] == close {
                            return Err(Bail);
                        }
                    }
                    Some(&b) if b == close && i < line.end => {
                        i += 1;
                        break;
                    }
                    _ => return Err(Bail),
                }
            }
        }
        Ok(if is_map {
            (Value::Object(map), Node::Map(position, true, entries.into_boxed_slice()), i)
        } else {
            (Value::Array(items), Node::Seq(position, nodes.into_boxed_slice()), i)
        })
    }

    /// Where a plain scalar inside a flow collection ends (at the `,`, `]` or `}` after it, or at
    /// the `:` of a key), refusing spellings whose reading depends on flow rules.
    fn flow_plain_end(&self, line: &Line, at: usize) -> Read<usize> {
        let bytes = self.bytes();
        if at >= line.end || is_indicator(bytes[at]) || bytes[at] == b'-' && bytes.get(at + 1) == Some(&b' ') {
            return Err(Bail);
        }
        let mut i = at;
        while i < line.end {
            match bytes[i] {
                b',' | b']' | b'}' => return Ok(i),
                b':' => return if bytes.get(i + 1) == Some(&b' ') { Ok(i) } else { Err(Bail) },
                b'#' | b'[' | b'{' | b'"' | b'\'' => return Err(Bail),
                _ => i += 1,
            }
        }
        Err(Bail)
    }

    /// A literal block scalar (`|` or `|-`) whose header is at `at`; its lines are indented more
    /// than `parent`.
    fn literal(&mut self, line: Line, at: usize, parent: usize) -> Read<(Value, Node)> {
        let bytes = self.bytes();
        let strip = bytes.get(at + 1) == Some(&b'-');
        let header_end = at + 1 + usize::from(strip);
        if bytes[header_end..line.end].iter().any(|&b| b != b' ') {
            return Err(Bail);
        }
        self.consume(&line);
        // The first line sets the indentation; leading blank lines are left to the parser.
        let start = self.pos;
        if start >= bytes.len() {
            return Err(Bail);
        }
        let end = self.line_end(start);
        let indent = bytes[start..end].iter().take_while(|&&b| b == b' ').count();
        if indent <= parent || start + indent == end {
            return Err(Bail);
        }
        let first = Line { start, content: start + indent, end, number: self.number };
        let position = self.position(&first, first.content);
        let mut text = String::new();
        let mut pending_blank = 0;
        loop {
            let start = self.pos;
            if start >= bytes.len() {
                break;
            }
            let end = self.line_end(start);
            let spaces = bytes[start..end].iter().take_while(|&&b| b == b' ').count();
            if start + spaces == end {
                // A blank line: part of the text only if more text follows.
                if spaces > indent {
                    return Err(Bail);
                }
                pending_blank += 1;
            } else if spaces >= indent {
                for _ in 0..pending_blank {
                    text.push('\n');
                }
                pending_blank = 0;
                text.push_str(&self.text[start + indent..end]);
                text.push('\n');
            } else {
                break;
            }
            self.pos = end + 1;
            self.number += 1;
        }
        if strip {
            text.pop();
        }
        Ok((Value::String(text), Node::Leaf(position)))
    }
}

/// How a plain scalar that starts a line's rest `text` ends.
enum PlainEnd {
    /// At a key's `:` (followed by a space or the end of the line), before any comment.
    Key(usize),
    /// At a comment (a `#` after a space) or the end of the line.
    Text(usize),
}

fn plain_end(text: &[u8]) -> PlainEnd {
    for (i, &b) in text.iter().enumerate() {
        match b {
            b':' if i + 1 == text.len() || text[i + 1] == b' ' => return PlainEnd::Key(i),
            b'#' if i > 0 && text[i - 1] == b' ' => return PlainEnd::Text(i),
            _ => {}
        }
    }
    PlainEnd::Text(text.len())
}

/// Whether the text holds only line feeds and characters YAML prints (no tab, no carriage return,
/// no control character, no byte-order mark).
fn printable(text: &str) -> bool {
    // Printable ASCII and line feeds: one pass the compiler vectorizes; the rest is rare.
    if text.bytes().all(|b| (0x20..0x7f).contains(&b) || b == b'\n') {
        return true;
    }
    if text.bytes().any(|b| (b < 0x20 && b != b'\n') || b == 0x7f) {
        return false;
    }
    !text.chars().any(|c| matches!(c, '\u{80}'..='\u{9f}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}'))
}

/// Characters that open something other than a plain scalar (or are reserved) at its start.
fn is_indicator(b: u8) -> bool {
    matches!(
        b,
        b'?' | b':'
            | b','
            | b'['
            | b']'
            | b'{'
            | b'}'
            | b'#'
            | b'&'
            | b'*'
            | b'!'
            | b'|'
            | b'>'
            | b'\''
            | b'"'
            | b'%'
            | b'@'
            | b'`'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// The block reader takes `doc` and reads it as serde-saphyr does, with the skeleton the
    /// parser's events give.
    fn same(doc: &str) {
        let (value, skeleton) = parse_block(doc, 3).unwrap_or_else(|| panic!("not taken by the block reader: {doc:?}"));
        let reference: Value = serde_saphyr::from_str(doc).unwrap();
        assert_eq!(value, reference, "{doc:?}");
        assert_eq!(Some(skeleton), crate::manifest::skeleton::parse(doc, 3), "{doc:?}");
    }

    /// The block reader leaves `doc` to serde-saphyr.
    fn left(doc: &str) {
        assert!(parse_block(doc, 0).is_none(), "taken by the block reader: {doc:?}");
    }

    #[test]
    fn reads_manifests_as_serde_saphyr_does() {
        same(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  labels: {app: web, \"q\": 'x'}\nspec:\n  replicas: 3\n  paused: false\n  minReadySeconds: -1\n  selector:\n    matchLabels:\n      app: web\n  template:\n    spec:\n      containers:\n      - name: a\n        image: \"nginx:1.27\"\n        args: [--a, \"b\", 'c', 500m]\n        command:\n        - |\n          echo hi\n          exit 0\n        env:\n        - {name: A, value: \"1.5\"}\n        - name: B\n          value:\n        resources: {limits: {cpu: 500m, memory: 128Mi}}\n",
        );
        same("a: yes\nb: On\nc: ~\nd:\ne: 'yes'\nf: \"null\"\n");
        same("key with spaces: v\n\"quoted key\": v\n'single': v\n");
        same("- a\n- {}\n- []\n- b: 1\n  c: [2]\n");
    }

    #[test]
    fn leaves_to_serde_saphyr_what_is_not_certain() {
        left("a: !!str 1\n");
        left("a: &x 1\nb: *x\n");
        left("base: &b {x: 1}\nd:\n  <<: *b\n");
        left("a: 1.5\n");
        left("a: 0x1F\n");
        left("a: >\n  folded\n  text\n");
        left("multi: line\n  plain text\nnext: x\n");
        left("a:\tb\n");
        left("a: 1");
        left("%YAML 1.2\n---\na: 1\n");
        left("a: [unclosed\n");
        left("- - b\n  - c\n");
    }
}
