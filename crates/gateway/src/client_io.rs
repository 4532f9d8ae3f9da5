//! A client connection's socket as the server reads and writes it: every write bounded by
//! `client_write_timeout_secs`, and a connection closed at that bound reset rather than
//! closed gracefully.
//!
//! A client that stops reading leaves the socket's send buffer full (megabytes on loopback and
//! fast links). Closed gracefully, the kernel keeps that buffer, and the socket, for as long as
//! it tries to deliver it to a peer that does not read: outside the process, beyond
//! `max_connections`, a few megabytes per connection a client can open and abandon at will.
//! Reset (`SO_LINGER` of zero), the buffer is dropped with the socket.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_io_timeout::TimeoutStream;

pin_project_lite::pin_project! {
    /// A client's TCP stream with its write bound (see the [module docs](self)); dropped with
    /// unread bytes from the client, it lingers ([`crate::linger`]) unless it was reset.
    #[derive(Debug)]
    pub(crate) struct ClientIo {
        #[pin]
        inner: TimeoutStream<TcpStream>,
        reset: bool,
        linger: Arc<AtomicBool>,
    }

    impl PinnedDrop for ClientIo {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if !*this.reset {
                let asked = this.linger.load(Ordering::Acquire);
                crate::linger::on_drop(this.inner.get_ref(), asked);
            }
        }
    }
}

impl ClientIo {
    /// `tcp`, each of whose writes fails after waiting `write_timeout` for the client; it
    /// lingers when dropped after `linger` was set (an answer ended the connection before its
    /// request's body was read), or with unread bytes waiting.
    pub(crate) fn new(tcp: TcpStream, write_timeout: Duration, linger: Arc<AtomicBool>) -> Self {
        let mut inner = TimeoutStream::new(tcp);
        inner.set_write_timeout(Some(write_timeout));
        Self {
            inner,
            reset: false,
            linger,
        }
    }
}

/// A write that failed for the write bound resets the connection when it is dropped.
fn reset_on_timeout<T>(
    inner: Pin<&mut TimeoutStream<TcpStream>>,
    reset: &mut bool,
    polled: Poll<io::Result<T>>,
) -> Poll<io::Result<T>> {
    if let Poll::Ready(Err(e)) = &polled
        && e.kind() == io::ErrorKind::TimedOut
    {
        *reset = true;
        if let Err(e) = inner.get_ref().set_zero_linger() {
            tracing::debug!(error = %e, "a timed-out client connection could not be set to reset");
        }
    }
    polled
}

impl AsyncRead for ClientIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.project().inner.poll_read(cx, buf)
    }
}

impl AsyncWrite for ClientIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        let mut inner = this.inner;
        let polled = inner.as_mut().poll_write(cx, buf);
        reset_on_timeout(inner, this.reset, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        let mut inner = this.inner;
        let polled = inner.as_mut().poll_write_vectored(cx, bufs);
        reset_on_timeout(inner, this.reset, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.project();
        let mut inner = this.inner;
        let polled = inner.as_mut().poll_flush(cx);
        reset_on_timeout(inner, this.reset, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.project();
        let mut inner = this.inner;
        let polled = inner.as_mut().poll_shutdown(cx);
        reset_on_timeout(inner, this.reset, polled)
    }
}
