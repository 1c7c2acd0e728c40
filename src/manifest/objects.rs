//! Loaded documents into the engine's objects, and the static view they make.

use crate::core::model::{self, Object};
use crate::core::view::Index;

use super::cores::map_on_cores;
use super::source::{Document, LoadError, Loaded, Origin};

/// A decoded object with its origin.
pub struct Decoded {
    pub object: Object,
    pub origin: Origin,
}

/// Decodes the documents of known kinds; other kinds are skipped quietly.
pub fn decode(documents: &[Document], namespace: &str, errors: &mut Vec<LoadError>) -> Vec<Decoded> {
    let mut out = Vec::new();
    let objects = map_on_cores(documents, |doc| model::decode(&doc.value, namespace));
    for (doc, object) in documents.iter().zip(objects) {
        match object {
            Ok(Some(object)) => out.push(Decoded { object, origin: doc.origin.clone() }),
            Ok(None) => {}
            Err(e) => errors.push(decode_error(&doc.origin, &e)),
        }
    }
    out
}

/// An object that does not decode, as an error naming its file, document and `List` item.
pub fn decode_error(origin: &Origin, e: &model::DecodeError) -> LoadError {
    LoadError {
        file: origin.file.clone(),
        document: Some(origin.document),
        message: match origin.item {
            Some(i) => format!("items[{i}]: {e}"),
            None => e.to_string(),
        },
    }
}

/// The static view of everything in `loaded` (`serve --cluster FILE`): objects of other kinds
/// are skipped; an object that does not decode, or a file that does not read, is an error.
pub fn static_view(loaded: &Loaded, namespace: &str) -> Result<Index, LoadError> {
    let mut errors = loaded.errors.clone();
    let decoded = decode(&loaded.documents, namespace, &mut errors);
    if let Some(e) = errors.into_iter().next() {
        return Err(e);
    }
    let mut index = Index::new();
    for d in &decoded {
        index.insert_object(&d.object);
    }
    Ok(index)
}
