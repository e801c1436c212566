//! The interactive shells: `tablinum shell` on a cluster (the one-shot
//! commands' verbs, parsed by the same clap definitions) and `tablinum
//! shell --local` on a local engine store.
//!
//! On a terminal: line editing, history (kept in `history` beside the
//! credentials file) and tab completion of verbs and table names
//! (`rustyline`). Otherwise lines are read from standard input without a
//! prompt, so scripts can pipe commands in. Owns the loop, splitting lines
//! into words (shell quoting) and printing errors; a failed command never
//! ends the shell.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use clap::Parser;
use rustyline::completion::Completer;
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::Validator;
use rustyline::Helper;

use crate::verbs::{Outcome, Session, Verb, VERB_NAMES};

/// History entries kept.
const HISTORY_ENTRIES_MAX: usize = 1000;

/// One line of the cluster shell: a verb and its arguments.
#[derive(Debug, Parser)]
#[command(
    name = "",
    no_binary_name = true,
    disable_version_flag = true,
    help_template = "{subcommands}\n\nshell: `help VERB` for a verb's options; quit with `quit` or Ctrl-D"
)]
struct Line {
    #[command(subcommand)]
    verb: Verb,
}

/// Verbs whose first argument is a table name.
const TABLE_VERBS: &[&str] = &[
    "put", "get", "head", "delete", "flush", "scan", "import", "export",
];
/// `table` subcommands.
const TABLE_SUBCOMMANDS: &[&str] = &["create", "drop", "list", "map"];

/// Completes verbs and table names.
struct Complete {
    /// The first words of a command.
    verbs: Vec<&'static str>,
    /// Known table names (refreshed after `table create` / `drop`).
    tables: Arc<Mutex<Vec<String>>>,
    /// Complete table names and `table` subcommands (the cluster shell).
    cluster: bool,
}

impl Complete {
    /// Candidates for the word at `pos`, and where it starts. Pure.
    fn candidates(&self, line: &str, pos: usize) -> (usize, Vec<String>) {
        let before = &line[..pos];
        let start = before.rfind(char::is_whitespace).map_or(0, |i| i + 1);
        let word = &before[start..];
        let prev: Vec<&str> = before[..start].split_whitespace().collect();
        let pool: Vec<String> = match (prev.as_slice(), self.cluster) {
            ([], _) => self.verbs.iter().map(|s| s.to_string()).collect(),
            (["help"], _) => self.verbs.iter().map(|s| s.to_string()).collect(),
            (["table"], true) => TABLE_SUBCOMMANDS.iter().map(|s| s.to_string()).collect(),
            (["table", "drop" | "map"], true) => self.tables(),
            ([v], true) if TABLE_VERBS.contains(v) => self.tables(),
            _ => Vec::new(),
        };
        let mut c: Vec<String> = pool.into_iter().filter(|p| p.starts_with(word)).collect();
        c.sort();
        c.dedup();
        (start, c)
    }

    fn tables(&self) -> Vec<String> {
        self.tables.lock().map(|t| t.clone()).unwrap_or_default()
    }
}

impl Completer for Complete {
    type Candidate = String;
    fn complete(
        &self,
        line: &str,
        pos: usize,
        _: &rustyline::Context<'_>,
    ) -> rustyline::Result<(usize, Vec<String>)> {
        Ok(self.candidates(line, pos))
    }
}
impl Hinter for Complete {
    type Hint = String;
}
impl Highlighter for Complete {}
impl Validator for Complete {}
impl Helper for Complete {}

/// Where the shell keeps its history.
fn history_path() -> Option<PathBuf> {
    tablinum_auth::files::credentials_path().map(|p| p.with_file_name("history"))
}

