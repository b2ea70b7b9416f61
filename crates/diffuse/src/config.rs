//! Settings of `diffuse dispatcher` and `diffuse worker` from three places besides the
//! built-in defaults, in this order of precedence: a command-line flag, then an environment
//! variable, then a configuration file.
//!
//! - **Environment.** Every option `--some-option` of `dispatcher` has the variable
//!   `DIFFUSE_DISPATCHER_SOME_OPTION`, of `worker` `DIFFUSE_WORKER_SOME_OPTION` (a few keep an
//!   older name: `DIFFUSE_DISPATCHER` for the worker's `--dispatcher`). `--help` shows each.
//! - **File.** `diffuse.toml`, the first found of: `--config FILE`, `$DIFFUSE_CONFIG`,
//!   `./diffuse.toml`, `$XDG_CONFIG_HOME/diffuse/diffuse.toml` (else `~/.config/...`),
//!   `/etc/diffuse/diffuse.toml`. A `[dispatcher]` table and a `[worker]` table whose keys are
//!   the long option names (`cache-size = "50GB"`; `cache_size` too), with strings, numbers,
//!   booleans (a switch: `two-mark = true`) and arrays (an option given several times). An
//!   unknown key, or a value of the wrong kind, is refused naming the file and the key.
//!
//! Clap parses the command line with the variables; the options neither set are then taken
//! from the file by parsing again with them appended, so each source keeps its place.
//! `diffuse config` shows the outcome and where each value came from.

use anyhow::{anyhow, bail, Context, Result};
use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Command};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The subcommands a file and the environment configure, and their tables.
pub const SECTIONS: [&str; 2] = ["dispatcher", "worker"];

/// The environment variable of `--long` of subcommand `section`.
pub fn env_name(section: &str, long: &str) -> String {
    format!(
        "DIFFUSE_{}_{}",
        section.to_uppercase(),
        long.to_uppercase().replace('-', "_")
    )
}

/// `cmd` with an environment variable on every option of the configured subcommands that has
/// none yet, and their `--config FILE`.
pub fn with_env(mut cmd: Command) -> Command {
    for section in SECTIONS {
        cmd = cmd.mut_subcommand(section, |mut sub| {
            sub = sub.arg(
                clap::Arg::new("config")
                    .long("config")
                    .env("DIFFUSE_CONFIG")
                    .value_name("FILE")
                    .value_parser(clap::value_parser!(PathBuf))
                    // Under "Options", not the heading of the options before it.
                    .help_heading(None::<&str>)
                    .help(
                        "Settings file [default: the first of ./diffuse.toml, \
                         $XDG_CONFIG_HOME/diffuse/diffuse.toml, /etc/diffuse/diffuse.toml]; \
                         flags win over environment variables, which win over the file",
                    ),
            );
            let ids: Vec<(clap::Id, String)> = sub
                .get_arguments()
                .filter(|a| a.get_env().is_none())
                .filter_map(|a| Some((a.get_id().clone(), a.get_long()?.to_string())))
                .filter(|(_, long)| !["help", "version", "config"].contains(&long.as_str()))
                .collect();
            for (id, long) in ids {
                let name = env_name(section, &long);
                sub = sub.mut_arg(id, |a| a.env(name));
            }
            sub
        });
    }
    cmd
}

/// The whole command line: `base` (the derived one, which the binary's root owns), with the
/// environment and `--config` added.
fn command(base: &Command) -> Command {
    with_env(base.clone())
}

/// The configuration file to read: `explicit` (`--config` or `$DIFFUSE_CONFIG`, which must
/// exist), else the first of the search path that exists.
pub fn find(explicit: Option<&Path>) -> Result<Option<PathBuf>> {
    if let Some(p) = explicit {
        if !p.is_file() {
            bail!("--config/DIFFUSE_CONFIG: {} is not a file", p.display());
        }
        return Ok(Some(p.to_path_buf()));
    }
    Ok(search_path().into_iter().find(|p| p.is_file()))
}

/// Where a configuration file is looked for, in order (after `--config` and `$DIFFUSE_CONFIG`).
pub fn search_path() -> Vec<PathBuf> {
    let mut v = vec![PathBuf::from("diffuse.toml")];
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")));
    if let Some(x) = xdg {
        v.push(x.join("diffuse").join("diffuse.toml"));
    }
    v.push(PathBuf::from("/etc/diffuse/diffuse.toml"));
    v
}

