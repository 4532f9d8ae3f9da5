//! A client's request body as the proxy stack takes it: straight from the connection, or
//! boxed by the router.
//!
//! A `POST` to one of the proxy's API paths goes from the connection to the proxy stack
//! without the router (see [`live`](crate::live)): its body is hyper's, bounded by the client
//! body timeout, and is handed on as it is (`Left`). Boxing it into the router's body, as
//! every other request's is, took an allocation per request and a boxed call, through an
//! error-mapping layer, on every poll of the body. A request the router matched first
//! (another method's route, a Gemini path) comes boxed (`Right`).

use http_body_util::Either;
use hyper::body::Incoming;

use crate::idle::IdleTimeoutBody;

/// The body of a request to the proxy stack (see the [module docs](self)).
pub(crate) type ClientBody = Either<IdleTimeoutBody<Incoming>, axum::body::Body>;

#[cfg(test)]
mod tests {
    use http_body::Body as _;
    use http_body_util::BodyExt;

    use super::*;

    /// A routed body reads as it was, its size and end included.
    #[tokio::test]
    async fn a_routed_body_reads_as_it_was() {
        let body: ClientBody = Either::Right(axum::body::Body::from("{\"model\":\"m\"}"));
        assert_eq!(body.size_hint().exact(), Some(13));
        assert!(!body.is_end_stream());
        let bytes = body.collect().await.map(|c| c.to_bytes()).ok();
        assert_eq!(bytes.as_deref(), Some(&b"{\"model\":\"m\"}"[..]));
        let empty: ClientBody = Either::Right(axum::body::Body::empty());
        assert!(empty.is_end_stream());
    }
}
