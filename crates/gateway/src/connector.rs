//! The connector of upstream calls: rustls (ring provider, webpki roots) for `https`, plain
//! TCP for `http`, HTTP/1.1 and HTTP/2 by ALPN, and nothing attached to the answers.
//!
//! hyper-util's `HttpConnector` describes each connection with an `HttpInfo` (its local and
//! remote addresses), and the pooled client copies that into the extensions of every answer
//! the connection carries: a map, a table and a box, three allocations per request that no
//! part of the gateway reads. [`Connector`] wraps the TLS connector and reports of each
//! connection only what the pooled client acts on: whether it negotiated HTTP/2 and whether
//! it goes through a proxy.
//!
//! [`plain_host`] is the other half of what the pooled client would do per request: the
//! `Host` of an HTTP/1 request, formatted (two allocations and a copy) for every request it
//! sends. For a plain-`http` provider the connection is HTTP/1 whatever happens, so the value
//! is known once, from the base URL; for `https` ALPN may choose HTTP/2, which has no `Host`,
//! and the client still writes it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderValue, Uri};
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_rustls::builderstates::WantsSchemes;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder, MaybeHttpsStream};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tower_service::Service;

use crate::combo::BoxError;

/// The TLS connector the upstream client and the logins' token refreshes share.
#[derive(Clone, Debug)]
pub(crate) struct Connector(HttpsConnector<HttpConnector>);

impl Connector {
    /// TCP with `TCP_NODELAY` that gives up after `connect`, under rustls for `https`.
    pub(crate) fn new(connect: Duration) -> Result<Self, rustls::Error> {
        let tls = HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())?;
        Ok(Self::over(tls, connect))
    }

    /// The connector over `tls` (the roots it trusts).
    fn over(tls: HttpsConnectorBuilder<WantsSchemes>, connect: Duration) -> Self {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(connect));
        let https = tls
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(http);
        Self(https)
    }
}

/// The `Host` header hyper-util's client writes into an HTTP/1 request to `base_url` (its host,
/// and its port unless it is 80), when `base_url` is plain `http`; `None` for any other.
pub(crate) fn plain_host(base_url: &str) -> Option<HeaderValue> {
    let uri: Uri = base_url.parse().ok()?;
    if uri.scheme_str() != Some("http") {
        return None;
    }
    let host = uri.host()?;
    let value = match uri.port_u16() {
        Some(80) | None => HeaderValue::from_str(host),
        Some(port) => HeaderValue::from_str(&format!("{host}:{port}")),
    };
    value.ok()
}

type Inner = MaybeHttpsStream<TokioIo<TcpStream>>;
type InnerFuture = <HttpsConnector<HttpConnector> as Service<Uri>>::Future;

impl Service<Uri> for Connector {
    type Response = Stream<Inner>;
    type Error = BoxError;
    type Future = Connecting;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        Connecting(self.0.call(uri))
    }
}

/// The future of [`Connector`]: the TLS connector's, its stream wrapped in [`Stream`].
pub(crate) struct Connecting(InnerFuture);

impl Future for Connecting {
    type Output = Result<Stream<Inner>, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.as_mut().poll(cx).map_ok(Stream)
    }
}

/// A connection that reads and writes as `S` does and reports what `S` reports, less the
/// extras (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct Stream<S>(S);

impl<S: Connection> Connection for Stream<S> {
    fn connected(&self) -> Connected {
        let inner = self.0.connected();
        let connected = Connected::new().proxy(inner.is_proxied());
        if inner.is_negotiated_h2() {
            connected.negotiated_h2()
        } else {
            connected
        }
    }
}

