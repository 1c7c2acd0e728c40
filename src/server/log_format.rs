//! How `serve` writes its log lines: JSON (`--log-format json`, the chart's default) and the
//! fields of its text lines when they are not styled (a pod's log, a pipe, a file). The
//! per-admission line is, after the rules, the largest part of what a review costs beyond decoding
//! it, so both are written straight into the line, with the same output as tracing-subscriber's
//! own formatters (tests below compare them).
//!
//! JSON: tracing-subscriber's `.json().flatten_event(true)` streams each field through serde's
//! map serializer into an `io::Write` adapter that re-checks every fragment as UTF-8: 24.9k
//! instructions for the admission line, three times the text line. [`JsonLine`] writes the same
//! object with serde_json's escaping into one buffer. An event inside a span (whose `span` and
//! `spans` keys it would need) goes to tracing-subscriber's formatter unchanged; json-subscriber,
//! the drop-in replacement crate, was slower still on this line (29.0k).
//!
//! Text: the same text as tracing-subscriber's default field formatter (`name=value` separated by
//! single spaces, the message bare, strings quoted, the `log.*` fields of events bridged from the
//! `log` crate left out), written straight: the default one styles every name and `=` through
//! nu-ansi-term even with colours off, which was 40% of the per-request line's instructions. Its
//! extension point for this is `FormatFields`, through a visitor; tracing-subscriber's own
//! `debug_fn(..).delimited(" ")` would do it but writes a second space where a `log.*` field is
//! left out, hence this small visitor.

use std::cell::RefCell;
use std::fmt;
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_subscriber::field::{MakeVisitor, VisitFmt, VisitOutput};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::format::{Format, Json, JsonFields, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// `serve`'s JSON log lines (see [`json_subscriber`]): the same object a line as
/// tracing-subscriber's `.json().flatten_event(true)`: `timestamp`, `level`, the event's fields
/// (`message` first), `target`.
pub struct JsonLine {
    /// For events inside a span.
    in_span: Format<Json, SystemTime>,
}

impl Default for JsonLine {
    fn default() -> Self {
        JsonLine { in_span: Format::default().json().flatten_event(true) }
    }
}

impl<S, N> FormatEvent<S, N> for JsonLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'w> FormatFields<'w> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        // As tracing-subscriber decides whether a line has span keys.
        if event.parent().is_some() || ctx.lookup_current().is_some() {
            return self.in_span.format_event(ctx, writer, event);
        }
        let normalized = event.normalized_metadata();
        let meta = normalized.as_ref().unwrap_or_else(|| event.metadata());
        let write = |line: &mut Vec<u8>, mut writer: Writer<'_>| {
            line.clear();
            let mut stamp = [0u8; STAMP_LEN];
            let stamp = write_stamp(&mut stamp, since_epoch());
            line.push(b'{');
            entry(line, "timestamp", stamp);
            line.push(b',');
            entry(line, "level", meta.level().as_str());
            event.record(&mut JsonVisitor { line: &mut *line, text: String::new() });
            line.push(b',');
            entry(line, "target", meta.target());
            line.extend_from_slice(b"}\n");
            // Only serde_json's output went in, which is UTF-8.
            writer.write_str(std::str::from_utf8(line).map_err(|_| fmt::Error)?)
        };
        LINE.with(|cell| match cell.try_borrow_mut() {
            Ok(mut line) => write(&mut line, writer),
            // In use further up this thread's stack (tracing drops an event sent while another
            // is formatted, but a writer could log): a buffer of its own.
            Err(_) => write(&mut Vec::new(), writer),
        })
    }
}

/// The JSON log through [`JsonLine`], filtered by `filter`, to `writer`; `.init()` installs it.
pub fn json_subscriber<W>(filter: tracing_subscriber::EnvFilter, writer: W) -> impl Subscriber + Send + Sync + 'static
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(false)
        .fmt_fields(JsonFields::new())
        .event_format(JsonLine::default())
        .finish()
}

