//! The command line of the benches run by hand: `--flag value` pairs after cargo's own `--bench`.
//! (clap would need every bench's flags declared twice, here and in its own struct; these benches
//! read a handful of numbers.)

/// Each `--flag value` pair of the command line, in order; exits 2 naming a flag with no value.
pub fn pairs(usage: &str) -> Vec<(String, String)> {
    let mut it = std::env::args().skip(1).filter(|a| a != "--bench");
    let mut out = Vec::new();
    while let Some(flag) = it.next() {
        let Some(value) = it.next() else {
            eprintln!("{flag}: expected a value after it ({usage})");
            std::process::exit(2)
        };
        out.push((flag, value));
    }
    out
}

/// Exits 2 naming the flag whose value is wrong.
pub fn bad(flag: &str, value: &str, usage: &str) -> ! {
    eprintln!("bad argument {flag} {value:?}: {usage}");
    std::process::exit(2)
}
