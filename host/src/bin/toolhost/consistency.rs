//! The command line's own consistency checks, for the tests. clap checks a
//! command (`Command::debug_assert`) only where clap itself is built with
//! debug assertions, and the suite builds everything with `--release`: these
//! are the checks of clap's that bear on what this command line uses, run
//! in any build, on the command as a parse builds it (global options
//! propagated, `--help` and `--version` added).

use clap::{Arg, Command};
use std::collections::HashMap;

/// Every problem in `cmd` and its subcommands, one line each, naming the
/// command.
pub fn problems(mut cmd: Command) -> Vec<String> {
    cmd.build();
    let mut found = Vec::new();
    check(&cmd, cmd.get_name(), &mut found);
    found
}

/// The argument names each argument of `cmd` refers to, by relation:
/// (argument, relation, name). clap keeps them private; its `Debug` shows
/// them (`requires`, `required_unless_present`, `conflicts_with`,
/// `overrides_with`, `required_if_eq`).
pub fn relations(cmd: &Command) -> Vec<(String, &'static str, String)> {
    let mut out = Vec::new();
    for arg in cmd.get_arguments() {
        // Without its help, whose text could look like a field.
        let shown = format!("{:?}", arg.clone().help(None::<&str>).long_help(None::<&str>));
        for (field, relation, pick_last) in [
            ("requires", "requires", true),
            ("r_unless", "is required unless", false),
            ("conflicts", "conflicts with", false),
            ("overrides", "overrides", false),
            ("r_ifs", "is required if", false),
        ] {
            for item in field_items(&shown, field) {
                let strings = quoted(&item);
                let name = if pick_last { strings.last() } else { strings.first() };
                if let Some(name) = name {
                    out.push((arg.get_id().to_string(), relation, name.clone()));
                }
            }
        }
    }
    out
}

fn check(cmd: &Command, path: &str, found: &mut Vec<String>) {
    let mut say = |what: String| found.push(format!("{path}: {what}"));
    let mut ids: HashMap<&str, &str> = HashMap::new();
    let mut longs: HashMap<&str, &str> = HashMap::new();
    let mut shorts: HashMap<char, &str> = HashMap::new();
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        if ids.insert(id, id).is_some() {
            say(format!("two arguments named {id:?}"));
        }
        for long in arg.get_long().into_iter().chain(arg.get_all_aliases().unwrap_or_default()) {
            if let Some(first) = longs.insert(long, id) {
                say(format!("--{long} is both {first:?}'s and {id:?}'s"));
            }
        }
        for short in arg.get_short().into_iter().chain(arg.get_all_short_aliases().unwrap_or_default()) {
            if let Some(first) = shorts.insert(short, id) {
                say(format!("-{short} is both {first:?}'s and {id:?}'s"));
            }
        }
        if arg.is_required_set() && arg.is_global_set() {
            say(format!("{id:?} is global and required"));
        }
    }
    for group in cmd.get_groups() {
        let id = group.get_id().as_str();
        if ids.insert(id, id).is_some() {
            say(format!("the group {id:?} is named as an argument or another group"));
        }
        for member in group.get_args() {
            if !cmd.get_arguments().any(|a| a.get_id() == member) {
                say(format!("the group {id:?} holds {member:?}, no argument of this command"));
            }
        }
    }
    for (arg, relation, name) in relations(cmd) {
        if arg == name {
            say(format!("{arg:?} {relation} itself"));
        } else if !ids.contains_key(name.as_str()) {
            say(format!("{arg:?} {relation} {name:?}, no argument or group of this command"));
        }
    }
    // Positionals take the places 1, 2, ... once each, the required first.
    let mut places: Vec<(usize, &Arg)> = cmd.get_positionals().filter_map(|a| Some((a.get_index()?, a))).collect();
    places.sort_by_key(|(i, _)| *i);
    for (want, (place, arg)) in places.iter().enumerate() {
        if *place != want + 1 {
            say(format!("the positional {:?} is at place {place}, not {}", arg.get_id(), want + 1));
        }
    }
    for pair in places.windows(2) {
        if pair[1].1.is_required_set() && !pair[0].1.is_required_set() {
            say(format!(
                "the required positional {:?} follows the optional {:?}",
                pair[1].1.get_id(),
                pair[0].1.get_id()
            ));
        }
    }
    let mut names: HashMap<&str, &str> = HashMap::new();
    for sub in cmd.get_subcommands() {
        for name in std::iter::once(sub.get_name()).chain(sub.get_all_aliases()) {
            if let Some(first) = names.insert(name, sub.get_name()) {
                say(format!("the subcommand name {name:?} is both {first:?}'s and {:?}'s", sub.get_name()));
            }
        }
    }
    for sub in cmd.get_subcommands() {
        check(sub, &format!("{path} {}", sub.get_name()), found);
    }
}

/// The items of the list field `field` in a `Debug` rendering: the text of
/// each element of `field: [a, b]`, split at top-level commas.
fn field_items(shown: &str, field: &str) -> Vec<String> {
    let Some(start) = shown.find(&format!(" {field}: [")) else { return Vec::new() };
    let rest = &shown[start + field.len() + 4..];
    let (mut items, mut item, mut depth, mut in_string, mut escaped) = (Vec::new(), String::new(), 0, false, false);
    for c in rest.chars() {
        if in_string {
            in_string = c != '"' || escaped;
            escaped = c == '\\' && !escaped;
        } else {
            match c {
                '"' => in_string = true,
                '(' | '[' | '{' => depth += 1,
                ']' if depth == 0 => break,
                ')' | ']' | '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(std::mem::take(&mut item));
                    continue;
                }
                _ => {}
            }
        }
        item.push(c);
    }
    items.push(item);
    items.retain(|i| !i.trim().is_empty());
    items
}

/// The string literals (as `Debug` writes them) in `text`, unescaped.
fn quoted(text: &str) -> Vec<String> {
    let (mut out, mut current, mut in_string, mut escaped) = (Vec::new(), String::new(), false, false);
    for c in text.chars() {
        if !in_string {
            in_string = c == '"';
        } else if escaped {
            current.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == '"' {
            out.push(std::mem::take(&mut current));
            in_string = false;
        } else {
            current.push(c);
        }
    }
    out
}