/// The text log (styled with ANSI colours when `styled`, else through [`PlainFields`]), stamped by
/// [`LineTime`], filtered by `filter`, to `writer`; `.init()` installs it.
pub fn text_subscriber<W>(
    filter: tracing_subscriber::EnvFilter,
    writer: W,
    styled: bool,
) -> Box<dyn Subscriber + Send + Sync + 'static>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let builder =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer).with_ansi(styled).with_timer(LineTime);
    if styled { Box::new(builder.finish()) } else { Box::new(builder.fmt_fields(PlainFields).finish()) }
}

thread_local! {
    /// The line being written, kept between lines for its capacity.
    static LINE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Each line's timestamp, as tracing-subscriber's [`SystemTime`] writes it (RFC 3339 in UTC with
/// microseconds: `2026-12-02T22:03:05.123456Z`), its date and time of day turned into text once a
/// second rather than on every line, where that was a quarter of the per-admission line's
/// instructions. `tracing_subscriber::fmt().with_timer(LineTime)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct LineTime;

impl FormatTime for LineTime {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        let mut stamp = [0u8; STAMP_LEN];
        w.write_str(write_stamp(&mut stamp, since_epoch()))
    }
}

/// The length of a [`LineTime`] stamp (its years are 1970 to 9999: see [`seconds_text`]).
const STAMP_LEN: usize = "2026-12-02T22:03:05.123456Z".len();

fn since_epoch() -> Duration {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default()
}

thread_local! {
    /// The second last stamped on this thread, and its text up to the seconds.
    static SECOND: RefCell<(u64, [u8; 19])> = const { RefCell::new((u64::MAX, [0; 19])) };
}

/// The stamp of `since_epoch` (after the Unix epoch), written into `out`.
fn write_stamp(out: &mut [u8; STAMP_LEN], since_epoch: Duration) -> &str {
    let secs = since_epoch.as_secs();
    SECOND.with(|second| {
        let mut second = second.borrow_mut();
        if second.0 != secs {
            *second = (secs, seconds_text(secs));
        }
        out[..19].copy_from_slice(&second.1);
    });
    out[19] = b'.';
    let mut micros = since_epoch.subsec_micros();
    for digit in out[20..26].iter_mut().rev() {
        *digit = b'0' + (micros % 10) as u8;
        micros /= 10;
    }
    out[26] = b'Z';
    // Only ASCII digits and punctuation went in.
    std::str::from_utf8(out).unwrap_or("")
}

/// `YYYY-MM-DDTHH:MM:SS` of `secs` after the epoch, in UTC (years 1970 to 9999; later ones, which
/// a clock does not show, as 9999-12-31T23:59:59).
fn seconds_text(secs: u64) -> [u8; 19] {
    let at = i64::try_from(secs).ok().and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok());
    let Some(at) = at.filter(|t| t.year() <= 9999) else { return *b"9999-12-31T23:59:59" };
    let text = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    );
    let mut out = [0u8; 19];
    out.copy_from_slice(&text.as_bytes()[..19]);
    out
}

/// `"key":value`, the value serialized by serde_json.
fn entry<T: serde::Serialize + ?Sized>(line: &mut Vec<u8>, key: &str, value: &T) {
    // Writing to a Vec cannot fail, and these types always serialize.
    let _ = serde_json::to_writer(&mut *line, key);
    line.push(b':');
    let _ = serde_json::to_writer(&mut *line, value);
}

/// Appends `,"name":value` for each field of an event.
struct JsonVisitor<'l> {
    line: &'l mut Vec<u8>,
    /// A `Debug` value's text, reused.
    text: String,
}

impl JsonVisitor<'_> {
    fn put<T: serde::Serialize + ?Sized>(&mut self, field: &Field, value: &T) {
        self.line.push(b',');
        entry(self.line, field.name(), value);
    }
}

