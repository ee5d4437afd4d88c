//! toolhost-mcp-wire: what the MCP server front and the MCP client share,
//! and nothing else: content blocks between the host's and MCP's
//! ([`content`]), an external server's offers as the front sees them
//! ([`upstream`]), resource subscriptions ([`subscribe`]) and a bounded
//! line reader. Neither the front nor the client depends on the other;
//! both depend on this.

#![deny(unsafe_code)]

pub mod content;
pub mod plugin_offer;
pub mod subscribe;
pub mod upstream;

use toolhost_core::{registry, tool};

/// Reads one line (without its `\n`) from `reader` into `line`, keeping at
/// most `max` bytes of it and skipping the rest, so a peer that never sends
/// a newline cannot grow the host's memory. Returns `None` at the end of the
/// input, else whether the line was cut.
pub async fn read_line_capped(
    reader: &mut (impl tokio::io::AsyncBufRead + Unpin),
    line: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Option<bool>> {
    use tokio::io::AsyncBufReadExt as _;
    line.clear();
    let (mut cut, mut read_any) = (false, false);
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(read_any.then_some(cut));
        }
        read_any = true;
        let newline = buf.iter().position(|&b| b == b'\n');
        let chunk = &buf[..newline.unwrap_or(buf.len())];
        let room = max.saturating_sub(line.len());
        cut |= chunk.len() > room;
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let consumed = newline.map_or(buf.len(), |i| i + 1);
        reader.consume(consumed);
        if newline.is_some() {
            return Ok(Some(cut));
        }
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn lines_are_read_whole_or_cut_at_the_cap() {
        let mut input: &[u8] = b"short\nthis one is long\r\nlast";
        let mut line = Vec::new();
        assert_eq!(super::read_line_capped(&mut input, &mut line, 8).await.unwrap(), Some(false));
        assert_eq!(line, b"short");
        assert_eq!(super::read_line_capped(&mut input, &mut line, 8).await.unwrap(), Some(true));
        assert_eq!(line, b"this one");
        assert_eq!(super::read_line_capped(&mut input, &mut line, 8).await.unwrap(), Some(false));
        assert_eq!(line, b"last");
        assert_eq!(super::read_line_capped(&mut input, &mut line, 8).await.unwrap(), None);
    }
}
