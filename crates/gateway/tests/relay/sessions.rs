//! Sessions across a switch: account-bound state removed on the switch only, tenants kept
//! apart, a session under the threshold forwarded byte for byte, sessions without a header,
//! odd bodies, the relay off, the quota kind.

use super::*;

#[tokio::test]
async fn responses_account_bound_state_is_removed_on_the_switch_only() {
    let env = setup().await;
    let session = "sess-bound";
    // State acct-a minted: a stored response (its id comes back in the reply) and a
    // reasoning blob. The strict simulator rejects both on any other account.
    let (status, first) = env
        .turn(
            Api::Responses,
            "client-1",
            "sess-warm-up",
            r#"{"model":"codex-relay","stream":false,"input":"hello"}"#,
            &[],
        )
        .await;
    assert_eq!(status, 200);
    let first: Value = serde_json::from_slice(&first).unwrap();
    let prev = first["id"].as_str().unwrap().to_owned();
    // The warm-up turn does not count towards the threshold crossing below.
    env.sim.set_used("acct-a", 0.0);
    let blob = env.sim.mint_encrypted("acct-a", "rs_1");
    // A Codex-like body: encrypted reasoning, a previous response, the turn-state header.
    let body = |turn: usize| {
        json!({
            "model": "codex-relay", "stream": true, "store": true,
            "previous_response_id": prev,
            "include": ["reasoning.encrypted_content"],
            "input": [
                {"type": "message", "role": "developer", "content": "You are Codex."},
                {"type": "message", "role": "user", "content": format!("turn {turn}: refactor")},
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": blob},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
                {"type": "message", "role": "user", "content": "continue"}
            ],
            "prompt_cache_key": session
        })
        .to_string()
    };
    let turn_state = [("x-codex-turn-state", "ts-from-acct-a")];
    for turn in 1..=3 {
        let b = body(turn);
        let (status, _) = env
            .turn(Api::Responses, "client-1", session, &b, &turn_state)
            .await;
        assert_eq!(status, 200);
        // No switch: forwarded byte for byte apart from the model, header included.
        let last = env.turns().pop().unwrap();
        assert_eq!(
            &last.body[..],
            b.replace("codex-relay", "gpt-5.5").as_bytes()
        );
        assert_eq!(last.headers["x-codex-turn-state"], "ts-from-acct-a");
    }
    env.idle().await;
    assert_eq!(env.stored(Some(session)).await.len(), 1);

    env.sim.set_used("acct-a", 100.0);
    env.sim.clear_requests();
    let b = body(4);
    let (status, _) = env
        .turn(Api::Responses, "client-1", session, &b, &turn_state)
        .await;
    assert_eq!(status, 200);
    let turns = env.turns();
    assert_eq!(turns.len(), 2);
    // The attempt on the session's own account is untouched.
    assert_eq!(
        &turns[0].body[..],
        b.replace("codex-relay", "gpt-5.5").as_bytes()
    );
    assert_eq!(turns[0].headers["x-codex-turn-state"], "ts-from-acct-a");
    // The attempt on the new account carries no state the new account would reject.
    let moved = &turns[1];
    assert_eq!(moved.account.as_deref(), Some("acct-b"));
    assert!(moved.headers.get("x-codex-turn-state").is_none());
    let v = moved.json().unwrap();
    assert!(v.get("previous_response_id").is_none(), "{v}");
    let items = v["input"].as_array().unwrap();
    assert!(items.iter().all(|i| i["type"] != "reasoning"), "{v}");
    assert!(!contains(&moved.body, &blob));
    assert_eq!(moved.rejected, None);
    assert!(has_handoff(moved));
    // Everything else survives.
    assert_eq!(v["prompt_cache_key"], session);
    assert!(items.iter().any(|i| i["content"] == "continue"));
}