/// The table of `section` in `file` (empty if the file has none).
fn table(file: &Path, section: &str) -> Result<toml::Table> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let mut doc: toml::Table = text
        .parse()
        .map_err(|e| anyhow!("{}: {e}", file.display()))?;
    for key in doc.keys() {
        if !SECTIONS.contains(&key.as_str()) {
            bail!(
                "{}: unknown table [{key}] (expected [dispatcher] or [worker])",
                file.display()
            );
        }
    }
    match doc.remove(section) {
        None => Ok(toml::Table::new()),
        Some(toml::Value::Table(t)) => Ok(t),
        Some(_) => bail!("{}: `{section}` must be a table", file.display()),
    }
}

/// The arguments `file`'s table for `section` adds to the command line: options not given as
/// flags or in the environment. Returns them with the ids they set.
pub fn file_args(
    sub: &Command,
    matches: &ArgMatches,
    section: &str,
    file: &Path,
) -> Result<(Vec<OsString>, Vec<String>)> {
    let mut args = Vec::new();
    let mut ids = Vec::new();
    for (key, value) in table(file, section)? {
        let long = key.replace('_', "-");
        let Some(arg) = sub
            .get_arguments()
            .find(|a| a.get_long() == Some(long.as_str()) && long != "config")
        else {
            let mut known: Vec<&str> = sub
                .get_arguments()
                .filter_map(|a| a.get_long())
                .filter(|l| !["help", "version", "config"].contains(l))
                .collect();
            known.sort_unstable();
            bail!(
                "{}: [{section}] unknown setting `{key}` (one of: {})",
                file.display(),
                known.join(", ")
            );
        };
        let id = arg.get_id().as_str().to_string();
        if matches!(
            matches.value_source(&id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        ) {
            continue;
        }
        let flag = matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse);
        let bad = |want: &str| {
            anyhow!(
                "{}: [{section}] `{key}` must be {want}, not {value}",
                file.display()
            )
        };
        let values: Vec<String> = match &value {
            toml::Value::Boolean(b) if flag => {
                if *b {
                    args.push(OsString::from(format!("--{long}")));
                    ids.push(id);
                }
                continue;
            }
            _ if flag => return Err(bad("true or false")),
            toml::Value::String(s) => vec![s.clone()],
            toml::Value::Integer(i) => vec![i.to_string()],
            toml::Value::Float(f) => vec![f.to_string()],
            toml::Value::Boolean(b) => vec![b.to_string()],
            toml::Value::Array(items) => items
                .iter()
                .map(|v| match v {
                    toml::Value::String(s) => Ok(s.clone()),
                    toml::Value::Integer(i) => Ok(i.to_string()),
                    toml::Value::Float(f) => Ok(f.to_string()),
                    _ => Err(bad("a list of strings or numbers")),
                })
                .collect::<Result<_>>()?,
            _ => return Err(bad("a string, a number, a boolean or a list")),
        };
        for v in values {
            args.push(OsString::from(format!("--{long}={v}")));
        }
        ids.push(id);
    }
    Ok((args, ids))
}

/// Where one setting came from.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// A command-line flag.
    Flag,
    /// This environment variable.
    Env(String),
    /// This file.
    File(PathBuf),
    /// The built-in default.
    Default,
    /// Not set.
    Unset,
}

/// Parse `argv` (with `diffuse` first) for one of [`SECTIONS`] or any other subcommand, taking
/// the configured subcommands' unset options from the file. Returns the matches, the file read
/// (if any) and the ids it set. With `strict` false, missing or bad arguments are let through
/// (for `diffuse config`, which shows what is set).
pub fn matches(
    base: &Command,
    argv: Vec<OsString>,
    strict: bool,
) -> Result<(ArgMatches, Option<PathBuf>, Vec<String>), Error> {
    let cmd = command(base);
    // First what the flags and the environment set (required options may be in the file).
    let loose = cmd
        .clone()
        .ignore_errors(true)
        .try_get_matches_from(&argv)
        .map_err(Error::Clap)?;
    let mut file = None;
    let mut ids = Vec::new();
    let mut argv = argv;
    if let Some((section, sub_m)) = loose.subcommand() {
        if SECTIONS.contains(&section) {
            let explicit = sub_m.get_one::<PathBuf>("config").cloned();
            file = find(explicit.as_deref()).map_err(Error::Config)?;
            if let Some(f) = &file {
                let sub = cmd
                    .find_subcommand(section)
                    .expect("a configured subcommand");
                let (extra, set) = file_args(sub, sub_m, section, f).map_err(Error::Config)?;
                argv.extend(extra);
                ids = set;
            }
        }
    }
    let cmd = if strict { cmd } else { cmd.ignore_errors(true) };
    let m = cmd.try_get_matches_from(&argv).map_err(Error::Clap)?;
    Ok((m, file, ids))
}

