//! `orca audit verify` with a shared store chosen: the shared store itself (read into a private
//! temporary copy of the file layout, verified there, removed), or — when `--root` names a
//! directory holding records, such as an export — that file layout, whatever store the
//! environment names.

use std::path::{Path, PathBuf};

use crate::trust::KeyUse;
use orca_store_postgres::PgStore;

use crate::app::App;
use crate::cli::Global;
use crate::cmd::audit::verify::{AuditScope, verify as verify_files};
use crate::exit::{CliError, Exit};
use crate::term::say;

/// A private directory removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<Self, CliError> {
        use std::os::unix::fs::DirBuilderExt as _;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path =
            std::env::temp_dir().join(format!("orca-verify-{}-{nanos:08x}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|e| CliError::internal(format!("cannot create {}: {e}", path.display())))?;
        Ok(Self(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether `root` holds a file layout with records (an export, or a project on the file store).
fn holds_records(root: &Path) -> bool {
    root.join(".orca")
        .join("plans")
        .read_dir()
        .is_ok_and(|mut d| d.next().is_some())
}

/// Verifies what `orca audit verify` means with the shared store `pg` chosen.
pub(crate) async fn verify(
    app: &App,
    global: &Global,
    pg: &PgStore,
    scope: AuditScope,
) -> Result<Exit, CliError> {
    let _copy;
    let dir = if global.root.is_some() && holds_records(app.root()) {
        if !app.json {
            say(&format!(
                "verifying the records under {} (a file layout: the shared store {} is not read)",
                app.root().display(),
                pg.url()
            ));
        }
        app.root().to_path_buf()
    } else {
        let copy = TempDir::new()?;
        let counts = crate::cmd::store::export(pg, &copy.0).await?;
        if !app.json {
            say(&format!(
                "verifying the shared store {} ({} plans, {} executions, {} audit logs read)",
                pg.url(),
                counts.plans,
                counts.executions,
                counts.logs
            ));
        }
        let dir = copy.0.clone();
        _copy = copy;
        dir
    };
    // The same verification as on a project's files, on that layout; trust roots and the
    // signing key come from the user's config as for any command.
    let mut files = global.clone();
    files.root = Some(dir);
    files.store = Some(String::new());
    let files_app = App::open(&files, false, KeyUse::Verify, false).await?;
    verify_files(&files_app, scope).await
}
