//! One tool-name rule: the SDK keeps its own copy (guests do not depend on the
//! host's crates), and it must be the vocabulary's rule, character for
//! character and name for name.

#[test]
fn the_sdk_and_the_vocabulary_share_one_tool_name_rule() {
    assert_eq!(toolhost_sdk::TOOL_NAME_PATTERN, toolhost_types::TOOL_NAME_PATTERN);
    let long = "x".repeat(64);
    let too_long = "x".repeat(65);
    for name in ["roll", "a-b_c", "A9", "", "dotted.name", "has space", "ü", &long, &too_long] {
        assert_eq!(toolhost_sdk::valid_tool_name(name), toolhost_types::valid_tool_name(name), "{name:?}");
    }
}
