//! `ha-guard check`: lint manifests offline, as CI pipelines, pre-commit and code scanning run it.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};

use clap::{Args, ValueEnum};

use super::error::Error;
use crate::check::{self, FailOn, Options, output};
use crate::core::catalogue::Action;
use crate::core::config::Config;
use crate::core::registry;
use crate::manifest::{self, LoadOptions, Loaded};

#[derive(Clone, Copy, ValueEnum)]
pub enum Format {
    Text,
    Json,
    Sarif,
    Junit,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Color {
    /// On a terminal, unless NO_COLOR is set.
    Auto,
    Always,
    Never,
}

#[derive(Args)]
pub struct CheckArgs {
    /// Files, directories (walked recursively; .gitignore respected) or `-` for stdin.
    #[arg(value_name = "PATH")]
    pub inputs: Vec<String>,
    /// Files, directories or `-` (stdin) to check, as with the positional PATHs.
    #[arg(short = 'f', long = "filename", num_args = 1.., value_name = "PATH")]
    pub paths: Vec<String>,
    /// Render a Helm chart with the `helm` on PATH (`helm template`) and check what it renders.
    #[arg(long, value_name = "CHART")]
    pub helm: Option<String>,
    /// Values files for --helm (repeatable).
    #[arg(long = "values", value_name = "FILE", requires = "helm")]
    pub values: Vec<PathBuf>,
    /// Render a kustomization with the `kubectl` on PATH (`kubectl kustomize`) and check it.
    #[arg(long, value_name = "DIR")]
    pub kustomize: Option<PathBuf>,
    #[command(flatten)]
    pub report: ReportArgs,
    /// Also read what .gitignore, .ignore and git's excludes leave out when walking directories.
    #[arg(long)]
    pub no_ignore: bool,
    /// The files are the whole namespace: run the rules that assert absence.
    #[arg(long)]
    pub complete: bool,
    /// Write the mutations back to the files.
    #[arg(long)]
    pub fix: bool,
    /// Accept paths that hold no Kubernetes object (by default an error: a mistyped path or an
    /// empty folder would otherwise pass).
    #[arg(long)]
    pub allow_empty: bool,
    /// Namespace for objects that have none.
    #[arg(long, default_value = "default", value_name = "NS")]
    pub namespace: String,
}

/// The flags of how rules are configured and how their report is printed and judged: `check`'s,
/// which `audit` shares.
#[derive(Args)]
pub struct ReportArgs {
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Which findings make the exit code 1: deny ones, warn ones too, or none.
    #[arg(long, value_enum, default_value = "deny")]
    pub fail_on: FailOn,
    /// Configuration file (the same file `serve --config` reads).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Turn a rule (or mutation) off, as `rules: {ID: off}` in the configuration would.
    #[arg(long, value_name = "ID", value_delimiter = ',')]
    pub disable: Vec<String>,
    /// Turn a rule on at its default action (over an `off` in the configuration), or a mutation on.
    #[arg(long, value_name = "ID", value_delimiter = ',')]
    pub enable: Vec<String>,
    /// Print the findings only (no notes, fixes or summary).
    #[arg(short, long)]
    pub quiet: bool,
    /// Write the report to FILE instead of stdout (`-`: stdout). With --fix and stdin input,
    /// `--output -` writes the fixed manifests to stdout, and the report to stderr.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Colour in text output.
    #[arg(long, value_enum, default_value = "auto")]
    pub color: Color,
    /// Preview a configuration change: judge the same objects under this file (the configuration
    /// in force) and under --config (the new one), and print only what the change would newly
    /// deny, newly warn, allow or stop reporting, object by object (text or json). Exit 1 when
    /// something becomes denied.
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,
}

impl ReportArgs {
    /// The configuration file (or the defaults) with --disable and --enable applied.
    pub fn config(&self) -> Result<Config, Error> {
        let mut config = self.config.as_deref().map(crate::config_file::load).transpose()?.unwrap_or_default();
        toggle(&mut config, &self.disable, &self.enable)?;
        Ok(config)
    }

    /// The `--baseline` configuration (with --disable and --enable applied, as to --config), if
    /// one is given.
    pub fn baseline_config(&self) -> Result<Option<Config>, Error> {
        let Some(path) = self.baseline.as_deref() else { return Ok(None) };
        if !matches!(self.format, Format::Text | Format::Json) {
            return Err(Error("--baseline prints a comparison: use --format text or json".into()));
        }
        let mut config = crate::config_file::load(path)?;
        toggle(&mut config, &self.disable, &self.enable)?;
        Ok(Some(config))
    }

