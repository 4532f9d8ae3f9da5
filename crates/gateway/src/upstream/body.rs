//! The response body of [`Upstream`](super::Upstream), one enum.
//!
//! hyper's server polls an answer's body about three times per event of a stream, each poll
//! through every wrapper above this one. Two nested `Either`s (the answer as it came or
//! translated; the provider's stream or the gateway's own answer) were two calls per poll to
//! reach the provider's stream; this enum is one match.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{Either, Full};
use hyper::body::Incoming;

use crate::combo::BoxError;
use crate::idle::IdleTimeoutBody;
use crate::translate::Translated;
use crate::usage::MeteredBody;

use super::RawBody;

pin_project_lite::pin_project! {
    /// The provider's answer as it came (its stream, or the gateway's own answer in its
    /// place), or translated into the client's shape.
    #[project = Projected]
    pub(crate) enum UpstreamBody {
        /// The provider's stream, its usage counted (boxed once: see [`RawBody`]).
        Provider { body: Pin<Box<MeteredBody<IdleTimeoutBody<Incoming>>>> },
        /// An answer the gateway wrote itself (an error in the client's shape).
        Own { #[pin] body: Full<Bytes> },
        /// The provider's answer translated into the client's shape.
        Translated { #[pin] body: Translated<RawBody> },
    }
}

impl From<RawBody> for UpstreamBody {
    fn from(body: RawBody) -> Self {
        match body {
            Either::Left(body) => Self::Provider { body },
            Either::Right(body) => Self::Own { body },
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    // Inlined into its caller, as every wrapper of an answer's body is: hyper polls a stream's
    // body about three times per event (docs/performance.md, "The answer's wrappers inlined").
    #[inline(always)]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.project() {
            Projected::Provider { body } => body.as_mut().poll_frame(cx),
            Projected::Own { body } => body.poll_frame(cx).map_err(|never| match never {}),
            Projected::Translated { body } => body.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Provider { body } => body.is_end_stream(),
            Self::Own { body } => body.is_end_stream(),
            Self::Translated { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Provider { body } => body.size_hint(),
            Self::Own { body } => body.size_hint(),
            Self::Translated { body } => body.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    /// Each variant hands on its body's frames, end and size as they are.
    #[tokio::test]
    async fn every_variant_forwards_its_body() {
        let own = UpstreamBody::from(RawBody::Right(Full::new(Bytes::from_static(b"{}"))));
        assert!(matches!(own, UpstreamBody::Own { .. }));
        assert_eq!(own.size_hint().exact(), Some(2));
        assert!(!own.is_end_stream());
        assert_eq!(own.collect().await.unwrap().to_bytes(), "{}");

        let translated = UpstreamBody::Translated {
            body: Either::Left(Full::new(Bytes::from_static(b"abc"))),
        };
        assert_eq!(translated.size_hint().exact(), Some(3));
        assert_eq!(translated.collect().await.unwrap().to_bytes(), "abc");

        let empty = UpstreamBody::Own {
            body: Full::new(Bytes::new()),
        };
        assert!(empty.is_end_stream());
    }
}
