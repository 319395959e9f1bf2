//! Reading one line at a time in bounded memory: a corpus file or standard input that holds a
//! giant "line" (a binary file, a JSON export without line breaks) stops with an error naming
//! the file and the line instead of growing a buffer until memory runs out.

use std::io::{self, BufRead, Read};

/// Longest line read from a corpus file or standard input, in bytes, its `\n` not counted
/// (1 MiB: a sentence is some hundred bytes; a longer line is not one sentence).
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// What [`read_line`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineRead {
    /// A line, its `\n` included when it has one (the last line of the input may not).
    Line,
    /// A line longer than the limit: the buffer holds its first `max + 1` bytes and the rest
    /// is still unread ([`skip_line`] discards it).
    TooLong,
    /// The end of the input: nothing was read.
    End,
}

/// Reads the next line of `reader` into `buf` (cleared first), reading at most `max` bytes
/// before its `\n`, so that memory stays bounded whatever the input holds.
pub fn read_line(reader: &mut impl BufRead, buf: &mut Vec<u8>, max: usize) -> io::Result<LineRead> {
    buf.clear();
    // One byte more than the line may hold: `max` bytes and a `\n`, or the proof of too many.
    let n = reader.by_ref().take(max as u64 + 1).read_until(b'\n', buf)?;
    Ok(if n == 0 {
        LineRead::End
    } else if buf.last() == Some(&b'\n') || n <= max {
        LineRead::Line
    } else {
        LineRead::TooLong
    })
}

/// Discards the rest of the current line, its `\n` included, without keeping it in memory.
pub fn skip_line(reader: &mut impl BufRead) -> io::Result<()> {
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            return Ok(());
        }
        match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => {
                reader.consume(i + 1);
                return Ok(());
            }
            None => {
                let n = chunk.len();
                reader.consume(n);
            }
        }
    }
}

/// Counts the lines left in `reader` (a last line without `\n` counts) without keeping any in
/// memory.
pub fn count_lines(reader: &mut impl BufRead) -> io::Result<usize> {
    let (mut lines, mut open) = (0, false);
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            return Ok(lines + usize::from(open));
        }
        let n = chunk.len();
        lines += chunk.iter().filter(|&&b| b == b'\n').count();
        open = chunk[n - 1] != b'\n';
        reader.consume(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every line of `input` read with a limit of `max` bytes, as (what, bytes read).
    fn all(input: &[u8], max: usize) -> Vec<(LineRead, Vec<u8>)> {
        // A reader buffer smaller than the lines, so that lines span several refills.
        let mut r = io::BufReader::with_capacity(3, input);
        let mut out = Vec::new();
        let mut buf = Vec::new();
        for _ in 0..=input.len() {
            match read_line(&mut r, &mut buf, max).unwrap() {
                LineRead::End => return out,
                LineRead::TooLong => {
                    out.push((LineRead::TooLong, buf.clone()));
                    skip_line(&mut r).unwrap();
                }
                LineRead::Line => out.push((LineRead::Line, buf.clone())),
            }
        }
        panic!("read_line never reported the end of {} bytes", input.len());
    }

    #[test]
    fn lines_up_to_the_limit_are_read_and_longer_ones_reported() {
        use LineRead::*;
        let got = all(b"abcd\nabcde\nab\nabcdefghij\nxy", 4);
        assert_eq!(
            got,
            [
                (Line, b"abcd\n".to_vec()),
                (TooLong, b"abcde".to_vec()),
                (Line, b"ab\n".to_vec()),
                (TooLong, b"abcde".to_vec()),
                (Line, b"xy".to_vec()),
            ]
        );
        // A last line of exactly the limit, without `\n`, is a line; one byte more is not.
        assert_eq!(all(b"abcd", 4), [(Line, b"abcd".to_vec())]);
        assert_eq!(all(b"abcde", 4), [(TooLong, b"abcde".to_vec())]);
        assert_eq!(all(b"", 4), []);
    }

    #[test]
    fn a_giant_line_is_never_held_in_memory() {
        let giant = vec![b'x'; 1 << 20];
        let mut input = giant.clone();
        input.extend_from_slice(b"\nnext\n");
        let mut r = io::BufReader::new(&input[..]);
        let mut buf = Vec::new();
        assert_eq!(read_line(&mut r, &mut buf, 100).unwrap(), LineRead::TooLong);
        assert_eq!(buf.len(), 101, "the limit and one byte more, not the line");
        skip_line(&mut r).unwrap();
        assert_eq!(read_line(&mut r, &mut buf, 100).unwrap(), LineRead::Line);
        assert_eq!(buf, b"next\n");
    }

    #[test]
    fn count_lines_counts_an_unterminated_last_line() {
        let count = |b: &[u8]| count_lines(&mut io::BufReader::with_capacity(2, b)).unwrap();
        assert_eq!(count(b""), 0);
        assert_eq!(count(b"a\nb\n"), 2);
        assert_eq!(count(b"a\nb"), 2);
        assert_eq!(count(b"\n\n\n"), 3);
    }
}