    /// Prints what changes from `before` (the baseline's report) to `after` (the new
    /// configuration's), and returns 1 when something becomes denied.
    /// The configuration's diagnostics of `after` (its exceptions that expired or allowed
    /// nothing) are kept: a preview is where a new file's dead exceptions should show first.
    pub fn finish_preview(
        &self,
        new: &Config,
        before: &check::Report,
        after: &check::Report,
    ) -> Result<ExitCode, Error> {
        let changes = check::preview::compare(before, after);
        let baseline = self.baseline.as_deref().map(|p| p.display().to_string()).unwrap_or_default();
        let config = self.config.as_deref().map_or("the defaults".to_string(), |p| p.display().to_string());
        let warnings: Vec<(String, String)> =
            self.exception_notices(new, after).into_iter().map(|(o, m)| (o.file, m)).collect();
        let text = match self.format {
            Format::Json => {
                serde_json::to_string_pretty(&check::preview::json(&changes, &baseline, &config, &warnings))
                    .unwrap_or_default()
                    + "\n"
            }
            _ => check::preview::text(&changes, &baseline, &config, &warnings),
        };
        match self.output.as_deref() {
            Some(p) if p.as_os_str() != "-" => {
                std::fs::write(p, text).map_err(|e| Error(format!("--output {}: {e}", p.display())))?
            }
            _ => {
                let _ = std::io::stdout().write_all(text.as_bytes());
            }
        }
        for e in before.errors.iter().chain(&after.errors) {
            eprintln!("error: {e}");
        }
        let code = if !after.errors.is_empty() { 2 } else { check::preview::exit_code(&changes) };
        Ok(ExitCode::from(code))
    }

    /// Warns of the configuration's exceptions that expired or allowed nothing in `report`.
    pub fn add_exception_notices(&self, config: &Config, report: &mut check::Report) {
        let notices = self.exception_notices(config, report);
        report.notices.extend(notices);
    }

    /// The configuration's exceptions that expired or allowed nothing in `report`, each at the
    /// configuration file.
    fn exception_notices(&self, config: &Config, report: &check::Report) -> Vec<(manifest::Origin, String)> {
        let file = self.config.as_deref().map_or("configuration".to_string(), |p| p.display().to_string());
        check::report::exception_notices(config, report, crate::config_file::today())
            .into_iter()
            .map(|n| {
                let origin = manifest::Origin {
                    file: file.clone(),
                    document: 0,
                    item: None,
                    line: 0,
                    column: None,
                    template: None,
                };
                (origin, n)
            })
            .collect()
    }

    /// Prints `report` as these flags say and returns the exit code they give it.
    pub fn finish(&self, report: &check::Report) -> Result<ExitCode, Error> {
        let dest = match self.output.as_deref() {
            None => Dest::Stdout,
            Some(p) if p.as_os_str() == "-" => Dest::Stdout,
            Some(p) => Dest::File(p),
        };
        self.finish_to(report, dest)
    }

