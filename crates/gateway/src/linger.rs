//! A lingering close: a client connection the server ends while the client is still sending
//! (an answer given before the request body was read: a 401 for an unknown key, a 413, the
//! budget's 503) is drained for a moment before it is closed.
//!
//! Closed at once with unread bytes in its receive buffer, the kernel resets the connection
//! (RST), and a peer still writing the body sees a broken pipe before it reads the answer: a
//! reverse proxy such as nginx then reports a 502 of its own in place of the gateway's 401 or
//! 413, and a client's SDK retries and uploads the body again. Drained, the connection ends
//! with the answer read.
//!
//! A connection lingers when one of its answers said `connection: close` (the client may
//! still be sending the body, now or in a moment), or when bytes nobody read wait in it as
//! it is dropped; a keep-alive connection closed while idle does not. It lingers with its
//! write side shut (the client sees the end of the answer) until the client closes, for at
//! most [`LINGER_TIME`] and [`LINGER_BYTES`], and at most [`MAX_LINGERING`] at
//! once: beyond them a connection is closed at once, as before. A lingering connection is no
//! longer one of `max_connections`: it holds a file descriptor and a small task, nothing of
//! the request.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest a connection lingers.
pub(crate) const LINGER_TIME: Duration = Duration::from_secs(5);
/// Most bytes read and dropped from a lingering connection.
pub(crate) const LINGER_BYTES: usize = 64 * 1024 * 1024;
/// Most connections lingering at once.
pub(crate) const MAX_LINGERING: usize = 1024;

static LINGERING: AtomicUsize = AtomicUsize::new(0);

/// One lingering connection, counted while it lives.
struct Counted;

impl Counted {
    fn take() -> Option<Self> {
        LINGERING
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_LINGERING).then_some(n + 1)
            })
            .ok()
            .map(|_| Counted)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        LINGERING.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Called as `tcp` is dropped: when an answer ended the connection before its request's body
/// was read (`asked`: the client may still be sending, now or in a moment), or when bytes
/// nobody read are waiting, a duplicate of the socket drains what comes in a task of its own
/// (the socket closes with its last descriptor).
pub(crate) fn on_drop(tcp: &TcpStream, asked: bool) {
    if !asked {
        // Asks the kernel (tokio's own record of readiness may be clear with bytes waiting).
        let mut probe = [std::mem::MaybeUninit::<u8>::uninit(); 1];
        match socket2::SockRef::from(tcp).peek(&mut probe) {
            Ok(n) if n > 0 => {}
            // Nothing waiting, the client's end, or an error: closed at once.
            _ => return,
        }
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let Some(counted) = Counted::take() else {
        return;
    };
    let dup = match socket2::SockRef::from(tcp).try_clone() {
        Ok(dup) => std::net::TcpStream::from(dup),
        Err(e) => {
            tracing::debug!(error = %e, "a connection with unread bytes could not linger");
            return;
        }
    };
    let _entered = runtime.enter();
    let Ok(mut tcp) = dup
        .set_nonblocking(true)
        .and_then(|()| TcpStream::from_std(dup))
    else {
        return;
    };
    runtime.spawn(async move {
        let _counted = counted;
        let _ = tcp.shutdown().await;
        let drain = async {
            let mut buf = vec![0u8; 16 * 1024];
            let mut left = LINGER_BYTES;
            while left > 0 {
                match tcp.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => left = left.saturating_sub(n),
                }
            }
        };
        let _ = tokio::time::timeout(LINGER_TIME, drain).await;
    });
}
