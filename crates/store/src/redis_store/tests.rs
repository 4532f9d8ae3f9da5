use super::scripts::glob_escape;

#[test]
fn glob_metacharacters_are_escaped() {
    assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    assert_eq!(glob_escape("context-relay:"), "context-relay:");
}