#[tokio::test]
async fn anthropic_signed_thinking_is_removed_on_the_switch() {
    let env = setup_full(SimQuotaHeaders::Anthropic, "", true).await;
    let session = "cc-thinking";
    cross_threshold(&env, Api::Messages, "client-1", session).await;
    env.sim.set_used("acct-c", 100.0);
    env.sim.clear_requests();
    let signature = env.sim.mint_signature("acct-c", "th_1");
    let redacted = env.sim.mint_signature("acct-c", "rd_1");
    let body = json!({
        "model": "claude-relay", "max_tokens": 2048, "stream": true,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": "turn 1: add the --json flag, step 1"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Let me plan.", "signature": signature},
                {"type": "redacted_thinking", "data": redacted},
                {"type": "text", "text": "Planned."}
            ]},
            {"role": "user", "content": "go on"}
        ]
    })
    .to_string();
    let (status, out) = env
        .turn(Api::Messages, "client-1", session, &body, &[])
        .await;
    assert_eq!(status, 200);
    assert!(
        std::str::from_utf8(&out)
            .unwrap()
            .starts_with("event: message_start")
    );
    let turns = env.turns();
    assert_eq!(turns.len(), 2);
    assert!(
        contains(&turns[0].body, &signature),
        "own account: untouched"
    );
    let moved = &turns[1];
    assert_eq!(moved.account.as_deref(), Some("acct-d"));
    assert_eq!(moved.uri.query(), Some("beta=true"));
    assert!(!contains(&moved.body, &signature));
    assert!(!contains(&moved.body, &redacted));
    assert_eq!(moved.rejected, None);
    let v = moved.json().unwrap();
    assert_eq!(v["messages"][1]["content"][0]["text"], "Planned.");
    // The handoff goes after the cached system block, which keeps its cache_control.
    assert_eq!(v["system"][0]["cache_control"]["type"], "ephemeral");
    assert!(v["system"].to_string().contains(HANDOFF_TAG));
}

#[tokio::test]
async fn two_tenants_with_one_session_id_are_isolated() {
    let env = setup().await;
    let session = "shared-session-id";
    // Tenant 1 crosses the threshold: a handoff for tenant 1 only.
    cross_threshold(&env, Api::Chat, "client-1", session).await;
    let stored = env.stored(Some(session)).await;
    assert_eq!(stored.len(), 1);
    let tenant1 = stored[0].tenant.clone();

    env.sim.set_used("acct-a", 100.0);
    env.sim.clear_requests();
    // Tenant 2, same session id: its own binding (fill first, so acct-a → 429 → acct-b), and no
    // handoff of tenant 1 reaches it.
    let (status, _) = env
        .turn(
            Api::Chat,
            "client-2",
            session,
            &Api::Chat.body(1, false),
            &[],
        )
        .await;
    assert_eq!(status, 200);
    env.idle().await;
    assert!(
        env.turns().iter().all(|r| !has_handoff(r)),
        "tenant 2 gets nothing"
    );
    let stored = env.stored(Some(session)).await;
    assert_eq!(stored.len(), 1, "tenant 1's handoff is still there");
    assert_eq!(stored[0].tenant, tenant1);

    // Tenant 1 moves to acct-b and gets its own handoff.
    env.sim.clear_requests();
    let (status, _) = env
        .turn(
            Api::Chat,
            "client-1",
            session,
            &Api::Chat.body(4, false),
            &[],
        )
        .await;
    assert_eq!(status, 200);
    let turns = env.turns();
    assert_eq!(
        turns.len(),
        1,
        "acct-a is known exhausted: straight to acct-b"
    );
    assert_eq!(turns[0].account.as_deref(), Some("acct-b"));
    assert!(has_handoff(&turns[0]));
    env.idle().await;
    assert!(env.stored(Some(session)).await.is_empty());
}

