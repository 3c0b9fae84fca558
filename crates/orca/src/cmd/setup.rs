//! Commands that need no project and never open the store: `init`, `completions`, `man`, and
//! the agents a plan document may name (for `plan validate`).

use std::path::Path;

use orca_agents::Agents;
use orca_core::AgentPort as _;
use orca_store::FileStore;
use serde_json::json;

use crate::app::{find_root, out, out_json};
use crate::cli::Global;
use crate::exit::{CliError, Exit};
use crate::term::say;
use crate::trust::KeyUse;

const CONFIG_TEMPLATE: &str = orca_agents::config::CONFIG_TEMPLATE;

/// The agents a plan may name: the project's (built-ins and its config), or the built-ins
/// when there is no project here or above. Reads only; creates nothing.
pub(crate) fn known_agents(
    global: &Global,
) -> Result<std::collections::BTreeSet<orca_core::AgentId>, CliError> {
    let root = match &global.root {
        Some(root) => Some(root.clone()),
        None => std::env::current_dir().ok().and_then(|cwd| {
            cwd.ancestors()
                .find(|d| d.join(".orca").is_dir())
                .map(Path::to_path_buf)
        }),
    };
    let agents = match root {
        Some(root) if root.join(".orca").is_dir() => crate::settings::Settings::load(&root)?.agents,
        _ => Agents::with_defaults(".", &|_: &str| None, orca_agents::LoopSettings::default()),
    };
    Ok(agents.agents().into_iter().map(|a| a.id).collect())
}

/// Generated into memory first: a closed stdout (`| head`) is then not an error, as for every
/// other output.
pub(crate) fn print_completions(shell: clap_complete::Shell) -> Exit {
    use clap::CommandFactory as _;
    let mut cmd = crate::cli::Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "orca", &mut script);
    out(&String::from_utf8_lossy(&script));
    Exit::Ok
}

/// `orca man`: one page, with every command's usage and options in a section of its own (no
/// `orca-init(1)` pages are referred to: there are none).
pub(crate) fn print_man() -> Result<Exit, CliError> {
    use clap::CommandFactory as _;
    let cmd = crate::cli::Cli::command();
    let man = clap_mangen::Man::new(cmd.clone());
    let mut page = Vec::new();
    let failed =
        |e: std::io::Error| CliError::internal(format!("cannot render the manual page: {e}"));
    man.render_title(&mut page).map_err(failed)?;
    man.render_name_section(&mut page).map_err(failed)?;
    man.render_synopsis_section(&mut page).map_err(failed)?;
    man.render_description_section(&mut page).map_err(failed)?;
    man.render_options_section(&mut page).map_err(failed)?;
    let mut text = String::from_utf8_lossy(&page).into_owned();
    text.push_str(".SH COMMANDS\n");
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        crate::man_page::command_section(&mut text, "orca", sub);
    }
    page.clear();
    man.render_extra_section(&mut page).map_err(failed)?;
    man.render_version_section(&mut page).map_err(failed)?;
    text.push_str(&String::from_utf8_lossy(&page));
    out(&text);
    Ok(Exit::Ok)
}

pub(crate) fn init(global: &Global) -> Result<Exit, CliError> {
    let root = match &global.root {
        Some(r) => find_root(Some(r), true)?,
        None => std::env::current_dir().map_err(|e| CliError::internal(e.to_string()))?,
    };
    let dir = root.join(".orca");
    let new_project = !dir.is_dir();
    std::fs::create_dir_all(&dir)
        .map_err(|e| CliError::internal(format!("cannot create {}: {e}", dir.display())))?;
    let config = dir.join("config.toml");
    let created = if config.exists() {
        false
    } else {
        let tmp = dir.join(".config.toml.tmp");
        let _ = std::fs::remove_file(&tmp);
        crate::settings::write_private(&tmp, CONFIG_TEMPLATE)
            .and_then(|()| std::fs::rename(&tmp, &config))
            .map_err(|e| CliError::internal(format!("cannot write {}: {e}", config.display())))?;
        true
    };
    let (authority, key) = crate::trust::authority(&root, &global.trusted_key, KeyUse::Sign)?;
    if new_project {
        crate::checkpoint::forget(&root, &authority);
    }
    if let Some(path) = &key {
        say(&format!(
            "created your signing key {} (it signs your approvals; keep it private)",
            path.display()
        ));
    }
    let removed = FileStore::open(&root)?.clean_all_stale_temps();
    if removed > 0 {
        say(&format!(
            "removed {removed} temp file(s) left by a process that is gone"
        ));
    }
    if global.json {
        out_json(&json!({ "root": root, "config": config, "created_config": created }));
    } else {
        out(&format!(
            "{} {}\n{} {}",
            if created { "created" } else { "kept" },
            config.display(),
            "orca is ready in",
            dir.display()
        ));
    }
    Ok(Exit::Ok)
}
