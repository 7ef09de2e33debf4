//! A TCP socket that leaves the runtime's poller while a coalescing reader pauses.
//!
//! A TLS client sends a large request as 16 KiB records, often one write each. While the
//! socket is registered with the runtime's epoll, the kernel wakes the thread parked in
//! `epoll_wait` for every record that arrives, even while the connection's reader waits on
//! purpose for the rest of the frame (see `skiff_protocol::frame`'s coalescing): each wake-up
//! is a context switch that does nothing but note the socket is readable. Kafka's clients over
//! PLAINTEXT send a request in one write, so this costs only TLS connections.
//!
//! [`ParkingTcp`] is the socket under a TLS stream. When the reader pauses, [`Parker::pause`]
//! takes the socket out of the poller (tokio's `into_std`, one `epoll_ctl`). A parked socket is
//! read and written directly (non-blocking system calls, nothing registered): only a call that
//! would block puts it back in the poller (`from_std`), so that its waker is woken. A parked
//! socket has no waker to lose: it is parked only while no write waits for room (a reader
//! never waits while it pauses). `SO_RCVLOWAT` would be the kernel's own way to hold the
//! wake-ups back, but no well-kept crate sets it without `unsafe` code.

use std::io::{self, IoSlice, Read, Write};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use skiff_protocol::frame::Pausing;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Where the socket is.
#[derive(Debug)]
enum Socket {
    /// Registered with the runtime's poller: readiness is watched.
    Watched(TcpStream),
    /// Out of the poller: read and written directly until a call would block.
    Parked(std::net::TcpStream),
    /// Taking it out of or putting it back in the poller failed: the connection is lost.
    Lost,
}

#[derive(Debug)]
struct Shared {
    socket: Socket,
    /// A write found no room and waits for the socket to be writable: it must stay watched.
    write_waiting: bool,
}

/// A TCP stream that can leave the runtime's poller between reads (see the module's
/// documentation).
#[derive(Debug)]
pub struct ParkingTcp {
    shared: Arc<Mutex<Shared>>,
}

/// Parks a [`ParkingTcp`] when its reader pauses.
#[derive(Debug, Clone)]
pub struct Parker {
    shared: Arc<Mutex<Shared>>,
}

impl ParkingTcp {
    pub fn new(stream: TcpStream) -> (ParkingTcp, Parker) {
        let shared = Arc::new(Mutex::new(Shared {
            socket: Socket::Watched(stream),
            write_waiting: false,
        }));
        (
            ParkingTcp {
                shared: Arc::clone(&shared),
            },
            Parker { shared },
        )
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        lock(&self.shared)
    }
}

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    // Nothing in the critical sections can leave the state half-changed: a poisoned lock's
    // state is as good as any.
    shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn lost() -> io::Error {
    io::Error::other("the socket could not be moved in or out of the runtime's poller")
}

impl Shared {
    /// The socket, registered with the poller again if it was parked.
    fn watched(&mut self) -> io::Result<&mut TcpStream> {
        self.socket = match std::mem::replace(&mut self.socket, Socket::Lost) {
            Socket::Parked(parked) => Socket::Watched(TcpStream::from_std(parked)?),
            other => other,
        };
        match &mut self.socket {
            Socket::Watched(stream) => Ok(stream),
            _ => Err(lost()),
        }
    }

    /// A direct call on a parked socket: `Some` unless it would block (or the socket is
    /// watched).
    fn parked<T>(
        &mut self,
        call: impl FnOnce(&mut std::net::TcpStream) -> io::Result<T>,
    ) -> Option<io::Result<T>> {
        let Socket::Parked(stream) = &mut self.socket else {
            return None;
        };
        match call(stream) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => None,
            done => Some(done),
        }
    }

    /// Notes whether a write is left waiting for room.
    fn wrote<T>(&mut self, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        self.write_waiting = poll.is_pending();
        poll
    }
}

impl Pausing for Parker {
    fn pause(&self) {
        let mut shared = lock(&self.shared);
        if shared.write_waiting {
            return;
        }
        // If leaving the poller fails, the stream is gone: every later call fails and the
        // connection closes.
        shared.socket = match std::mem::replace(&mut shared.socket, Socket::Lost) {
            Socket::Watched(stream) => stream.into_std().map_or(Socket::Lost, Socket::Parked),
            other => other,
        };
    }
}

