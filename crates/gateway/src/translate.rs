//! Responses ⇄ Anthropic Messages on the wire: a Responses client served by a provider that
//! speaks only Anthropic Messages (`api = "anthropic"`).
//!
//! It runs inside the upstream client, below the relay layers: the relay injects and scrubs in
//! the client's shape, then the outgoing body is translated
//! ([`context_relay_core::translate`]) and sent to `{base_url}/messages` with
//! `anthropic-version` set (kept when the client sent one) and `accept-encoding: identity` (the
//! answer is read here). The answer comes back in the client's shape: an error body, a JSON
//! answer, or an SSE stream translated event by event as it arrives. Response headers, quota
//! headers included, are kept, so the account resolver reads the provider's usage and rotates
//! on a 429 as for an untranslated answer.
//!
//! Errors keep their status, except Anthropic's 529 `overloaded_error`, a 503
//! `server_is_overloaded`. A prompt longer than the model's context window (Anthropic's 400
//! `prompt is too long: …`) has the code `context_length_exceeded`, and a streamed request
//! gets it where Codex CLI reads it: a 200 stream of `response.created` then
//! `response.failed`, which Codex reports as a full context window.
//!
//! Codex's compaction (`/responses/compact`) is served too: the history goes out as a
//! Messages request asking for a summary, and the answer is the compacted history
//! ([`context_relay_core::translate::compaction_turn`]).
//!
//! [`serves`] says which client shapes a provider can serve; the resolver skips a target
//! that cannot serve the request's shape.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use context_relay_core::ApiShape;
use context_relay_core::translate::{
    RequestOptions, ResponseContext, ResponsesError, StreamTranslator, compaction_turn,
    messages_to_compaction, messages_to_response, responses_to_messages,
};
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Either, Full, Limited};

use context_relay_tower::{FactsExt, ServingModel};

use crate::combo::BoxError;
use crate::config::ProviderApi;
use crate::error::{ErrorKind, ErrorShape, error_response};
use crate::routing::Routing;
use crate::upstream::{InBody, OutBody};

/// The Anthropic API version sent when the client named none.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The largest JSON answer or error body translated whole. A larger one is answered with a
/// 502 in the client's shape: passed unchanged, it would be an Anthropic body the client
/// cannot read.
const MAX_ANSWER_BYTES: usize = 32 * 1024 * 1024;

/// Whether a provider speaking `api` can serve a request to `path`: a pass-through provider
/// serves everything; an OpenAI provider everything but Anthropic Messages and Gemini; an
/// Anthropic provider serves Anthropic requests and other
/// non-conversation paths as they are, and Responses requests (Codex compaction included)
/// translated, but not Chat Completions nor Gemini.
pub(crate) fn serves(api: ProviderApi, path: &str) -> bool {
    match api {
        ProviderApi::Passthrough => true,
        // Anthropic's token count (`/messages/count_tokens`) is no turn, but the Messages API.
        ProviderApi::Openai => match ApiShape::from_path(path) {
            Some(ApiShape::AnthropicMessages | ApiShape::Gemini) => false,
            Some(ApiShape::ChatCompletions | ApiShape::Responses) => true,
            None => !is_count_tokens(path),
        },
        ProviderApi::Anthropic => match ApiShape::from_path(path) {
            None | Some(ApiShape::AnthropicMessages | ApiShape::Responses) => true,
            Some(ApiShape::ChatCompletions | ApiShape::Gemini) => false,
        },
    }
}

fn is_count_tokens(path: &str) -> bool {
    path.split('?')
        .next()
        .is_some_and(|p| p.trim_end_matches('/').ends_with("/messages/count_tokens"))
}

fn is_compact(path: &str) -> bool {
    path.trim_end_matches('/').ends_with("/responses/compact")
}

/// How the answer of a translated request is translated back.
#[derive(Debug)]
pub(crate) struct Inbound {
    ctx: ResponseContext,
    /// The client asked for a stream.
    stream: bool,
    /// A compaction: the user messages kept in the compacted history.
    compaction: Option<Vec<serde_json::Value>>,
}

/// Whether `req` goes upstream translated: a Responses request to a provider that speaks
/// only Anthropic Messages.
pub(crate) fn needed<B>(req: &Request<B>) -> bool {
    let api = Routing::endpoint(req.extensions()).map_or(ProviderApi::Passthrough, |e| e.api);
    api == ProviderApi::Anthropic
        && ApiShape::from_path(req.uri().path()) == Some(ApiShape::Responses)
}

