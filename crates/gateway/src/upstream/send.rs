//! One request sent to its provider: the upstream head made, the answer awaited within the
//! head timeout, and the answer's head made the client's.
//!
//! [`start`] does the work before the wait, [`Sent`] waits (a future of its own, so that the
//! upstream call of a request that needs no translation is not boxed) and finishes the answer.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::{Extensions, HeaderValue, Request, Response, StatusCode, Uri, header};
use http_body::Body;
use http_body_util::{Either, Full};
use hyper::body::Incoming;

use context_relay_tower::{FactsExt, ResolvedAccount};

use crate::resolver::InBandQuota;
use crate::routing::Routing;

use super::carried;
use super::uri::{BaseUrl, has_dot_segment};
use super::{
    HeadTimedOut, HttpClient, OutBody, RawBody, UpstreamLimits, account_only, client_only, strip,
};
use crate::error::{ErrorKind, ErrorShape, error_response};
use crate::idle::IdleTimeoutBody;
use crate::secret::redact_url;
use crate::telemetry::HistogramsBy;
use crate::timer::{Within, within};
use crate::usage::{Labels, MeteredBody, UsageLedger};

/// The client's error shape of a 502, worked out from its path on the error paths only.
fn bad_gateway(client_path: &str, message: &str) -> Response<RawBody> {
    let shape = ErrorShape::for_path(client_path);
    let kind = ErrorKind::Upstream.name(shape);
    error_response(shape, StatusCode::BAD_GATEWAY, kind, message).map(Either::Right)
}

/// Sends `req` to its [`UpstreamEndpoint`]: the answer, or the gateway's own error when the
/// request cannot be sent.
pub(super) fn start(
    client: &HttpClient,
    limits: UpstreamLimits,
    first_byte: &Arc<HistogramsBy>,
    usage: Option<&UsageLedger>,
    req: Request<OutBody>,
) -> Sent {
    let (mut parts, body) = req.into_parts();
    let Some(endpoint) = Routing::take_endpoint(&mut parts.extensions) else {
        return Sent::answered(bad_gateway(
            parts.uri.path(),
            "the gateway resolved no upstream for this request (no UpstreamEndpoint)",
        ));
    };
    if has_dot_segment(parts.uri.path()) {
        let shape = ErrorShape::for_path(parts.uri.path());
        let kind = ErrorKind::InvalidRequest.name(shape);
        let message = "the request path has a `.` or `..` segment; the gateway does not forward it";
        return Sent::answered(
            error_response(shape, StatusCode::BAD_REQUEST, kind, message).map(Either::Right),
        );
    }
    let uri = match endpoint.base_url.uri_for(&parts.uri) {
        Ok(u) => u,
        Err(e) => {
            // A base URL may carry user-info: never shown as is.
            let shown = redact_url(endpoint.base_url.as_str());
            tracing::warn!(base_url = %shown, error = %e, "the upstream URL is invalid");
            return Sent::answered(bad_gateway(
                parts.uri.path(),
                &format!("the provider's configured URL is invalid: {e}"),
            ));
        }
    };
    // hyper writes the length of the body it sends (exact for buffered bodies, chunked for
    // streams) when the head has none; a value already saying the body's exact length (the
    // combo and each attempt make it so) is kept, any other removed, so what is sent never
    // disagrees with it.
    let length_right = body
        .size_hint()
        .exact()
        .is_some_and(|len| crate::content_length::says(&parts.headers, len));
    // A name set below (`host`, the credential's) is replaced in place by its `insert`
    // rather than removed first: one look-up of the name instead of two, and no removal.
    let host = endpoint.host;
    let credential = endpoint.credential;
    strip(&mut parts.headers, |n| {
        if (host.is_some() && n == header::HOST)
            || credential.as_ref().is_some_and(|c| c.replaces(n))
        {
            return false;
        }
        n == header::HOST || (n == header::CONTENT_LENGTH && !length_right) || client_only(n)
    });
    // The relay reads the answers of the sessions it tracks as they pass (whether the turn
    // completed, what a refusal blames), which a compressed answer hides: every answer is
    // asked for uncompressed (the usage and refusal readers decode either way). Every line of
    // the header is replaced, which never grows the map.
    if parts.headers.contains_key(header::ACCEPT_ENCODING) {
        parts.headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
    }
    if let Some(host) = host {
        parts.headers.insert(header::HOST, host);
    }
    if let Some(credential) = credential {
        credential.apply(&mut parts.headers);
    }
    let client_uri = std::mem::replace(&mut parts.uri, uri);
    // The client picks the protocol per connection; a client's HTTP/2 request must not
    // force HTTP/2 on an HTTP/1 upstream.
    parts.version = http::Version::HTTP_11;
    let provider: Arc<str> = parts
        .extensions
        .fact::<ResolvedAccount>()
        .map_or_else(|| Arc::from("-"), |r| r.provider().clone());
    // Only a successful answer reports usage; the labels are taken before the request goes.
    let labels = usage.and_then(|ledger| Some((ledger.clone(), ledger.labels(&parts.extensions)?)));
    let in_band = endpoint.in_band;
    // The request's extension map becomes the answer's: what the layers above insert into
    // the answer (the quota signal, the relay's action) then fits in a table already
    // allocated, instead of the request's table being dropped here and the answer's
    // allocated and grown anew; the served account, tenant and combo stay in it
    // (`carried`). hyper's client reads no extension of the requests the gateway sends (all
    // `POST`s).
    let recycled = std::mem::take(&mut parts.extensions);
    let started = Instant::now();
    Sent {
        state: State::Waiting {
            answer: within(
                limits.head,
                client.request(Request::from_parts(parts, body)),
            ),
            after: Some(After {
                base_url: endpoint.base_url,
                provider,
                labels,
                in_band,
                recycled,
                client_uri,
                started,
                limits,
                first_byte: first_byte.clone(),
            }),
        },
    }
}