/// A failure to parse the command line (clap's own message and exit code) or to read the
/// configuration (exit code 2).
pub enum Error {
    /// Clap's.
    Clap(clap::Error),
    /// The file's.
    Config(anyhow::Error),
}

/// One option as a command would start with it: `--name`, its values, where they came from.
pub type Setting = (String, Vec<String>, Origin);

/// Each option of `section` (`dispatcher` or `worker`) as the command would see it with no
/// flags: its value and where it came from; and the settings file read.
pub fn effective(
    base: &Command,
    section: &str,
    config: Option<&Path>,
) -> Result<(Option<PathBuf>, Vec<Setting>)> {
    let mut argv: Vec<OsString> = vec!["diffuse".into(), section.into()];
    if let Some(c) = config {
        argv.push(OsString::from("--config"));
        argv.push(c.as_os_str().to_os_string());
    }
    let (m, file, from_file) = match matches(base, argv, false) {
        Ok(x) => x,
        Err(Error::Clap(e)) => bail!("{}", e.render()),
        Err(Error::Config(e)) => return Err(e),
    };
    let (_, sub_m) = m.subcommand().expect("a subcommand");
    let cmd = command(base);
    let sub = cmd.find_subcommand(section).expect("a subcommand");
    let mut out = Vec::new();
    for arg in sub.get_arguments() {
        let Some(long) = arg.get_long() else {
            continue;
        };
        if ["help", "version", "config"].contains(&long) {
            continue;
        }
        let id = arg.get_id().as_str();
        let values: Vec<String> = sub_m
            .get_raw(id)
            .map(|v| v.map(|x| x.to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        let origin = if from_file.iter().any(|f| f == id) {
            Origin::File(file.clone().expect("a file set it"))
        } else {
            match sub_m.value_source(id) {
                Some(ValueSource::CommandLine) => Origin::Flag,
                Some(ValueSource::EnvVariable) => Origin::Env(
                    arg.get_env()
                        .map(|e| e.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                ),
                Some(ValueSource::DefaultValue) => Origin::Default,
                _ => Origin::Unset,
            }
        };
        out.push((format!("--{long}"), values, origin));
    }
    Ok((file, out))
}

/// Arguments of `diffuse config`.
#[derive(clap::Args, Debug)]
pub struct ConfigArgs {
    /// Whose settings: dispatcher or worker.
    #[arg(value_parser = ["dispatcher", "worker"])]
    section: String,
    /// Settings file [default: $DIFFUSE_CONFIG, then the search path].
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print JSON: the file read, and each option with its value and origin.
    #[arg(long)]
    json: bool,
}

/// `diffuse config`: the settings `diffuse dispatcher` or `diffuse worker` would start with here
/// (no flags), and where each came from.
pub fn show(base: &Command, a: ConfigArgs) -> Result<std::process::ExitCode> {
    let config = a
        .config
        .clone()
        .or_else(|| std::env::var_os("DIFFUSE_CONFIG").map(PathBuf::from));
    let (file, settings) = match effective(base, &a.section, config.as_deref()) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Ok(std::process::ExitCode::from(2));
        }
    };
    if a.json {
        let v = serde_json::json!({
            "section": a.section,
            "file": file,
            "search_path": search_path(),
            "settings": settings.iter().map(|(name, values, origin)| serde_json::json!({
                "option": name, "values": values, "origin": origin,
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(std::process::ExitCode::SUCCESS);
    }
    match &file {
        Some(f) => println!("# diffuse {}: settings file {}", a.section, f.display()),
        None => println!(
            "# diffuse {}: no settings file (looked for {})",
            a.section,
            search_path()
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
    let width = settings.iter().map(|s| s.0.len()).max().unwrap_or(10);
    for (name, values, origin) in &settings {
        let shown = if values.is_empty() {
            "-".to_string()
        } else {
            values.join(" ")
        };
        let from = match origin {
            Origin::Flag => "flag".to_string(),
            Origin::Env(v) => format!("environment ({v})"),
            Origin::File(f) => format!("file ({})", f.display()),
            Origin::Default => "default".to_string(),
            Origin::Unset => "unset".to_string(),
        };
        println!("{name:<width$}  {shown:<24}  {from}");
    }
    Ok(std::process::ExitCode::SUCCESS)
}
