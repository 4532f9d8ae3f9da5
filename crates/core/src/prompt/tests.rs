use serde_json::json;

use super::*;
use crate::conversation::Conversation;

const SAMPLING: [&str; 5] = [
    "temperature",
    "top_p",
    "top_k",
    "presence_penalty",
    "frequency_penalty",
];

fn settings() -> SummarySettings {
    SummarySettings::default()
}

#[test]
fn prompt_names_every_key_the_files_and_carries_the_history() {
    let p = summary_prompt("[1] USER:\nhello <b>", &["src/a.rs".into(), "b.rs".into()]);
    for key in [
        "\"summary\"",
        "\"keyDecisions\"",
        "\"taskProgress\"",
        "\"activeEntities\"",
    ] {
        assert!(p.contains(key), "{key}");
    }
    assert!(p.contains("200 words") && p.contains("ONE JSON object"));
    assert!(p.contains("tool calls named:\n- src/a.rs\n- b.rs\n"));
    assert!(p.ends_with("<conversation>\n[1] USER:\nhello <b>\n</conversation>"));
    assert!(!summary_prompt("h", &[]).contains("Files the session touched"));
}

#[test]
fn no_shape_sends_sampling_parameters_by_default() {
    let trigger = json!({"model": "gpt-5", "temperature": 0.7, "top_p": 0.9, "messages": [],
        "input": [], "contents": [], "system": "s", "stream": true, "tools": [{"type": "function"}]});
    for shape in [
        ApiShape::ChatCompletions,
        ApiShape::Responses,
        ApiShape::AnthropicMessages,
        ApiShape::Gemini,
    ] {
        let v = summary_request(shape, &trigger, "P", &settings());
        for k in SAMPLING {
            assert!(v.get(k).is_none(), "{shape}: {k}");
        }
        assert!(v.get("tools").is_none(), "{shape}");
        assert!(
            v.get("generationConfig")
                .and_then(|g| g.get("temperature"))
                .is_none()
        );
        // The body reads back as a conversation whose last entry is the prompt.
        let conv = Conversation::from_value(shape, &v).expect("conversation");
        let last = conv.entries().last().expect("entry");
        assert_eq!(last.role.as_deref(), Some("user"));
        assert_eq!(last.text(), "P");
    }
}

