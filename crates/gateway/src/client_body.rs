//! A client's request body as the proxy stack takes it: straight from the connection, or
//! boxed by the router.
//!
//! A `POST` to one of the proxy's API paths goes from the connection to the proxy stack
//! without the router (see [`live`](crate::live)): its body is hyper's, bounded by the client
//! body timeout, and is handed on as it is. Boxing it into the router's body, as every other
//! request's is, took an allocation per request and a boxed call, through an error-mapping
//! layer, on every poll of the body. A request the router matched first (another method's
//! route, a Gemini path) comes boxed.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use crate::combo::BoxError;
use crate::idle::IdleTimeoutBody;

pin_project_lite::pin_project! {
    /// The body of a request to the proxy stack (see the [module docs](self)).
    #[project = ClientBodyProj]
    pub(crate) enum ClientBody {
        /// From the connection, with the client body timeout.
        Direct {
            #[pin]
            body: IdleTimeoutBody<Incoming>,
        },
        /// Through the router.
        Routed {
            #[pin]
            body: axum::body::Body,
        },
    }
}

impl ClientBody {
    /// hyper's body of a request, bounded by the client body timeout.
    pub(crate) fn direct(body: IdleTimeoutBody<Incoming>) -> Self {
        Self::Direct { body }
    }
}

impl From<axum::body::Body> for ClientBody {
    fn from(body: axum::body::Body) -> Self {
        Self::Routed { body }
    }
}

impl std::fmt::Debug for ClientBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Direct { .. } => "ClientBody::Direct",
            Self::Routed { .. } => "ClientBody::Routed",
        })
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.project() {
            ClientBodyProj::Direct { body } => body.poll_frame(cx),
            ClientBodyProj::Routed { body } => body.poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Direct { body } => body.is_end_stream(),
            Self::Routed { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Direct { body } => body.size_hint(),
            Self::Routed { body } => body.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    /// A routed body reads as it was, its size and end included.
    #[tokio::test]
    async fn a_routed_body_reads_as_it_was() {
        let body = ClientBody::from(axum::body::Body::from("{\"model\":\"m\"}"));
        assert_eq!(body.size_hint().exact(), Some(13));
        assert!(!body.is_end_stream());
        let bytes = body.collect().await.map(|c| c.to_bytes()).ok();
        assert_eq!(bytes.as_deref(), Some(&b"{\"model\":\"m\"}"[..]));
        let empty = ClientBody::from(axum::body::Body::empty());
        assert!(empty.is_end_stream());
        assert_eq!(format!("{empty:?}"), "ClientBody::Routed");
    }
}
