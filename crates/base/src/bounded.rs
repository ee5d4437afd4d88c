//! Bodies read from the network with a size limit: refused as soon as
//! they are known to be too large (by their declared length, or by the
//! chunks read so far), never held whole first.

use std::future::poll_fn;
use std::pin::Pin;

use futures_core::Stream;

/// Why a bounded body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError<E> {
    /// The body is larger than the limit (`declared`: the length its
    /// sender announced, when that is what gave it away).
    #[error("over the {max} byte limit{}", declared.map(|n| format!(" ({n} bytes declared)")).unwrap_or_default())]
    TooLarge {
        /// The limit, in bytes.
        max: usize,
        /// The length the sender declared, when that was over the limit.
        declared: Option<u64>,
    },
    /// Reading a chunk failed.
    #[error("{0}")]
    Read(#[source] E),
}

/// Reads `body`, a stream of chunks whose sender declared `declared`
/// bytes (a `Content-Length`, when there is one), keeping at most `max`
/// bytes: a declared length over `max` is refused before anything is
/// read, and the read stops at the first chunk that would go over it.
pub async fn read_capped<S, B, E>(declared: Option<u64>, max: usize, body: S) -> Result<Vec<u8>, BodyError<E>>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
{
    if let Some(n) = declared
        && n > max as u64
    {
        return Err(BodyError::TooLarge { max, declared: Some(n) });
    }
    let mut body = std::pin::pin!(body);
    let mut out = Vec::new();
    while let Some(chunk) = poll_fn(|cx| Pin::as_mut(&mut body).poll_next(cx)).await {
        let chunk = chunk.map_err(BodyError::Read)?;
        let chunk = chunk.as_ref();
        if out.len() + chunk.len() > max {
            return Err(BodyError::TooLarge { max, declared: None });
        }
        out.extend_from_slice(chunk);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream of the given chunks, then its end.
    struct Chunks(std::collections::VecDeque<Result<Vec<u8>, &'static str>>);

    impl Stream for Chunks {
        type Item = Result<Vec<u8>, &'static str>;
        fn poll_next(mut self: Pin<&mut Self>, _: &mut std::task::Context<'_>) -> std::task::Poll<Option<Self::Item>> {
            std::task::Poll::Ready(self.0.pop_front())
        }
    }

    fn read(declared: Option<u64>, max: usize, chunks: Vec<Result<Vec<u8>, &'static str>>) -> Result<Vec<u8>, String> {
        let f = read_capped(declared, max, Chunks(chunks.into()));
        let waker = std::task::Waker::noop();
        match std::pin::pin!(f).poll(&mut std::task::Context::from_waker(waker)) {
            std::task::Poll::Ready(r) => r.map_err(|e| e.to_string()),
            std::task::Poll::Pending => unreachable!("the chunks are all ready"),
        }
    }

    use std::future::Future as _;

    #[test]
    fn a_body_up_to_the_limit_is_read_whole_and_one_byte_more_is_refused() {
        assert_eq!(read(None, 4, vec![Ok(b"ab".to_vec()), Ok(b"cd".to_vec())]).unwrap(), b"abcd");
        assert_eq!(read(Some(4), 4, vec![Ok(b"abcd".to_vec())]).unwrap(), b"abcd");
        let over = read(None, 4, vec![Ok(b"ab".to_vec()), Ok(b"cde".to_vec())]).unwrap_err();
        assert_eq!(over, "over the 4 byte limit");
    }

    #[test]
    fn a_declared_length_over_the_limit_is_refused_before_any_chunk_is_read() {
        let err = read(Some(5), 4, vec![Err("a chunk was read")]).unwrap_err();
        assert_eq!(err, "over the 4 byte limit (5 bytes declared)");
    }

    #[test]
    fn a_failed_read_says_why() {
        assert_eq!(read(None, 4, vec![Ok(b"a".to_vec()), Err("reset")]).unwrap_err(), "reset");
    }
}