impl<S: Read + Unpin> Read for Stream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: Write + Unpin> Write for Stream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection that says what it was built with, and an extra as `HttpConnector` does.
    struct Said(Connected);

    impl Connection for Said {
        fn connected(&self) -> Connected {
            let c = Connected::new()
                .proxy(self.0.is_proxied())
                .extra(std::net::SocketAddr::from(([127, 0, 0, 1], 9)));
            if self.0.is_negotiated_h2() {
                c.negotiated_h2()
            } else {
                c
            }
        }
    }

    fn extras(c: &Connected) -> usize {
        let mut ext = http::Extensions::new();
        c.get_extras(&mut ext);
        ext.len()
    }

    #[test]
    fn http2_by_alpn_and_a_proxy_are_still_reported() {
        for (h2, proxied) in [(false, false), (true, false), (false, true), (true, true)] {
            let mut inner = Connected::new().proxy(proxied);
            if h2 {
                inner = inner.negotiated_h2();
            }
            let said = Said(inner);
            assert_eq!(extras(&said.connected()), 1, "the double attaches an extra");
            let c = Stream(said).connected();
            assert_eq!(c.is_negotiated_h2(), h2, "h2 {h2} proxied {proxied}");
            assert_eq!(c.is_proxied(), proxied, "h2 {h2} proxied {proxied}");
        }
    }

    #[test]
    fn the_host_of_a_plain_http_provider_is_known_from_its_url() {
        let cases = [
            ("http://127.0.0.1:8089/v1", Some("127.0.0.1:8089")),
            ("http://llm.internal/v1", Some("llm.internal")),
            ("http://llm.internal:80", Some("llm.internal")),
            ("http://[::1]:11434/v1", Some("[::1]:11434")),
            ("http://user:pw@llm.internal:81", Some("llm.internal:81")),
            // HTTPS may become HTTP/2 (no `Host`): the client writes it once it knows.
            ("https://api.openai.com/v1", None),
            ("https://llm.internal:8443", None),
            ("not a url", None),
        ];
        for (url, expected) in cases {
            let host = plain_host(url).map(|v| v.to_str().unwrap_or("?").to_owned());
            assert_eq!(host.as_deref(), expected, "{url}");
        }
    }

    /// A provider over TLS that picks HTTP/2 by ALPN, as the hosted APIs do: the pooled client
    /// must speak HTTP/2 on that connection (HTTP/1 bytes there are a protocol error).
    #[tokio::test]
    async fn a_provider_that_negotiates_http2_is_spoken_to_in_http2() {
        use std::sync::Arc;

        use bytes::Bytes;
        use http_body_util::{BodyExt, Full};
        use hyper_util::client::legacy::Client;
        use hyper_util::rt::TokioExecutor;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

        let rcgen::CertifiedKey { cert, signing_key } =
            rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("a cert");
        let cert_der: CertificateDer<'static> = cert.der().clone();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(signing_key.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(vec![cert_der.clone()], key)
            .expect("server config");
        server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    continue;
                };
                let answer = hyper::service::service_fn(|req: http::Request<_>| async move {
                    let version = format!("{:?}", req.version());
                    Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from(
                        version,
                    ))))
                });
                tokio::spawn(
                    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), answer),
                );
            }
        });

        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert_der).expect("root");
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = Connector::over(
            HttpsConnectorBuilder::new().with_tls_config(tls),
            Duration::from_secs(5),
        );
        let client: Client<Connector, Full<Bytes>> =
            Client::builder(TokioExecutor::new()).build(connector);
        let uri: Uri = format!("https://localhost:{port}/v1/responses")
            .parse()
            .expect("uri");
        let res = tokio::time::timeout(Duration::from_secs(10), client.get(uri))
            .await
            .expect("an answer in time")
            .expect("an answer");
        assert_eq!(res.status(), http::StatusCode::OK);
        assert_eq!(res.version(), http::Version::HTTP_2);
        let body = res.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(&body[..], b"HTTP/2.0");
    }

    #[test]
    fn nothing_is_attached_to_the_answers() {
        let c = Stream(Said(Connected::new())).connected();
        assert_eq!(extras(&c), 0);
    }
}