impl Visit for JsonVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value);
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, &value);
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, &value);
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, &value);
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, &value);
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        use std::fmt::Write as _;
        let mut text = std::mem::take(&mut self.text);
        text.clear();
        let _ = write!(text, "{value:?}");
        self.put(field, text.as_str());
        self.text = text;
    }
}

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

/// For tests that read what was logged: a writer into a shared buffer, cloned into a
/// subscriber's `with_writer(move || buffer.clone())` (tracing-subscriber's own `Mutex<W>` writer
/// would be owned by the subscriber; the test reads the buffer beside it).
#[cfg(test)]
#[derive(Clone, Default)]
pub(crate) struct LogBuffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

#[cfg(test)]
impl std::io::Write for LogBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
impl LogBuffer {
    /// Everything written so far.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// The lines written so far that contain `needle`.
    pub(crate) fn lines_with(&self, needle: &str) -> Vec<String> {
        self.text().lines().filter(|l| l.contains(needle)).map(String::from).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What each formatter writes for the events `emit` sends, timestamps left out.
    fn lines(plain: bool, emit: impl Fn()) -> String {
        let buffer = LogBuffer::default();
        let writer = buffer.clone();
        let builder = tracing_subscriber::fmt().without_time().with_ansi(false).with_writer(move || writer.clone());
        if plain {
            tracing::subscriber::with_default(builder.fmt_fields(PlainFields).finish(), &emit);
        } else {
            tracing::subscriber::with_default(builder.finish(), &emit);
        }
        buffer.text()
    }

    struct Shown;
    impl fmt::Display for Shown {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("shop/web")
        }
    }

    /// The per-admission line's fields, and one of each other kind a field can be.
    fn admission() {
        tracing::info!(
            webhook = "validate",
            uid = %"0a1b",
            object = %Shown,
            dry_run = false,
            latency_us = 42u64,
            ratio = 0.5f64,
            rules = %"pdb-min-available-blocks=deny,inject-pdb-unhealthy-eviction",
            delta = -3i64,
            nan = f64::NAN,
            big = 1u128 << 100,
            "admission"
        );
    }

