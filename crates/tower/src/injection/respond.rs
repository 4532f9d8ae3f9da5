//! Turning the inner response into the layer's response: release before anything is handed
//! back on an error, repair a rejection of account-bound state once, watch the body's end.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use context_relay_core::ApiShape;
use context_relay_core::ending::{EndDetector, Ending};
use context_relay_core::portable::{self, Scope};
use context_relay_core::repair::{self, ERROR_BODY_LIMIT, RepairKind};
use context_relay_store::Affinity;
use http::{Response, StatusCode, header};
use http_body::{Body, Frame};
use http_body_util::BodyExt;

use super::action::{RELAY_HEADER, RelayAction};
use super::after::After;
use super::body::{EndHook, ResponseBody};
use super::retry::Retry;
use crate::metrics;

/// Most stream bytes held back while waiting for the first output event; past this the stream
/// is passed on as it is.
const HOLD_LIMIT: usize = 64 * 1024;
/// Longest wait for the next event while holding a stream's opening back: a provider that goes
/// quiet after `response.created` gets its stream passed on rather than the client's response
/// head delayed.
const HOLD_TIME: Duration = Duration::from_secs(10);

/// What was read ahead of the consumer.
type Prefix<B> = VecDeque<Result<Frame<<B as Body>::Data>, <B as Body>::Error>>;

/// Whether a response must be looked at before it is handed on: a 400 that may blame
/// account-bound state, or a Responses stream whose opening may be followed by such a failure,
/// when the request may carry account-bound state at all (else a repair changes nothing).
pub(crate) fn needs_a_look<B, E>(response: &Response<B>, retry: &Retry<B, E>) -> bool {
    (response.status() == StatusCode::BAD_REQUEST || holdable(response, retry.shape))
        && retry.may_repair()
}

