//! Standard output, its write errors named as such.
//!
//! `println!` panics when stdout cannot be written (a full disk behind `> file`, a closed pipe)
//! and a bare `io::Error` says only "No space left on device": every command writes its
//! results through [`Stdout`] (`outln!`/`out!`, or [`Stdout::lock`] for a stream), whose
//! errors say "writing to standard output" and keep their kind, so that a closed pipe
//! (`s2s … | head`) is still told apart ([`crate::args::is_broken_pipe`]) and ends quietly.

use std::fmt;
use std::io::{self, Write};

/// Writes one formatted line to standard output and flushes it; the error names stdout.
macro_rules! outln {
    () => { $crate::out::Stdout::lock().line(format_args!("")) };
    ($($arg:tt)*) => { $crate::out::Stdout::lock().line(format_args!($($arg)*)) };
}

/// Writes formatted text (no newline added) to standard output and flushes it; the error
/// names stdout.
macro_rules! out {
    ($($arg:tt)*) => { $crate::out::Stdout::lock().text(format_args!($($arg)*)) };
}

pub(crate) use {out, outln};

/// Standard output, locked; its errors are [`named`].
pub struct Stdout(io::StdoutLock<'static>);

impl Stdout {
    /// Locks standard output.
    pub fn lock() -> Self {
        Self(io::stdout().lock())
    }

    /// Writes `args`, a newline, and flushes.
    pub fn line(mut self, args: fmt::Arguments) -> io::Result<()> {
        self.write_fmt(args)?;
        self.write_all(b"\n")?;
        self.flush()
    }

    /// Writes `args` and flushes.
    pub fn text(mut self, args: fmt::Arguments) -> io::Result<()> {
        self.write_fmt(args)?;
        self.flush()
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf).map_err(named)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush().map_err(named)
    }
}

/// Flushes standard output once the command is done (what `print!` left buffered), the error
/// named.
pub fn flush() -> io::Result<()> {
    Stdout::lock().flush()
}

/// `e`, of the same kind, saying that it was standard output that could not be written.
pub fn named(e: io::Error) -> io::Error {
    if e.get_ref().is_some_and(|inner| inner.is::<StdoutError>()) {
        return e;
    }
    io::Error::new(e.kind(), StdoutError(e))
}

/// A write to standard output that failed.
#[derive(Debug)]
struct StdoutError(io::Error);

impl fmt::Display for StdoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "writing to standard output: {}", self.0)?;
        if self.0.kind() == io::ErrorKind::StorageFull {
            write!(f, " (the output stops here: free space where it goes, or send it elsewhere)")?;
        } else {
            write!(f, " (the output stops here: check where it goes, or send it elsewhere)")?;
        }
        Ok(())
    }
}

impl std::error::Error for StdoutError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_error_keeps_its_kind_and_says_standard_output_once() {
        let full = named(io::Error::from(io::ErrorKind::StorageFull));
        assert_eq!(full.kind(), io::ErrorKind::StorageFull);
        let text = full.to_string();
        assert!(text.starts_with("writing to standard output: ") && text.contains("free space"), "{text}");
        let again = named(full);
        assert_eq!(again.to_string().matches("standard output").count(), 1);
        let pipe = anyhow::Error::from(named(io::Error::from(io::ErrorKind::BrokenPipe)));
        assert!(crate::args::is_broken_pipe(&pipe));
    }
}
