//! The context window of the Messages endpoint ([`SimBuilder::context_window`]): a prompt
//! longer than the window is refused the way the Anthropic API refuses it, a 400
//! `invalid_request_error` saying `prompt is too long: N tokens > M maximum`.
//!
//! The prompt's size is estimated as the simulator counts input tokens everywhere: a token
//! per 4 bytes of the request body.

use axum::body::Body;
use http::{Response, StatusCode};
use serde_json::json;

use super::{SimBuilder, SimState};

impl SimBuilder {
    /// Refuses Messages requests whose prompt is longer than `tokens` (a token per 4 bytes of
    /// body) with the Anthropic API's 400 `prompt is too long: N tokens > M maximum`. No
    /// limit by default.
    pub fn context_window(mut self, tokens: u64) -> Self {
        self.context_window = Some(tokens);
        self
    }
}

/// The 400 the Messages API answers to a request to `path` with `body` that does not fit the
/// context window; `None` when it fits or there is no window. The request is recorded as
/// rejected (`prompt_too_long`).
pub(super) fn refusal(
    state: &SimState,
    recorded: usize,
    path: &str,
    body: &[u8],
) -> Option<Response<Body>> {
    let window = state.config.context_window?;
    let tokens = (body.len() / 4) as u64;
    if !path.ends_with("/messages") || tokens <= window {
        return None;
    }
    state.reject(recorded, "prompt_too_long");
    let message = format!("prompt is too long: {tokens} tokens > {window} maximum");
    let body =
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}});
    Some(super::control::json_response(
        StatusCode::BAD_REQUEST,
        &body,
    ))
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use http::Request;
    use http_body_util::BodyExt;
    use serde_json::{Value, json};

    use crate::SimProvider;

    #[tokio::test]
    async fn a_prompt_longer_than_the_window_is_refused_with_the_real_error() {
        let sim = SimProvider::builder()
            .account("a", "key-a")
            .context_window(100)
            .start()
            .await
            .unwrap();
        let post = |body: Value| {
            let req = Request::post("/v1/messages")
                .header("x-api-key", "key-a")
                .body(Body::from(body.to_string()))
                .unwrap();
            crate::handle(sim.state.clone(), req)
        };
        let short = json!({"model": "claude-x", "max_tokens": 5,
            "messages": [{"role": "user", "content": "hi"}]});
        assert_eq!(post(short.clone()).await.status(), 200);
        let mut long = short;
        long["messages"][0]["content"] = "word ".repeat(200).into();
        let res = post(long.clone()).await;
        assert_eq!(res.status(), 400);
        let body = res.into_body().collect().await.unwrap().to_bytes();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        let tokens = long.to_string().len() / 4;
        assert_eq!(
            v["error"]["message"],
            format!("prompt is too long: {tokens} tokens > 100 maximum")
        );
        assert_eq!(
            sim.requests().last().unwrap().rejected.as_deref(),
            Some("prompt_too_long")
        );
        // Other endpoints have no window here.
        let responses = Request::post("/v1/responses")
            .header("authorization", "Bearer key-a")
            .body(Body::from(
                json!({"model": "gpt-5.5", "input": "word ".repeat(200)}).to_string(),
            ))
            .unwrap();
        assert_eq!(
            crate::handle(sim.state.clone(), responses).await.status(),
            200
        );
        sim.shutdown().await;
    }
}
