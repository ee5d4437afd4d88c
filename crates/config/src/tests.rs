use super::*;
use crate::budget::Tier;

const SEED: &str = r#"
mcp:
  servers:
    - name: dice-extended
      transport: stdio
      command: /usr/local/bin/mcp-dice-server --config /etc/dice.json
      env:
        DICE_MAX_SIDES: "100"
        LOG_LEVEL: debug
    - name: world-search
      transport: streamable-http
      url: https://tools.example.com/mcp
    - name: premium-tools
      transport: streamable-http
      url: https://premium.example.com/mcp
      auth:
        token: "Bearer eyJhbGciOiJSUzI1NiIs..."
    - name: enterprise-tools
      transport: streamable-http
      url: https://enterprise.example.com/mcp
      auth:
        oauth:
          client_id: glyphoxa-prod
          client_secret: "${MCP_OAUTH_SECRET}"
          token_url: https://auth.example.com/oauth/token
          scopes:
            - tools:read
            - tools:execute
npcs:
  - name: Greymantle the Sage
    personality: "An ancient elven scholar with vast knowledge..."
    engine: cascaded
    budget_tier: standard
    tools:
      - roll
      - search_rules
      - get_rule
      - query_entities
      - get_summary
      - search_sessions
  - name: Bartok the Barkeep
    personality: "A jovial halfling who runs the tavern..."
    engine: s2s
    budget_tier: fast
    tools:
      - roll
      - roll_table
      - query_entities
"#;

#[test]
fn the_seed_shape_parses_unchanged() {
    let mut cfg: Config = serde_yaml_ng::from_str(SEED).unwrap();
    cfg.check(SEED).unwrap();
    cfg.expand_env(SEED, |k| (k == "MCP_OAUTH_SECRET").then(|| "s3cret".to_string())).unwrap();
    assert_eq!(cfg.mcp.servers.len(), 4);
    assert_eq!(cfg.mcp.servers[0].transport, Transport::Stdio);
    assert_eq!(cfg.mcp.servers[0].env["DICE_MAX_SIDES"], "100");
    assert_eq!(cfg.mcp.servers[3].auth.as_ref().unwrap().oauth.as_ref().unwrap().client_secret, "s3cret");
    assert_eq!(cfg.npcs[0].budget_tier, Tier::Standard);
    assert_eq!(cfg.npcs[1].tools, ["roll", "roll_table", "query_entities"]);
    assert!(cfg.plugins.builtins);
}

#[test]
fn a_missing_secret_names_the_key_and_line() {
    let mut cfg: Config = serde_yaml_ng::from_str(SEED).unwrap();
    let e = cfg.expand_env(SEED, |_| None).unwrap_err().0;
    assert_eq!(
        e,
        "mcp.servers[3].auth.oauth.client_secret: environment variable MCP_OAUTH_SECRET is not set at line 24"
    );
}

#[test]
fn a_bad_tier_names_the_key_and_line() {
    let e = Config::parse("npcs:\n  - name: a\n    budget_tier: quick\n").unwrap_err().0;
    assert!(e.contains("npcs[0].budget_tier"), "{e}");
    assert!(e.contains("line 3"), "{e}");
    assert!(e.contains("unknown variant `quick`"), "{e}");
}

#[test]
fn unknown_keys_are_errors() {
    let e = Config::parse("limits:\n  fuell: 5\n").unwrap_err().0;
    assert!(e.contains("unknown field `fuell`") && e.contains("line 2"), "{e}");
    let e = Config::parse("npcs:\n  - name: a\n    budget_teir: fast\n").unwrap_err().0;
    assert!(e.contains("budget_teir"), "{e}");
}

#[test]
fn semantic_errors_name_the_key() {
    let e = Config::parse("mcp:\n  servers:\n    - name: x\n      transport: stdio\n").unwrap_err().0;
    assert_eq!(e, "mcp.servers[0].command: required for transport stdio at line 3");
    let e = Config::parse("npcs:\n  - name: a\n  - name: a\n").unwrap_err().0;
    assert!(e.starts_with("npcs[1].name: duplicate agent name"), "{e}");
    let e = Config::parse("npcs:\n  - name: Mira\n  - name: mira\n").unwrap_err().0;
    assert!(e.starts_with("npcs[1].name: \"mira\" would be served at /mcp/mira, like \"Mira\""), "{e}");
}

#[test]
fn a_servers_timeout_and_tier_are_checked() {
    let server = "mcp:\n  servers:\n    - name: slow\n      transport: stdio\n      command: srv\n";
    let cfg = Config::parse(&format!("{server}      timeout_ms: 10000\n      tier: deep\n")).unwrap();
    assert_eq!(cfg.mcp.servers[0].timeout_ms, Some(10_000));
    assert_eq!(cfg.mcp.servers[0].tier, Some(Tier::Deep));
    let e = Config::parse(&format!("{server}      timeout_ms: 0\n")).unwrap_err().0;
    assert_eq!(e, "mcp.servers[0].timeout_ms: must be at least 1 (milliseconds) at line 3");
    let e = Config::parse(&format!("{server}      timeout_ms: 99999999999\n")).unwrap_err().0;
    assert!(e.starts_with("mcp.servers[0].timeout_ms: 99999999999 ms is more than an hour"), "{e}");
    let e = Config::parse(&format!("{server}      timeout_ms: 60000\n")).unwrap_err().0;
    assert!(e.contains("above limits.timeout_ceiling_ms (30000 ms)"), "{e}");
    let raised = format!("{server}      timeout_ms: 60000\nlimits:\n  timeout_ceiling_ms: 120000\n");
    assert_eq!(Config::parse(&raised).unwrap().mcp.servers[0].timeout_ms, Some(60_000));
    let e = Config::parse(&format!("{server}      timeout_ms: 50\n")).unwrap_err().0;
    assert!(e.contains("below limits.timeout_floor_ms (100 ms)"), "{e}");
    let e = Config::parse(&format!("{server}      tier: slow\n")).unwrap_err().0;
    assert!(e.contains("tier") && e.contains("unknown variant `slow`") && e.contains("line 6"), "{e}");
    let e = Config::parse(&format!("{server}      timeout_ms: soon\n")).unwrap_err().0;
    assert!(e.contains("timeout_ms") && e.contains("line 6"), "{e}");
}

#[test]
fn limits_apply_over_defaults() {
    let cfg = Config::parse("limits:\n  fuel: 0\n  memory_mib: 8\n").unwrap();
    let l = cfg.limits();
    assert_eq!(l.fuel, None);
    assert_eq!(l.memory_bytes, 8 << 20);
    assert_eq!(l.output_bytes, Limits::default().output_bytes);
}

#[test]
fn env_expansion() {
    let look = |k: &str| (k == "A").then(|| "1".to_string());
    assert_eq!(expand("x${A}y${A}", &look).unwrap(), "x1y1");
    assert_eq!(expand("no vars", &look).unwrap(), "no vars");
    assert_eq!(expand("${B}", &look).unwrap_err(), "B");
}

#[test]
fn the_stdio_input_poll_is_bounded() {
    assert_eq!(Config::parse("").unwrap().server.stdio_input_poll_us, 1000);
    assert_eq!(Config::parse("server:\n  stdio_input_poll_us: 0\n").unwrap().server.stdio_input_poll_us, 0);
    let e = Config::parse("server:\n  stdio_input_poll_us: 20000\n").unwrap_err().0;
    assert!(e.contains("server.stdio_input_poll_us: at most 10000"), "{e}");
}
