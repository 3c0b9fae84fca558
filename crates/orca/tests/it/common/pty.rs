//! Running `orca` at a terminal: what the terminal shows, and waiting with a guard.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::io::Read as _;
use std::process::{Child, ExitStatus};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Everything written to the terminal behind `controller`, until the child has closed it
/// (reading ends with EIO then).
pub(crate) fn record(controller: &std::fs::File) -> JoinHandle<String> {
    let mut reader = controller.try_clone().unwrap();
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
pub(crate) fn wait(child: &mut Child, what: &str) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("{what} did not end");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