    #[test]
    fn stamps_are_rfc3339_utc_with_microseconds() {
        let stamp = |secs: u64, nanos: u32| {
            let mut out = [0u8; STAMP_LEN];
            write_stamp(&mut out, Duration::new(secs, nanos)).to_string()
        };
        assert_eq!(stamp(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(stamp(1_796_248_985, 123_456_789), "2026-12-02T22:03:05.123456Z");
        // The same second again (the cached text), then the next one, a leap day, a century.
        assert_eq!(stamp(1_796_248_985, 999_999_999), "2026-12-02T22:03:05.999999Z");
        assert_eq!(stamp(1_796_248_986, 1_000), "2026-12-02T22:03:06.000001Z");
        assert_eq!(stamp(951_868_799, 5_000), "2000-02-29T23:59:59.000005Z");
        assert_eq!(stamp(4_107_542_400, 0), "2100-03-01T00:00:00.000000Z");
        assert_eq!(stamp(u64::MAX, 0), "9999-12-31T23:59:59.000000Z");
    }

    /// The same text as tracing-subscriber's own timer, read within one second of ours.
    #[test]
    fn stamps_are_tracing_subscribers() {
        for _ in 0..100 {
            let before = since_epoch();
            let mut theirs = String::new();
            SystemTime.format_time(&mut Writer::new(&mut theirs)).unwrap();
            let after = since_epoch();
            if before.as_secs() != after.as_secs() {
                continue;
            }
            let mut out = [0u8; STAMP_LEN];
            let ours = write_stamp(&mut out, before);
            assert_eq!(ours.len(), theirs.len(), "{ours} / {theirs}");
            assert_eq!(ours[..19], theirs[..19], "the date and time of day");
            assert!(ours[19..] <= theirs[19..] && theirs.ends_with('Z'), "{ours} / {theirs}");
            return;
        }
        panic!("the clock crossed a second boundary 100 times in a row");
    }

    #[test]
    fn the_line_is_the_default_formatters_without_its_styling() {
        let emit = || {
            admission();
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

    /// The JSON lines of `ours` (or of tracing-subscriber's `.json().flatten_event(true)`) for the
    /// events `emit` sends, as values without their timestamps, and the raw text.
    fn json_lines(ours: bool, emit: impl Fn()) -> (Vec<serde_json::Value>, String) {
        let buffer = LogBuffer::default();
        let writer = buffer.clone();
        let make = move || writer.clone();
        let filter = || tracing_subscriber::EnvFilter::new("info");
        if ours {
            tracing::subscriber::with_default(json_subscriber(filter(), make), &emit);
        } else {
            let theirs = tracing_subscriber::fmt()
                .with_env_filter(filter())
                .with_writer(make)
                .json()
                .flatten_event(true)
                .finish();
            tracing::subscriber::with_default(theirs, &emit);
        }
        let text = buffer.text();
        let values = text
            .lines()
            .map(|line| {
                let mut value: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
                let stamp = value.as_object_mut().unwrap().remove("timestamp");
                let stamp = stamp.unwrap_or_else(|| panic!("no timestamp: {line}"));
                assert!(stamp.as_str().is_some_and(|t| t.len() >= 20 && t.ends_with('Z')), "{line}");
                value
            })
            .collect();
        (values, text)
    }

    #[test]
    fn the_json_line_is_tracing_subscribers() {
        let emit = || {
            admission();
            tracing::warn!(error = %"bad \"quote\"\n\u{1}é", "bad request");
            tracing::debug!("filtered out");
            let err = std::io::Error::other("disk full");
            tracing::error!(error = &err as &dyn std::error::Error, "with an error");
            tracing::info!(log.target = "rustls::conn", code = 7, "from log");
            tracing::info!(message = "a message given as a str field", then = "this");
            // Inside a span: the span's fields too, through tracing-subscriber's formatter.
            let span = tracing::info_span!("request", path = "/validate");
            span.in_scope(|| tracing::info!(inner = true, "in a span"));
            tracing::info!(parent: &span, "with an explicit parent");
            span.in_scope(|| tracing::info!(parent: None, "an explicit root in a span"));
            // A field whose Debug logs: tracing drops the inner event (its dispatcher is busy on
            // this thread), and the outer line is written whole.
            struct Logs;
            impl fmt::Debug for Logs {
                fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    tracing::info!(inner = 1, "logged while formatting");
                    f.write_str("logs")
                }
            }
            tracing::info!(value = ?Logs, "outer");
        };
        let (ours, text) = json_lines(true, emit);
        let (theirs, _) = json_lines(false, emit);
        assert_eq!(ours, theirs, "{text}");
        assert_eq!(ours.len(), 9, "{text}");
        let first = text.lines().next().unwrap();
        assert!(first.starts_with("{\"timestamp\":\""), "{first}");
        assert!(first.contains("\"level\":\"INFO\",\"message\":\"admission\",\"webhook\":\"validate\""), "{first}");
        assert!(first.ends_with(",\"target\":\"ha_guard::server::log_format::tests\"}"), "{first}");
        assert_eq!(ours[0]["latency_us"], 42);
        assert_eq!(ours[0]["nan"], serde_json::Value::Null);
        assert_eq!(ours[1]["error"], "bad \"quote\"\n\u{1}é");
        assert_eq!(ours[5]["span"]["path"], "/validate");
        assert_eq!(ours[7]["span"]["path"], "/validate", "an explicit root still names the current span");
        assert_eq!((ours[8]["message"].as_str(), ours[8]["value"].as_str()), (Some("outer"), Some("logs")));
    }

    #[test]
    fn log_crate_fields_are_left_out_without_a_second_space() {
        let emit = || tracing::info!(log.target = "rustls::conn", code = 7, "from log");
        let plain = lines(true, emit);
        assert_eq!(plain, lines(false, emit));
        assert!(plain.ends_with(": from log code=7\n"), "{plain}");
    }
}
