//! This process's stdin and stdout, read and written on the IO reactor.
//!
//! rmcp's [`stdio_pipes`] does that when both are pipes (reopened
//! non-blocking through `/proc/self/fd`); anything else falls back to
//! tokio's blocking handles, which read and write on the blocking pool: a
//! thread hand-off and futex wake-ups for every message each way. Node's
//! `child_process` (the TypeScript SDK's stdio transport, and every
//! Node-based client) gives its children Unix socket pairs, not pipes, so
//! those clients paid that hand-off on every call (BENCHMARKS.md, "The
//! stdio hot path as every client sees it"). A socket cannot be reopened
//! through `/proc` with a description of its own, so its descriptor is
//! made non-blocking while the session uses it, and its flags are put back
//! when the stream is dropped. Not when stderr is the same socket as stdout
//! (`2>&1`): log lines would then meet a non-blocking stderr.

use rmcp::transport::{StdioReader, stdio_pipes};
use rustix::fs::OFlags;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Standard input, as [`stdio`] opened it.
#[derive(Debug)]
pub enum StdinReader {
    /// A pipe (non-blocking) or a file or terminal (blocking): rmcp's.
    Rmcp(StdioReader),
    /// A Unix socket, on the reactor.
    Socket(SocketStream),
}

/// Standard output, as [`stdio`] opened it.
#[derive(Debug)]
pub enum StdoutWriter {
    /// A pipe (non-blocking) or a file or terminal (blocking): rmcp's.
    Rmcp(rmcp::transport::StdioWriter),
    /// A Unix socket, on the reactor.
    Socket(SocketStream),
}

/// This process's stdin and stdout: both on the IO reactor when both are
/// pipes or both are Unix sockets (stderr not being stdout's socket),
/// else as rmcp's [`stdio_pipes`] opens them. Must be called inside a
/// tokio runtime with IO enabled.
pub fn stdio() -> (StdinReader, StdoutWriter) {
    let (stdin, stdout, stderr) = (io::stdin(), io::stdout(), io::stderr());
    if is_socket(stdin.as_fd()) && is_socket(stdout.as_fd()) && !same_file(stdout.as_fd(), stderr.as_fd()) {
        match (SocketStream::of(stdin.as_fd()), SocketStream::of(stdout.as_fd())) {
            (Ok(input), Ok(output)) => {
                tracing::debug!("stdio: both standard streams are Unix sockets, served on the reactor");
                return (StdinReader::Socket(input), StdoutWriter::Socket(output));
            }
            (Err(e), _) | (_, Err(e)) => {
                tracing::debug!(error = %e, "stdio: sockets left blocking");
            }
        }
    }
    let (input, output) = stdio_pipes();
    (StdinReader::Rmcp(input), StdoutWriter::Rmcp(output))
}

fn is_socket(fd: BorrowedFd<'_>) -> bool {
    rustix::fs::fstat(fd).is_ok_and(|s| rustix::fs::FileType::from_raw_mode(s.st_mode) == rustix::fs::FileType::Socket)
}

/// Whether two descriptors are the same file (or socket).
fn same_file(a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> bool {
    match (rustix::fs::fstat(a), rustix::fs::fstat(b)) {
        (Ok(a), Ok(b)) => (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino),
        _ => true,
    }
}

/// One end of a Unix socket (a duplicate of the descriptor given), on the
/// reactor; the socket's flags are restored when it is dropped.
#[derive(Debug)]
pub struct SocketStream {
    io: tokio::net::UnixStream,
    /// The flags to put back, if this stream made the socket non-blocking.
    restore: Option<OFlags>,
}

impl SocketStream {
    /// A stream over a duplicate of `fd`, which must be a Unix socket.
    pub fn of(fd: BorrowedFd<'_>) -> io::Result<SocketStream> {
        let fd = rustix::io::dup(fd)?;
        let flags = rustix::fs::fcntl_getfl(&fd)?;
        let restore = if flags.contains(OFlags::NONBLOCK) {
            None
        } else {
            rustix::fs::fcntl_setfl(&fd, flags | OFlags::NONBLOCK)?;
            Some(flags)
        };
        let stream =
            SocketStream { io: tokio::net::UnixStream::from_std(std::os::unix::net::UnixStream::from(fd))?, restore };
        Ok(stream)
    }
}

impl Drop for SocketStream {
    fn drop(&mut self) {
        if let Some(flags) = self.restore {
            let _ = rustix::fs::fcntl_setfl(self.io.as_fd(), flags);
        }
    }
}

impl AsyncRead for SocketStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl AsyncWrite for SocketStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, data)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    /// The socket stays open for writing: the session's end closes it.
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for StdinReader {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            StdinReader::Rmcp(r) => Pin::new(r).poll_read(cx, buf),
            StdinReader::Socket(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for StdoutWriter {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            StdoutWriter::Rmcp(w) => Pin::new(w).poll_write(cx, data),
            StdoutWriter::Socket(s) => Pin::new(s).poll_write(cx, data),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            StdoutWriter::Rmcp(w) => Pin::new(w).poll_flush(cx),
            StdoutWriter::Socket(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            StdoutWriter::Rmcp(w) => Pin::new(w).poll_shutdown(cx),
            StdoutWriter::Socket(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    #[tokio::test]
    async fn a_socket_is_served_on_the_reactor_and_its_flags_put_back() {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(is_socket(ours.as_fd()));
        assert!(!is_socket(std::fs::File::open("/dev/null").unwrap().as_fd()), "not a socket");
        let mut stream = SocketStream::of(ours.as_fd()).unwrap();

        // Far more than a socket buffer holds: the writer waits for room,
        // and every byte arrives in order.
        let data: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
        let reader = std::thread::spawn(move || {
            use std::io::{Read as _, Write as _};
            let mut got = Vec::new();
            (&theirs).take(4 << 20).read_to_end(&mut got).unwrap();
            (&theirs).write_all(b"answer\n").unwrap();
            got
        });
        stream.write_all(&data).await.unwrap();
        let mut line = [0u8; 7];
        stream.read_exact(&mut line).await.unwrap();
        assert_eq!(&line, b"answer\n");
        assert_eq!(reader.join().unwrap(), data);
        assert!(rustix::fs::fcntl_getfl(&ours).unwrap().contains(OFlags::NONBLOCK), "non-blocking while in use");
        drop(stream);
        assert!(!rustix::fs::fcntl_getfl(&ours).unwrap().contains(OFlags::NONBLOCK), "blocking again once dropped");
    }

    #[test]
    fn stderr_on_stdouts_socket_is_seen() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let a2 = a.try_clone().unwrap();
        assert!(same_file(a.as_fd(), a2.as_fd()));
        assert!(!same_file(a.as_fd(), b.as_fd()));
    }
}
