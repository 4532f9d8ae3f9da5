use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use crate::config::Config;
use crate::server::RunningGateway;
use crate::{Gateway, app::ProxyService};

/// A gateway with one provider of one account (not reachable) and one combo, its store in
/// memory.
pub(crate) fn gateway() -> Gateway {
    let config = Config::from_toml_str(
        r#"
[store]
backend = "memory"
[[providers]]
name = "codex"
base_url = "http://127.0.0.1:9/v1"
  [[providers.accounts]]
  id = "acct-a"
  api_key = "key-a"
[[combos]]
name = "codex-relay"
targets = ["codex/gpt-5.5"]
"#,
        |_| None,
    )
    .unwrap();
    Gateway::new(config).unwrap()
}

/// The test gateway on a loopback port, and a client.
async fn serve() -> (Client<HttpConnector, Full<Bytes>>, RunningGateway) {
    let gateway = gateway();
    let server = RunningGateway::start_with(
        "127.0.0.1:0".parse().unwrap(),
        gateway.service(),
        gateway.serve_options(),
    )
    .await
    .unwrap();
    (Client::builder(TokioExecutor::new()).build_http(), server)
}

#[tokio::test]
async fn a_panicking_handler_is_an_api_shaped_500_and_the_server_lives_on() {
    let gateway = gateway();
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let panicking: ProxyService = crate::SharedService::new(tower::service_fn(
        |req: Request<crate::client_body::ClientBody>| async move {
            if req.uri().path().ends_with("/responses") {
                panic!("injected test panic");
            }
            Ok::<_, std::convert::Infallible>(http::Response::new(axum::body::Body::empty()))
        },
    ));
    let service = gateway.service_for(gateway.router_with(panicking));
    let server = RunningGateway::start_with(
        "127.0.0.1:0".parse().unwrap(),
        service,
        gateway.serve_options(),
    )
    .await
    .unwrap();
    for _ in 0..3 {
        let req = Request::post(format!("{}/v1/responses", server.url()))
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap();
        let res = client.request(req).await.unwrap();
        assert_eq!(res.status(), 500);
        // The layers outside the panic catcher (request id, metrics, access log) saw it.
        assert!(res.headers().contains_key("x-request-id"));
        let v: Value =
            serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes()).unwrap();
        // Readable as an OpenAI error and as an Anthropic one.
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "api_error");
        assert!(v["error"]["message"].is_string());
        assert!(!v.to_string().contains("injected test panic"));
    }
    let res = client
        .request(
            Request::get(format!("{}/healthz", server.url()))
                .body(Full::default())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn every_labelled_route_is_served() {
    use tower::ServiceExt;

    let config = Config::from_toml_str(
        r#"
admin_token = "secret-admin-token-0123456789"
[store]
backend = "memory"
[[providers]]
name = "codex"
base_url = "http://127.0.0.1:9/v1"
  [[providers.accounts]]
  id = "acct-a"
  api_key = "key-a"
[[combos]]
name = "codex-relay"
targets = ["codex/gpt-5.5"]
"#,
        |_| None,
    )
    .unwrap();
    let gateway = Gateway::new(config).unwrap();
    let ok: ProxyService = crate::SharedService::new(tower::service_fn(
        |_: Request<crate::client_body::ClientBody>| async move {
            Ok::<_, std::convert::Infallible>(http::Response::new(axum::body::Body::empty()))
        },
    ));
    let router = gateway.router_with(ok);
    for route in super::ROUTES {
        let path = route
            .replace("{session}", "s-1")
            .replace("{*rest}", "gemini-2.5-pro:generateContent");
        assert_eq!(crate::telemetry::route_label(&path), route);
        for method in ["GET", "POST", "DELETE"] {
            let req = Request::builder()
                .method(method)
                .uri(&path)
                .body(axum::body::Body::empty())
                .unwrap();
            let res = router.clone().oneshot(req).await.unwrap();
            let body = res.into_body().collect().await.unwrap().to_bytes();
            assert!(
                !String::from_utf8_lossy(&body).contains("no route for"),
                "{method} {path} fell through to the 404"
            );
        }
    }
}

/// The served router calls the proxy stack directly for a `POST` to an API path; every other
/// method still gets the router's answer.
#[tokio::test]
async fn api_paths_reach_the_proxy_directly_and_other_methods_still_get_405() {
    assert!(super::is_proxy_path("/v1/chat/completions"));
    assert!(!super::is_proxy_path("/v1/chat/completions/"));
    assert!(!super::is_proxy_path(
        "/v1/models/gemini-2.5-pro:generateContent"
    ));
    let (client, server) = serve().await;
    let url = format!("{}/v1/chat/completions", server.url());
    let res = client
        .request(Request::get(&url).body(Full::default()).unwrap())
        .await
        .unwrap();
    assert_eq!(res.status(), 405);
    assert_eq!(res.headers()["allow"], "POST");
    // An unknown model: the combo service (inside the proxy stack) answers 404 in the API's
    // shape.
    let req = Request::post(&url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(
            br#"{"model":"nope","messages":[]}"#,
        )))
        .unwrap();
    let res = client.request(req).await.unwrap();
    assert_eq!(res.status(), 404);
    assert!(res.headers().contains_key("x-request-id"));
    let v: Value =
        serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(v["error"]["code"], "model_not_found", "{v}");
    server.shutdown().await.unwrap();
}