    /// [`ReportArgs::finish`], the report written to `dest`.
    pub fn finish_to(&self, report: &check::Report, dest: Dest) -> Result<ExitCode, Error> {
        let how = Output { format: self.format, fail_on: self.fail_on, color: self.color, quiet: self.quiet };
        print(report, how, dest)?;
        Ok(ExitCode::from(report.exit_code(self.fail_on) as u8))
    }
}

pub fn run(args: CheckArgs) -> Result<ExitCode, Error> {
    let config = args.report.config()?;
    let options = Options { complete: args.complete, namespace: args.namespace.clone(), config };
    let paths: Vec<String> = args.inputs.iter().chain(&args.paths).cloned().collect();
    if paths.is_empty() && args.helm.is_none() && args.kustomize.is_none() {
        return Err(Error(
            "nothing to check: give files or directories, `-` for stdin, --helm CHART or --kustomize DIR".into(),
        ));
    }
    let load = LoadOptions { respect_ignore_files: !args.no_ignore, chart_dir: None };
    let mut skipped: Vec<(String, String)> = Vec::new();
    let to_stdout = args.fix && paths.iter().any(|p| p == "-") && args.report.output.as_deref() == Some("-".as_ref());
    let mut run = if args.fix {
        if args.helm.is_some() || args.kustomize.is_some() {
            return Err(Error(
                "--fix writes files back: it cannot with --helm or --kustomize, whose input is rendered".into(),
            ));
        }
        // `--output -` with stdin: the fixed manifests go to stdout, the report to stderr.
        let fix = if to_stdout { check::Fix::FilesAndStdout } else { check::Fix::Files };
        let mut run = check::run_with(&paths, &load, &options, fix)?;
        for chart in std::mem::take(&mut run.loaded.charts) {
            let c = chart.display().to_string();
            let why = format!("{c} is a Helm chart: --fix does not rewrite templates, so it was not checked");
            skipped.push((c, why));
        }
        run
    } else {
        let (loaded, report) = load_and_check(&args, &paths, &load, &options, &mut skipped)?;
        if let Some(baseline) = args.report.baseline_config()? {
            // The preview: the same files judged under the configuration in force.
            let before_options = Options { config: baseline, ..options.clone() };
            let (_, before) = load_and_check(&args, &paths, &load, &before_options, &mut Vec::new())?;
            return args.report.finish_preview(&options.config, &before, &report);
        }
        check::Run { loaded, report, fixed: Vec::new(), stdout: None }
    };
    for (file, why) in skipped {
        let origin = manifest::Origin { file, document: 0, item: None, line: 0, column: None, template: None };
        run.report.unchecked.push((origin, why));
    }
    args.report.add_exception_notices(&options.config, &mut run.report);
    let r = &run.report;
    if r.objects == 0 && r.unchecked.is_empty() && r.errors.is_empty() {
        if !r.other_kinds.is_empty() {
            // Valid objects, only of kinds no rule reads (a DaemonSet, a ConfigMap): nothing to
            // judge is the answer, not an input error; said per file.
            let notes = other_kinds_notes(&r.other_kinds);
            for (file, note) in notes {
                let origin = manifest::Origin { file, document: 0, item: None, line: 0, column: None, template: None };
                run.report.unchecked.push((origin, note));
            }
        } else if !args.allow_empty {
            return Err(Error(nothing_found(&paths, &args, &run.loaded)));
        }
    }
    for f in &run.fixed {
        eprintln!("fixed: {f}");
    }
    let code = match &run.stdout {
        Some(text) => {
            let _ = std::io::stdout().write_all(text.as_bytes());
            args.report.finish_to(&run.report, Dest::Stderr)?
        }
        None => args.report.finish(&run.report)?,
    };
    // The process ends here: freeing the texts and the report (every finding's strings) one by
    // one would only delay the exit, which returns the memory anyway.
    std::mem::forget(run);
    Ok(code)
}

/// Reads (and renders) the inputs and checks them under `options`; chart folders that cannot be
/// rendered are added to `skipped`.
fn load_and_check(
    args: &CheckArgs,
    paths: &[String],
    load: &LoadOptions,
    options: &Options,
    skipped: &mut Vec<(String, String)>,
) -> Result<(manifest::Loaded<check::Prepared>, check::Report), Error> {
    let prepare = |value: serde_json::Value| check::Prepared::of(&value, &options.namespace);
    let mut loaded = manifest::load_mapped(paths, load, &prepare);
    let mut rendered = render(args)?;
    // A chart folder among the paths: rendered as --helm would, or skipped with the command.
    let helm = on_path("helm");
    for chart in std::mem::take(&mut loaded.charts) {
        let c = chart.display().to_string();
        if helm {
            rendered.push(helm_template(&c, &[])?);
        } else {
            let why = format!(
                "{c} is a Helm chart and `helm` is not on PATH, so it was not checked: run \
                 `helm template NAME {c} | ha-guard check -f -` (or `ha-guard check --helm {c}` with helm installed)"
            );
            skipped.push((c, why));
        }
    }
    for (name, text, chart) in rendered {
        add_rendered(&mut loaded, name, text, chart, &prepare);
    }
    let report = check::check_loaded(&mut loaded, options);
    Ok((loaded, report))
}

/// How a report is printed: `check`'s flags, which `audit` shares.
#[derive(Clone, Copy)]
pub struct Output {
    pub format: Format,
    pub fail_on: FailOn,
    pub color: Color,
    pub quiet: bool,
}

/// Where a report is written: stdout (`--output -` too), stderr (when `--fix` writes the fixed
/// manifests to stdout), or a file.
#[derive(Clone, Copy)]
pub enum Dest<'a> {
    Stdout,
    Stderr,
    File(&'a std::path::Path),
}

/// Prints `report` as `how` says, to `dest`; its errors go to stderr.
pub(crate) fn print(report: &check::Report, how: Output, dest: Dest) -> Result<(), Error> {
    let text = match how.format {
        Format::Text => {
            let color = match how.color {
                Color::Always => true,
                Color::Never => false,
                Color::Auto => {
                    let terminal = match dest {
                        Dest::Stdout => std::io::stdout().is_terminal(),
                        Dest::Stderr => std::io::stderr().is_terminal(),
                        Dest::File(_) => false,
                    };
                    terminal && std::env::var_os("NO_COLOR").is_none()
                }
            };
            output::text(report, output::TextStyle { color, quiet: how.quiet })
        }
        Format::Json => serde_json::to_string_pretty(&output::json(report)).unwrap_or_default() + "\n",
        Format::Sarif => serde_json::to_string_pretty(&output::sarif(report)).unwrap_or_default() + "\n",
        Format::Junit => output::junit(report, how.fail_on),
    };
    match dest {
        Dest::File(path) => {
            std::fs::write(path, text).map_err(|e| Error(format!("--output {}: {e}", path.display())))?
        }
        Dest::Stdout => {
            let _ = std::io::stdout().write_all(text.as_bytes());
        }
        Dest::Stderr => {
            let _ = std::io::stderr().write_all(text.as_bytes());
        }
    }
    // Errors go to stderr, once, whatever the format: seen in CI logs, and apart from a report
    // that is piped or written to a file.
    for e in &report.errors {
        eprintln!("error: {e}");
    }
    Ok(())
}

/// The error for an ID that names no rule or mutation, with the nearest one: every place an ID
/// is typed (`--disable`, `--enable`, `explain`) says it the same way.
pub(crate) fn unknown_id(id: &str) -> Error {
    let nearest = registry::nearest(id, true, true);
    Error(format!("{id:?} is no rule or mutation ID: did you mean {nearest}? (`ha-guard rules` lists them)"))
}

/// `--disable` and `--enable`, applied over the configuration.
pub(crate) fn toggle(config: &mut Config, disable: &[String], enable: &[String]) -> Result<(), Error> {
    for id in disable.iter().chain(enable) {
        if registry::rule(id).is_none() && registry::mutation(id).is_none() {
            return Err(unknown_id(id));
        }
    }
    if let Some(both) = disable.iter().find(|id| enable.contains(id)) {
        return Err(Error(format!("{both} is both --disable'd and --enable'd")));
    }
    for id in disable {
        if registry::rule(id).is_some() {
            config.rules.insert(id.clone(), Action::Off);
        } else {
            config.mutations.insert(id.clone(), false);
        }
    }
    for id in enable {
        if registry::rule(id).is_some() {
            if config.rules.get(id) == Some(&Action::Off) {
                config.rules.remove(id);
            }
        } else {
            config.mutations.insert(id.clone(), true);
        }
    }
    Ok(())
}

/// A rendered stream: a name for it, its text, and for a local chart its name and folder (for
/// the `# Source:` paths).
type Rendered = (String, String, Option<(String, String)>);

/// What `--helm` and `--kustomize` render.
fn render(args: &CheckArgs) -> Result<Vec<Rendered>, Error> {
    let mut out = Vec::new();
    if let Some(chart) = &args.helm {
        out.push(helm_template(chart, &args.values)?);
    }
    if let Some(dir) = &args.kustomize {
        let mut cmd = Command::new("kubectl");
        cmd.arg("kustomize").arg(dir);
        let text = run_renderer(cmd, "kubectl", "kubectl kustomize DIR | ha-guard check -f -")?;
        out.push((format!("kubectl kustomize {}", dir.display()), text, None));
    }
    Ok(out)
}

/// `helm template` of `chart` (a folder, or a chart reference helm resolves) with `values`.
fn helm_template(chart: &str, values: &[PathBuf]) -> Result<Rendered, Error> {
    let mut cmd = Command::new("helm");
    cmd.args(["template", "ha-guard-check", chart]);
    for v in values {
        cmd.arg("--values").arg(v);
    }
    let text = run_renderer(cmd, "helm", "helm template RELEASE CHART | ha-guard check -f -")?;
    // A local chart's `# Source: NAME/templates/x.yaml` is NAME's folder on disk.
    let path = std::path::Path::new(chart);
    let local = path.join("Chart.yaml").is_file().then(|| {
        let name = std::fs::read_to_string(path.join("Chart.yaml"))
            .ok()
            .and_then(|t| {
                t.lines().find_map(|l| l.strip_prefix("name:").map(|n| n.trim().trim_matches('"').to_string()))
            })
            .unwrap_or_default();
        (name, chart.trim_end_matches('/').to_string())
    });
    Ok((format!("helm template {chart}"), text, local))
}

/// Whether an executable named `program` is in one of PATH's folders.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// Per file, what it holds of kinds ha-guard does not judge: `1 object of a kind ha-guard does not
/// judge (DaemonSet)`, `3 objects of kinds ... (ConfigMap 2, DaemonSet 1)`.
fn other_kinds_notes(
    by_file: &std::collections::BTreeMap<String, std::collections::BTreeMap<String, usize>>,
) -> Vec<(String, String)> {
    by_file
        .iter()
        .map(|(file, kinds)| {
            let total: usize = kinds.values().sum();
            let named = if kinds.len() == 1 {
                kinds.keys().next().cloned().unwrap_or_default()
            } else {
                kinds.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
            };
            let what = match (total, kinds.len()) {
                (1, _) => "1 object of a kind".to_string(),
                (n, 1) => format!("{n} objects of a kind"),
                (n, _) => format!("{n} objects of kinds"),
            };
            (
                file.clone(),
                format!(
                    "{what} ha-guard does not judge ({named}): nothing here to check. Its rules read Deployments, \
                     StatefulSets, PodDisruptionBudgets, HorizontalPodAutoscalers, KEDA ScaledObjects, \
                     PersistentVolumeClaims, Services, Namespaces, Nodes and webhook configurations"
                ),
            )
        })
        .collect()
}

/// The error of a run that found no object: each path given, and what was found there.
fn nothing_found(paths: &[String], args: &CheckArgs, loaded: &Loaded<check::Prepared>) -> String {
    let mut what: Vec<String> = Vec::new();
    for p in paths {
        if p == "-" {
            what.push("- (stdin): no object".into());
            continue;
        }
        let files = loaded.sources.iter().filter(|s| std::path::Path::new(&s.file).starts_with(p)).count();
        what.push(if !std::path::Path::new(p).is_dir() {
            format!("{p}: a file with no object")
        } else if files == 0 {
            format!("{p}: a folder with no .yaml, .yml or .json file")
        } else {
            format!(
                "{p}: a folder whose {} hold no object",
                if files == 1 { "1 file".to_string() } else { format!("{files} files") }
            )
        });
    }
    if let Some(chart) = &args.helm {
        what.push(format!("--helm {chart}: rendered no object"));
    }
    if let Some(dir) = &args.kustomize {
        what.push(format!("--kustomize {}: rendered no object", dir.display()));
    }
    format!(
        "no Kubernetes object to check:\n  {}\nfix the paths, or pass --allow-empty to accept finding nothing",
        what.join("\n  ")
    )
}

fn run_renderer(mut cmd: Command, program: &str, instead: &str) -> Result<String, Error> {
    let output = cmd.stdin(Stdio::null()).output().map_err(|e| {
        Error(if e.kind() == std::io::ErrorKind::NotFound {
            format!("`{program}` is not on PATH: install it, or render yourself: {instead}")
        } else {
            format!("cannot run `{program}`: {e}")
        })
    })?;
    if !output.status.success() {
        return Err(Error(format!(
            "`{}` failed ({}):\n{}",
            [cmd.get_program()]
                .into_iter()
                .chain(cmd.get_args())
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim_end()
        )));
    }
    String::from_utf8(output.stdout).map_err(|_| Error(format!("`{program}` wrote text that is not UTF-8")))
}

/// Adds a rendered stream; a local chart's template paths are put under its folder.
fn add_rendered(
    loaded: &mut Loaded<check::Prepared>,
    name: String,
    text: String,
    chart: Option<(String, String)>,
    prepare: &(impl Fn(serde_json::Value) -> check::Prepared + Sync),
) {
    let first = loaded.documents.len();
    manifest::add_text_mapped(loaded, name, None, text, false, prepare);
    let Some((chart_name, dir)) = chart else { return };
    for d in &mut loaded.documents[first..] {
        if let Some(t) = d.origin.template.as_mut()
            && let Some(rest) = t.path.strip_prefix(&format!("{chart_name}/"))
        {
            t.path = format!("{dir}/{rest}");
        }
    }
}
