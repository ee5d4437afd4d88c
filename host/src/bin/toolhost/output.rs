//! How commands print: aligned tables, JSON, durations, argument summaries.

use anyhow::Result;
use serde::Serialize;
use serde_json::Value;
use std::process::ExitCode;
use std::time::Duration;
use toolhost::budget::Tier;

/// Prints `value` as pretty JSON; the command succeeded.
pub fn print_json(value: &impl Serialize) -> Result<ExitCode> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(ExitCode::SUCCESS)
}

/// Prints rows under a header, columns aligned, the last one unpadded.
pub fn print_table<const N: usize>(header: &[&str; N], rows: &[[String; N]]) {
    // Cells can come from a plugin, a config or a database: a control
    // character is shown escaped, never sent to the terminal.
    let rows: Vec<[String; N]> =
        rows.iter().map(|r| r.clone().map(|c| toolhost::tool::log_safe(&c).into_owned())).collect();
    let rows = &rows[..];
    let mut widths = header.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == N {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        println!("{}", s.trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

/// "expression*, seed": the argument names, required ones starred.
pub fn arg_summary(schema: &Value) -> String {
    let required: Vec<&str> =
        schema["required"].as_array().map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let Some(props) = schema["properties"].as_object() else { return String::new() };
    props
        .keys()
        .map(|k| if required.contains(&k.as_str()) { format!("{k}*") } else { k.clone() })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Declared milliseconds, or `-`.
pub fn ms(v: Option<u32>) -> String {
    v.map_or("-".into(), |v| format!("{v}ms"))
}

/// A duration for a table cell.
pub fn dur(d: Option<Duration>) -> String {
    match d {
        None => "-".into(),
        Some(d) if d < Duration::from_millis(10) => format!("{:.2}ms", d.as_secs_f64() * 1e3),
        Some(d) => format!("{:.0}ms", d.as_secs_f64() * 1e3),
    }
}

/// A tier for a table cell.
pub fn tier_name(t: Option<Tier>) -> &'static str {
    t.map_or("over-budget", Tier::as_str)
}

/// `a (yes), b (no)`: each item with its mark, as the reviewer's commands
/// list asks (`granted` / `NOT granted`, `set` / `NOT set`).
pub fn marked<'a>(items: impl IntoIterator<Item = (&'a str, bool)>, yes: &str, no: &str) -> String {
    items.into_iter().map(|(item, ok)| format!("{item} ({})", if ok { yes } else { no })).collect::<Vec<_>>().join(", ")
}

/// "a, b, c", or "(none)".
pub fn list_or_none(items: &[String]) -> String {
    if items.is_empty() { "(none)".to_string() } else { items.join(", ") }
}
