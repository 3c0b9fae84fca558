//! Running a program at a terminal in a test: a pseudo-terminal pair, what the terminal shows,
//! and waiting for the program with a guard against a hang.

use std::fs::File;
use std::io::Read as _;
use std::process::{Child, ExitStatus};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A new pseudo-terminal: (the controller a test reads and writes, the terminal a child gets
/// as its stdin, stdout and stderr).
///
/// # Panics
///
/// The system has no pseudo-terminal to give.
#[must_use]
pub fn openpty() -> (File, File) {
    let pty = nix::pty::openpty(None, None).unwrap_or_else(|e| panic!("openpty: {e}"));
    (File::from(pty.master), File::from(pty.slave))
}

/// Everything written to the terminal behind `controller`, until the child has closed it
/// (reading ends with EIO then).
///
/// # Panics
///
/// The descriptor cannot be duplicated.
#[must_use]
pub fn record(controller: &File) -> JoinHandle<String> {
    let mut reader = controller
        .try_clone()
        .unwrap_or_else(|e| panic!("duplicating the terminal: {e}"));
    std::thread::spawn(move || {
        let mut text = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            text.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&text).into_owned()
    })
}

/// Waits for `child`; kills it and fails after 120 s (only a guard against a hang).
///
/// # Panics
///
/// The child cannot be waited for, or did not end within 120 s.
pub fn wait(child: &mut Child, what: &str) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child
            .try_wait()
            .unwrap_or_else(|e| panic!("waiting for {what}: {e}"))
        {
            return status;
        }
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("{what} did not end");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
