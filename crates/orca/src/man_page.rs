//! The commands of `orca man`, as roff: one subsection per command (nested commands in turn),
//! with its summary, usage and options, from the same clap definitions as `--help`.

use std::fmt::Write as _;

/// Escapes text for roff: backslashes, and a leading `.` or `'` that would start a request.
fn roff(text: &str) -> String {
    let escaped = text.replace('\\', "\\\\").replace('-', "\\-");
    escaped
        .lines()
        .map(|l| {
            if l.starts_with('.') || l.starts_with('\'') {
                format!("\\&{l}")
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Appends the section of `cmd` (named `parent cmd`) and of its subcommands.
pub(crate) fn command_section(out: &mut String, parent: &str, cmd: &clap::Command) {
    let name = format!("{parent} {}", cmd.get_name());
    let _ = writeln!(out, ".SS \"{}\"", roff(&name));
    if let Some(about) = cmd.get_long_about().or_else(|| cmd.get_about()) {
        let _ = writeln!(out, "{}", roff(&about.to_string()));
    }
    let mut usage = cmd.clone().bin_name(&name);
    let usage = usage.render_usage().to_string();
    let usage = usage.trim_start_matches("Usage: ").trim();
    let _ = writeln!(out, ".PP\n\\fB{}\\fR", roff(usage));
    for arg in cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !a.is_global_set())
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
    {
        let mut label = match (arg.get_short(), arg.get_long()) {
            (Some(s), Some(l)) => format!("-{s}, --{l}"),
            (None, Some(l)) => format!("--{l}"),
            (Some(s), None) => format!("-{s}"),
            (None, None) => String::new(),
        };
        let value = arg
            .get_value_names()
            .map(|v| {
                v.iter()
                    .map(|n| format!("<{n}>"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_else(|| format!("<{}>", arg.get_id().as_str().to_uppercase()));
        if arg.get_action().takes_values() {
            if label.is_empty() {
                label = value;
            } else {
                label = format!("{label} {value}");
            }
        }
        let _ = writeln!(out, ".TP\n\\fB{}\\fR", roff(&label));
        if let Some(help) = arg.get_long_help().or_else(|| arg.get_help()) {
            let _ = writeln!(out, "{}", roff(&help.to_string()));
        }
    }
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        command_section(out, &name, sub);
    }
}
