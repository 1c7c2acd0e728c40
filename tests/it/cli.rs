//! Running the ha-guard binary in the CLI tests: what one run gave ([`Run`]) and one way to start
//! it ([`ha_guard`]), with the folder, stdin and environment a test needs.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_ha-guard");

/// What one run of the binary gave.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}\n{}", self.stdout, self.stderr))
    }

    /// stdout and stderr together, for messages that may go to either.
    pub fn all(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// A run of the binary with `args`, to be given a folder, stdin and environment, then [`run`](Invocation::run).
pub fn ha_guard<'a>(args: &'a [&'a str]) -> Invocation<'a> {
    Invocation { command: Command::new(BIN), args, stdin: None }
}

pub struct Invocation<'a> {
    command: Command,
    args: &'a [&'a str],
    stdin: Option<&'a str>,
}

impl<'a> Invocation<'a> {
    pub fn dir(mut self, dir: &Path) -> Self {
        self.command.current_dir(dir);
        self
    }

    pub fn stdin(mut self, input: Option<&'a str>) -> Self {
        self.stdin = input;
        self
    }

    pub fn env(mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) -> Self {
        self.command.env(key, value);
        self
    }

    pub fn envs(mut self, vars: &[(&str, &str)]) -> Self {
        self.command.envs(vars.iter().copied());
        self
    }

    pub fn env_remove(mut self, key: &str) -> Self {
        self.command.env_remove(key);
        self
    }

    pub fn run(mut self) -> Run {
        let cmd = &mut self.command;
        cmd.args(self.args).stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd.stdin(if self.stdin.is_some() { Stdio::piped() } else { Stdio::null() });
        let mut child = cmd.spawn().expect("the binary starts");
        if let Some(input) = self.stdin {
            child.stdin.take().expect("piped").write_all(input.as_bytes()).expect("stdin written");
        }
        let out = child.wait_with_output().expect("the binary finishes");
        Run {
            code: out.status.code().expect("exited, not killed by a signal"),
            stdout: String::from_utf8(out.stdout).expect("UTF-8 stdout"),
            stderr: String::from_utf8(out.stderr).expect("UTF-8 stderr"),
        }
    }
}
