//! Private permissions for everything under `.orca/`: directories 0700, files 0600, whatever
//! the umask (task results and audit entries may quote what a step printed).

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;

/// The mode of every directory the store creates.
pub const DIR_MODE: u32 = 0o700;
/// The mode of every file the store creates.
pub const FILE_MODE: u32 = 0o600;

/// `OpenOptions` creating files 0600 (before the umask; [`fix_file`] makes it exact).
pub(crate) fn options() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.mode(FILE_MODE);
    o
}

/// Sets a file's mode to 0600 if it is anything else (a umask that removed owner bits, or a
/// file from an older version).
pub(crate) fn fix_file(file: &File) -> io::Result<()> {
    let mode = file.metadata()?.permissions().mode() & 0o777;
    if mode != FILE_MODE {
        file.set_permissions(fs::Permissions::from_mode(FILE_MODE))?;
    }
    Ok(())
}

/// Opens with `options`, then makes the mode exact.
pub(crate) fn open(options: &OpenOptions, path: &Path) -> io::Result<File> {
    let file = options.open(path)?;
    fix_file(&file)?;
    Ok(file)
}

/// Creates one directory 0700 (exactly, whatever the umask).
pub(crate) fn create_dir(dir: &Path) -> io::Result<()> {
    DirBuilder::new().mode(DIR_MODE).create(dir)?;
    fix_dir(dir)
}

/// Creates a directory and its missing parents 0700; an existing `dir` is made 0700 too.
pub(crate) fn create_dir_all(dir: &Path) -> io::Result<()> {
    if !dir.is_dir() {
        if let Some(parent) = dir.parent()
            && !parent.as_os_str().is_empty()
            && !parent.exists()
        {
            // Parents outside the store (the project root) get the usual permissions.
            fs::create_dir_all(parent)?;
        }
        match DirBuilder::new().mode(DIR_MODE).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    fix_dir(dir)
}

fn fix_dir(dir: &Path) -> io::Result<()> {
    let mode = fs::metadata(dir)?.permissions().mode() & 0o777;
    if mode != DIR_MODE {
        fs::set_permissions(dir, fs::Permissions::from_mode(DIR_MODE))?;
    }
    Ok(())
}
