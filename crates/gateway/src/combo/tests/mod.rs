use std::convert::Infallible;
use std::io::Write;

use http_body_util::BodyExt;

use tower::{ServiceExt, service_fn};

use super::*;
use crate::config::Config;
use crate::routing::Routing;
use context_relay_tower::SessionId;

fn config() -> Config {
    Config::from_toml_str(
        r#"
[[providers]]
name = "codex"
base_url = "http://127.0.0.1:9/v1"
[[providers.accounts]]
id = "a"
api_key = "k"
[[providers]]
name = "anthropic"
base_url = "http://127.0.0.1:9/v1"
[[providers.accounts]]
id = "a"
api_key = "k"
[[combos]]
name = "codex-relay"
targets = ["codex/gpt-5.5", "anthropic/claude"]
[[combos]]
name = "plain"
strategy = "priority"
targets = ["anthropic/claude"]
"#,
        |_| None,
    )
    .unwrap()
}

type Seen = (Request<()>, Bytes);

async fn run<B>(req: Request<B>) -> (StatusCode, Bytes, Option<Seen>)
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    run_with_limit(req, 1024).await
}

/// [`run`] with a body limit of `limit` bytes.
async fn run_with_limit<B>(req: Request<B>, limit: usize) -> (StatusCode, Bytes, Option<Seen>)
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let seen = Arc::new(std::sync::Mutex::new(None));
    let s2 = seen.clone();
    let svc = ComboLayer::new(Routes::from_config(&config()), limit).layer(service_fn(
        move |req: Request<crate::chunks::Chunks>| {
            let seen = s2.clone();
            async move {
                let (parts, body) = req.into_parts();
                let bytes = body.collect().await.unwrap().to_bytes();
                *seen.lock().unwrap() = Some((Request::from_parts(parts, ()), bytes));
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
            }
        },
    ));
    let res = svc.oneshot(req).await.unwrap();
    let status = res.status();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let seen = seen.lock().unwrap().take();
    (status, body, seen)
}

fn post(path: &str, body: &'static [u8]) -> Request<Full<Bytes>> {
    Request::post(path)
        .header("content-length", body.len())
        .body(Full::new(Bytes::from_static(body)))
        .unwrap()
}

