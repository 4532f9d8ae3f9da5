//! The Gemini API routes: where the model and the client's key sit in a Gemini request.
//!
//! A Gemini client (`google-genai`) posts to `/{version}/models/{model}:generateContent` or
//! `:streamGenerateContent?alt=sse`, `version` being `v1` (the SDK's default) or `v1beta`. The
//! body has no `model`: the model is the path segment between `models/` and the `:method`, a
//! combo name or `provider/model` (slashes kept as they are or percent-encoded). The client's
//! key comes in `x-goog-api-key` or in the `key` query parameter.
//!
//! - [`key_to_header`] runs before client authentication: it takes `key` out of the query (so it
//!   is never forwarded, and authentication reads it as it reads `x-goog-api-key`);
//! - [`path_model`] gives the model of a Gemini path, read by the combo service instead of the
//!   body's `model`;
//! - [`with_model`] writes the target's model into the path (the upstream URL is the provider's
//!   `base_url`, version included, then `/models/{model}:{method}`).

use std::borrow::Cow;
use std::convert::Infallible;

use axum::body::Body;
use context_relay_core::json;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode, Uri};
use percent_encoding::{AsciiSet, CONTROLS, percent_decode_str, utf8_percent_encode};
use tower::ServiceExt;
use url::form_urlencoded;

use crate::app::ProxyService;
use crate::error::{ErrorKind, ErrorShape, error_response};
use crate::shared_service::SharedService;

/// The header a Gemini client sends its key in.
const GOOG_API_KEY: HeaderName = HeaderName::from_static("x-goog-api-key");

/// Characters escaped in a model written into a path (a `/` of `provider/model` stays as is:
/// the provider's own models have none).
const PATH_ESCAPES: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'?')
    .add(b'<')
    .add(b'>')
    .add(b'`')
    .add(b'{')
    .add(b'}');

/// Whether `path` is a Gemini generation route.
pub(crate) fn is_gemini(path: &str) -> bool {
    path_model(path).is_some()
}

/// The model of a Gemini path (`/v1beta/models/{model}:generateContent`), percent-decoded, and
/// the byte range of its text in `path`. `None` for any other path.
pub(crate) fn path_model(path: &str) -> Option<(std::ops::Range<usize>, String)> {
    let rest = path
        .strip_prefix("/v1/models/")
        .or_else(|| path.strip_prefix("/v1beta/models/"))?;
    let start = path.len() - rest.len();
    let colon = rest.rfind(':')?;
    let method = &rest[colon + 1..];
    if method != "generateContent" && method != "streamGenerateContent" {
        return None;
    }
    let raw = &rest[..colon];
    let model = percent_decode_str(raw).decode_utf8().ok()?;
    // A `.` or `..` segment would name another path of the provider: no Gemini route.
    if model.trim().is_empty() || model.split('/').any(|s| s == "." || s == "..") {
        return None;
    }
    Some((start..start + colon, model.into_owned()))
}

/// Checks that a Gemini body is one JSON object (it is forwarded as sent; the provider judges
/// its members).
pub(crate) fn check_body(body: &[u8]) -> Result<(), String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err("expected a JSON object as request body, found an empty body".into());
    }
    json::parse_object(body)
        .map(|_| ())
        .map_err(|e| format!("expected a JSON object as request body, found invalid JSON ({e})"))
}

/// `uri` with the model of its Gemini path replaced by `model`; `None` when `uri` is no Gemini
/// route or the result is no valid URI.
pub(crate) fn with_model(uri: &Uri, model: &str) -> Option<Uri> {
    let path = uri.path();
    let (span, current) = path_model(path)?;
    if current == model {
        return Some(uri.clone());
    }
    let encoded: Cow<'_, str> = utf8_percent_encode(model, PATH_ESCAPES).into();
    let mut out = String::with_capacity(path.len() + model.len() + 32);
    out.push_str(&path[..span.start]);
    out.push_str(&encoded);
    out.push_str(&path[span.end..]);
    if let Some(q) = uri.query() {
        out.push('?');
        out.push_str(q);
    }
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(out.parse().ok()?);
    Uri::from_parts(parts).ok()
}

/// Takes the client's `key` out of the query of a Gemini request and, when the request has no
/// `x-goog-api-key`, puts it there, so that client authentication reads it like any other
/// credential and the upstream client strips it like any other. Every other query parameter
/// (`alt=sse`) is kept in its order. Other requests pass unchanged.
pub(crate) fn key_to_header<B>(mut req: Request<B>) -> Request<B> {
    let Some(query) = req.uri().query() else {
        return req;
    };
    if !is_gemini(req.uri().path()) {
        return req;
    }
    let mut key = None;
    let mut kept = form_urlencoded::Serializer::new(String::new());
    let mut any_kept = false;
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        if name == context_relay_core::session::QUERY_CREDENTIAL {
            key.get_or_insert(value.into_owned());
        } else {
            kept.append_pair(&name, &value);
            any_kept = true;
        }
    }
    let Some(key) = key else {
        return req;
    };
    let mut path = req.uri().path().to_owned();
    if any_kept {
        path.push('?');
        path.push_str(&kept.finish());
    }
    let mut parts = req.uri().clone().into_parts();
    match path.parse() {
        Ok(pq) => parts.path_and_query = Some(pq),
        // Unreachable for a path that was valid a moment ago; without the key rewrite the
        // request still never forwards it (the upstream URL is rebuilt the same way).
        Err(_) => return req,
    }
    if let Ok(uri) = Uri::from_parts(parts) {
        *req.uri_mut() = uri;
    }
    if !req.headers().contains_key(&GOOG_API_KEY)
        && let Ok(mut value) = HeaderValue::from_str(&key)
    {
        value.set_sensitive(true);
        req.headers_mut().insert(GOOG_API_KEY, value);
    }
    req
}

