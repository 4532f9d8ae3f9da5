//! The `plain` target: a bare hyper reverse proxy (hyper-util's pooled client behind a hyper
//! server), the baseline nothing can undercut.

use std::convert::Infallible;

use bytes::Bytes;
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{Either, Empty};
use hyper::body::Incoming;
use hyper::server::conn::http1 as server_http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

/// The baseline: forwards method, path, headers and body to `upstream` and streams the response
/// back, nothing else.
pub(crate) async fn plain_proxy(listener: TcpListener, upstream: Uri) {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Client<HttpConnector, Incoming> =
        Client::builder(TokioExecutor::new()).build(connector);
    let authority = upstream.authority().cloned();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let client = client.clone();
        let authority = authority.clone();
        tokio::spawn(async move {
            let service = service_fn(move |mut req: Request<Incoming>| {
                let client = client.clone();
                let authority = authority.clone();
                async move {
                    let mut uri = Uri::builder().scheme("http");
                    if let Some(a) = authority {
                        uri = uri.authority(a);
                    }
                    let pq = req.uri().path_and_query().map_or("/", |p| p.as_str());
                    let res = match uri.path_and_query(pq).build() {
                        Ok(uri) => {
                            *req.uri_mut() = uri;
                            client.request(req).await.ok()
                        }
                        Err(_) => None,
                    };
                    Ok::<_, Infallible>(match res {
                        Some(res) => res.map(Either::Left),
                        None => {
                            let mut r = Response::new(Either::Right(Empty::<Bytes>::new()));
                            *r.status_mut() = StatusCode::BAD_GATEWAY;
                            r
                        }
                    })
                }
            });
            let _ = server_http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
