//! YAML documents into JSON values, with their skeletons (source positions) when it costs nothing.
//!
//! serde-saphyr decodes any YAML and is the reference. On a large bundle it is most of `check`'s
//! time, and finding source positions takes a second parse of the same text. What `kubectl`, Helm
//! and kustomize write is plain block YAML, which the [block reader](super::block) reads straight
//! from the text, value and skeleton together, several times faster; whatever it is not certain to
//! read exactly as serde-saphyr does goes to serde-saphyr, whole (its errors read as they always
//! did). Tests, the corpus test and the `yaml` fuzz target hold the two to the same value and the
//! same skeleton.

use serde_json::Value;

use super::block::parse_block;
use super::skeleton::Node;

/// A document's value, and its skeleton when the block reader read it (`None` when serde-saphyr
/// did: `locate` then parses it again if a finding needs a position in it). Lines of the skeleton
/// are shifted by `line_offset`.
pub fn parse(doc: &str, line_offset: usize) -> Result<(Value, Option<Node>), serde_saphyr::Error> {
    if let Some((value, skeleton)) = parse_block(doc, line_offset) {
        return Ok((value, Some(skeleton)));
    }
    serde_saphyr::from_str::<Value>(doc).map(|v| (v, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Through [`parse`], whatever the way: the same value as serde-saphyr, and its error.
    #[test]
    fn parse_gives_serde_saphyrs_value_or_error() {
        for doc in ["a: 1.5\n", "a: &x 1\nb: *x\n", "a: web\n", "{\"json\": [1, null]}\n"] {
            let (value, _) = parse(doc, 0).unwrap();
            assert_eq!(value, serde_saphyr::from_str::<Value>(doc).unwrap());
        }
        let e = parse("a: 1\na: 2\n", 0).unwrap_err();
        assert_eq!(e.to_string(), serde_saphyr::from_str::<Value>("a: 1\na: 2\n").unwrap_err().to_string());
    }

    /// The block reader's skeleton is the one `locate` builds from the parser's events.
    #[test]
    fn the_block_readers_skeleton_is_the_parsers() {
        let doc = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  labels: {app: web}\nspec:\n  replicas: 3\n  template:\n    spec:\n      containers:\n      - name: a\n        args: [--a, \"b\"]\n";
        let (_, skeleton) = parse(doc, 3).unwrap();
        assert_eq!(skeleton, crate::manifest::skeleton::parse(doc, 3));
    }
}