/// The request as it goes upstream, and how to read its answer when it was translated; or
/// the gateway's own answer when it cannot be sent.
pub(crate) async fn outbound(
    req: Request<InBody>,
) -> Result<(Request<OutBody>, Option<Inbound>), Response<Full<Bytes>>> {
    if !needed(&req) {
        return Ok((req.map(Either::Left), None));
    }
    let path = req.uri().path();
    let shape = ErrorShape::for_path(path);
    let refuse = |status: StatusCode, kind: ErrorKind, message: &str| {
        error_response(shape, status, kind.name(shape), message)
    };
    let compact = is_compact(path);
    let (mut parts, body) = req.into_parts();
    let bytes = match crate::collect::whole(body).await {
        Ok(bytes) => bytes,
        Err(e) => {
            let e: BoxError = e.into();
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                ErrorKind::InvalidRequest,
                &format!("the request body could not be read: {e}"),
            ));
        }
    };
    // The target's model, as the resolver routed the request (`provider/model`); without it
    // the translator keeps the model the body names (the gateway already wrote the target's
    // there), so the body is not searched for it again here.
    let model = parts
        .extensions
        .fact::<ServingModel>()
        .and_then(|m| m.0.split_once('/'))
        .map(|(_, model)| model.to_owned())
        .unwrap_or_default();
    // A compaction goes out as the turn that asks for the summary.
    let (bytes, compaction) = if compact {
        match compaction_turn(&bytes) {
            Ok(c) => (Bytes::from(c.turn), Some(c.kept)),
            Err(e) => {
                return Err(refuse(
                    StatusCode::BAD_REQUEST,
                    ErrorKind::InvalidRequest,
                    &format!("the compaction request cannot be translated: {e}"),
                ));
            }
        }
    } else {
        (bytes, None)
    };
    let mut options = RequestOptions::new(model.clone());
    if let Some(max) = Routing::endpoint(&parts.extensions).and_then(|e| e.max_output_tokens) {
        options.default_max_tokens = max;
    }
    let translated = match responses_to_messages(&bytes, &options) {
        Ok(t) => t,
        Err(e) => {
            metrics::counter!("context_relay_gateway_translate_errors_total").increment(1);
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                ErrorKind::InvalidRequest,
                &format!("the Responses request cannot be translated to Anthropic Messages: {e}"),
            ));
        }
    };
    if !translated.dropped.is_empty() {
        tracing::debug!(dropped = ?translated.dropped, "Responses fields without a Messages equivalent were left out");
    }
    metrics::counter!("context_relay_gateway_translated_requests_total", "from" => "responses", "to" => "anthropic").increment(1);
    let mut uri = String::from("/v1/messages");
    if let Some(q) = parts.uri.query() {
        uri.push('?');
        uri.push_str(q);
    }
    parts.uri = uri
        .parse()
        .unwrap_or_else(|_| http::Uri::from_static("/v1/messages"));
    parts
        .headers
        .entry("anthropic-version")
        .or_insert(HeaderValue::from_static(ANTHROPIC_VERSION));
    parts.headers.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let created_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let inbound = Inbound {
        ctx: ResponseContext {
            model: translated
                .client_model
                .clone()
                .or((!model.is_empty()).then_some(model)),
            custom_tools: translated.custom_tools,
            created_at,
        },
        stream: translated.stream,
        compaction,
    };
    let body = Either::Right(
        Full::new(Bytes::from(translated.body))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    Ok((Request::from_parts(parts, body), Some(inbound)))
}

impl Inbound {
    /// The provider's answer in the client's shape.
    pub(crate) async fn response<B>(self, res: Response<B>) -> Response<Translated<B>>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let status = res.status();
        let is_sse = res
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let (mut parts, body) = res.into_parts();
        parts.headers.remove(header::CONTENT_LENGTH);
        if status.is_success() && is_sse {
            return Response::from_parts(
                parts,
                Either::Right(SseBody {
                    inner: body,
                    translator: Box::new(StreamTranslator::new(self.ctx)),
                    finished: false,
                }),
            );
        }
        let bytes = match Limited::new(body, MAX_ANSWER_BYTES).collect().await {
            Ok(c) => c.to_bytes(),
            Err(e) => {
                let message = if e.is::<http_body_util::LengthLimitError>() {
                    format!(
                        "the provider's answer is larger than the {} MiB the gateway translates",
                        MAX_ANSWER_BYTES >> 20
                    )
                } else {
                    format!("the provider's answer could not be read: {e}")
                };
                tracing::warn!(error = %e, "the provider's answer could not be read for translation");
                return bad_gateway(&message);
            }
        };
        if !status.is_success() {
            return self.error(parts, &bytes);
        }
        let out = match &self.compaction {
            Some(kept) => match messages_to_compaction(&bytes, kept, &self.ctx) {
                Some(out) => Some(out),
                None if messages_to_response(&bytes, &self.ctx).is_some() => {
                    return bad_gateway("the provider's answer to the compaction has no summary");
                }
                None => None,
            },
            None => messages_to_response(&bytes, &self.ctx),
        };
        let out = match out {
            Some(out) => {
                parts.headers.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                Bytes::from(out)
            }
            None => {
                metrics::counter!("context_relay_gateway_translate_errors_total").increment(1);
                tracing::warn!(%status, "the provider's answer is not an Anthropic Messages body; passed unchanged");
                bytes
            }
        };
        Response::from_parts(parts, Either::Left(Full::new(out)))
    }

    /// The provider's error answer (`parts` and its whole body) in the client's shape.
    fn error<B>(self, mut parts: http::response::Parts, bytes: &Bytes) -> Response<Translated<B>> {
        let Some(e) = ResponsesError::from_messages(parts.status.as_u16(), bytes) else {
            metrics::counter!("context_relay_gateway_translate_errors_total").increment(1);
            tracing::warn!(status = %parts.status, "the provider's error is not an Anthropic error body; passed unchanged");
            return Response::from_parts(parts, Either::Left(Full::new(bytes.clone())));
        };
        if e.is_context_overflow() && self.stream {
            // Codex reads `context_length_exceeded` only from a `response.failed` event.
            let out = StreamTranslator::new(self.ctx).fail(&e.code, &e.message);
            parts.status = StatusCode::OK;
            parts.headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            return Response::from_parts(parts, Either::Left(Full::new(Bytes::from(out))));
        }
        parts.status = StatusCode::from_u16(e.status).unwrap_or(parts.status);
        parts.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Response::from_parts(parts, Either::Left(Full::new(Bytes::from(e.body()))))
    }
}

