//! What ComboService reads from the body as the client sent it: the model name it refuses,
//! the fingerprint it takes before the model is rewritten.

use super::*;

#[tokio::test]
async fn a_model_name_with_a_control_character_is_refused() {
    for body in [
        &br#"{"model":"codex/gpt
WARN forged","messages":[]}"#[..],
        br#"{"model":"codex/gpt[31m","messages":[]}"#,
    ] {
        let (status, answer, seen) = run(post("/v1/chat/completions", body)).await;
        assert_eq!(status, 400);
        assert!(seen.is_none());
        assert!(
            String::from_utf8_lossy(&answer).contains("control character"),
            "{answer:?}"
        );
    }
}

/// A session told by its fingerprint hashes the `model` the client sent (the combo), not the
/// target's it is rewritten to: a combo whose targets change keeps its sessions. Small and
/// large bodies (the latter read on the blocking pool) alike.
#[tokio::test]
async fn the_fingerprint_hashes_the_model_the_client_sent() {
    let small: &'static [u8] =
        br#"{"model":"codex-relay","messages":[{"role":"user","content":"fix the bug"}]}"#;
    let large: &'static [u8] = format!(
        r#"{{"model":"codex-relay","messages":[{{"role":"user","content":"{}"}}]}}"#,
        "x".repeat(crate::decoding::OFF_WORKERS_BYTES)
    )
    .leak()
    .as_bytes();
    for sent in [small, large] {
        let (status, _, seen) = run_with_limit(post("/v1/chat/completions", sent), 1 << 20).await;
        assert_eq!(status, 200);
        let (req, body) = seen.unwrap();
        assert!(body.starts_with(br#"{"model":"gpt-5.5""#));
        let session = req.extensions().fact::<SessionId>().expect("a fingerprint");
        assert_eq!(
            Some(&*session.0),
            context_relay_core::session::fingerprint(sent).as_deref()
        );
    }
}
