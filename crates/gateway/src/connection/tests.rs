use std::sync::{Arc, Mutex};

use axum::body::Body;
use http::{Request, Response};
use hyper::body::Incoming;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::SharedService;
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

/// The next request on a connection starts with the last answer's extension map emptied:
/// it carries none of the answer's values, and the answer keeps what hyper's server reads of
/// it (its reason phrase).
#[tokio::test]
async fn a_requests_extensions_carry_nothing_of_the_last_answer() {
    let seen: Arc<Mutex<Vec<bool>>> = Arc::default();
    let log = seen.clone();
    let service = SharedService::new(tower::service_fn(move |req: Request<Incoming>| {
        let log = log.clone();
        async move {
            log.lock()
                .unwrap()
                .push(req.extensions().get::<Marker>().is_some());
            let mut res = Response::new(Body::from("ok"));
            res.extensions_mut().insert(Marker);
            res.extensions_mut()
                .insert(hyper::ext::ReasonPhrase::from_static(b"Fine"));
            Ok::<_, std::convert::Infallible>(res)
        }
    }));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve_with(
        listener,
        service,
        ServeOptions::default(),
        std::future::pending(),
    ));
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
