//! Turning the inner response into the layer's response: release before anything is handed
//! back on an error, repair a rejection of account-bound state once, watch the body's end.

use std::collections::VecDeque;
use std::pin::Pin;

use context_relay_core::ending::EndDetector;
use context_relay_core::repair::RepairKind;
use context_relay_engine::{EndWatch, Look, Repair, ResolvedAccount, Ticket};
use http::Response;
use http_body::{Body, Frame};
use http_body_util::BodyExt;

use super::retry::Retry;
use crate::response_body::{EndHook, ResponseBody};

/// What was read ahead of the consumer.
type Prefix<B> = VecDeque<Result<Frame<<B as Body>::Data>, <B as Body>::Error>>;

/// Whether a response must be looked at before it is handed on (see [`Repair::wants_look`]).
pub(crate) fn needs_a_look<B, E>(response: &Response<B>, retry: &Retry<B, E>) -> bool {
    retry
        .repair
        .wants_look(response.status(), response.headers())
}

/// The layer's response on the direct path, without reading ahead or waiting: a body watched
/// when the ticket waits for its end. The request's account goes on the response in every
/// case. Only for tickets that carry no claim (a claimed ticket takes [`respond`], which gives
/// the claim of an error response back before handing it on).
pub(crate) fn finish_plain<B>(
    response: Response<B>,
    ticket: Option<Ticket>,
    account: Option<ResolvedAccount>,
) -> Response<ResponseBody<B>>
where
    B: Body,
    B::Data: AsRef<[u8]>,
{
    let (mut parts, body) = response.into_parts();
    let ticket = match ticket.map(|t| t.try_label(&mut parts)) {
        Some(Ok(t)) => t,
        // Not reached (see above); dropping the ticket releases its claim in the background.
        Some(Err(_)) => None,
        None => label_account(&mut parts, account),
    };
    let hook = ticket.map(|t| EndHook::Ticket(Box::new(EndWatch::new(t))));
    Response::from_parts(parts, ResponseBody::plain(body, hook))
}

/// Labels the response (account, action), the claim of an error response given back first;
/// the ticket that still waits for the body's end.
async fn label(
    parts: &mut http::response::Parts,
    ticket: Option<Ticket>,
    account: Option<ResolvedAccount>,
) -> Option<Ticket> {
    match ticket {
        Some(t) => t.label(parts).await,
        None => label_account(parts, account),
    }
}

/// Labels a response without a ticket with the request's account.
fn label_account(
    parts: &mut http::response::Parts,
    account: Option<ResolvedAccount>,
) -> Option<Ticket> {
    if let Some(a) = account
        && parts.extensions.get::<ResolvedAccount>().is_none()
    {
        parts.extensions.insert(a);
    }
    None
}

/// Handles the inner result (see the module docs). `retry` is given when the request can be
/// sent again; `account` labels the response when there is no ticket.
pub(crate) async fn respond<B, E>(
    result: Result<Response<B>, E>,
    mut ticket: Option<Ticket>,
    retry: Option<Retry<B, E>>,
    account: Option<ResolvedAccount>,
) -> Result<Response<ResponseBody<B>>, E>
where
    B: Body + Send + 'static,
    B::Data: AsRef<[u8]> + Send,
    B::Error: Send,
{
    let response = match result {
        Ok(r) => r,
        Err(e) => {
            if let Some(t) = ticket.as_mut() {
                t.release_now().await;
            }
            return Err(e);
        }
    };
    let Some(retry) = retry.filter(|r| needs_a_look(&response, r)) else {
        return Ok(settle(response, ticket, account).await);
    };
    let looked = look(response, &retry.repair).await;
    let Some(kind) = looked.blames else {
        return Ok(assemble(looked, ticket, account).await);
    };
    let Retry { repair, resend } = retry;
    let Some(body) = repair.resend_body(kind, looked.parts.status, ticket.as_mut()) else {
        return Ok(assemble(looked, ticket, account).await);
    };
    // The rejected response is not handed on.
    drop(looked);
    match resend(body).await {
        Ok(response) => Ok(settle(response, ticket, account).await),
        Err(e) => {
            if let Some(t) = ticket.as_mut() {
                t.release_now().await;
            }
            Err(e)
        }
    }
}

/// The response without a retry: the claim goes back first on an error status.
async fn settle<B>(
    response: Response<B>,
    ticket: Option<Ticket>,
    account: Option<ResolvedAccount>,
) -> Response<ResponseBody<B>>
where
    B: Body,
    B::Data: AsRef<[u8]>,
{
    let (mut parts, body) = response.into_parts();
    let hook = label(&mut parts, ticket, account)
        .await
        .map(|t| EndHook::Ticket(Box::new(EndWatch::new(t))));
    Response::from_parts(parts, ResponseBody::plain(body, hook))
}

/// A response read ahead.
struct Looked<B: Body> {
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
/// the first output event, the end, or a failure (see [`Look`]).
async fn look<B>(response: Response<B>, repair: &Repair) -> Looked<B>
where
    B: Body,
    B::Data: AsRef<[u8]>,
{
    let (parts, body) = response.into_parts();
    let mut look = Look::new(repair, parts.status, &parts.headers);
    let mut body = Box::pin(body);
    let mut prefix = VecDeque::new();
    let mut ended = false;
    loop {
        if look.settled() {
            break;
        }
        if look.full() || body.is_end_stream() {
            ended = body.is_end_stream();
            break;
        }
        let next = match look.deadline() {
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
                if let Some(data) = frame.data_ref() {
                    look.push(data.as_ref());
                }
                prefix.push_back(Ok(frame));
            }
            Some(Err(e)) => {
                prefix.push_back(Err(e));
                break;
            }
        }
    }
    let (detector, blames) = look.finish(ended);
    Looked {
        parts,
        body,
        prefix,
        detector,
        ended,
        blames,
    }
}

/// The layer's response from a response read ahead.
async fn assemble<B>(
    looked: Looked<B>,
    ticket: Option<Ticket>,
    account: Option<ResolvedAccount>,
) -> Response<ResponseBody<B>>
where
    B: Body,
    B::Data: AsRef<[u8]>,
{
    let Looked {
        mut parts,
        body,
        prefix,
        detector,
        ended,
        ..
    } = looked;
    let hook = label(&mut parts, ticket, account)
        .await
        .map(|t| EndHook::Ticket(Box::new(EndWatch::resume(detector, t))));
    Response::from_parts(parts, ResponseBody::boxed(body, prefix, ended, hook))
}