/// What the answer needs of the request once it comes.
struct After {
    base_url: Arc<BaseUrl>,
    provider: Arc<str>,
    labels: Option<(UsageLedger, Labels)>,
    /// The account, for a quota failure at the end of its answer's stream.
    in_band: Option<InBandQuota>,
    recycled: Extensions,
    client_uri: Uri,
    started: Instant,
    limits: UpstreamLimits,
    first_byte: Arc<HistogramsBy>,
}

pin_project_lite::pin_project! {
    /// The answer of a request [`start`] sent (see the [module docs](self)).
    pub(crate) struct Sent {
        #[pin]
        state: State,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State {
        Waiting {
            #[pin]
            answer: Within<hyper_util::client::legacy::ResponseFuture>,
            // Taken when the answer or the timeout comes.
            after: Option<After>,
        },
        Answered {
            answer: Option<Response<RawBody>>,
        },
    }
}

impl Sent {
    fn answered(res: Response<RawBody>) -> Self {
        Self {
            state: State::Answered { answer: Some(res) },
        }
    }
}

impl Future for Sent {
    type Output = Response<RawBody>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Waiting { answer, after } => {
                let outcome = std::task::ready!(answer.poll(cx));
                match after.take() {
                    Some(after) => Poll::Ready(after.finish(outcome)),
                    None => Poll::Ready(polled_again()),
                }
            }
            StateProj::Answered { answer } => {
                Poll::Ready(answer.take().unwrap_or_else(polled_again))
            }
        }
    }
}

/// What a [`Sent`] polled after it completed answers (the future contract leaves it open; an
/// error answer rather than a panic or a wait that never ends).
fn polled_again() -> Response<RawBody> {
    let mut res = Response::new(Either::Right(Full::new(Bytes::from_static(
        b"the upstream call was polled after it completed\n",
    ))));
    *res.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    res
}

impl After {
    /// The client's answer of `outcome`: the provider's (`Some`) or the head timeout's.
    fn finish(
        self,
        outcome: Option<Result<Response<Incoming>, hyper_util::client::legacy::Error>>,
    ) -> Response<RawBody> {
        let Self {
            base_url,
            provider,
            labels,
            in_band,
            mut recycled,
            client_uri,
            started,
            limits,
            first_byte,
        } = self;
        first_byte
            .get(&provider)
            .record(started.elapsed().as_secs_f64());
        let shown = || redact_url(base_url.as_str());
        let Some(sent) = outcome else {
            tracing::warn!(base_url = %shown(), after = ?limits.head, "upstream sent no response head in time");
            metrics::counter!("context_relay_gateway_upstream_timeouts_total", "provider" => provider.to_string(), "phase" => "head").increment(1);
            let shape = ErrorShape::for_path(client_uri.path());
            let kind = ErrorKind::UpstreamTimeout.name(shape);
            // The base URL stays in the log: clients learn nothing of the provider's address.
            let mut res = error_response(
                shape,
                StatusCode::GATEWAY_TIMEOUT,
                kind,
                &format!(
                    "the provider {provider} sent no response within {:?} (upstream_head_timeout_secs)",
                    limits.head
                ),
            )
            .map(Either::Right);
            res.extensions_mut().insert(HeadTimedOut);
            return res;
        };
        match sent {
            Ok(mut res) => {
                carried::for_the_answer(&mut recycled);
                recycled.extend(std::mem::take(res.extensions_mut()));
                *res.extensions_mut() = recycled;
                strip(res.headers_mut(), account_only);
                let meter = labels.filter(|_| res.status().is_success());
                let encoding = res
                    .headers()
                    .get(header::CONTENT_ENCODING)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                res.map(|b| {
                    let body = IdleTimeoutBody::new(b, limits.idle);
                    Either::Left(Box::pin(match meter {
                        Some((ledger, labels)) => {
                            MeteredBody::new(body, ledger, labels, &encoding, in_band)
                        }
                        None => MeteredBody::plain(body),
                    }))
                })
            }
            Err(e) => {
                // hyper's top-level message is generic ("client error (Connect)"); the
                // cause chain says what happened ("Connection refused").
                let mut source = String::new();
                let mut cause = std::error::Error::source(&e);
                while let Some(c) = cause {
                    source.push_str(&format!(": {c}"));
                    cause = c.source();
                }
                tracing::warn!(base_url = %shown(), error = %e, "upstream request failed");
                metrics::counter!("context_relay_gateway_upstream_errors_total").increment(1);
                bad_gateway(
                    client_uri.path(),
                    &format!("the provider {provider} could not be reached: {e}{source}"),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::task::Waker;

    use super::*;

    /// A request refused before it is sent is answered at the first poll; a poll after that
    /// gets an error answer, not a panic or a wait.
    #[test]
    fn a_refused_request_is_answered_once() {
        let mut refused = std::pin::pin!(Sent::answered(bad_gateway("/v1/messages", "no")));
        let mut cx = Context::from_waker(Waker::noop());
        let Poll::Ready(first) = refused.as_mut().poll(&mut cx) else {
            panic!("not answered at the first poll");
        };
        assert_eq!(first.status(), StatusCode::BAD_GATEWAY);
        let Poll::Ready(again) = refused.as_mut().poll(&mut cx) else {
            panic!("pending after it completed");
        };
        assert_eq!(again.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
