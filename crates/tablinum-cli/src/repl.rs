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

use clap::{CommandFactory as _, Parser};
use rustyline::completion::Completer;
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::Validator;
use rustyline::Helper;

use crate::verbs::{Outcome, Session, Verb};

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

/// The id of a positional argument that names an existing table: the
/// shell completes table names there.
const TABLE_ARG: &str = "table";

/// Completes command words and table names.
struct Complete {
    /// What the first words may be.
    words: Words,
    /// Known table names (refreshed after `table ...` commands).
    tables: Arc<Mutex<Vec<String>>>,
}

/// The command words a shell knows.
enum Words {
    /// The cluster shell: the clap definitions of its verbs, so completion
    /// follows them (subcommands, and a table name where an argument has
    /// the id [`TABLE_ARG`]).
    Tree(Box<clap::Command>),
    /// The local shell: first words only.
    Flat(&'static [&'static str]),
}

/// Words every shell takes besides its commands.
const SHELL_WORDS: [&str; 2] = ["help", "quit"];

impl Complete {
    /// Candidates for the word at `pos`, and where it starts. Pure.
    fn candidates(&self, line: &str, pos: usize) -> (usize, Vec<String>) {
        let before = &line[..pos];
        let start = before.rfind(char::is_whitespace).map_or(0, |i| i + 1);
        let word = &before[start..];
        let prev: Vec<&str> = before[..start].split_whitespace().collect();
        let pool: Vec<String> = match &self.words {
            Words::Flat(w) if prev.is_empty() => w.iter().map(|s| s.to_string()).collect(),
            Words::Flat(_) => Vec::new(),
            Words::Tree(root) => self.in_tree(root, &prev),
        };
        let mut c: Vec<String> = pool.into_iter().filter(|p| p.starts_with(word)).collect();
        c.sort();
        c.dedup();
        (start, c)
    }

    /// What may follow `prev` in the command tree: the subcommands of the
    /// command it names, or table names when that command's first
    /// positional argument is a table.
    fn in_tree(&self, root: &clap::Command, prev: &[&str]) -> Vec<String> {
        let top = || {
            root.get_subcommands()
                .map(|c| c.get_name().to_string())
                .chain(SHELL_WORDS.map(String::from))
                .collect()
        };
        let path = match prev {
            [] | ["help"] => return top(),
            ["help", ..] => return Vec::new(),
            p => p,
        };
        let mut cmd = root;
        for w in path {
            match cmd.find_subcommand(w) {
                Some(c) => cmd = c,
                // Past the command words: arguments are not completed.
                None => return Vec::new(),
            }
        }
        if cmd.has_subcommands() {
            return cmd
                .get_subcommands()
                .map(|c| c.get_name().to_string())
                .collect();
        }
        match cmd.get_positionals().next() {
            Some(a) if a.get_id() == TABLE_ARG => self.tables(),
            _ => Vec::new(),
        }
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
    let complete = Complete {
        words: Words::Tree(Box::new(Line::command())),
        tables: tables.clone(),
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
                if crate::exit::is_broken_pipe(&e) {
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
        words: Words::Flat(crate::shell::COMMANDS),
        tables: Arc::new(Mutex::new(Vec::new())),
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
        Complete {
            words: Words::Tree(Box::new(Line::command())),
            tables: Arc::new(Mutex::new(vec!["demo".into(), "events".into()])),
        }
    }

    #[test]
    fn completes_verbs_then_tables() {
        let c = complete();
        assert_eq!(c.candidates("sc", 2), (0, vec!["scan".to_string()]));
        assert_eq!(
            c.candidates("t", 1),
            (
                0,
                vec![
                    "table".to_string(),
                    "token".to_string(),
                    "topic".to_string()
                ]
            )
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