#[tokio::test]
async fn a_session_under_the_threshold_is_forwarded_byte_for_byte() {
    let env = setup().await;
    // Odd but valid JSON: spacing, escapes, number forms, unknown fields, key order.
    let bodies = [
        "{ \"messages\" : [{\"role\":\"user\",\"content\":\"h\\u00e9 \\ud83d\\ude00\"}], \"model\":\"codex-relay\" ,\"x_ratio\":1.50,\"x\":{\"b\":[1e3,-0.0,null],\"a\":true}}",
        "{\"model\":\"codex-relay\",\"messages\":[{\"role\":\"user\",\"content\":\"h\\u00e9 \\ud83d\\ude00\"},{\"role\":\"assistant\",\"content\":\"ok\"},{\"role\":\"user\",\"content\":\"again\"}],\"n\":1}",
    ];
    for body in bodies {
        let (status, _) = env.turn(Api::Chat, "client-1", "under", body, &[]).await;
        assert_eq!(status, 200);
        let last = env.turns().pop().unwrap();
        assert_eq!(
            &last.body[..],
            body.replace("\"codex-relay\"", "\"gpt-5.5\"").as_bytes()
        );
    }
    env.idle().await;
    assert!(env.summaries().is_empty(), "60 % used: no summary yet");
    assert!(env.stored(None).await.is_empty());
}

#[tokio::test]
async fn clients_without_session_headers_are_sticky_and_relayed() {
    let env = setup().await;
    // No session header at all (the OpenAI SDKs): the session is the fingerprint of the
    // conversation's stable parts, the same for the resolver and both layers.
    let send = |turn: usize| {
        let body = Api::Chat.body(turn, false);
        let req = Request::post(env.url("/v1/chat/completions"))
            .header("authorization", "Bearer sdk-key")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let client = env.client.clone();
        async move {
            let res = client.request(req).await.unwrap();
            assert_eq!(res.status(), 200);
            res.into_body().collect().await.unwrap();
        }
    };
    for turn in 1..=3 {
        send(turn).await;
    }
    env.idle().await;
    let stored = env.stored(None).await;
    assert_eq!(stored.len(), 1, "a handoff keyed by the fingerprint");
    env.sim.set_used("acct-a", 100.0);
    env.sim.clear_requests();
    send(4).await;
    let turns = env.turns();
    assert_eq!(turns.len(), 2);
    assert!(has_handoff(&turns[1]));
}

#[tokio::test]
async fn an_sdk_session_without_a_header_is_one_session_across_turns_and_key_orders() {
    let env = setup().await;
    // OpenAI SDK style, no session header: the whole history is resent every turn, and the
    // members other than `model` and the conversation come in another order on each turn
    // (before or after the history). The session is the fingerprint of the first turn's
    // model, system entry and first ask, read from the start of the body only.
    let body = |turn: usize| {
        let mut messages = vec![json!({"role": "system", "content": "You are a coding agent."})];
        for t in 1..=turn {
            messages
                .push(json!({"role": "user", "content": format!("step {t}: add a --json flag")}));
            if t < turn {
                messages.push(json!({"role": "assistant", "content": format!("did step {t}")}));
            }
        }
        let messages = serde_json::to_string(&messages).unwrap();
        if turn % 2 == 1 {
            format!(
                r#"{{"model":"codex-relay","stream":false,"messages":{messages},"user":"u-1"}}"#
            )
        } else {
            format!(
                r#"{{"user":"u-1","stream":false,"model":"codex-relay","messages":{messages}}}"#
            )
        }
    };
    // The gateway tells the session on the body as the client sent it (the combo's name, not
    // the target's it is rewritten to: a reload that changes the targets keeps the session).
    let session = context_relay_core::session::fingerprint(body(1).as_bytes()).unwrap();
    assert_eq!(
        context_relay_core::session::fingerprint(body(2).as_bytes()),
        Some(session.clone())
    );
    let send = |turn: usize| {
        let req = Request::post(env.url("/v1/chat/completions"))
            .header("authorization", "Bearer sdk-key")
            .body(Full::new(Bytes::from(body(turn))))
            .unwrap();
        let client = env.client.clone();
        async move {
            let res = client.request(req).await.unwrap();
            assert_eq!(res.status(), 200);
            res.into_body().collect().await.unwrap();
        }
    };
    for turn in 1..=3 {
        send(turn).await;
    }
    env.idle().await;
    // One session: the turns stayed on one account and one handoff was written, under the
    // first turn's fingerprint.
    let served: Vec<_> = env.turns().into_iter().map(|t| t.account).collect();
    assert_eq!(served.len(), 3);
    assert!(served.iter().all(|a| *a == served[0]), "{served:?}");
    let stored = env.stored(None).await;
    assert_eq!(stored.len(), 1, "one session, one handoff");
    assert_eq!(&*stored[0].session, session);
    // The switch turn (the other key order) finds it.
    env.sim.set_used(served[0].as_deref().unwrap(), 100.0);
    env.sim.clear_requests();
    send(4).await;
    let turns = env.turns();
    assert_eq!(turns.len(), 2);
    assert!(has_handoff(&turns[1]));
}

