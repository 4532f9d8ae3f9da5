//! Turning the inner response into the layer's response through the [`Attempt`]: a claim
//! given back before anything is handed on after an error, a rejection of account-bound state
//! repaired once, the body's end watched.

use std::collections::VecDeque;
use std::pin::Pin;

use context_relay_engine::{Attempt, Looked, ResponsePlan};
use http::Response;
use http_body::{Body, Frame};
use http_body_util::BodyExt;

use super::retry::Resend;
use crate::response_body::{EndHook, ResponseBody};

/// What was read ahead of the consumer.
type Prefix<B> = VecDeque<Result<Frame<<B as Body>::Data>, <B as Body>::Error>>;

/// The layer's response once the attempt planned to forward it: labelled, its body watched
/// when the attempt waits for its end.
pub(crate) fn finish<B>(response: Response<B>, attempt: Attempt) -> Response<ResponseBody<B>>
where
    B: Body,
    B::Data: AsRef<[u8]>,
{
    let (mut parts, body) = response.into_parts();
    attempt.label(&mut parts);
    Response::from_parts(parts, ResponseBody::plain(body, hook(attempt)))
}

/// The end hook of an attempt that watches its body's end (dropping the others settles them).
fn hook(attempt: Attempt) -> Option<EndHook> {
    attempt
        .watches_end()
        .then(|| EndHook::Attempt(Box::new(attempt)))
}

/// Handles the inner result through the attempt's phases. `resend` is given when the request
/// can be sent again; `plan` when the response head was planned already.
pub(crate) async fn respond<B, E>(
    result: Result<Response<B>, E>,
    mut attempt: Attempt,
    resend: Option<Resend<B, E>>,
    plan: Option<ResponsePlan>,
) -> Result<Response<ResponseBody<B>>, E>
where
    B: Body + Send + 'static,
    B::Data: AsRef<[u8]> + Send,
    B::Error: Send,
{
    let response = match result {
        Ok(r) => r,
        Err(e) => {
            attempt.failed().await;
            return Err(e);
        }
    };
    let plan = match plan {
        Some(plan) => plan,
        None => {
            attempt
                .response_head(response.status(), response.headers())
                .await
        }
    };
    let (Some(resend), ResponsePlan::LookAhead { deadline }) = (resend, plan) else {
        return Ok(finish(response, attempt));
    };
    let looked = look(response, &mut attempt, deadline).await;
    let body = match attempt.looked(looked.parts.status, looked.ended).await {
        Looked::Forward => return Ok(assemble(looked, attempt)),
        Looked::Resend(body) => body,
    };
    // The rejected response is not handed on.
    drop(looked);
    match resend(body).await {
        Ok(response) => {
            let plan = attempt.response_head(response.status(), response.headers());
            plan.await;
            Ok(finish(response, attempt))
        }
        Err(e) => {
            attempt.failed().await;
            Err(e)
        }
    }
}

/// A response read ahead.
struct Ahead<B: Body> {
    parts: http::response::Parts,
    body: Pin<Box<B>>,
    prefix: Prefix<B>,
    /// The inner body reported its end (`None`) while read ahead: it must not be polled again.
    ended: bool,
}

/// Reads the body ahead while the attempt asks for more, until `deadline` (a held stream
/// opening) or the end.
async fn look<B>(
    response: Response<B>,
    attempt: &mut Attempt,
    deadline: Option<tokio::time::Instant>,
) -> Ahead<B>
where
    B: Body,
    B::Data: AsRef<[u8]>,
{
    let (parts, body) = response.into_parts();
    let mut body = Box::pin(body);
    let mut prefix = VecDeque::new();
    let mut ended = false;
    loop {
        if body.is_end_stream() {
            ended = true;
            break;
        }
        let next = match deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, body.frame()).await {
                Ok(next) => next,
                Err(_) => break,
            },
            None => body.frame().await,
        };
        match next {
            None => {
                ended = true;
                break;
            }
            Some(Ok(frame)) => {
                let more = match frame.data_ref() {
                    Some(data) => attempt.look_chunk(data.as_ref()),
                    None => true,
                };
                prefix.push_back(Ok(frame));
                if !more {
                    break;
                }
            }
            Some(Err(e)) => {
                prefix.push_back(Err(e));
                break;
            }
        }
    }
    Ahead {
        parts,
        body,
        prefix,
        ended,
    }
}

/// The layer's response from a response read ahead.
fn assemble<B>(looked: Ahead<B>, attempt: Attempt) -> Response<ResponseBody<B>>
where
    B: Body,
    B::Data: AsRef<[u8]>,
{
    let Ahead {
        mut parts,
        body,
        prefix,
        ended,
    } = looked;
    attempt.label(&mut parts);
    let hook = hook(attempt);
    Response::from_parts(parts, ResponseBody::boxed(body, prefix, ended, hook))
}