/// The gateway's 502 about a provider's answer it cannot translate, in the Responses shape.
fn bad_gateway<B>(message: &str) -> Response<Translated<B>> {
    let shape = ErrorShape::OpenAi;
    let kind = ErrorKind::Upstream.name(shape);
    error_response(shape, StatusCode::BAD_GATEWAY, kind, message).map(Either::Left)
}

/// The body of a translated answer: translated whole, or an SSE stream translated as it
/// arrives.
pub(crate) type Translated<B> = Either<Full<Bytes>, SseBody<B>>;

pin_project_lite::pin_project! {
    /// A Messages SSE body read as the Responses SSE body of [`StreamTranslator`]. It ends
    /// when the inner body ends (with `response.failed` when that came before
    /// `message_stop`); an inner error ends it the same way, logged.
    ///
    /// The translator is boxed: the answer's body type is the larger of this and the
    /// untranslated body, and every layer above moves the response by value; inline, the
    /// translator's few hundred bytes made every answer that much larger to move.
    pub(crate) struct SseBody<B> {
        #[pin]
        inner: B,
        translator: Box<StreamTranslator>,
        finished: bool,
    }
}

impl<B> Body for SseBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        loop {
            if *this.finished {
                return Poll::Ready(None);
            }
            let out = match std::task::ready!(this.inner.as_mut().poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => this.translator.push(&data),
                    Err(_) => continue,
                },
                Some(Err(e)) => {
                    let e: BoxError = e.into();
                    tracing::warn!(error = %e, "the provider's stream failed; the client gets response.failed");
                    *this.finished = true;
                    this.translator.finish()
                }
                None => {
                    *this.finished = true;
                    this.translator.finish()
                }
            };
            if !out.is_empty() {
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.finished
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_answer_too_large_to_translate_is_a_502_that_says_so() {
        for status in [StatusCode::OK, StatusCode::BAD_REQUEST] {
            let inbound = Inbound {
                ctx: ResponseContext::default(),
                stream: false,
                compaction: None,
            };
            let big = Bytes::from(vec![b' '; MAX_ANSWER_BYTES + 1]);
            let res = Response::builder()
                .status(status)
                .header(header::CONTENT_TYPE, "application/json")
                .body(Full::new(big))
                .unwrap();
            let res = inbound.response(res).await;
            assert_eq!(res.status(), StatusCode::BAD_GATEWAY);
            let body = res.into_body().collect().await.unwrap().to_bytes();
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let message = v["error"]["message"].as_str().unwrap();
            assert!(message.contains("larger than the 32 MiB"), "{message}");
        }
    }

    #[test]
    fn which_shapes_a_provider_serves() {
        for path in [
            "/v1/chat/completions",
            "/v1/responses",
            "/v1/responses/compact",
            "/v1/messages?beta=true",
            "/v1beta/models/g:generateContent",
        ] {
            assert!(serves(ProviderApi::Passthrough, path), "{path}");
        }
        assert!(serves(ProviderApi::Anthropic, "/v1/responses"));
        assert!(serves(ProviderApi::Anthropic, "/v1/messages?beta=true"));
        assert!(serves(ProviderApi::Anthropic, "/v1/messages/count_tokens"));
        assert!(serves(ProviderApi::Anthropic, "/v1/responses/compact"));
        assert!(serves(ProviderApi::Openai, "/v1/responses/compact"));
        assert!(serves(ProviderApi::Openai, "/v1/chat/completions"));
        assert!(!serves(ProviderApi::Openai, "/v1/messages"));
        assert!(!serves(
            ProviderApi::Openai,
            "/v1/messages/count_tokens?beta=true"
        ));
        assert!(!serves(
            ProviderApi::Openai,
            "/v1beta/models/g:generateContent"
        ));
        assert!(!serves(ProviderApi::Anthropic, "/v1/chat/completions"));
        assert!(!serves(
            ProviderApi::Anthropic,
            "/v1beta/models/g:streamGenerateContent"
        ));
    }
}
