//! The `ha-guard` command: parse, dispatch, one exit path (`cli`).

use std::process::ExitCode;

/// mimalloc instead of the system allocator: `check` builds and frees millions of small values
/// (JSON trees, typed objects) on every core, where glibc's malloc spent a third of the time
/// (benches/README.md, "check").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = ha_guard::cli::parse();
    if matches!(
        cli.command,
        ha_guard::cli::Command::Check(_) | ha_guard::cli::Command::Audit(_) | ha_guard::cli::Command::Reports(_)
    ) {
        ha_guard::cli::memory::return_memory_promptly();
    }
    if matches!(
        cli.command,
        ha_guard::cli::Command::Serve(_) | ha_guard::cli::Command::Audit(_) | ha_guard::cli::Command::Reports(_)
    ) {
        ha_guard::cli::memory::no_transparent_huge_pages();
    }
    match ha_guard::cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", e.0);
            ExitCode::from(2)
        }
    }
}
