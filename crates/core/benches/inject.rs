//! Injection bench (being written).
fn main() {}