#[test]
fn responses_keeps_instructions_store_and_stream_as_sent() {
    let trigger = json!({"model": "gpt-5.5", "instructions": [{"role": "system", "content": "x"}],
        "store": false, "stream": true, "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "k", "input": [{"type": "reasoning"}]});
    let v = summary_request(ApiShape::Responses, &trigger, "P", &settings());
    assert_eq!(v["instructions"], trigger["instructions"]);
    assert_eq!(v["store"], false);
    assert_eq!(v["stream"], true);
    assert_eq!(v["max_output_tokens"], 800);
    assert!(v.get("include").is_none() && v.get("max_tokens").is_none());
    // Nothing sent, nothing added.
    let v = summary_request(
        ApiShape::Responses,
        &json!({"model": "m", "input": "hi"}),
        "P",
        &settings(),
    );
    assert!(
        v.get("store").is_none() && v.get("stream").is_none() && v.get("instructions").is_none()
    );
}

/// A chained turn's summary names the chain it continued, never the client's `conversation`
/// (the provider would add the summary to it); other shapes name neither.
#[test]
fn responses_names_the_chain_but_not_the_conversation() {
    let trigger = json!({"model": "m", "store": true, "previous_response_id": "resp_7",
        "conversation": "conv_1", "input": "go on"});
    let v = summary_request(ApiShape::Responses, &trigger, "P", &settings());
    assert_eq!(v["previous_response_id"], "resp_7");
    assert!(v.get("conversation").is_none());
    let v = summary_request(ApiShape::ChatCompletions, &trigger, "P", &settings());
    assert!(v.get("previous_response_id").is_none());
}

#[test]
fn anthropic_keeps_system_and_turns_thinking_off() {
    let system = json!([{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}]);
    let trigger = json!({"model": "claude-opus-4-8", "system": system, "messages": [],
        "thinking": {"type": "adaptive"}, "context_management": {"edits": []}, "max_tokens": 64000});
    let v = summary_request(ApiShape::AnthropicMessages, &trigger, "P", &settings());
    assert_eq!(v["system"], system);
    assert_eq!(v["thinking"], json!({"type": "disabled"}));
    assert_eq!(v["max_tokens"], 800);
    assert_eq!(v["stream"], false);
    assert!(v.get("context_management").is_none());
}

#[test]
fn chat_limit_follows_the_model_family() {
    for (model, key) in [
        ("gpt-5", "max_completion_tokens"),
        ("gpt-5.1-mini", "max_completion_tokens"),
        ("o1-preview", "max_completion_tokens"),
        ("o3", "max_completion_tokens"),
        ("azure/o4-mini", "max_completion_tokens"),
        ("gpt-4.1-mini", "max_tokens"),
        ("llama-3.3-70b", "max_tokens"),
    ] {
        let v = summary_request(
            ApiShape::ChatCompletions,
            &json!({"model": model, "messages": []}),
            "P",
            &settings(),
        );
        assert_eq!(v[key], 800, "{model}");
        let other = if key == "max_tokens" {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        assert!(v.get(other).is_none(), "{model}");
    }
}

#[test]
fn settings_override_model_limit_stream_and_merge_params() {
    let mut s = SummarySettings {
        model: Some("gpt-4.1-mini".into()),
        max_output_tokens: 500,
        stream: Some(true),
        ..SummarySettings::default()
    };
    s.params.insert("temperature".into(), json!(0.2));
    let v = summary_request(
        ApiShape::ChatCompletions,
        &json!({"model": "gpt-5", "messages": []}),
        "P",
        &s,
    );
    assert_eq!(v["model"], "gpt-4.1-mini");
    assert_eq!(v["max_tokens"], 500);
    assert_eq!(v["stream"], true);
    // A streamed Chat reply carries its usage only when asked.
    assert_eq!(v["stream_options"], json!({"include_usage": true}));
    assert_eq!(v["temperature"], 0.2);
    s.stream = None;
    let v = summary_request(
        ApiShape::ChatCompletions,
        &json!({"model": "gpt-5", "messages": []}),
        "P",
        &s,
    );
    assert_eq!(v["stream"], false);
    assert!(v.get("stream_options").is_none(), "{v}");
    let v = summary_request(ApiShape::Gemini, &json!({"contents": []}), "P", &s);
    assert_eq!(v["generationConfig"]["maxOutputTokens"], 500);
    assert!(v.get("model").is_none());
}

#[test]
fn settings_deserialize_with_defaults() {
    let s: SummarySettings =
        serde_json::from_value(json!({"params": {"temperature": 1}})).expect("settings");
    assert_eq!(s.max_output_tokens, 800);
    assert_eq!(s.params["temperature"], 1);
    assert!(serde_json::from_value::<SummarySettings>(json!({"nope": 1})).is_err());
}

#[test]
fn a_zero_limit_sends_none_where_the_api_allows_it() {
    let s = SummarySettings {
        max_output_tokens: 0,
        ..SummarySettings::default()
    };
    let codex = json!({"model": "gpt-5.5", "instructions": "You are Codex.", "store": false,
                       "stream": true, "input": []});
    let v = summary_request(ApiShape::Responses, &codex, "P", &s);
    assert!(v.get("max_output_tokens").is_none(), "{v}");
    assert_eq!((&v["stream"], &v["store"]), (&json!(true), &json!(false)));
    let v = summary_request(
        ApiShape::ChatCompletions,
        &json!({"model": "gpt-5"}),
        "P",
        &s,
    );
    assert!(v.get("max_completion_tokens").is_none() && v.get("max_tokens").is_none());
    let v = summary_request(ApiShape::Gemini, &json!({}), "P", &s);
    assert!(v.get("generationConfig").is_none());
    // Anthropic requires one: the default.
    let v = summary_request(ApiShape::AnthropicMessages, &json!({"model": "c"}), "P", &s);
    assert_eq!(v["max_tokens"], SUMMARY_MAX_TOKENS);
}

/// Text of the history that names the prompt's own tag, in the spellings a model still reads
/// as the tag.
fn tag_spelling() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    (
        prop::sample::select(vec!["", " ", "\n", "  \t"]),
        prop::bool::ANY,
        prop::sample::select(vec!["", " ", "\r\n"]),
        prop::sample::select(vec![
            "conversation",
            "CONVERSATION",
            "Conversation",
            "conversatioN",
        ]),
        prop::sample::select(vec![">", " >", " role=\"x\">", ""]),
    )
        .prop_map(|(a, slash, b, name, end)| {
            format!("<{a}{}{b}{name}{end}", if slash { "/" } else { "" })
        })
}

proptest::proptest! {
    /// Whatever the history holds, the prompt has one conversation, opened and closed by the
    /// prompt's own tags; the history reads as it was, `<` of a tag aside.
    #[test]
    fn history_text_cannot_close_the_conversation(
        pieces in proptest::collection::vec(
            proptest::prop_oneof![tag_spelling(), "[ -~<>é\n]{0,12}"], 0..12),
        file in proptest::prop_oneof![tag_spelling(), "[a-z/.]{1,12}"],
    ) {
        let history = pieces.concat();
        let prompt = summary_prompt(&history, &[file]);
        let lower = prompt.to_lowercase();
        let tags: Vec<usize> = lower
            .match_indices('<')
            .map(|(at, _)| at)
            .filter(|&at| {
                let rest = lower[at + 1..].trim_start_matches([' ', '\t', '\n', '\r']);
                let rest = rest.strip_prefix('/').unwrap_or(rest);
                rest.trim_start_matches([' ', '\t', '\n', '\r']).starts_with("conversation")
            })
            .collect();
        proptest::prop_assert_eq!(tags.len(), 2, "{}", prompt);
        proptest::prop_assert!(prompt.ends_with("\n</conversation>"));
        let body = &prompt[prompt.find("<conversation>\n").unwrap() + 15..prompt.len() - 16];
        proptest::prop_assert_eq!(body.replace("&lt;", "<"), history.replace("&lt;", "<"));
        proptest::prop_assert!(matches!(fence(&fence(&history)), std::borrow::Cow::Borrowed(_)));
    }
}