fn holdable<B>(response: &Response<B>, shape: ApiShape) -> bool {
    shape == ApiShape::Responses
        && response.status().is_success()
        && response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// The layer's response, without reading ahead: a body watched when `after` waits for its end.
pub(crate) fn finish_plain<B>(
    response: Response<B>,
    after: Option<After>,
) -> Response<ResponseBody<B>>
where
    B: Body,
    B::Data: AsRef<[u8]>,
{
    let (mut parts, body) = response.into_parts();
    let hook = label(&mut parts, after);
    Response::from_parts(parts, ResponseBody::plain(body, hook.map(hook_of)))
}

fn hook_of(after: After) -> EndHook {
    EndHook {
        detector: EndDetector::new(),
        after,
    }
}

/// Sets the resolved account and the relay's action on the response; the `after` that still
/// has work at the body's end (on a success status).
fn label(parts: &mut http::response::Parts, after: Option<After>) -> Option<After> {
    let after = after?;
    if parts.extensions.get::<crate::ResolvedAccount>().is_none() {
        parts.extensions.insert(after.account.clone());
    }
    set_action(parts, after.action);
    (parts.status.is_success() && after.waits_for_end()).then_some(after)
}

fn set_action(parts: &mut http::response::Parts, action: RelayAction) {
    if let Some(value) = action.header_value() {
        parts.headers.insert(RELAY_HEADER, value);
        parts.extensions.insert(action);
    }
}

/// Handles the inner result (see the module docs). `retry` is given when the request can be
/// sent again.
pub(crate) async fn respond<B, E>(
    result: Result<Response<B>, E>,
    mut after: Option<After>,
    retry: Option<Retry<B, E>>,
) -> Result<Response<ResponseBody<B>>, E>
where
    B: Body + Send + 'static,
    B::Data: AsRef<[u8]> + Send,
    B::Error: Send,
{
    let response = match result {
        Ok(r) => r,
        Err(e) => {
            if let Some(a) = after.as_mut() {
                a.release_now().await;
            }
            return Err(e);
        }
    };
    let Some(retry) = retry.filter(|r| needs_a_look(&response, r)) else {
        return Ok(settle(response, after).await);
    };
    let shape = retry.shape;
    let look = look(response, shape).await;
    let Some(kind) = look.blames else {
        return Ok(assemble(look, after).await);
    };
    let Some((body, seen)) = stripped(retry.sent.json(), shape, retry.slot) else {
        return Ok(assemble(look, after).await);
    };
    ::metrics::counter!(metrics::REPAIRS, "kind" => kind.as_str()).increment(1);
    tracing::warn!(
        %kind,
        status = look.parts.status.as_u16(),
        "provider rejected account-bound state; sending once more without it"
    );
    // The rejected response is not handed on.
    drop(look);
    if let Some(a) = after.as_mut() {
        a.action.repaired = true;
        if let Some(r) = retry.remember {
            // What the rejected request carried is foreign to this account from now on: the
            // next turns are scrubbed instead of rejected again.
            let base = match &a.record {
                Some((_, planned)) => (*planned.foreign).clone(),
                None => r.foreign,
            };
            let affinity = Affinity::new(a.account.provider.clone(), a.account.account.clone())
                .with_foreign(base.merged(&seen), SystemTime::now() + r.ttl);
            a.record = Some((r.key, affinity));
        }
    }
    match (retry.resend)(body).await {
        Ok(response) => Ok(settle(response, after).await),
        Err(e) => {
            if let Some(a) = after.as_mut() {
                a.release_now().await;
            }
            Err(e)
        }
    }
}

/// The body with all account-bound state removed, and the digests of what it carried; `None`
/// when there was none to remove (a retry would be rejected the same way) or the body is
/// unknown.
fn stripped(
    json: Option<Bytes>,
    shape: ApiShape,
    slot: context_relay_core::config::InjectionSlot,
) -> Option<(Bytes, Vec<u64>)> {
    let json = json?;
    match portable::rewrite(shape, &json, Scope::All, None, slot) {
        Ok(r) => r.body.map(|b| (Bytes::from(b), r.seen)),
        Err(e) => {
            tracing::warn!(error = %e, "rejected body cannot be stripped; passing the error on");
            None
        }
    }
}

/// The response without a retry: the claim goes back first on an error status.
async fn settle<B>(response: Response<B>, mut after: Option<After>) -> Response<ResponseBody<B>>
where
    B: Body,
    B::Data: AsRef<[u8]>,
{
    if !response.status().is_success()
        && let Some(a) = after.as_mut()
    {
        a.release_now().await;
    }
    finish_plain(response, after)
}

/// A response read ahead.
struct Look<B: Body> {
    parts: http::response::Parts,
    body: Pin<Box<B>>,
    prefix: Prefix<B>,
    detector: EndDetector,
    /// The inner body reported its end (`None`) while read ahead: it must not be polled again.
    ended: bool,
    /// The account-bound state the response blames.
    blames: Option<RepairKind>,
}

/// Reads a 400 body (bounded) and classifies it, or holds a stream's opening events back until
/// the first output event, the end, or a failure.
async fn look<B>(response: Response<B>, shape: ApiShape) -> Look<B>
where
    B: Body,
    B::Data: AsRef<[u8]>,
{
    let hold = holdable(&response, shape);
    let (parts, body) = response.into_parts();
    let mut body = Box::pin(body);
    let mut prefix = VecDeque::new();
    let mut detector = EndDetector::new();
    let mut error_body = Vec::new();
    let mut held = 0usize;
    let mut ended = false;
    loop {
        if hold && (detector.output_started() || detector.ending() != Ending::Unfinished) {
            break;
        }
        if held > HOLD_LIMIT.max(ERROR_BODY_LIMIT) || body.is_end_stream() {
            ended = body.is_end_stream();
            break;
        }
        let next = if hold {
            match tokio::time::timeout(HOLD_TIME, body.frame()).await {
                Ok(next) => next,
                Err(_) => break,
            }
        } else {
            body.frame().await
        };
        match next {
            None => {
                ended = true;
                break;
            }
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    let data = data.as_ref();
                    held += data.len();
                    if hold {
                        detector.push(data);
                    } else if error_body.len() < ERROR_BODY_LIMIT {
                        error_body.extend_from_slice(data);
                    }
                }
                prefix.push_back(Ok(frame));
            }
            Some(Err(e)) => {
                prefix.push_back(Err(e));
                break;
            }
        }
    }
    let blames = if hold {
        if ended {
            detector.finish();
        }
        (detector.ending() == Ending::Failed && !detector.output_started())
            .then(|| detector.failure().and_then(repair::classify))
            .flatten()
    } else {
        repair::classify(&error_body)
    };
    Look {
        parts,
        body,
        prefix,
        detector,
        ended,
        blames,
    }
}

/// The layer's response from a response read ahead.
async fn assemble<B>(look: Look<B>, mut after: Option<After>) -> Response<ResponseBody<B>>
where
    B: Body,
    B::Data: AsRef<[u8]>,
{
    let Look {
        mut parts,
        body,
        prefix,
        detector,
        ended,
        ..
    } = look;
    if !parts.status.is_success()
        && let Some(a) = after.as_mut()
    {
        a.release_now().await;
    }
    let hook = label(&mut parts, after).map(|after| EndHook { detector, after });
    Response::from_parts(parts, ResponseBody::boxed(body, prefix, ended, hook))
}
