//! What the collector writes back on the socket, the only messages that travel from the
//! collector to the shim: one line per snapshot asked for through the shim's C API
//! ([`ApiSnapshot`](crate::ApiSnapshot)), `snapshot N PATH` when its file is written or
//! `snapshot N !WHY` when it is not; [`ASK_SNAPSHOT`] when a client of the collector asks for
//! a snapshot of the program (`gpushim snapshot`), which the shim then takes as it takes one
//! by signal; and at the end of the stream an empty line ([`END_OF_STREAM`]), after any
//! answers.

/// What the collector writes once it has read and applied the whole stream.
pub const END_OF_STREAM: &[u8] = b"\n";

/// The line (without its newline) that asks the shim for a snapshot, as its signal does.
/// A shim that does not know it ignores it.
pub const ASK_SNAPSHOT: &[u8] = b"ask snapshot";

/// The line that answers API snapshot `n`: its file's path when `written` is `Ok`, else why
/// not. A path holding a newline cannot be said on one line: its snapshot is answered as not
/// written; newlines in a reason become spaces.
pub fn answer_line(n: u32, written: Result<&[u8], &str>) -> Vec<u8> {
    let mut line = format!("snapshot {n} ").into_bytes();
    match written {
        Ok(p) if !p.contains(&b'\n') => line.extend_from_slice(p),
        Ok(_) => line.extend_from_slice(b"!the snapshot's path holds a newline"),
        Err(e) => {
            line.push(b'!');
            line.extend(e.bytes().map(|b| if b == b'\n' { b' ' } else { b }));
        }
    }
    line.push(b'\n');
    line
}

/// An answer line (without its newline) read back: the snapshot's number and its path, or why
/// it was not written. `None` for anything else.
pub fn parse_answer(line: &[u8]) -> Option<(u32, Result<Vec<u8>, String>)> {
    let rest = line.strip_prefix(b"snapshot ")?;
    let sp = rest.iter().position(|&b| b == b' ')?;
    let n: u32 = std::str::from_utf8(&rest[..sp]).ok()?.parse().ok()?;
    let tail = &rest[sp + 1..];
    Some(match tail.strip_prefix(b"!") {
        Some(why) => (n, Err(String::from_utf8_lossy(why).into_owned())),
        None => (n, Ok(tail.to_vec())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse() {
        assert_eq!(parse_answer(b"snapshot 3 /tmp/a b.json"), Some((3, Ok(b"/tmp/a b.json".to_vec()))));
        assert_eq!(parse_answer(b"snapshot 4 !disk full"), Some((4, Err("disk full".into()))));
        assert_eq!(parse_answer(b""), None);
        assert_eq!(parse_answer(b"snapshot x /a"), None);
    }

    #[test]
    fn answer_lines_are_one_line_each_and_read_back() {
        assert_eq!(answer_line(1, Ok(b"/o/s.json")), b"snapshot 1 /o/s.json\n");
        assert_eq!(answer_line(2, Ok(b"/o/a\nb.json")), b"snapshot 2 !the snapshot's path holds a newline\n");
        assert_eq!(answer_line(3, Err("no\nspace")), b"snapshot 3 !no space\n");
        let line = answer_line(7, Ok(b"/o/x y.json"));
        assert_eq!(parse_answer(&line[..line.len() - 1]), Some((7, Ok(b"/o/x y.json".to_vec()))));
    }
}
