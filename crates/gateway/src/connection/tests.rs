use std::sync::{Arc, Mutex};

use axum::body::Body;
use http::{Request, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::HttpService;
use crate::server::{ServeOptions, serve_with};

/// A value an answer carries.
#[derive(Clone, Debug)]
struct Marker;

/// Reads one answer of `body` bytes' length off `tcp`, whole.
async fn answer(tcp: &mut TcpStream, body: &[u8]) -> String {
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    while !seen.ends_with(body) {
        let n = tcp.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&seen).into_owned()
}

/// The gateway's HTTP service around a router that records whether each request carried a
/// [`Marker`], and puts one (and a reason phrase) on each answer.
fn marking(seen: Arc<Mutex<Vec<bool>>>) -> HttpService {
    let router = axum::Router::new().fallback(move |req: Request<Body>| {
        let seen = seen.clone();
        async move {
            seen.lock()
                .unwrap()
                .push(req.extensions().get::<Marker>().is_some());
            let mut res = Response::new(Body::from("ok"));
            res.extensions_mut().insert(Marker);
            res.extensions_mut()
                .insert(hyper::ext::ReasonPhrase::from_static(b"Fine"));
            res
        }
    });
    crate::routes::tests::gateway().service_for(router)
}

/// Serves `service` on a loopback port.
async fn served(service: HttpService) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve_with(
        listener,
        service,
        ServeOptions::default(),
        std::future::pending(),
    ));
    addr
}

/// The next request on a connection starts with the last answer's extension map emptied:
/// it carries none of the answer's values, and the answer keeps what hyper's server reads of
/// it (its reason phrase).
#[tokio::test]
async fn a_requests_extensions_carry_nothing_of_the_last_answer() {
    let seen: Arc<Mutex<Vec<bool>>> = Arc::default();
    let addr = served(marking(seen.clone())).await;
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    for _ in 0..3 {
        tcp.write_all(b"GET / HTTP/1.1\r\nhost: gateway\r\n\r\n")
            .await
            .unwrap();
        let text = answer(&mut tcp, b"ok").await;
        assert!(text.starts_with("HTTP/1.1 200 Fine\r\n"), "{text}");
    }
    assert_eq!(*seen.lock().unwrap(), [false, false, false]);
}

/// The same over HTTP/2, where the streams of one connection run at once and answers hand
/// their maps on in any order: no request sees a value an answer carried.
#[tokio::test]
async fn concurrent_streams_carry_nothing_of_each_others_answers() {
    let seen: Arc<Mutex<Vec<bool>>> = Arc::default();
    let addr = served(marking(seen.clone())).await;
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    for _ in 0..4 {
        let calls = (0..8).map(|_| {
            let mut sender = sender.clone();
            async move {
                let req = Request::get(format!("http://{addr}/"))
                    .body(http_body_util::Empty::<bytes::Bytes>::new())
                    .unwrap();
                let res = sender.send_request(req).await.unwrap();
                assert_eq!(res.status(), 200);
            }
        });
        futures_util::future::join_all(calls).await;
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 32);
    assert!(seen.iter().all(|marked| !marked), "{seen:?}");
}
