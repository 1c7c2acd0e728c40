//! The one error a command returns.

/// Why a command could not do its job: printed as `error: ...`, exit code 2 (unusable input or
/// flags, DESIGN.md §5).
#[derive(Debug)]
pub struct Error(pub String);

impl<E: std::fmt::Display> From<E> for Error {
    fn from(e: E) -> Self {
        Error(e.to_string())
    }
}
