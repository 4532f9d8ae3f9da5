//! Printing: the `[quickstart]` markers and the handoff as the story shows it.

use serde_json::Value;

pub(crate) fn marker(what: &str) {
    println!("[quickstart] {what}");
}

/// Prints `text` indented under a turn, one `|` per line so its exact content stays visible.
pub(crate) fn print_block(text: &str) {
    for line in text.lines() {
        println!("          | {line}");
    }
}

/// Prints a handoff as `GET /admin/handoffs` returns it.
pub(crate) fn print_handoff(h: &Value) {
    let s = |key: &str| h[key].as_str().unwrap_or("?").to_owned();
    let list = |key: &str| -> Vec<String> {
        h[key]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    println!(
        "        from {} / {}, {} messages summarised by {}, expires {}",
        s("from_provider"),
        s("from_account"),
        h["message_count"],
        s("model"),
        s("expires_at")
    );
    println!("        summary:         {}", s("summary"));
    println!("        key decisions:");
    for d in list("key_decisions") {
        println!("          - {d}");
    }
    println!("        task progress:   {}", s("task_progress"));
    println!(
        "        active entities: {}",
        list("active_entities").join(", ")
    );
}
