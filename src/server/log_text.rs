//! The fields of `serve`'s text log when it is not styled (a pod's log, a pipe, a file).
//!
//! The same text as tracing-subscriber's default field formatter (`name=value` separated by single
//! spaces, the message bare, strings quoted, the `log.*` fields of events bridged from the `log`
//! crate left out), written straight: the default one styles every name and `=` through
//! nu-ansi-term even with colours off, which was 40% of the per-request line's instructions. Its
//! extension point for this is `FormatFields`, through a visitor; tracing-subscriber's own
//! `debug_fn(..).delimited(" ")` would do it but writes a second space where a `log.*` field is
//! left out, hence this small visitor.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{MakeVisitor, VisitFmt, VisitOutput};
use tracing_subscriber::fmt::format::Writer;

/// The field formatter: `tracing_subscriber::fmt().fmt_fields(PlainFields)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct PlainFields;

/// Writes one event's (or span's) fields to a line.
pub struct PlainVisitor<'w> {
    writer: Writer<'w>,
    seen: bool,
    result: fmt::Result,
}

impl<'w> MakeVisitor<Writer<'w>> for PlainFields {
    type Visitor = PlainVisitor<'w>;

    fn make_visitor(&self, writer: Writer<'w>) -> Self::Visitor {
        PlainVisitor { writer, seen: false, result: Ok(()) }
    }
}

impl PlainVisitor<'_> {
    /// The separator before a field, if the field is written at all.
    fn start(&mut self, field: &Field) -> Option<&'static str> {
        if self.result.is_err() || field.name().starts_with("log.") {
            return None;
        }
        let separator = if self.seen { " " } else { "" };
        self.seen = true;
        Some(separator)
    }
}

impl Visit for PlainVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            if let Some(separator) = self.start(field) {
                self.result = self.writer.write_str(separator).and_then(|()| self.writer.write_str(value));
            }
        } else {
            self.record_debug(field, &value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let Some(separator) = self.start(field) else { return };
        // The fixed parts as strings: one formatting call a field, for the value.
        let w = &mut self.writer;
        self.result = w.write_str(separator).and_then(|()| match field.name() {
            "message" => write!(w, "{value:?}"),
            name => w.write_str(name).and_then(|()| w.write_str("=")).and_then(|()| write!(w, "{value:?}")),
        });
    }
}

impl VisitOutput<fmt::Result> for PlainVisitor<'_> {
    fn finish(self) -> fmt::Result {
        self.result
    }
}

impl VisitFmt for PlainVisitor<'_> {
    fn writer(&mut self) -> &mut dyn fmt::Write {
        &mut self.writer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A `MakeWriter` into a shared buffer.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What each formatter writes for the events `emit` sends, timestamps left out.
    fn lines(plain: bool, emit: impl Fn()) -> String {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let builder = tracing_subscriber::fmt().without_time().with_ansi(false).with_writer(move || writer.clone());
        if plain {
            tracing::subscriber::with_default(builder.fmt_fields(PlainFields).finish(), &emit);
        } else {
            tracing::subscriber::with_default(builder.finish(), &emit);
        }
        String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap()
    }

    struct Shown;
    impl fmt::Display for Shown {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("shop/web")
        }
    }

    #[test]
    fn the_line_is_the_default_formatters_without_its_styling() {
        let emit = || {
            tracing::info!(
                webhook = "validate",
                uid = %"0a1b",
                object = %Shown,
                dry_run = false,
                latency_us = 42u64,
                ratio = 0.5f64,
                rules = %"",
                "admission"
            );
            tracing::warn!(error = %"bad \"quote\"", "bad request");
            tracing::info!("a message, no field");
            tracing::info!(only = 1, "");
            let err = std::io::Error::other("disk full");
            tracing::error!(error = &err as &dyn std::error::Error, "with an error");
            tracing::info!(message = "a message given as a str field", then = "this");
        };
        let plain = lines(true, emit);
        assert_eq!(plain, lines(false, emit));
        assert!(
            plain.contains(
                "admission webhook=\"validate\" uid=0a1b object=shop/web dry_run=false latency_us=42 ratio=0.5 rules="
            ),
            "{plain}"
        );
        assert_eq!(plain.lines().count(), 6, "{plain}");
    }

    #[test]
    fn log_crate_fields_are_left_out_without_a_second_space() {
        let emit = || tracing::info!(log.target = "rustls::conn", code = 7, "from log");
        let plain = lines(true, emit);
        assert_eq!(plain, lines(false, emit));
        assert!(plain.ends_with(": from log code=7\n"), "{plain}");
    }
}
