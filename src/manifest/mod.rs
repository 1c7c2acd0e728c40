//! Reading YAML and JSON manifests with their source positions: what `check` lints, what
//! `serve --cluster FILE` builds its view from. The files, in the order they import each other:
//! [`source`] and [`skeleton`] (data), [`block`] (the fast reader), [`yaml`] (one document: the
//! block reader, else serde-saphyr), [`locate`] (field paths to lines and columns), [`load`]
//! (paths to documents), [`objects`] (documents to the engine's objects and a static view), with
//! [`cores`] spreading documents over the cores.

pub mod block;
pub mod cores;
pub mod load;
pub mod locate;
pub mod objects;
pub mod skeleton;
pub mod source;
pub mod yaml;

pub use load::{add_text, add_text_mapped, load, load_mapped, load_with, split_documents};
pub use locate::Locator;
pub use source::{Document, LoadError, LoadOptions, Loaded, Origin, Source, Template, document_label};
