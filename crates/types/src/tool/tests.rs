use super::*;
use serde_json::json;

#[test]
fn annotated_blocks_and_resource_links_have_a_json_shape() {
    let link = Content::ResourceLink(ResourceLink {
        uri: "demo://r/1".into(),
        name: "one".into(),
        size: Some(3),
        ..ResourceLink::default()
    });
    let annotations = Annotations { audience: Some(vec![Audience::User]), priority: Some(0.5), last_modified: None };
    let block = Content::Text("hi".into()).annotated(annotations.clone());
    assert_eq!(
        serde_json::to_value([&link, &block]).unwrap(),
        json!([
            {"type": "resource_link", "uri": "demo://r/1", "name": "one", "size": 3},
            {"type": "text", "text": "hi", "annotations": {"audience": ["user"], "priority": 0.5}},
        ])
    );
    assert_eq!(block.plain(), &Content::Text("hi".into()));
    assert_eq!(block.annotations(), Some(&annotations));
    let again = block.clone().annotated(Annotations::default());
    assert!(
        matches!(&again, Content::Annotated { block, .. } if **block == Content::Text("hi".into())),
        "never nested"
    );
    assert_eq!(again.len(), 2);
}