#[tokio::test]
async fn odd_bodies_on_a_switch_fail_open() {
    let env = setup().await;
    let session = "odd";
    cross_threshold(&env, Api::Chat, "client-1", session).await;
    env.sim.set_used("acct-a", 100.0);
    // `messages` is not an array: the relay cannot inject, the request still goes through.
    let body = r#"{"model":"codex-relay","messages":42,"stream":false}"#;
    let (status, _) = env.turn(Api::Chat, "client-1", session, body, &[]).await;
    assert_eq!(status, 200);
    let (status, _) = env
        .turn(
            Api::Chat,
            "client-1",
            session,
            r#"{"model":"codex-relay","messages":[{"role":"user","content":{"weird":[]}}]}"#,
            &[],
        )
        .await;
    assert_eq!(status, 200);
    env.idle().await;
    let (status, _) = env
        .turn(
            Api::Chat,
            "client-1",
            session,
            &Api::Chat.body(5, false),
            &[],
        )
        .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn with_the_relay_off_nothing_is_summarised_or_injected() {
    let env = setup_full(SimQuotaHeaders::Codex, "", false).await;
    assert!(!env.gateway().relay_enabled());
    cross_threshold(&env, Api::Chat, "client-1", "off").await;
    env.sim.set_used("acct-a", 100.0);
    let (status, _) = env
        .turn(Api::Chat, "client-1", "off", &Api::Chat.body(4, false), &[])
        .await;
    assert_eq!(status, 200);
    assert!(env.summaries().is_empty());
    assert!(env.turns().iter().all(|r| !has_handoff(r)));
    let turns = env.turns();
    // The pool still rotates on the 429.
    assert_eq!(turns.last().unwrap().account.as_deref(), Some("acct-b"));

    // The config key does the same.
    let text = config_text("http://127.0.0.1:9/v1", "relay_enabled = false");
    let gw = Gateway::new(Config::from_toml_str(&text, |_| None).unwrap()).unwrap();
    assert!(!gw.relay_enabled());
    assert!(gw.relay(true).relay_enabled());
}

#[tokio::test]
async fn provider_quota_kind_reaches_the_relay() {
    // The anthropic provider is configured to read no quota headers: its accounts never get
    // a handoff, although the simulator reports 90 % in Anthropic headers.
    let env = setup_full(SimQuotaHeaders::Anthropic, "", true).await;
    let text = config_text(&env.sim.base_url(), "").replace(
        "auth = \"x-api-key\"",
        "auth = \"x-api-key\"\nquota = \"none\"",
    );
    let gateway = Gateway::new(Config::from_toml_str(&text, |_| None).unwrap()).unwrap();
    let env2 = Env(Harness::serve(env.0.sim, gateway).await);
    cross_threshold(&env2, Api::Messages, "client-1", "no-quota").await;
    assert_eq!(env2.sim.used("acct-c"), Some(90.0));
    assert!(env2.summaries().is_empty());
    assert!(env2.stored(None).await.is_empty());
    // (With the default `quota = "auto"` the same turns produce a handoff: see
    // `anthropic_messages_session_relays_across_a_429`.)
}