/// The service of the Gemini routes (`/v1/models/{*rest}`, `/v1beta/models/{*rest}`): a
/// generation path goes to `proxy` with its query key moved ([`key_to_header`]); any other
/// path under them is a 404 in the Gemini error shape.
pub(crate) fn service(
    proxy: ProxyService,
) -> SharedService<Request<Body>, Response<Body>, Infallible> {
    SharedService::new(tower::service_fn(move |req: Request<Body>| {
        let proxy = proxy.clone();
        async move {
            if !is_gemini(req.uri().path()) {
                let shape = ErrorShape::Gemini;
                let message = format!(
                    "no route for {} {}: the gateway serves `models/{{model}}:generateContent` and `:streamGenerateContent`",
                    req.method(),
                    req.uri().path()
                );
                let res = error_response(
                    shape,
                    StatusCode::NOT_FOUND,
                    ErrorKind::ModelNotFound.name(shape),
                    &message,
                );
                return Ok(res.map(Body::new));
            }
            proxy
                .oneshot(key_to_header(req).map(http_body_util::Either::Right))
                .await
        }
    }))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn paths() {
        let (span, m) = path_model("/v1/models/gemini-relay:generateContent").unwrap();
        assert_eq!(m, "gemini-relay");
        assert_eq!(
            &"/v1/models/gemini-relay:generateContent"[span],
            "gemini-relay"
        );
        let p = "/v1beta/models/gemini/gemini-2.5-pro:streamGenerateContent";
        assert_eq!(path_model(p).unwrap().1, "gemini/gemini-2.5-pro");
        let p = "/v1beta/models/gemini%2Fgemini-2.5-pro:streamGenerateContent";
        assert_eq!(path_model(p).unwrap().1, "gemini/gemini-2.5-pro");
        assert_eq!(path_model("/v1/models/m:countTokens"), None);
        assert_eq!(path_model("/v1/models/:generateContent"), None);
        assert_eq!(path_model("/v1/responses"), None);
        assert_eq!(path_model("/v2/models/m:generateContent"), None);
    }

    #[test]
    fn model_rewrite_keeps_the_query() {
        let uri: Uri = "/v1/models/gemini-relay:streamGenerateContent?alt=sse"
            .parse()
            .unwrap();
        let out = with_model(&uri, "gemini-2.5-flash").unwrap();
        assert_eq!(
            out.to_string(),
            "/v1/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        );
        assert_eq!(with_model(&"/v1/responses".parse().unwrap(), "m"), None);
    }

    #[test]
    fn key_leaves_the_query_for_the_header() {
        let req = Request::post("/v1beta/models/m:streamGenerateContent?key=ck%2B1&alt=sse")
            .body(())
            .unwrap();
        let req = key_to_header(req);
        assert_eq!(
            req.uri().to_string(),
            "/v1beta/models/m:streamGenerateContent?alt=sse"
        );
        assert_eq!(req.headers()["x-goog-api-key"], "ck+1");

        // A header already there wins; the query key is still removed.
        let req = Request::post("/v1/models/m:generateContent?key=q")
            .header("x-goog-api-key", "h")
            .body(())
            .unwrap();
        let req = key_to_header(req);
        assert_eq!(req.uri().to_string(), "/v1/models/m:generateContent");
        assert_eq!(req.headers()["x-goog-api-key"], "h");

        // Other routes are not Gemini's: their query is theirs (the upstream URL leaves a
        // `key` out whatever the route).
        let req = Request::post("/v1/messages?key=x").body(()).unwrap();
        assert_eq!(key_to_header(req).uri().to_string(), "/v1/messages?key=x");
        // A model with a dot segment is no Gemini route.
        assert!(path_model("/v1beta/models/..%2F..%2Fadmin:generateContent").is_none());
        assert!(path_model("/v1beta/models/p/../x:generateContent").is_none());
    }

    proptest! {
        /// Whatever the model, writing it into a path and reading it back gives it again.
        #[test]
        // Printable ASCII but `:` (which ends a path's model), not filtered: two in five
        // drawn strings held one, enough rejects to abort a run of a few thousand cases.
        fn rewrite_round_trips(model in "[ -9;-~]{1,40}") {
            prop_assume!(!model.trim().is_empty());
            prop_assume!(!model.split('/').any(|s| s == "." || s == ".."));
            let uri: Uri = "/v1beta/models/x:generateContent?alt=sse".parse().unwrap();
            let out = with_model(&uri, &model).unwrap();
            prop_assert_eq!(path_model(out.path()).unwrap().1, model);
            prop_assert_eq!(out.query(), Some("alt=sse"));
        }
    }
}
