//! The `ha-guard` command: parse, dispatch, one exit path (`cli`).

use std::process::ExitCode;

/// mimalloc instead of the system allocator: `check` builds and frees millions of small values
/// (JSON trees, typed objects) on every core, where glibc's malloc spent a third of the time
/// (benches/README.md, "check").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    match ha_guard::cli::run(ha_guard::cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", e.0);
            ExitCode::from(2)
        }
    }
}