impl AsyncRead for ParkingTcp {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut shared = self.lock();
        let direct = shared.parked(|stream| {
            let read = stream.read(buf.initialize_unfilled())?;
            buf.advance(read);
            Ok(())
        });
        if let Some(done) = direct {
            return Poll::Ready(done);
        }
        match shared.watched() {
            Ok(stream) => Pin::new(stream).poll_read(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

impl ParkingTcp {
    /// A write: directly on a parked socket, through the poller if it would block there.
    fn poll_write_with(
        &self,
        cx: &mut Context<'_>,
        direct: impl FnOnce(&mut std::net::TcpStream) -> io::Result<usize>,
        watched: impl FnOnce(Pin<&mut TcpStream>, &mut Context<'_>) -> Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        let mut shared = self.lock();
        if let Some(done) = shared.parked(direct) {
            return Poll::Ready(done);
        }
        let poll = match shared.watched() {
            Ok(stream) => watched(Pin::new(stream), cx),
            Err(e) => Poll::Ready(Err(e)),
        };
        shared.wrote(poll)
    }
}

impl AsyncWrite for ParkingTcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_with(
            cx,
            |stream| stream.write(buf),
            |stream, cx| stream.poll_write(cx, buf),
        )
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_with(
            cx,
            |stream| stream.write_vectored(bufs),
            |stream, cx| stream.poll_write_vectored(cx, bufs),
        )
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // A TCP socket buffers nothing of its own.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut shared = self.lock();
        // A parked socket is shut down as it is: no need to watch it again for that.
        if let Some(done) = shared.parked(|stream| stream.shutdown(std::net::Shutdown::Write)) {
            return Poll::Ready(done);
        }
        match shared.watched() {
            Ok(stream) => Pin::new(stream).poll_shutdown(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    const BOUND: Duration = Duration::from_secs(10);

    impl Parker {
        fn is_parked(&self) -> bool {
            matches!(lock(&self.shared).socket, Socket::Parked(_))
        }
    }

    /// A loopback connection: the accepted end as a [`ParkingTcp`], and the peer.
    async fn pair() -> (ParkingTcp, Parker, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let (peer, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let (stream, _) = accepted.expect("accept");
        let (parking, parker) = ParkingTcp::new(stream);
        (parking, parker, peer.expect("connect"))
    }

    /// A parked socket is read and written without the poller; a read that finds nothing puts
    /// it back, and that read is woken when bytes come.
    #[tokio::test]
    async fn a_parked_socket_is_used_directly_until_a_read_would_wait() {
        let (mut socket, parker, mut peer) = pair().await;
        parker.pause();
        assert!(parker.is_parked());
        // Loopback queues the bytes on the receiving socket before `write_all` returns.
        peer.write_all(b"hello").await.expect("write");
        let mut buf = [0u8; 16];
        let read = tokio::time::timeout(BOUND, socket.read(&mut buf)).await;
        assert!(matches!(read, Ok(Ok(5))));
        assert_eq!(&buf[..5], b"hello");
        socket.write_all(b"back").await.expect("parked write");
        assert!(
            parker.is_parked(),
            "reads and writes that did not wait leave it parked"
        );
        let mut back = [0u8; 4];
        peer.read_exact(&mut back).await.expect("peer read");
        assert_eq!(&back, b"back");

        // Nothing to read: the socket goes back to the poller and the read waits for bytes.
        let reading = tokio::spawn(async move {
            let mut buf = [0u8; 16];
            let read = socket.read(&mut buf).await;
            (read.map(|n| buf[..n].to_vec()), socket)
        });
        let woken = {
            let parker = parker.clone();
            async move {
                while parker.is_parked() {
                    tokio::task::yield_now().await;
                }
            }
        };
        assert!(tokio::time::timeout(BOUND, woken).await.is_ok());
        peer.write_all(b"more").await.expect("write");
        let done = tokio::time::timeout(BOUND, reading).await;
        let Ok(Ok((Ok(read), mut socket))) = done else {
            panic!("the read was not woken: {done:?}");
        };
        assert_eq!(read, b"more");

        // The end of the stream reaches a parked reader too.
        parker.pause();
        drop(peer);
        let mut buf = [0u8; 16];
        let end = tokio::time::timeout(BOUND, socket.read(&mut buf)).await;
        assert!(matches!(end, Ok(Ok(0))));
    }

    /// A write waiting for room keeps the socket in the poller (parking would lose its waker),
    /// and finishes once the peer reads.
    #[tokio::test]
    async fn a_write_waiting_for_room_keeps_the_socket_watched() {
        let (mut socket, parker, mut peer) = pair().await;
        let chunk = vec![9u8; 64 * 1024];
        let mut sent = 0usize;
        let mut cx = Context::from_waker(std::task::Waker::noop());
        // Fill the peer's receive buffer and this socket's send buffer (bounded).
        let mut full = false;
        for _ in 0..100_000 {
            match Pin::new(&mut socket).poll_write(&mut cx, &chunk) {
                Poll::Ready(Ok(n)) => sent += n,
                Poll::Ready(Err(e)) => panic!("write failed: {e}"),
                Poll::Pending => {
                    full = true;
                    break;
                }
            }
        }
        assert!(full, "the socket never filled");
        parker.pause();
        assert!(!parker.is_parked(), "parked while a write waits");
        let draining = tokio::spawn(async move {
            let mut got = vec![0u8; sent + chunk.len()];
            peer.read_exact(&mut got).await.map(|_| got)
        });
        let rest = vec![9u8; 64 * 1024];
        let written = tokio::time::timeout(BOUND, socket.write_all(&rest)).await;
        assert!(matches!(written, Ok(Ok(()))));
        let drained = tokio::time::timeout(BOUND, draining).await;
        assert!(matches!(&drained, Ok(Ok(Ok(got))) if got.iter().all(|&b| b == 9)));
        // Its write done, the socket may be parked again.
        parker.pause();
        assert!(parker.is_parked());
    }
}
