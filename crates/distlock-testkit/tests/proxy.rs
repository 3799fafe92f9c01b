//! Each fault of the TCP fault proxy does what it says, on open and new connections.

// Helpers fail the test by panicking, like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use distlock_testkit::fault::{Fault, FaultControl};
use distlock_testkit::proxy::FaultProxy;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};

const PATIENCE: Duration = Duration::from_secs(5);

/// An echo server; aborted when the handle drops at the end of the test.
async fn echo_server() -> (SocketAddr, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                loop {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if stream.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    (addr, task)
}

async fn setup() -> (FaultProxy, JoinHandle<()>) {
    let (upstream, echo) = echo_server().await;
    (FaultProxy::start(upstream).await.unwrap(), echo)
}

/// Writes `message` and reads the same number of bytes back.
async fn round_trip(stream: &mut TcpStream, message: &[u8]) -> Vec<u8> {
    stream.write_all(message).await.unwrap();
    let mut reply = vec![0u8; message.len()];
    timeout(PATIENCE, stream.read_exact(&mut reply))
        .await
        .expect("echo did not come back")
        .unwrap();
    reply
}

#[tokio::test]
async fn none_passes_traffic_through() {
    let (proxy, _echo) = setup().await;
    assert_ne!(proxy.addr(), proxy.upstream());
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(round_trip(&mut stream, b"hello").await, b"hello");
    let big: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
    assert_eq!(round_trip(&mut stream, &big).await, big);
}

#[tokio::test]
async fn delay_holds_each_round_trip_at_least_the_delay() {
    let (proxy, _echo) = setup().await;
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(round_trip(&mut stream, b"warm").await, b"warm");
    let delay = Duration::from_millis(150);
    proxy.set_fault(Fault::Delay(delay)).await;
    for message in [&b"one"[..], b"two", b"three"] {
        let started = Instant::now();
        assert_eq!(round_trip(&mut stream, message).await, message);
        // Both directions are delayed.
        assert!(
            started.elapsed() >= 2 * delay,
            "took {:?}",
            started.elapsed()
        );
    }
    proxy.set_fault(Fault::None).await;
    let started = Instant::now();
    round_trip(&mut stream, b"fast").await;
    assert!(started.elapsed() < delay, "took {:?}", started.elapsed());
}

#[tokio::test]
async fn delay_keeps_order_and_does_not_accumulate() {
    let (proxy, _echo) = setup().await;
    let delay = Duration::from_millis(200);
    proxy.set_fault(Fault::Delay(delay)).await;
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    let started = Instant::now();
    let mut expected = Vec::new();
    for i in 0..10u8 {
        let chunk = [i; 100];
        stream.write_all(&chunk).await.unwrap();
        expected.extend_from_slice(&chunk);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut reply = vec![0u8; expected.len()];
    timeout(PATIENCE, stream.read_exact(&mut reply))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reply, expected);
    let elapsed = started.elapsed();
    assert!(elapsed >= 2 * delay, "took {elapsed:?}");
    // Ten chunks delayed one after another would take 10 × 2 × delay.
    assert!(elapsed < 6 * delay, "delays added up: {elapsed:?}");
}

#[tokio::test]
async fn blackhole_swallows_traffic_on_open_connections_and_none_restores_it() {
    let (proxy, _echo) = setup().await;
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(round_trip(&mut stream, b"before").await, b"before");

    proxy.set_fault(Fault::Blackhole).await;
    stream.write_all(b"lost").await.unwrap();
    let mut buf = [0u8; 16];
    let read = timeout(Duration::from_millis(500), stream.read(&mut buf)).await;
    assert!(read.is_err(), "blackholed read returned {read:?}");

    // New connections are accepted and swallowed too.
    let mut fresh = TcpStream::connect(proxy.addr()).await.unwrap();
    fresh.write_all(b"lost too").await.unwrap();
    let read = timeout(Duration::from_millis(300), fresh.read(&mut buf)).await;
    assert!(read.is_err(), "blackholed read returned {read:?}");

    proxy.set_fault(Fault::None).await;
    let mut after = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(round_trip(&mut after, b"after").await, b"after");
    // The old connection stayed open and flows again; what was swallowed is gone.
    assert_eq!(round_trip(&mut stream, b"again").await, b"again");
}

#[tokio::test]
async fn reset_resets_open_connections_and_refuses_new_ones() {
    let (proxy, _echo) = setup().await;
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(round_trip(&mut stream, b"ping").await, b"ping");

    proxy.set_fault(Fault::Reset).await;
    let mut buf = [0u8; 16];
    let error = timeout(PATIENCE, stream.read(&mut buf))
        .await
        .expect("reset did not reach the open connection")
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::ConnectionReset);

    let mut fresh = TcpStream::connect(proxy.addr()).await.unwrap();
    let outcome = timeout(PATIENCE, async {
        let _ = fresh.write_all(b"x").await;
        fresh.read(&mut buf).await
    })
    .await
    .expect("new connection was neither answered nor reset");
    assert_eq!(outcome.unwrap_err().kind(), ErrorKind::ConnectionReset);

    proxy.set_fault(Fault::None).await;
    let mut after = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(round_trip(&mut after, b"back").await, b"back");
}

#[tokio::test]
async fn close_ends_open_connections_cleanly_and_accepts_new_ones() {
    let (proxy, _echo) = setup().await;
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(round_trip(&mut stream, b"ping").await, b"ping");

    proxy.set_fault(Fault::Close).await;
    let mut buf = [0u8; 16];
    let read = timeout(PATIENCE, stream.read(&mut buf))
        .await
        .expect("close did not reach the open connection");
    assert_eq!(read.unwrap(), 0, "expected a clean end of stream");

    // A connection made while Close is in force is served normally.
    let mut fresh = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(round_trip(&mut fresh, b"new").await, b"new");
}

#[tokio::test]
async fn upstream_down_resets_the_client() {
    // A port nothing listens on: bind, read the port, release it.
    let upstream = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let proxy = FaultProxy::start(upstream).await.unwrap();
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    let mut buf = [0u8; 4];
    let read = timeout(PATIENCE, stream.read(&mut buf)).await.unwrap();
    assert_eq!(read.unwrap_err().kind(), ErrorKind::ConnectionReset);
}

#[tokio::test]
async fn dropping_the_proxy_closes_its_connections_and_port() {
    let (proxy, _echo) = setup().await;
    let addr = proxy.addr();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    assert_eq!(round_trip(&mut stream, b"ping").await, b"ping");
    drop(proxy);
    let mut buf = [0u8; 4];
    let read = timeout(PATIENCE, stream.read(&mut buf))
        .await
        .expect("connection outlived the proxy");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    let deadline = Instant::now() + PATIENCE;
    while TcpStream::connect(addr).await.is_ok() {
        assert!(Instant::now() < deadline, "proxy still accepts after drop");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