/// Reads lines (edited on a terminal, plain otherwise) and hands each to
/// `exec` until it returns false, `quit`/`exit`, or end of input.
fn read_loop(
    prompt: &str,
    complete: Complete,
    exec: &mut dyn FnMut(&str) -> bool,
) -> anyhow::Result<()> {
    if !std::io::stdin().is_terminal() {
        for line in std::io::stdin().lock().lines() {
            let line = line?;
            if matches!(line.trim(), "quit" | "exit") || !exec(&line) {
                break;
            }
        }
        return Ok(());
    }
    let config = rustyline::Config::builder()
        .max_history_size(HISTORY_ENTRIES_MAX)?
        .auto_add_history(false)
        .completion_type(rustyline::CompletionType::List)
        .build();
    let mut ed: rustyline::Editor<Complete, rustyline::history::DefaultHistory> =
        rustyline::Editor::with_config(config)?;
    ed.set_helper(Some(complete));
    let history = history_path();
    if let Some(h) = &history {
        // No history yet is fine.
        let _ = ed.load_history(h);
    }
    loop {
        match ed.readline(prompt) {
            Ok(line) => {
                if matches!(line.trim(), "quit" | "exit") {
                    break;
                }
                if !line.trim().is_empty() {
                    let _ = ed.add_history_entry(line.as_str());
                }
                if !exec(&line) {
                    break;
                }
            }
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(h) = &history {
        if let Some(dir) = h.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        if let Err(e) = ed.save_history(h) {
            eprintln!("warning: could not save history to {}: {e}", h.display());
        }
    }
    Ok(())
}

/// Prints an error as the one-shot CLI would, without exiting.
fn print_error(e: &anyhow::Error, cluster: Option<&str>) {
    let (_, hint) = crate::exit::classify(e, cluster);
    eprintln!("error: {}", crate::exit::one_line(e));
    if let Some(h) = hint {
        eprintln!("hint: {h}");
    }
}

/// Runs the cluster shell.
pub fn run(mut s: Session) -> anyhow::Result<()> {
    let addr = s.remote.cluster.clone();
    // Fail now (exit 3 with a hint) rather than at the first command.
    s.client()?;
    let tables = Arc::new(Mutex::new(s.table_names()));
    if std::io::stdin().is_terminal() {
        println!(
            "tablinum {} shell on {addr}; `help` lists the commands, `help VERB` a verb's options, Ctrl-D quits",
            tablinum_server::VERSION
        );
    }
    let mut verbs: Vec<&'static str> = VERB_NAMES.to_vec();
    verbs.extend(["help", "quit"]);
    let complete = Complete {
        verbs,
        tables: tables.clone(),
        cluster: true,
    };
    let prompt = format!("tablinum {addr}> ");
    read_loop(&prompt, complete, &mut |line| {
        let words = match shlex::split(line) {
            Some(w) => w,
            None => {
                eprintln!("error: unbalanced quotes");
                return true;
            }
        };
        if words.is_empty() {
            return true;
        }
        let parsed = match Line::try_parse_from(&words) {
            Ok(l) => l,
            Err(e) => {
                // `help` and `VERB --help` print to stdout; mistakes to stderr.
                let _ = e.print();
                return true;
            }
        };
        let changes_tables = matches!(&parsed.verb, Verb::Table(_));
        match crate::verbs::run(&mut s, parsed.verb) {
            Ok(Outcome::Done | Outcome::NotFound) => {}
            Err(e) => {
                if e.chain().any(|c| {
                    c.downcast_ref::<std::io::Error>()
                        .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
                }) {
                    return false;
                }
                print_error(&e, Some(&addr));
            }
        }
        let _ = std::io::stdout().flush();
        if changes_tables {
            let names = s.table_names();
            if let Ok(mut t) = tables.lock() {
                *t = names;
            }
        }
        true
    })
}

/// Runs the local engine shell on `store` (opened from `dir`).
pub fn run_local(store: &tablinum_engine::Store, dir: &Path) -> anyhow::Result<()> {
    if std::io::stdin().is_terminal() {
        println!(
            "tablinum {} local engine shell on {}; type help, Ctrl-D quits",
            tablinum_server::VERSION,
            dir.display()
        );
    } else {
        // Scripts read the same greeting the old shell printed.
        println!("tablinum shell; type help");
    }
    let complete = Complete {
        verbs: crate::shell::COMMANDS.to_vec(),
        tables: Arc::new(Mutex::new(Vec::new())),
        cluster: false,
    };
    let prompt = format!("tablinum local:{}> ", dir.display());
    let mut out = std::io::stdout();
    read_loop(&prompt, complete, &mut |line| {
        match crate::shell::execute_line(store, line, &mut out) {
            Ok(_) => {}
            Err(e) => print_error(&e, None),
        }
        let _ = out.flush();
        true
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete() -> Complete {
        let mut verbs = VERB_NAMES.to_vec();
        verbs.extend(["help", "quit"]);
        Complete {
            verbs,
            tables: Arc::new(Mutex::new(vec!["demo".into(), "events".into()])),
            cluster: true,
        }
    }

    #[test]
    fn completes_verbs_then_tables() {
        let c = complete();
        assert_eq!(c.candidates("sc", 2), (0, vec!["scan".to_string()]));
        assert_eq!(
            c.candidates("t", 1),
            (0, vec!["table".to_string(), "token".to_string()])
        );
        assert_eq!(c.candidates("get e", 5), (4, vec!["events".to_string()]));
        assert_eq!(c.candidates("table d", 7), (6, vec!["drop".to_string()]));
        assert_eq!(
            c.candidates("table drop de", 13),
            (11, vec!["demo".to_string()])
        );
        assert!(
            c.candidates("get demo k", 10).1.is_empty(),
            "keys are not completed"
        );
    }

    #[test]
    fn shell_lines_parse_with_the_one_shot_definitions() {
        let l = Line::try_parse_from(["put", "demo", "k", "a b", "--index", "c=r"]).unwrap();
        match l.verb {
            Verb::Put(p) => {
                assert_eq!(p.value.as_deref(), Some("a b"));
                assert_eq!(p.index, vec!["c=r".to_string()]);
            }
            other => panic!("{other:?}"),
        }
        assert!(Line::try_parse_from(["bogus"]).is_err());
        assert!(
            Line::try_parse_from(["get", "demo"]).is_err(),
            "a key is required"
        );
    }
}
