//! Fuzz target `yaml`: `check`'s fast YAML reader (the block reader) against serde-saphyr,
//! document by document, without the rest of `check` (so that libFuzzer tries many more inputs
//! than the `check` target).
//!
//! Invariants: every document the block reader (`manifest::block::parse_block`) takes,
//! serde-saphyr takes too and reads to the same value; the skeleton it builds is the one the
//! parser's events give (`manifest::skeleton::parse`); and `manifest::yaml::parse` gives
//! serde-saphyr's value, or fails where it fails.
#![no_main]

use ha_guard::manifest::{block, load, skeleton, yaml};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for span in load::split_documents(&text) {
        let doc = &text[span];
        let reference = serde_saphyr::from_str::<Value>(doc);
        if let Some((value, node)) = block::parse_block(doc, 1) {
            match &reference {
                Ok(reference) => assert_eq!(&value, reference, "the block reader reads {doc:?} differently"),
                Err(e) => panic!("the block reader takes {doc:?}, serde-saphyr refuses it: {e}"),
            }
            assert_eq!(Some(node), skeleton::parse(doc, 1), "the block reader's skeleton of {doc:?}");
        }
        match (yaml::parse(doc, 1), &reference) {
            (Ok((value, _)), Ok(reference)) => assert_eq!(&value, reference, "check reads {doc:?} differently"),
            (Err(_), Err(_)) => {}
            (got, _) => panic!("check's reader and serde-saphyr disagree on {doc:?}: {:?} vs {reference:?}", got.map(|(v, _)| v)),
        }
    }
});