#[tokio::test]
async fn combo_sets_extensions_and_rewrites() {
    let (status, _, seen) = run(post(
        "/v1/chat/completions",
        br#"{"model": "codex-relay", "messages":[]}"#,
    ))
    .await;
    assert_eq!(status, 200);
    let (req, body) = seen.unwrap();
    assert_eq!(&body[..], br#"{"model": "gpt-5.5", "messages":[]}"#);
    // The client's length no longer holds: it says the new body's.
    assert_eq!(
        req.headers()["content-length"],
        body.len().to_string().as_str()
    );
    assert_eq!(
        req.extensions().fact::<ComboName>(),
        Some(&ComboName::new("codex-relay"))
    );
    let t = Routing::targets(req.extensions()).unwrap();
    assert_eq!(t.targets.len(), 2);
    assert_eq!(&*t.targets[1].model, "claude");
}

/// A body that arrives in several chunks is joined once and its `model` rewritten in the
/// joined buffer: the upstream gets every other byte as sent, whatever the new name's length.
#[tokio::test]
async fn a_body_in_several_chunks_is_forwarded_whole_with_its_model_rewritten() {
    let chunks: [&'static [u8]; 3] = [
        br#"{"model": "#,
        br#""codex-relay", "messages":[{"role":"user","#,
        br#""content":"caf\u00e9 \"q\""}],"n":1.50}"#,
    ];
    for (client, sent) in [
        ("codex-relay", "gpt-5.5"),
        ("plain", "claude"),
        ("codex/gpt-5.5", "gpt-5.5"),
    ] {
        let body: Vec<Bytes> = chunks
            .iter()
            .map(|c| Bytes::from(String::from_utf8_lossy(c).replace("codex-relay", client)))
            .collect();
        let whole: Vec<u8> = body.concat();
        let frames = futures_util::stream::iter(
            body.into_iter()
                .map(|b| Ok::<_, Infallible>(http_body::Frame::data(b))),
        );
        let req = Request::post("/v1/chat/completions")
            .body(http_body_util::StreamBody::new(frames))
            .unwrap();
        let (status, _, seen) = run(req).await;
        assert_eq!(status, 200, "{client}");
        let (_, got) = seen.unwrap();
        let expected = String::from_utf8_lossy(&whole).replacen(
            &format!("\"{client}\""),
            &format!("\"{sent}\""),
            1,
        );
        assert_eq!(String::from_utf8_lossy(&got), expected, "{client}");
    }
}

#[tokio::test]
async fn combos_and_direct_routes_name_their_combo() {
    // The relay sees a priority combo (for its model switches); its settings keep only that.
    let (_, _, seen) = run(post("/v1/messages", br#"{"model":"plain"}"#)).await;
    assert_eq!(
        seen.unwrap().0.extensions().fact::<ComboName>(),
        Some(&ComboName::new("plain"))
    );
    let (_, _, seen) = run(post("/v1/messages", br#"{"model":"anthropic/claude-x/y"}"#)).await;
    let (req, body) = seen.unwrap();
    assert_eq!(&body[..], br#"{"model":"claude-x/y"}"#);
    // A direct route is keyed by the route, so the relay acts on it as on a combo.
    assert_eq!(
        req.extensions().fact::<ComboName>(),
        Some(&ComboName::new("anthropic/claude-x/y"))
    );
    assert_eq!(
        &*Routing::targets(req.extensions()).unwrap().targets[0].provider,
        "anthropic"
    );
}

/// A second top-level `model` (plain or spelt with escapes) is refused however the body
/// arrives, and whether or not the head names the session (the pass over a body of unknown or
/// large length then looks for fewer literals, over a short one for all); a body with one is
/// forwarded with the session the head names.
#[tokio::test]
async fn a_second_model_is_refused_with_or_without_a_session_in_the_head() {
    let bodies: [(&str, u16); 4] = [
        (r#"{"model":"plain","prompt_cache_key":"pk","n":1}"#, 200),
        (r#"{"model":"plain","messages":[],"model":"plain"}"#, 400),
        (r#"{"model":"plain","messages":[],"mo\u0064el":"x"}"#, 400),
        (r#"{"model":"plain","t":"caf\u00e9","x":{"model":1}}"#, 200),
    ];
    for (text, status) in bodies {
        let heads = [None, Some("s-head")]
            .into_iter()
            .flat_map(|s| [(s, false), (s, true)]);
        for (session, declared) in heads {
            for cut in [0, 7, text.len() / 2, text.len() - 3] {
                let frames = futures_util::stream::iter(
                    [&text.as_bytes()[..cut], &text.as_bytes()[cut..]]
                        .map(|c| Ok::<_, Infallible>(http_body::Frame::data(Bytes::from(c)))),
                );
                let mut req = Request::post("/v1/chat/completions");
                if let Some(id) = session {
                    req = req.header("x-session-id", id);
                }
                if declared {
                    req = req.header("content-length", text.len());
                }
                let req = req.body(http_body_util::StreamBody::new(frames)).unwrap();
                let (got, body, seen) = run(req).await;
                let case = format!("{text} {session:?} {declared} cut at {cut}: {body:?}");
                assert_eq!(got, status, "{case}");
                if let (Some(id), Some((sent, _))) = (session, seen) {
                    let named = sent.extensions().fact::<SessionId>().map(|s| &*s.0);
                    assert_eq!(named, Some(id), "{case}");
                }
            }
        }
    }
}

#[tokio::test]
async fn errors_in_the_api_shape() {
    let (status, body, seen) = run(post("/v1/responses", b"{not json")).await;
    assert_eq!(status, 400);
    assert!(seen.is_none());
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert!(v["error"]["message"].as_str().unwrap().contains("JSON"));

    let (status, body, _) = run(post("/v1/messages", br#"{"messages":[]}"#)).await;
    assert_eq!(status, 400);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["type"], "error");
    assert!(v["error"]["message"].as_str().unwrap().contains("model"));

    let (status, body, _) = run(post("/v1/messages", br#"{"model":"gpt-4"}"#)).await;
    assert_eq!(status, 404);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["type"], "not_found_error");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("codex-relay")
    );
}

#[tokio::test]
async fn too_large_bodies() {
    // Declared length over the limit.
    let big: &'static [u8] = Box::leak(vec![b' '; 2000].into_boxed_slice());
    let (status, _, seen) = run(post("/v1/responses", big)).await;
    assert_eq!(status, 413);
    assert!(seen.is_none());
    // Undeclared length over the limit.
    let req = Request::post("/v1/responses")
        .body(Full::new(Bytes::from_static(big)))
        .unwrap();
    assert_eq!(run(req).await.0, 413);
    // Compressed under the limit, decoded over it.
    let gz = gzip(&[b' '; 5000]);
    let req = Request::post("/v1/responses")
        .header("content-encoding", "gzip")
        .body(Full::new(Bytes::from(gz)))
        .unwrap();
    assert_eq!(run(req).await.0, 413);
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn zstd(data: &[u8]) -> Vec<u8> {
    ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
}

#[tokio::test]
async fn compressed_bodies_are_forwarded_decoded() {
    let plain = br#"{"model":"codex-relay","input":"x"}"#;
    let z = zstd(plain);
    let req = Request::post("/v1/responses")
        .header("content-encoding", "zstd")
        .header("content-length", z.len())
        .body(Full::new(Bytes::from(z)))
        .unwrap();
    let (status, _, seen) = run(req).await;
    assert_eq!(status, 200);
    let (req, body) = seen.unwrap();
    assert_eq!(&body[..], br#"{"model":"gpt-5.5","input":"x"}"#);
    assert!(req.headers().get("content-encoding").is_none());
    // The compressed length is stale: it says the decoded body's (the loopback test reads
    // what the provider gets).
    assert_eq!(
        req.headers()["content-length"],
        body.len().to_string().as_str()
    );

    let req = Request::post("/v1/responses")
        .header("content-encoding", "lz4")
        .body(Full::new(Bytes::from_static(plain)))
        .unwrap();
    assert_eq!(run(req).await.0, 415);
}

/// `content-encoding` on several field lines is one list, in order (RFC 9110): each layer is
/// decoded, and the bound on stacked layers counts them all.
#[tokio::test]
async fn content_codings_on_several_lines_are_one_list() {
    let plain = br#"{"model":"codex-relay","input":"x"}"#;
    // Applied gzip first, then zstd: listed in that order.
    let body = zstd(&gzip(plain));
    let req = Request::post("/v1/responses")
        .header("content-encoding", "gzip")
        .header("content-encoding", "zstd")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let (status, _, seen) = run(req).await;
    assert_eq!(status, 200);
    let (req, body) = seen.unwrap();
    assert_eq!(&body[..], br#"{"model":"gpt-5.5","input":"x"}"#);
    assert!(req.headers().get("content-encoding").is_none());
    // A second layer the body does not have is not ignored: the request is refused.
    let req = Request::post("/v1/responses")
        .header("content-encoding", "gzip")
        .header("content-encoding", "gzip")
        .body(Full::new(Bytes::from(gzip(plain))))
        .unwrap();
    assert_eq!(run(req).await.0, 400);
    // Three layers over three lines are more than the two the gateway decodes.
    let mut req = Request::post("/v1/responses");
    for _ in 0..3 {
        req = req.header("content-encoding", "gzip");
    }
    let req = req
        .body(Full::new(Bytes::from(gzip(&gzip(&gzip(plain))))))
        .unwrap();
    assert_eq!(run(req).await.0, 415);
}

#[test]
fn model_ids() {
    let ids = Routes::from_config(&config()).model_ids();
    let names: Vec<&str> = ids.iter().map(|(i, _)| i.as_str()).collect();
    assert_eq!(
        names,
        ["codex-relay", "plain", "codex/gpt-5.5", "anthropic/claude"]
    );
}

/// The pool key the account resolver builds from what [`identify`] set: `tenant\nsession`.
/// The same with ComboService's one pass over the body handed over, or without it.
fn identified(req: &Request<()>, body: &[u8]) -> Option<String> {
    let key = |body: &[u8], found: Option<&context_relay_core::json::Found<'_>>| {
        let (mut parts, ()) = req.clone().into_parts();
        identify(&mut parts, Some(body), found);
        let tenant = parts.extensions.fact::<Tenant>().expect("a tenant, always");
        let session = parts.extensions.fact::<SessionId>()?;
        Some(format!("{}\n{}", tenant.0, session.0))
    };
    let searched = key(body, None);
    let found = crate::model::BODY_LITERALS.find_all(body, crate::model::BODY_LITERALS_CAP);
    assert_eq!(
        key(body, Some(&found)),
        searched,
        "the pass changes nothing"
    );
    if session_in_head(&req.clone().into_parts().0) {
        // What lets a large body's session be read on the worker: the body changes nothing.
        assert_eq!(key(b"", None), searched, "a session in the head");
    }
    searched
}

/// The session is found in the head (and a large body's session is read on the worker, not
/// the blocking pool) only when the body cannot change it.
#[test]
fn a_session_in_the_head_is_read_without_the_body() {
    let body =
        br#"{"model":"m","prompt_cache_key":"pk","messages":[{"role":"user","content":"hi"}]}"#;
    let in_head = |req: &Request<()>| session_in_head(&req.clone().into_parts().0);
    let mut req = Request::new(());
    assert!(!in_head(&req));
    assert_eq!(identified(&req, body).as_deref(), Some("anonymous\npk"));
    req.extensions_mut().insert(SessionId::new(" "));
    assert!(!in_head(&req), "a blank explicit id is no session");
    req.extensions_mut().insert(SessionId::new("ext"));
    assert!(in_head(&req));
    assert_eq!(identified(&req, body).as_deref(), Some("anonymous\next"));
    let mut req = Request::new(());
    req.headers_mut()
        .insert("x-session-id", HeaderValue::from_static("  "));
    assert!(!in_head(&req), "a blank header is no session");
    req.headers_mut()
        .insert("x-session-id", HeaderValue::from_static("s1"));
    assert!(in_head(&req));
    assert_eq!(identified(&req, body).as_deref(), Some("anonymous\ns1"));
}

#[test]
fn identify_sets_tenant_and_session_once_for_everyone() {
    let key = identified;
    let mut req = Request::new(());
    // No header, a body that is not JSON: no fingerprint either.
    assert_eq!(key(&req, b"not json"), None);
    req.headers_mut()
        .insert("thread-id", HeaderValue::from_static("t"));
    req.headers_mut()
        .insert("session-id", HeaderValue::from_static("  "));
    assert_eq!(key(&req, b"").as_deref(), Some("anonymous\nt"));
    req.headers_mut()
        .insert("x-claude-code-session-id", HeaderValue::from_static("cc"));
    assert_eq!(key(&req, b"").as_deref(), Some("anonymous\ncc"));
    req.headers_mut()
        .insert("authorization", HeaderValue::from_static("Bearer k1"));
    let tenant = context_relay_core::session::tenant(req.headers());
    assert_eq!(key(&req, b"").as_deref(), Some(&*format!("{tenant}\ncc")));
    req.extensions_mut().insert(SessionId::new("ext"));
    assert_eq!(key(&req, b"").as_deref(), Some(&*format!("{tenant}\next")));
    req.extensions_mut().insert(Tenant::new("t1"));
    assert_eq!(key(&req, b"").as_deref(), Some("t1\next"));
    // A blank extension counts as absent; an explicit one is cleaned like any other.
    req.extensions_mut().insert(SessionId::new(" "));
    assert_eq!(key(&req, b"").as_deref(), Some("t1\ncc"));
    req.extensions_mut().insert(SessionId::new(" ext "));
    assert_eq!(key(&req, b"").as_deref(), Some("t1\next"));
    let long = "x".repeat(300);
    let mut req = Request::new(());
    req.headers_mut()
        .insert("x-session-id", HeaderValue::from_str(&long).unwrap());
    assert_eq!(key(&req, b"").unwrap().len(), "anonymous\n".len() + 128);
    // Without headers the body gives the session (a fingerprint of the stable parts).
    let req = Request::new(());
    let turn1 = br#"{"model":"m","messages":[{"role":"user","content":"fix the bug"}]}"#;
    let turn2 = br#"{"model":"m","messages":[{"role":"user","content":"fix the bug"},{"role":"assistant","content":"done"},{"role":"user","content":"thanks"}]}"#;
    assert!(key(&req, turn1).is_some());
    assert_eq!(key(&req, turn1), key(&req, turn2));
}

/// What the service below ComboService got: the status, the head, the body's bytes and how
/// many chunks they came in.
async fn run_counting(
    pieces: &[Vec<u8>],
    session: bool,
) -> (StatusCode, Option<(Request<()>, Vec<u8>, usize)>) {
    let seen = Arc::new(std::sync::Mutex::new(None));
    let s2 = seen.clone();
    let svc = ComboLayer::new(Routes::from_config(&config()), 1 << 20).layer(service_fn(
        move |req: Request<crate::chunks::Chunks>| {
            let seen = s2.clone();
            async move {
                let (parts, mut body) = req.into_parts();
                let (mut bytes, mut count) = (Vec::new(), 0);
                while let Some(frame) = body.frame().await {
                    bytes.extend_from_slice(frame.unwrap().data_ref().unwrap());
                    count += 1;
                }
                *seen.lock().unwrap() = Some((Request::from_parts(parts, ()), bytes, count));
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
            }
        },
    ));
    // Owned: the request's body outlives this borrow.
    let owned: Vec<Vec<u8>> = pieces.to_vec();
    let frames = futures_util::stream::iter(
        owned
            .into_iter()
            .map(|p| Ok::<_, Infallible>(http_body::Frame::data(Bytes::from(p)))),
    );
    let mut req = Request::post("/v1/chat/completions");
    if session {
        req = req.header("x-session-id", "s-head");
    }
    let req = req.body(http_body_util::StreamBody::new(frames)).unwrap();
    let res = svc.oneshot(req).await.unwrap();
    let status = res.status();
    let seen = seen.lock().unwrap().take();
    (status, seen)
}

/// A member holding more escapes of the letters of `model` than the pass over a body records.
fn dense_letters() -> String {
    let text = r"\u006d\u006f\u0064\u0065\u006c ".repeat(crate::model::BODY_LITERALS_CAP / 5 + 1);
    format!(r#","t":"{text}""#)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// A body in several chunks whose head names the session is kept in its chunks, or
    /// joined when it must be (its `model` cut by a chunk's end, a second top-level `model`,
    /// plain or spelled with `\u` escapes, after it): either way the service below gets what
    /// it gets for the same body in one chunk (status, bytes, model written, session), and a
    /// body routed in its chunks comes in them, not copied into one (a `model` nested after
    /// the first, as in a tool's schema, or escapes elsewhere, keep it in them).
    #[test]
    fn a_body_kept_in_its_chunks_is_routed_as_one_in_one_chunk(
        before in proptest::sample::select(vec!["", r#""stream":true,"#, r#""input":"a\"b","#]),
        model in proptest::sample::select(vec!["codex-relay", "plain", "codex/gpt-5.5", "nope"]),
        after in proptest::collection::vec(proptest::sample::select(vec![
            r#","input":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx""#,
            r#","tools":[{"model":1}]"#,
            r#","t":"caf\u00e9""#,
            r#","model":"plain""#,
            r#","mod\u0065l":"plain""#,
            r#","tools":[{"p":{"model" :{"type":"string"}},"e":["model"]}]"#,
            r#","x":"\\u0065","y":"model""#,
            r#","say \"model":1"#,
            // Terminal output: escapes the pass does not look for.
            r#","ansi":"\u001b[1mok\u001b[0m \u001b[1mok\u001b[0m \u001b[1mok\u001b[0m \u001b[1mok\u001b[0m \u001b[1mok\u001b[0m \u001b[1mok\u001b[0m \u001b[1mok\u001b[0m \u001b[1mok\u001b[0m \u001b[1mok\u001b[0m \u001b[1mok\u001b[0m \u001b[1mok\u001b[0m \u001b[1mok\u001b[0m \u001b[1mok\u001b[0m \u001b[1mok\u001b[0m \u001b[1mok\u001b[0m \u001b[1mok\u001b[0m \u001b[1mok\u001b[0m ""#,
            // More escaped letters than the pass records: joined and parsed whole (see
            // `dense_letters`).
            "dense",
            r#","n":1.50"#,
        ]), 0..6),
        cuts in proptest::collection::vec(0usize..400, 1..5),
    ) {
        let after: Vec<String> = after
            .iter()
            .map(|a| if *a == "dense" { dense_letters() } else { a.to_string() })
            .collect();
        let text = format!("{{{before}\"model\":\"{model}\"{}}}", after.concat());
        let whole = text.into_bytes();
        let mut ends: Vec<usize> = cuts.iter().map(|c| c % (whole.len() + 1)).collect();
        ends.push(whole.len());
        ends.sort_unstable();
        let mut pieces = Vec::new();
        let mut from = 0;
        for end in ends {
            pieces.push(whole[from..end].to_vec());
            from = end;
        }
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        for session in [true, false] {
            let (status, one) = rt.block_on(run_counting(std::slice::from_ref(&whole), session));
            let (got, seen) = rt.block_on(run_counting(&pieces, session));
            proptest::prop_assert_eq!(got, status);
            match (&one, seen) {
                (Some((head, bytes, _)), Some((sent, got, count))) => {
                    proptest::prop_assert_eq!(&got, bytes);
                    let written = |r: &Request<()>| {
                        Routing::targets(r.extensions()).map(|t| t.written.clone())
                    };
                    proptest::prop_assert_eq!(written(&sent), written(head));
                    let named = |r: &Request<()>| r.extensions().fact::<SessionId>().cloned();
                    proptest::prop_assert_eq!(named(&sent), named(head));
                    // Kept with the session in the head, `model` whole in the first chunk, no
                    // second top-level one after it, and no more occurrences than the pass
                    // records.
                    let second = after.iter().any(|a| a.starts_with(r#","mod"#));
                    let dense = after.iter().any(|a| *a == dense_letters());
                    let model_end = whole.windows(7).position(|w| w == b"\"model\"").unwrap()
                        + model.len() + 10;
                    let in_first = pieces.iter().find(|p| !p.is_empty())
                        .is_some_and(|p| p.len() >= model_end);
                    let several = pieces.iter().filter(|p| !p.is_empty()).count() > 1;
                    if !session || second || dense || !in_first {
                        proptest::prop_assert_eq!(count, 1);
                    } else if several {
                        proptest::prop_assert!(count > 1, "{}", String::from_utf8_lossy(&whole));
                    }
                }
                (None, None) => {}
                (one, seen) => proptest::prop_assert!(false, "{one:?} against {seen:?}"),
            }
        }
    }
}

/// A large turn of an agent session (the head names the session) that comes in several
/// chunks reaches the service below in them: its `model` literal replaced by a chunk of its
/// own, every other byte in the chunks it came in.
#[tokio::test]
async fn a_large_turn_is_forwarded_in_its_chunks() {
    let history = format!(r#","input":"{}""#, "x".repeat(3000));
    let pieces = vec![
        br#"{"model":"codex-relay","stream":true"#.to_vec(),
        history.clone().into_bytes(),
        br#","n":1}"#.to_vec(),
    ];
    let (status, seen) = run_counting(&pieces, true).await;
    assert_eq!(status, 200);
    let (_, bytes, count) = seen.unwrap();
    let expected = format!(r#"{{"model":"gpt-5.5","stream":true{history},"n":1}}"#);
    assert_eq!(String::from_utf8(bytes).unwrap(), expected);
    // `{`, the new literal, the rest of the first chunk, and the two other chunks.
    assert_eq!(count, 5);
    // Without the session in the head the body is read for its ids: joined, one chunk.
    let (_, seen) = run_counting(&pieces, false).await;
    assert_eq!(seen.unwrap().2, 1);
}

mod sent;