/// With `[[clients]]`, `GET /v1/models` needs a client key as the API routes do, and lists only
/// what the client's `combos` allow-list lets it ask for; without an allow-list, everything.
#[tokio::test]
async fn models_need_a_client_key_and_list_what_the_client_may_use() {
    use tower::ServiceExt;

    let config = Config::from_toml_str(
        r#"
[store]
backend = "memory"
[[clients]]
name = "alice"
key = "alice-key-0123456789"
combos = ["codex-relay"]
[[clients]]
name = "bob"
key = "bob-key-0123456789"
[[providers]]
name = "codex"
base_url = "http://127.0.0.1:9/v1"
  [[providers.accounts]]
  id = "acct-a"
  api_key = "key-a"
[[combos]]
name = "codex-relay"
targets = ["codex/gpt-5.5"]
[[combos]]
name = "other"
targets = ["codex/gpt-5.4"]
"#,
        |_| None,
    )
    .unwrap();
    let router = Gateway::new(config).unwrap().router();
    let list = |key: Option<&'static str>| {
        let router = router.clone();
        async move {
            let mut req = Request::get("/v1/models");
            if let Some(key) = key {
                req = req.header("authorization", format!("Bearer {key}"));
            }
            let res = router
                .oneshot(req.body(axum::body::Body::empty()).unwrap())
                .await
                .unwrap();
            let status = res.status();
            let body = res.into_body().collect().await.unwrap().to_bytes();
            (status, serde_json::from_slice::<Value>(&body).unwrap())
        }
    };
    let ids = |v: &Value| -> Vec<String> {
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_owned())
            .collect()
    };
    for key in [None, Some("wrong-key-0123456789")] {
        let (status, v) = list(key).await;
        assert_eq!(status, 401, "{key:?}: {v}");
        assert_eq!(v["error"]["type"], "invalid_api_key", "{v}");
        assert!(!v.to_string().contains("codex-relay"), "{v}");
    }
    let (status, v) = list(Some("alice-key-0123456789")).await;
    assert_eq!(status, 200);
    assert_eq!(ids(&v), ["codex-relay"]);
    let (status, v) = list(Some("bob-key-0123456789")).await;
    assert_eq!(status, 200);
    assert_eq!(
        ids(&v),
        ["codex-relay", "other", "codex/gpt-5.5", "codex/gpt-5.4"]
    );
}

/// A base URL that ends in `/v1` for a client that adds `/v1` itself (Claude Code with
/// `ANTHROPIC_BASE_URL=…/v1`): the 404 says so, in the client's error shape.
#[tokio::test]
async fn a_doubled_v1_is_named_in_the_404() {
    let (client, server) = serve().await;
    for (path, hinted) in [("/v1/v1/messages", true), ("/v2/messages", false)] {
        let res = client
            .request(
                Request::post(format!("{}{path}", server.url()))
                    .body(Full::new(Bytes::from_static(b"{}")))
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(res.status(), 404);
        let body = res.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with(&format!("no route for POST {path}")),
            "{message}"
        );
        assert_eq!(message.contains("without /v1"), hinted, "{message}");
    }
}
