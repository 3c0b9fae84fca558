//! The terminal orca writes to.

/// The width in columns of the terminal on descriptor `fd`, if it is one.
pub fn columns(fd: i32) -> Option<usize> {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    #[expect(unsafe_code, reason = "TIOCGWINSZ has no safe wrapper in std")]
    // SAFETY: `size` is a valid, writable `winsize` that outlives the call; `fd` is only
    // queried.
    let rc = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &raw mut size) };
    (rc == 0 && size.ws_col > 0).then_some(usize::from(size.ws_col))
}
